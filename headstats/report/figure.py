"""The figure machinery every figure kind shares (:mod:`headstats.report.plots`): how a score and a
model look (colour, line style, marker and label, from :data:`headstats.engine.scores.SCORES`: one colour
per score family, solid for raw scores, dashed for layer-normalised, dotted for head-normalised), which
curves share a panel, text a reader can read at a report's width, annotations kept off each other, and
the atomic, reproducible PNG and SVG a report links.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure

from headstats.engine.scores import SCORES
from headstats.engine.scores import score_ids as registered_score_ids
from headstats.io import store

MAX_CURVES = 8  # curves in one panel: beyond this, colours repeat and no curve can be followed
# One colour and one marker per score family: colours Okabe-Ito-like (distinguishable in colour-blind
# vision), the study's best score (ahon) in the most salient one; any two of them, grey and black are
# at least 21 CIEDE2000 apart (tests/test_browser.py holds figures to 15). The marker keeps apart ahon,
# lthon and avvn, three warm colours. Normalisation shows in the line style.
FAMILY_LOOKS = {
    "awft": ("#0173b2", "s"),
    "entropy": ("#029e73", "D"),
    "ftvvn": ("#cc78bc", "P"),
    "avvn": ("#8c564b", "v"),
    "lthon": ("#de8f05", "X"),
    "ahon": ("#d55e00", "^"),
    "fhon": ("#56b4e9", "<"),
}
# The families a user registers take these in registration order: any two of them, the study's
# families', grey and black at least 15 CIEDE2000 apart (tests/test_plots.py checks every pair), and
# none paler than 30 from white. Past twelve user families the colours repeat with another marker.
SPARE_COLOURS = (
    "#d62728", "#bcbd22", "#393b79", "#6b6ecf", "#637939", "#8c6d31",
    "#7b4173", "#74c476", "#e7298a", "#fc8d62", "#225555", "#225522",
)  # fmt: skip
_SPARE_MARKERS = (">", "p", "h", "d", "8", "H", "*")


def score_style(score_id: str) -> dict[str, object]:
    """Colour, line style, marker and legend label of a score's curves, read from the registry: a
    normalised score takes its numerator's colour and marker (dashed when divided by a layer mean,
    dotted by a head's own score), so a score registered in user code gets a style of its own too."""
    score = SCORES.get(score_id)
    if score is not None and score.is_random:
        return {"color": "black", "linestyle": "-", "marker": "o", "label": score_id}  # its name says no more
    if score is not None:
        family = score.ratio.numerator if score.ratio is not None else score.id
        kind = "" if score.ratio is None else {"layer": "ln", "head": "hn"}[score.ratio.over]
    else:  # an id this registry does not know (e.g. from a newer run): read its suffix
        family, _, kind = score_id.partition("_")
    linestyle = {"": "-", "ln": "--", "hn": ":"}.get(kind, "-.")
    color, marker = _family_look(family)
    return {"color": color, "linestyle": linestyle, "marker": marker, "label": score_label(score_id)}


def _family_look(family: str) -> tuple[str, str]:
    """A family's colour and marker: the study's families' own, else by registration order."""
    if family in FAMILY_LOOKS:
        return FAMILY_LOOKS[family]
    others = [s.id for s in SCORES.values() if s.ratio is None and not s.is_random and s.id not in FAMILY_LOOKS]
    if family not in others:
        return "grey", "o"
    i = others.index(family)
    return SPARE_COLOURS[i % len(SPARE_COLOURS)], _SPARE_MARKERS[i % len(_SPARE_MARKERS)]


def score_label(score_id: str) -> str:
    """``id (name)`` from the registry; unknown ids (e.g. from a newer run) stay as they are."""
    score = SCORES.get(score_id)
    return f"{score_id} ({score.name})" if score is not None else score_id


