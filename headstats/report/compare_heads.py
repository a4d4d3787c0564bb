"""The per-head part of the report of ``headstats compare``: how far each head moved, against its
margin, for compared models of the reference's architecture.

It renders :class:`headstats.jobs.compare.Comparison`'s per-head tables (statistics of
:mod:`headstats.stats.heads`): the clause of each model's answer that counts heads by verdict, the
layer x head map, the section "How far each head moved" (``tables/heads.csv``: one row per head;
``tables/head_shifts.csv``: every dataset x score x head), and the methods' notes on the per-head rule
and on scores that are the same on every text.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from headstats.jobs.compare import Comparison
from headstats.report.writer import ReportWriter
from headstats.stats.compare import EQUIVALENT, MOVED, UNDETERMINED
from headstats.stats.heads import MIN_UNITS

SECTION = "How far each head moved"
ANCHOR = "#how-far-each-head-moved"
SHOWN_HEADS = 6  # moved heads named in a sentence; the table and CSV list all
LISTED_HEADS = 20  # heads moved beyond the margin shown as a table on the page; more: collapsed
# the verdict's mark on a head of the map: black with a white edge or white with a black edge, visible on
# every colour of the map; an equivalent head has none
MARKS = {
    MOVED: {"markerfacecolor": "black", "markeredgecolor": "white", "markersize": 7},
    UNDETERMINED: {"markerfacecolor": "white", "markeredgecolor": "black", "markersize": 5},
}
MARK_WORDS = {MOVED: "moved beyond its margin", UNDETERMINED: "undetermined"}
CELL_COLUMNS = [
    "model_b", "dataset", "score", "layer", "head", "head_local", "mean_a", "mean_b", "iqr_a", "shift_iqr",
    "shift_iqr_low", "shift_iqr_high", "exact", "margin", "margin_from", "verdict", "p_max_t", "significant",
]  # fmt: skip


def same_architecture(result: Comparison) -> list[str]:
    """The compared models that share the reference's heads, in order."""
    return [o for o in result.others if result.same_architecture.get(o)]


def head_name(layer: int, head: int) -> str:
    return f"L{layer} H{head}"


def head_list(heads: pd.DataFrame, shown: int = SHOWN_HEADS) -> str:
    """``L24 H6, L24 H8`` (by layer and head), the first ``shown`` and how many more."""
    names = [head_name(r.layer, r.head) for r in heads.sort_values(["layer", "head"]).itertuples()]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def heads_clause(result: Comparison, other: str) -> str:
    """The per-head part of a model's answer, its verdicts ordered by how many heads each holds:
    ``per head, 266 of 270 equivalent within their margin (2 moved beyond it: L24 H6, L24 H8; 2
    undetermined)``."""
    heads = result.head_verdicts
    heads = heads[heads["model_b"] == other]
    counts = heads["verdict"].value_counts()
    moved = heads[heads["verdict"] == MOVED]
    first_words = {
        EQUIVALENT: "[equivalent within their margin]({})",
        MOVED: "[moved beyond their margin]({})",
        UNDETERMINED: "[undetermined]({}) against their margin",
    }
    later_words = {EQUIVALENT: "equivalent", MOVED: "moved beyond it", UNDETERMINED: "undetermined"}
    order = sorted((v for v in (EQUIVALENT, MOVED, UNDETERMINED) if counts.get(v, 0)), key=lambda v: -counts[v])
    named = f": {head_list(moved)}" if len(moved) else ""
    lead = order[0]
    text = f"per head, {counts[lead]} of {len(heads)} " + first_words[lead].format(ANCHOR)
    text += named if lead == MOVED else ""
    rest = [f"{counts[v]} {later_words[v]}" + (named if v == MOVED else "") for v in order[1:]]
    return text + (f" ({'; '.join(rest)})" if rest else "")


def _grid(heads: pd.DataFrame, column: str) -> pd.DataFrame:
    return heads.pivot(index="layer", columns="head", values=column).sort_index().sort_index(axis=1)


