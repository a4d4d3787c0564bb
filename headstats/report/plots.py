"""Figures of the study and of headstats' analyses (seaborn/matplotlib; written as PNG and SVG).

Every function takes tables (intervention points and curve summaries, score tables, distance and
overlap matrices) and returns a :class:`matplotlib.figure.Figure` built without pyplot, so plotting
works headless and leaves no global state behind; :func:`save_figure` writes it atomically. Score
names, directions and line styles come from :data:`headstats.engine.scores.SCORES`: one colour per score
family, solid for raw scores, dashed for layer-normalised (LN), dotted for head-normalised (HN).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from headstats.engine.scores import SCORES
from headstats.engine.scores import score_ids as registered_score_ids
from headstats.io import store
from headstats.stats import ranking
from headstats.stats.matrix import DistanceMatrix
from headstats.stats.summary import BASELINE
from headstats.stats.tables import model_rows

X_LABEL = "heads zeroed (realised %)"
MAX_CURVES = 8  # curves in one panel: beyond this, colours repeat and no curve can be followed
MIN_HEATMAP = 3  # rows and columns a heatmap needs; a smaller matrix is a few numbers, shown as a table
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


def _is_random(score_id: str) -> bool:
    score = SCORES.get(score_id)
    return score.is_random if score is not None else score_id == "random"


def _is_normalised(score_id: str) -> bool:
    score = SCORES.get(score_id)
    return score.ratio is not None if score is not None else "_" in score_id


def curve_groups(scores: Sequence[str], max_curves: int = MAX_CURVES) -> list[list[str]]:
    """The score ids split into panels of at most ``max_curves`` curves each: all in one panel when
    they fit, else raw and normalised scores apart (chunked further if needed), with ``random``, the
    yardstick, in every panel."""
    randoms = [s for s in scores if _is_random(s)]
    others = [s for s in scores if not _is_random(s)]
    room = max_curves - len(randoms)
    if room < 1:
        raise ValueError(f"{len(randoms)} random curves leave no room in a panel of {max_curves} curves")
    if len(others) <= room:
        return [list(scores)]
    groups = []
    for family in ([s for s in others if not _is_normalised(s)], [s for s in others if _is_normalised(s)]):
        groups += [randoms + family[i : i + room] for i in range(0, len(family), room)]
    return groups


def _ordered_scores(scores: Iterable[str]) -> list[str]:
    canonical = {sid: i for i, sid in enumerate(registered_score_ids())}
    return sorted(set(scores), key=lambda s: (canonical.get(s, len(canonical)), s))


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


# --- accuracy vs % of heads zeroed ---------------------------------------------------------------


def _check_points(points: pd.DataFrame) -> pd.DataFrame:
    needed = {"model", "score", "realised_pct", "accuracy"}
    if not isinstance(points, pd.DataFrame) or not needed <= set(points.columns):
        raise ValueError(
            "accuracy curves need a table with columns model, score, realised_pct, accuracy "
            "(headstats.summarize_interventions or headstats.report.paper.paper_points)"
        )
    if "task" in points.columns and points["task"].nunique() > 1:
        raise ValueError("points of several tasks: plot one task at a time")
    return points


def _baseline_row(points: pd.DataFrame, model: str) -> pd.Series:
    base = points[(points["model"] == model) & (points["score"] == BASELINE)]
    if base.empty:
        raise ValueError(f"no baseline point for model {model!r}: the curves need the un-intervened run")
    return base.iloc[0]


def _band(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """The 95% interval columns of ``rows`` where the table has them (published points do not)."""
    if not {"acc_low", "acc_high"} <= set(rows.columns):
        return None
    low, high = rows["acc_low"].to_numpy(dtype=float), rows["acc_high"].to_numpy(dtype=float)
    return (low, high) if np.isfinite(low).all() and np.isfinite(high).all() else None


def _draw_curves(
    ax: object, points: pd.DataFrame, model: str, scores: Sequence[str], linewidth: float, title: str | None = None
) -> None:
    rows = points[points["model"] == model]
    base = _baseline_row(points, model)
    baseline = float(base["accuracy"])
    band = _band(base.to_frame().T)
    if band is not None:
        ax.axhspan(band[0][0], band[1][0], color="grey", alpha=0.15, linewidth=0, label="baseline 95% interval")
    ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="baseline")
    ax.axhline(baseline - 1, color="grey", linestyle=":", linewidth=1, label="baseline - 1 point")
    for sid in scores:
        curve = rows[rows["score"] == sid].sort_values("realised_pct", kind="stable")
        if curve.empty:
            continue
        style = score_style(sid)
        ax.plot(curve["realised_pct"], curve["accuracy"], linewidth=linewidth, markersize=4.5, **style)
        band = _band(curve)
        if band is not None:
            ax.fill_between(curve["realised_pct"], *band, color=style["color"], alpha=0.1, linewidth=0)
    ax.set_title(title or model, fontsize=10 if title is None else 8)
    ax.set_xlabel(X_LABEL, fontsize=8)
    ax.set_ylabel("accuracy (%)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _panel_title(model: str, labels: Mapping[str, str] | None) -> str | None:
    """The model's slug and, when known, its exact identity (source file, quantisation), wrapped to
    fit a panel at font size 8 (an identity runs to 80 characters; unwrapped, neighbouring panels'
    titles overlap)."""
    label = (labels or {}).get(model)
    if not label or label == model:
        return None
    return "\n".join([model, *textwrap.wrap(label, 48)])


def _model_list(points: pd.DataFrame, models: Sequence[str] | None) -> list[str]:
    have = list(dict.fromkeys(points["model"].astype(str)))
    if models is None:
        return have
    missing = [m for m in models if m not in have]
    if missing:
        raise ValueError(f"no points for model(s) {', '.join(missing)}; the table has {', '.join(have)}")
    return list(models)


def accuracy_grid(
    points: pd.DataFrame,
    *,
    models: Sequence[str] | None = None,
    scores: Sequence[str] | None = None,
    cols: int = 3,
    title: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Accuracy vs realised % of heads zeroed: one panel per model with the baseline and the
    baseline - 1 point lines (the study's Figure 2 layout), and shaded 95% intervals of every point
    and of the baseline where ``points`` has them (``acc_low``, ``acc_high``). At most
    :data:`MAX_CURVES` curves share a panel: more scores are drawn as small multiples, one block of
    panels per group of :func:`curve_groups`, each with its legend at its right. ``labels``:
    model -> its exact identity, shown under the model in the panel title."""
    points = _check_points(points)
    models = _model_list(points, models)
    scores = _ordered_scores(points.loc[points["score"] != BASELINE, "score"]) if scores is None else list(scores)
    groups = curve_groups(scores)
    cols = max(1, min(cols, len(models)))
    rows = math.ceil(len(models) / cols)
    block = 3.4 * rows + (0.35 if len(groups) > 1 else 0.0)
    fig = Figure(figsize=(4.2 * cols + 2.6, block * len(groups)), layout="constrained")
    blocks = fig.subfigures(len(groups), 1, squeeze=False)[:, 0] if len(groups) > 1 else [fig]
    for sub, group in zip(blocks, groups, strict=True):
        axes = sub.subplots(rows, cols, squeeze=False)
        for ax, model in zip(axes.flat, models, strict=False):
            _draw_curves(ax, points, model, group, linewidth=1.3, title=_panel_title(model, labels))
        for ax in list(axes.flat)[len(models) :]:
            ax.set_axis_off()
        handles, names = axes.flat[0].get_legend_handles_labels()
        sub.legend(handles, names, loc="outside right upper", fontsize=7, frameon=False)
        if len(groups) > 1:
            kind = "normalised scores" if any(_is_normalised(s) for s in group) else "raw scores"
            sub.suptitle(f"{kind} (with random)", fontsize=10)
    if title:
        fig.suptitle(title)
    return fig