def wrap_title(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points (a character is
    at most about 0.6 em wide in the default sans-serif), so that no title is clipped by its figure."""
    chars = max(12, int(width_in * 72 / (0.6 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.splitlines())


def is_random_score(score_id: str) -> bool:
    """Whether ``score_id`` is a random baseline (an unknown id: whether it is ``random``)."""
    score = SCORES.get(score_id)
    return score.is_random if score is not None else score_id == "random"


def is_normalised_score(score_id: str) -> bool:
    """Whether ``score_id`` is a normalised score (an unknown id: whether it has a suffix)."""
    score = SCORES.get(score_id)
    return score.ratio is not None if score is not None else "_" in score_id


def curve_groups(scores: Sequence[str], max_curves: int = MAX_CURVES) -> list[list[str]]:
    """The score ids split into panels of at most ``max_curves`` curves each: all in one panel when
    they fit, else raw and normalised scores apart (chunked further if needed), with ``random``, the
    yardstick, in every panel."""
    randoms = [s for s in scores if is_random_score(s)]
    others = [s for s in scores if not is_random_score(s)]
    room = max_curves - len(randoms)
    if room < 1:
        raise ValueError(f"{len(randoms)} random curves leave no room in a panel of {max_curves} curves")
    if len(others) <= room:
        return [list(scores)]
    groups = []
    for family in ([s for s in others if not is_normalised_score(s)], [s for s in others if is_normalised_score(s)]):
        groups += [randoms + family[i : i + room] for i in range(0, len(family), room)]
    return groups


def ordered_scores(scores: Iterable[str]) -> list[str]:
    """The distinct score ids of ``scores`` in registry order, unknown ids last by name."""
    canonical = {sid: i for i, sid in enumerate(registered_score_ids())}
    return sorted(set(scores), key=lambda s: (canonical.get(s, len(canonical)), s))


# Colours for more models than tab10 holds: Okabe-Ito's without its yellow (too pale on white) and
# with a brown, any two at least 20 CIEDE2000 apart; black is the reference's.
_MANY_MODELS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#8c564b")
_MANY_STYLES = ("-", "--", ":", "-.")


def model_looks(models: Sequence[str]) -> dict[str, dict[str, object]]:
    """One look per model, the same in every panel of a figure: tab10's colours for up to 10 models;
    beyond, the first model (the reference) black and the others a colour of :data:`_MANY_MODELS`
    and a line style, so that no two models look alike (a colour repeats only with another style)."""
    if len(models) <= 10:
        return {
            m: {"color": mpl.colors.to_hex(mpl.colormaps["tab10"](i)), "linestyle": "-"} for i, m in enumerate(models)
        }
    if len(models) - 1 > len(_MANY_MODELS) * len(_MANY_STYLES):
        raise ValueError(
            f"{len(models)} models are more than one figure tells apart "
            f"({1 + len(_MANY_MODELS) * len(_MANY_STYLES)}): draw them in several figures"
        )
    looks = {models[0]: {"color": "#000000", "linestyle": "-"}}
    for i, model in enumerate(models[1:]):
        looks[model] = {"color": _MANY_MODELS[i % len(_MANY_MODELS)], "linestyle": _MANY_STYLES[i // len(_MANY_MODELS)]}
    return looks


MIN_TEXT_PX = 10  # the smallest text of a figure as a reader sees it in a report at 1280 px
PAGE_WIDTH_PX = 1160  # a report's column at 1280 px (its body's width less its padding)
CSS_PX_PER_PT = 96 / 72  # an SVG's size in pt, shown in CSS px


def shown_scale(fig: Figure, width_px: float = PAGE_WIDTH_PX, max_height_px: float | None = None) -> float:
    """How much a report shrinks ``fig``'s SVG (1: shown at its own size): to the page's column, and to
    ``max_height_px`` where it has one (the headline)."""
    w_in, h_in = fig.get_size_inches()
    scale = min(1.0, width_px / (72 * w_in * CSS_PX_PER_PT))
    if max_height_px:
        scale = min(scale, max_height_px / (72 * h_in * CSS_PX_PER_PT))
    return scale


def make_legible(
    fig: Figure, min_px: float = MIN_TEXT_PX, width_px: float = PAGE_WIDTH_PX, max_height_px: float | None = None
) -> float:
    """Raise every text of ``fig`` (titles, labels, tick labels, legends, annotations) to at least
    ``min_px`` as shown in a report (:func:`shown_scale`), lay the figure out again and move
    annotations off other texts (:func:`separate_annotations`); returns that smallest size in pt."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    smallest = math.ceil(10 * min_px / CSS_PX_PER_PT / shown_scale(fig, width_px, max_height_px)) / 10
    if fig.canvas is None or not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()  # tick labels exist once drawn
    changed = False
    for ax in fig.axes:
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            labels = [t for t in axis.get_ticklabels(which="both") if t.get_text()]
            if labels and min(t.get_fontsize() for t in labels) < smallest:
                ax.tick_params(axis=name, which="both", labelsize=smallest)
                changed = True
    for text in fig.findobj(Text):
        if text.get_text().strip() and text.get_fontsize() < smallest:
            text.set_fontsize(smallest)
            changed = True
    if changed and fig.get_layout_engine() is None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a figure tight_layout cannot fit keeps its layout
            fig.tight_layout()
    separate_annotations(fig)
    return smallest


# Places tried around an annotated point, in offset points with the text's alignment: beside it
# up-right first (where the curves' end labels go), then the other corners, then further out.
_ANNOTATION_PLACES = [
    ((dx * side, dy * up), "left" if side > 0 else "right", "bottom" if up > 0 else "top")
    for dx, dy in ((4, 4), (4, 14), (12, 24))
    for up in (1, -1)
    for side in (1, -1)
]


def separate_annotations(fig: Figure, gap_px: float = 2.0) -> None:
    """Move each annotation of ``fig`` placed at an offset from its point (``textcoords="offset
    points"``) that overlaps another text or leaves its axes to the first place around its point
    where it does neither; one that fits nowhere stays where it was drawn."""
    from matplotlib.text import Annotation, Text

    renderer = fig.canvas.get_renderer()
    notes = [t for ax in fig.axes for t in ax.texts if isinstance(t, Annotation) and t.anncoords == "offset points"]
    shown = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t not in notes]
    taken = [t.get_window_extent(renderer).padded(gap_px) for t in shown]
    for note in notes:
        if not (note.get_visible() and note.get_text().strip()):
            continue
        inside = note.axes.get_window_extent(renderer)
        drawn = (note.xyann, note.get_horizontalalignment(), note.get_verticalalignment())
        for offset, ha, va in [drawn, *_ANNOTATION_PLACES]:
            note.xyann = offset
            note.set_horizontalalignment(ha)
            note.set_verticalalignment(va)
            box = note.get_window_extent(renderer)
            fits = inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
            if fits and not any(box.overlaps(other) for other in taken):
                break
        else:
            note.xyann = drawn[0]
            note.set_horizontalalignment(drawn[1])
            note.set_verticalalignment(drawn[2])
        taken.append(note.get_window_extent(renderer).padded(gap_px))


def save_figure(
    fig: Figure, directory: str | os.PathLike, name: str, formats: Sequence[str] = ("png", "svg"), dpi: int = 100
) -> dict[str, Path]:
    """Write ``directory/name.{png,svg}`` atomically (temporary file + rename); returns the paths.

    SVG text stays text (smaller files) and no creation date is embedded, so re-rendering the same
    data gives the same files.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for fmt in formats:
        metadata = {"Date": None} if fmt == "svg" else {"Software": None} if fmt == "png" else None

        def save(tmp: Path, fmt: str = fmt, metadata: dict | None = metadata) -> None:
            with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "headstats"}):
                fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)

        paths[fmt] = store.write_atomic(out / f"{name}.{fmt}", save)
    return paths