def head_map(result: Comparison) -> Figure:
    """One panel per compared model of the reference's architecture: its layers (rows) by heads
    (columns), each head coloured by its largest shift from the reference over its head-local scores and
    datasets, in the reference's IQR (log scale, 0 at the lowest colour), and marked by its verdict
    (:data:`MARKS`; equivalent heads unmarked). The legend sits below the panels, off the data."""
    models = same_architecture(result)
    heads = result.head_verdicts
    heads = heads[heads["model_b"].isin(models)].assign(size=lambda f: f["largest_shift"].abs())
    n_layers, n_heads = heads["layer"].nunique(), heads["head"].nunique()
    top = float(heads["size"].max()) if heads["size"].max() > 0 else 1.0
    positive = heads.loc[heads["size"] > 0, "size"]
    bottom = max(float(positive.min()) if len(positive) else top / 1e3, top / 1e4)
    norm = LogNorm(vmin=bottom if bottom < top else top / 10, vmax=top)
    width = len(models) * max(2.6, 0.34 * n_heads + 1.3) + 1.4
    fig = Figure(figsize=(width, max(3.2, 0.21 * n_layers + 2.0)), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    labels = dict(zip(result.facts["slug"], result.facts["label"], strict=True)) if not result.facts.empty else {}
    mesh = None
    for ax, model in zip(axes, models, strict=True):
        mine = heads[heads["model_b"] == model]
        grid = _grid(mine, "size").clip(lower=norm.vmin)
        mesh = ax.pcolormesh(
            np.arange(n_heads + 1) - 0.5, np.arange(n_layers + 1) - 0.5, grid.to_numpy(), norm=norm, cmap="viridis"
        )
        for verdict, look in MARKS.items():
            marked = mine[mine["verdict"] == verdict]
            ax.plot(marked["head"], marked["layer"], linestyle="none", marker="o", **look)
        ax.set_xlim(-0.5, n_heads - 0.5)
        ax.set_ylim(n_layers - 0.5, -0.5)
        ax.set_xticks(range(n_heads))
        step = 1 if n_layers <= 12 else 5
        ax.set_yticks(range(0, n_layers, step))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(labels.get(model, model), loc="left")
    bar = fig.colorbar(mesh, ax=list(axes), label="largest |shift| (reference IQR, log)\n0 at the lowest colour")
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))  # 0.01: no small superscripts
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    shown = [v for v in MARKS if (heads["verdict"] == v).any()]
    handles = [Line2D([], [], linestyle="none", marker="o", label=MARK_WORDS[v], **MARKS[v]) for v in shown]
    if handles:  # an unmarked head is equivalent: the caption says so
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False)
    return fig


def _moved_table(heads: pd.DataFrame) -> pd.DataFrame:
    """The heads that moved beyond their margin: where, and the shift with its band on the score and
    dataset it moved farthest beyond its margin on."""

    def shift(r) -> str:
        if r.beyond_exact:
            return f"{r.beyond_shift:+.3g} (exact)"
        return f"{r.beyond_shift:+.3g} [{r.beyond_low:+.3g}, {r.beyond_high:+.3g}]"

    return pd.DataFrame(
        {
            "compared": heads["model_b"],
            "head": [head_name(r.layer, r.head) for r in heads.itertuples()],
            "moved beyond on": heads["moved_on"],
            "shift [90% band] on the first": [shift(r) for r in heads.itertuples()],
            "its margin": heads["beyond_margin"],
        }
    )