def headline_curves(
    points: pd.DataFrame,
    curves: pd.DataFrame,
    *,
    scores: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Small multiples of the accuracy curves of several tasks: one row per model, one column per
    task, at most :data:`MAX_CURVES` curves per panel (``scores``, default every score the curves
    have, ``random`` first and then in registry order, cut to fit), the baseline and baseline - 1
    point lines, and one legend at the right."""
    for column in ("model", "task", "score", "realised_pct", "accuracy"):
        if column not in points.columns:
            raise ValueError("headline curves need points with columns model, task, score, realised_pct, accuracy")
    models = list(dict.fromkeys(curves["model"].astype(str)))
    tasks = sorted(curves["task"].astype(str).unique())
    have = _ordered_scores(curves["score"].astype(str))
    shown = [s for s in (scores or have) if s in have]
    shown = ([s for s in shown if _is_random(s)] + [s for s in shown if not _is_random(s)])[:MAX_CURVES]
    fig = Figure(figsize=(3.3 * len(tasks) + 2.6, 2.6 * len(models) + 0.3), layout="constrained")
    axes = fig.subplots(len(models), len(tasks), squeeze=False)
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i, j]
            here = points[points["task"].astype(str) == task]
            if not ((here["model"] == model) & (here["score"] == BASELINE)).any():
                ax.set_axis_off()
                ax.set_title(f"{model} · {task}: not run", fontsize=8)
                continue
            name = (labels or {}).get(model, model)
            _draw_curves(ax, here, model, shown, linewidth=1.4, title=wrap_title(f"{task} · {name}", 3.1, 8))
    drawn = next((ax for ax in axes.flat if ax.lines), axes.flat[0])
    handles, names = drawn.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside right upper", fontsize=7, frameon=False)
    return fig


def within_one_point_dots(table: pd.DataFrame, reference: str, other: str, *, title: str) -> Figure:
    """Per model (rows), two dots on one axis: ``table[reference]`` and ``table[other]`` (e.g. the
    study's Table 2: % of heads zeroed within 1 point by ``awft`` and by the best other score), the
    gap between them drawn as a line; rows of ``model`` == "Average" are drawn apart, in bold."""
    rows = table.reset_index(drop=True)
    fig = Figure(figsize=(7.0, 0.28 * len(rows) + 1.3), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    ref, oth = rows[reference].astype(float), rows[other].astype(float)
    ax.hlines(y, np.minimum(ref, oth), np.maximum(ref, oth), color="0.75", linewidth=2)
    ax.plot(ref, y, "o", color=score_style(reference)["color"], label=reference)
    ax.plot(oth, y, "s", color="#d55e00", label=other)
    ax.set_yticks(y, [str(m) for m in rows["model"]], fontsize=7)
    for tick, model in zip(ax.get_yticklabels(), rows["model"], strict=True):
        if model == "Average":
            tick.set_fontweight("bold")
    ax.set_xlabel("% of heads zeroed within 1 accuracy point", fontsize=8)
    ax.set_xlim(left=0)
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(wrap_title(title, 6.5, 9), fontsize=9)
    fig.legend(loc="outside right upper", fontsize=7, frameon=False)
    return fig


def top_curves(
    points: pd.DataFrame,
    curves: pd.DataFrame,
    models: Sequence[str],
    *,
    k: int = 3,
    by: str = "norm_auc",
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Random plus each model's ``k`` best curves by ``by`` (the study's Figure 4), one panel per model
    (``labels`` as in :func:`accuracy_grid`)."""
    points = _check_points(points)
    models = _model_list(points, models)
    ranks = ranking.rank_scores(curves, by)
    fig = Figure(figsize=(4.6 * len(models), 5.2), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        if model not in ranks.index:
            raise ValueError(f"no curve summaries for model {model!r}")
        order = ranks.loc[model].dropna().astype(int).sort_values(kind="stable").index
        best = [s for s in order if s != "random"][:k]
        _draw_curves(ax, points, model, ["random", *best], linewidth=1.8, title=_panel_title(model, labels))
        # Below the panel: inside it, the legend would hide the curves' low-accuracy end.
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return fig


# --- matrices -------------------------------------------------------------------------------------


def matrix_heatmap(
    matrix: pd.DataFrame,
    *,
    title: str,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    fmt: str = ".2f",
    colorbar_label: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    annotate: bool | None = None,
) -> Figure:
    """A heatmap of any labelled matrix (ranks, correlations, IoU, distances), its cells annotated
    with their values when ``annotate`` (default: up to 100 cells; the numbers are in the CSV).
    Missing values are grey cells labelled "blank" (:func:`blank_cells` lists them for a caption).
    A matrix of fewer than :data:`MIN_HEATMAP` rows or columns is refused (:func:`fits_heatmap`):
    its few numbers read better as a table."""
    if matrix.empty:
        raise ValueError(f"nothing to draw for {title!r}: the matrix is empty")
    if not fits_heatmap(matrix):
        raise ValueError(
            f"{title!r}: a {matrix.shape[0]} x {matrix.shape[1]} matrix is too small for a heatmap (at least "
            f"{MIN_HEATMAP} x {MIN_HEATMAP}): show its numbers as a table"
        )
    n_rows, n_cols = matrix.shape
    width = max(4.5, 0.55 * n_cols + 2.8)
    fig = Figure(figsize=(width, max(3.2, 0.42 * n_rows + 1.8)), layout="constrained")
    ax = fig.subplots()
    values = matrix.astype(float)
    annotate = n_rows * n_cols <= 100 if annotate is None else annotate
    sns.heatmap(
        values,
        ax=ax,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        annot=annotate,
        fmt=fmt,
        linewidths=0.5,
        annot_kws={"fontsize": 7},
        cbar_kws={"label": colorbar_label} if colorbar_label else None,
    )
    for i, j in blank_cells(values):
        r, c = values.index.get_loc(i), values.columns.get_loc(j)
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor="0.88", edgecolor="white", linewidth=0.5, label="blank"))
    ax.set_title(wrap_title(title, width - 1.2, 10), fontsize=10)
    ax.set_xticklabels(ax.get_xticklabels(), rotation=45, ha="right", fontsize=8)
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0, fontsize=8)
    ax.set_xlabel(xlabel or "")
    ax.set_ylabel(ylabel or "")
    return fig