def write_heads(writer: ReportWriter, result: Comparison) -> None:
    """The section "How far each head moved": the map, the rule in two sentences, the heads that moved
    beyond their margin, every head's verdict and every cell (CSV), the significance-only count, and
    whether the inactive heads stay."""
    writer.heading(SECTION)
    across = [o for o in result.others if not result.same_architecture.get(o)]
    if across:
        writer.text(
            f"{', '.join(across)} {'has' if len(across) == 1 else 'have'} another architecture than {result.reference} "
            "(other layers or heads): only the distribution-level results above apply to "
            f"{'it' if len(across) == 1 else 'them'}; a head of one model is not a head of the other."
        )
    if result.heads.empty:
        return
    writer.figure(
        head_map(result),
        "head_map",
        "Every head of each compared model (rows: layers, columns: heads), coloured by its largest shift from the "
        "reference over its head-local scores and datasets, in the reference's IQR (log scale); ● moved beyond its "
        "margin on some score, ○ undetermined, no mark: equivalent within its margin on every score. A bright head "
        "without a mark moved far on a score whose margin is larger still (a first-token score, which the format "
        "change moves further).",
    )
    heads, cells = result.head_verdicts, result.heads
    family = int(cells["family"].iloc[0])
    writer.text(
        "Per dataset, score and head: the shift of the head's mean over the texts from the reference's, in the "
        f"reference's IQR of that score (the unit of W1/IQR), with a simultaneous {cells['confidence'].iloc[0]:.0%} "
        f"band over all {family} dataset × score × head cells of a compared model, against the head's "
        "[margin](#the-heads-margin). A head's verdict reads the scores that look at it alone (raw and "
        "head-normalised; a layer-normalised score moves every head of a layer when one moves): *moved beyond "
        "the margin* on any of them, *equivalent within it* on all, else *undetermined*. The family-wise error "
        f"of *moved beyond* is about {result.spec.alpha:g} at the margin. [The rule](#the-heads-margin)."
    )
    moved = heads[heads["verdict"] == MOVED]
    if len(moved):
        writer.table(
            _moved_table(moved),
            "moved_beyond",
            floatfmt=".3g",
            collapsed=f"The {len(moved)} heads moved beyond their margin" if len(moved) > LISTED_HEADS else None,
        )
    writer.table(heads, "heads", floatfmt=".3g", collapsed="Every head's verdict (all columns)")
    writer.linked_table(cells[[c for c in CELL_COLUMNS if c in cells]], "head_shifts", "Every dataset × score × head")
    labels = dict(zip(result.facts["slug"], result.facts["label"], strict=True)) if not result.facts.empty else {}
    told = [
        f"{int((heads.loc[heads['model_b'] == m, 'n_significant'] > 0).sum())} of {int((heads['model_b'] == m).sum())} "
        f"heads of {labels.get(m, m)}"
        for m in same_architecture(result)
    ]
    writer.text(
        "Significance only: a paired sign-flip max-T test (family-wise 5% over the heads of each dataset and score) "
        "tells "
        + "; ".join(told)
        + " apart from the reference on some head-local score (`n_significant`, `p_max_t`). With enough texts it "
        "detects any deterministic change, rounding included: it says a difference is detectable, not that it is "
        "large."
    )
    summary = result.head_summary.copy()
    summary["jaccard [95% CI]"] = [
        f"{j:.3g} [{lo:.3g}, {hi:.3g}]" if np.isfinite(lo) else f"{j:.3g}"
        for j, lo, hi in zip(summary["jaccard"], summary["jaccard_low"], summary["jaccard_high"], strict=True)
    ]
    shown = ["model_b", "dataset", "score", "n_beyond", "n_equivalent", "n_undetermined", "n_significant",
             "spearman", "split_half", "jaccard [95% CI]", "n_selected"]  # fmt: skip
    writer.text(
        f"Do the inactive heads stay inactive? `spearman`: rank correlation of the heads' mean scores between the "
        f"two models (`split_half`: the reference's own agreement between halves of its texts); `jaccard`: overlap "
        f"of the {result.spec.rate:.0%} most inactive heads by mean score in each model, with a 95% interval from "
        "resampling texts."
    )
    writer.table(
        summary[shown], "heads_by_score", collapsed="Per dataset and score: heads by verdict, rank correlation, overlap"
    )


def write_head_rule(writer: ReportWriter, result: Comparison) -> None:
    """The methods' note on the per-head rule and its margin (inside the appendix)."""
    if result.heads.empty:
        return
    cells, spec = result.heads, result.spec
    writer.heading("The heads' margin", 3)
    critical = cells.groupby("model_b", sort=False)["critical"].first()
    margin = (
        f"the given margin, {spec.margin:g}, as a shift of that many IQRs"
        if spec.margin is not None
        else "the larger of how far the format change moves that head (its own shift, on the same texts) and the "
        "distribution margin of that dataset and score (the shift every head would need to move the pooled "
        "distribution that far): the head's own yardstick says what a change of no consequence does to this head, "
        "and the floor keeps a head that happens not to react to the format change from a margin near 0"
    )
    writer.text(
        "A head's shift is the paired mean difference of its score over the texts (averaged within clusters), "
        "divided by the reference's interquartile range of the score on the dataset over all its heads and texts: "
        "every head shifted by s moves the pooled distribution by W1/IQR = |s|. A mean rather than W1 of the head's "
        "values over texts: it is paired and unbiased, where W1 over one head's few dozen values is biased upwards "
        f"by about as much as the shifts it would judge. The band: the bootstrap-t of the largest studentised "
        f"deviation over a compared model's family ({spec.n_resamples} resamples of the texts' clusters, each "
        "dataset on its own; resampled standard errors floored at a third of the sample's, so that a head that "
        "differs on a few texts only does not widen every head's band), critical value "
        + ", ".join(f"{c:.2f} standard errors for {m}" for m, c in critical.items())
        + ". A false *moved beyond* needs a head whose true shift lies within its margin to leave the band on the "
        "side facing the margin: simulated with every head at its margin, the family-wise error stayed within "
        "0.05 plus two Monte Carlo standard errors for normal, skewed and spiky differences of 20 to 128 units, "
        "where each head's own interval (the distribution rule applied head by head) said *moved beyond* for some "
        f"head in most comparisons (`benchmarks/compare_head_margin_size.py`). A head's margin: {margin}. A head "
        "whose differences are the same on every text (unchanged, or a score the same on every text in both models) "
        "has an exact shift, no interval, and its verdict compares it with the margin."
    )
    units = int(cells["n_units"].min())
    if units < MIN_UNITS:
        writer.text(
            f"**Too few units for the band**: {units} clusters of texts, fewer than {MIN_UNITS}. At 10 units the "
            "simulated family-wise error of skewed differences reached 0.11: read the per-head verdicts as a "
            "sketch, and score more texts to decide."
        )


def write_constant_texts(writer: ReportWriter, result: Comparison) -> None:
    """The methods' note, once per dataset and score, on scores that are the same on every text."""
    table = result.constant_texts
    if table.empty:
        return
    left = {(o, s) for o in result.others for s in result.left_out.get(o, {})}
    table = table[[(m, s) not in left for m, s in zip(table["model"], table["score"], strict=True)]]
    if table.empty:
        return
    writer.heading("Scores the same on every text", 3)
    lines = []
    for (dataset, score), rows in table.groupby(["dataset", "score"], sort=False):
        why = f", and every text of {dataset} starts with the same token" if rows["first_token"].iloc[0] else ""
        cause = f" (it reads the first token only{why})" if rows["first_token"].iloc[0] else ""
        lines.append(
            f"`{score}` on {dataset}: the same on every text, head by head, for {', '.join(rows['model'])}{cause}."
        )
    writer.text(
        "\n\n".join(lines)
        + "\n\nA distance between two models on which a score is the same on every text does not depend on the texts "
        "drawn: it is exact, shown without an interval (*exact*), and its verdict compares it with the margin as it "
        "is; resampling texts would give a zero-width interval, which is no interval."
    )


def plain(text: str) -> str:
    """Markdown of an answer as terminal text: links as their words, no emphasis."""
    return re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text).replace("**", "")


__all__ = ["head_map", "heads_clause", "plain", "same_architecture", "write_constant_texts", "write_head_rule",
           "write_heads"]  # fmt: skip