def fits_heatmap(matrix: pd.DataFrame) -> bool:
    """Whether a matrix has at least :data:`MIN_HEATMAP` rows and columns, the least a heatmap shows
    better than its numbers."""
    return min(matrix.shape) >= MIN_HEATMAP


def blank_cells(matrix: pd.DataFrame) -> list[tuple[object, object]]:
    """(row, column) labels of the missing values of ``matrix``: the blank cells a caption explains."""
    mask = matrix.astype(float).isna().to_numpy()
    return [(matrix.index[i], matrix.columns[j]) for i, j in zip(*np.nonzero(mask), strict=True)]


def rank_heatmap(ranks: pd.DataFrame, *, title: str = "Rank of score functions (1 = best)") -> Figure:
    """Models x score functions, annotated with ranks (the study's Figure 3). A score without a rank
    (it zeroed no head) gets a grey cell marked "none": left blank, it would read as the palest
    colour, the worst rank."""
    values = ranks.astype(float)
    fig = matrix_heatmap(
        values,
        title=title,
        cmap="Blues_r",
        fmt=".0f",
        xlabel="score function",
        ylabel="model",
        annotate=True,
    )
    ax = fig.axes[0]
    for i, j in zip(*np.nonzero(values.isna().to_numpy()), strict=True):
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor="0.85", edgecolor="white", linewidth=0.5, label="no rank"))
        ax.text(j + 0.5, i + 0.5, "none", ha="center", va="center", fontsize=7, color="0.3")
    return fig


def area_intervals(intervals: pd.DataFrame, *, labels: Mapping[str, str] | None = None) -> Figure:
    """Each model's curve areas with their bootstrap intervals, best first, one panel per model
    (``intervals``: :func:`headstats.stats.ranking.curve_intervals`); the reference curve's interval
    is shaded across the panel, so a score whose interval clears it beats chance."""
    if intervals.empty:
        raise ValueError("no curve areas to draw: curve_intervals returned no rows")
    models = list(dict.fromkeys(intervals["model"]))
    height = 1.2 + 0.4 * intervals.groupby("model").size().max()
    fig = Figure(figsize=(4.2 * len(models), height), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        rows = intervals[intervals["model"] == model].sort_values("area", ascending=True, na_position="first")
        ref = rows[rows["score"] == rows["reference"]]
        if len(ref) and np.isfinite(ref["area_low"].iloc[0]):
            ax.axvspan(ref["area_low"].iloc[0], ref["area_high"].iloc[0], color="0.85", zorder=0)
        y = np.arange(len(rows))
        for i, (_, row) in enumerate(rows.iterrows()):
            color = score_style(str(row["score"])).get("color", "C0")
            ax.errorbar(
                row["area"],
                i,
                xerr=[[row["area"] - row["area_low"]], [row["area_high"] - row["area"]]],
                fmt="o",
                color=color,
                capsize=3,
            )
        ax.set_yticks(y, [str(s) for s in rows["score"]])
        ax.set_xlabel(f"{rows['by'].iloc[0]} (accuracy %)")
        ax.set_title(_panel_title(model, labels) or model, fontsize=8)
    return fig


def wasserstein_heatmap(
    result: DistanceMatrix, *, title: str | None = None, labels: Mapping[str, str] | None = None
) -> Figure:
    """W1 between models, in the order of ``result`` (e.g. checkpoints by training step); cells whose
    distance does not exceed the pair's noise floor (the larger of the two models' split-half floors)
    are hatched: there the models cannot be told apart from re-drawing the texts. ``labels``: model ->
    the short name its row and column show."""
    names = dict(labels or {})
    fig = matrix_heatmap(
        result.w1.rename(index=names, columns=names),
        title=title or f"W1 of {result.score} ({result.depth} depth); hatched: within noise floor",
        cmap="magma_r",
        vmin=0.0,
        fmt=".3g",
        colorbar_label="Wasserstein-1",
    )
    ax = fig.axes[0]
    floor = result.pair_floor()
    for i, a in enumerate(result.w1.index):
        for j, b in enumerate(result.w1.columns):
            if a != b and np.isfinite(floor.loc[a, b]) and result.w1.loc[a, b] <= floor.loc[a, b]:
                ax.add_patch(Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="grey", linewidth=0))
    return fig


def overlap_heatmap(matrix: pd.DataFrame, *, title: str, annotate: bool | None = None) -> Figure:
    """IoU between score functions' selections, or models' top-k sets (0 = disjoint, 1 = identical)."""
    return matrix_heatmap(
        matrix, title=title, cmap="plasma", vmin=0.0, vmax=1.0, colorbar_label="IoU", annotate=annotate
    )


# --- score distributions --------------------------------------------------------------------------


def _one_dataset(rows: pd.DataFrame, model: str, dataset: str | None) -> pd.DataFrame:
    if "dataset" not in rows.columns:
        return rows
    have = sorted(rows["dataset"].astype(str).unique())
    if dataset is None:
        if len(have) > 1:
            raise ValueError(f"model {model!r} has several datasets ({', '.join(have)}): pick one with dataset=")
        return rows
    if dataset not in have:
        raise ValueError(f"model {model!r} has no dataset {dataset!r}; it has {', '.join(have)}")
    return rows[rows["dataset"].astype(str) == dataset]


def _score_list(score_ids: str | Sequence[str]) -> list[str]:
    ids = [score_ids] if isinstance(score_ids, str) else list(score_ids)
    for sid in ids:
        if sid not in SCORES:
            raise ValueError(f"unknown score id {sid!r}: choose from {', '.join(SCORES)}")
    if not ids:
        raise ValueError("no score ids to plot")
    return ids


def _values(rows: pd.DataFrame, model: str, score_id: str) -> np.ndarray:
    if score_id not in rows.columns or rows[score_id].isna().all():
        raise ValueError(f"model {model!r} has no values of {score_id!r}")
    values = rows[score_id].to_numpy(np.float64)
    return values[np.isfinite(values)]


def ecdf(
    scores: pd.DataFrame,
    score_ids: str | Sequence[str],
    models: Sequence[str],
    *,
    dataset: str | None = None,
    quantiles: int = 512,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Empirical CDFs of a score for several models (pooled over sequences, layers and heads); one
    panel per score id. More than :data:`MAX_CURVES` models are drawn as small multiples: one row of
    panels per group, the first model (the reference) in every row. ``labels``: model -> the short
    name its legend shows.

    Drawn from ``quantiles`` quantiles per model, so a table of millions of rows plots as fast as a
    small one and the figure stays small.
    """
    ids = _score_list(score_ids)
    models = list(models)
    head, rest = models[:1], models[1:]
    room = MAX_CURVES - len(head)
    groups = [head + rest[i : i + room] for i in range(0, len(rest), room)] or [head]
    fig = Figure(figsize=(5.0 * len(ids), 3.8 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), len(ids), squeeze=False)
    levels = np.linspace(0.0, 1.0, quantiles)
    looks = _model_looks(models)
    rows = {m: _one_dataset(model_rows(scores, m), m, dataset) for m in models}
    names = dict(labels or {})
    for g, group in enumerate(groups):
        for ax, sid in zip(axes[g], ids, strict=True):
            for model in group:
                ax.plot(
                    np.quantile(_values(rows[model], model, sid), levels),
                    levels,
                    linewidth=1.5,
                    **looks[model],
                    label=names.get(model, model),
                )
            ax.set_xlabel(f"{score_label(sid)}\ninactive when {SCORES[sid].inactive_when} the threshold", fontsize=8)
            ax.set_ylabel("fraction of (sequence, layer, head)", fontsize=8)
            ax.set_title(wrap_title(f"ECDF of {sid}" + (f" on {dataset}" if dataset else ""), 4.6, 10), fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    return fig


# Colours for more models than tab10 holds: Okabe-Ito's without its yellow (too pale on white) and
# with a brown, any two at least 20 CIEDE2000 apart; black is the reference's.
_MANY_MODELS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#8c564b")
_MANY_STYLES = ("-", "--", ":", "-.")


def _model_looks(models: Sequence[str]) -> dict[str, dict[str, object]]:
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


def layer_head_heatmap(
    scores: pd.DataFrame,
    score_ids: str | Sequence[str],
    model: str,
    *,
    dataset: str | None = None,
    model_label: str | None = None,
) -> Figure:
    """Mean of a score over sequences for every (layer, head) of one model; one panel per score id
    (titled with ``model_label``, default the model's name)."""
    ids = _score_list(score_ids)
    rows = _one_dataset(model_rows(scores, model), model, dataset)
    for sid in ids:
        _values(rows, model, sid)
    grids = rows.groupby(["layer", "head"], observed=True)[ids].mean()
    n_layers, n_heads = grids.index.levshape
    if min(n_layers, n_heads) < MIN_HEATMAP:
        raise ValueError(
            f"model {model!r} has {n_layers} layer(s) x {n_heads} head(s): too few for a heatmap (at least "
            f"{MIN_HEATMAP} x {MIN_HEATMAP}); show the per-head means as a table"
        )
    fig = Figure(
        figsize=(len(ids) * max(3.2, 0.3 * n_heads + 2.0), max(3.0, 0.2 * n_layers + 1.4)), layout="constrained"
    )
    axes = fig.subplots(1, len(ids), squeeze=False)[0]
    for ax, sid in zip(axes, ids, strict=True):
        grid = grids[sid].unstack("head").astype(float)
        sns.heatmap(
            grid,
            ax=ax,
            cmap="viridis",
            cbar_kws={"label": f"mean {sid}"},
            annot=grid.size <= 64,
            fmt=".2g",
            annot_kws={"fontsize": 6},
        )
        title = f"{score_label(sid)}\n{model_label or model}" + (f" on {dataset}" if dataset else "")
        ax.set_title(wrap_title(title, max(3.2, 0.3 * n_heads + 2.0) - 0.9, 9), fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    return fig
