"""The report of ``headstats compare``: one sentence per comparison, one figure, the main table.

It renders the finished tables of :class:`headstats.jobs.compare.Comparison` (every number is a
statistic of :mod:`headstats.stats.compare`) through the report writer
(:class:`headstats.report.writer.ReportWriter`): ``index.html``, ``summary.md``, ``tables/*.csv``
(``moved_heads.csv`` lists the moved heads with ``layer`` and ``head`` columns) and ``figures/``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headstats.io import store
from headstats.jobs.compare import COMPARED, FORMAT_CHANGE, Comparison
from headstats.report.freshness import report_inputs
from headstats.report.writer import ReportWriter
from headstats.stats.compare import EQUIVALENT, MOVED, UNDETERMINED

VERDICT_COLOURS = {MOVED: "#b2182b", EQUIVALENT: "#1b7837", UNDETERMINED: "#777777"}
SHOWN_HEADS = 6  # moved heads named in a sentence; the table and CSV list all


def _label(result: Comparison, slug: str) -> str:
    name = result.names.get(slug, slug)
    return slug if name == slug else f"{slug} ({name})" if Path(name).name != slug else slug


def _head_list(moved: pd.DataFrame) -> str:
    names = [f"L{r.layer} H{r.head}" for r in moved.sort_values(["layer", "head"]).itertuples()]
    shown = ", ".join(names[:SHOWN_HEADS])
    return shown + (f" and {len(names) - SHOWN_HEADS} more" if len(names) > SHOWN_HEADS else "")


def sentence(result: Comparison, other: str) -> str:
    """The plain-language answer for one compared model."""
    rows = result.distances[result.distances["model_b"] == other]
    counts = rows["verdict"].value_counts()
    n = len(rows)
    parts = [f"**{other} vs {result.reference}**: "]
    if result.spec.margin is None:
        margin = "[format-change margin](#the-margin)"
    else:
        margin = f"[margin](#the-margin) of {result.spec.margin:g}"
    parts.append(
        f"[equivalent](#verdicts) within the {margin} on {counts.get(EQUIVALENT, 0)} of {n} dataset × score pairs"
    )
    extra = []
    if counts.get(MOVED, 0):
        extra.append(f"moved beyond it on {counts[MOVED]}")
    if counts.get(UNDETERMINED, 0):
        extra.append(f"undetermined on {counts[UNDETERMINED]}")
    if extra:
        parts.append(" (" + ", ".join(extra) + ")")
    moved = int(rows["moved"].sum())
    parts.append(f"; the distribution [moved](#movement-test) on {moved} of {n}")
    if result.same_architecture.get(other):
        heads = result.moved_heads
        heads = heads[heads["model_b"] == other]
        tested = result.heads.loc[result.heads["model_b"] == other, ["layer", "head"]].drop_duplicates()
        if len(heads) == len(tested):
            parts.append(f"; every one of its {len(tested)} heads [moved](#which-heads-moved) on some score")
        elif len(heads):
            plural = "s" if len(heads) != 1 else ""
            parts.append(f"; {len(heads)} head{plural} [moved](#which-heads-moved): {_head_list(heads)}")
        else:
            parts.append("; no head [moved](#which-heads-moved)")
    else:
        parts.append("; other architecture: distributions only")
    return "".join(parts) + "."


def abstract(result: Comparison) -> str:
    lines = [sentence(result, other) for other in result.others]
    if result.spec.margin is None:
        lines.append(
            f"The margin is how far {result.reference} itself moves when its prompts use the `{result.format_change}` "
            f"format instead of `{result.spec.prompt_format}`, on the same texts."
        )
    return "\n\n".join(lines)


def _interval(value: float, low: float, high: float) -> str:
    if not np.isfinite(value):
        return ""
    return f"{value:.3g} [{low:.3g}, {high:.3g}]" if np.isfinite(low) else f"{value:.3g}"


def main_table(result: Comparison) -> pd.DataFrame:
    d = result.distances
    return pd.DataFrame(
        {
            "compared": d["model_b"],
            "dataset": d["dataset"],
            "score": d["score"],
            "W1/IQR [90% CI]": [
                _interval(*v) for v in zip(d["w1_iqr"], d["w1_iqr_low"], d["w1_iqr_high"], strict=False)
            ],
            "margin": d["margin"],
            "verdict": d["verdict"],
            "p (Holm)": d["p_holm"],
            "W1 (raw)": d["w1"],
            "texts to decide": d["texts_to_decide"],
        }
    )


def headline_figure(result: Comparison) -> Figure:
    """Distance over the reference's IQR with its interval per dataset × score (one marker per compared
    model), the margin as a grey band from 0, and the split-half noise of the texts as a small mark."""
    d = result.distances
    pairs = d[["dataset", "score"]].drop_duplicates().reset_index(drop=True)
    n_rows, others = len(pairs), result.others
    fig = Figure(figsize=(7.5, 1.2 + 0.28 * n_rows * max(1, len(others)) ** 0.5), layout="constrained")
    ax = fig.subplots()
    step = 0.7 / max(len(others), 1)
    markers = "os^Dv<>p"
    for i, pair in pairs.iterrows():
        here = d[(d["dataset"] == pair["dataset"]) & (d["score"] == pair["score"])]
        margin = here["margin"].iloc[0]
        if np.isfinite(margin):
            ax.barh(i, margin, height=0.8, color="#dddddd", zorder=0)
        noise = here["noise_iqr"].max()
        if np.isfinite(noise):
            ax.plot([noise], [i], marker="|", color="#555555", markersize=10, zorder=1)
    for j, other in enumerate(others):
        rows = d[d["model_b"] == other].merge(pairs.reset_index(), on=["dataset", "score"])
        y = rows["index"].to_numpy() + (j - (len(others) - 1) / 2) * step
        x = rows["w1_iqr"].to_numpy()
        lo = np.clip(x - rows["w1_iqr_low"].to_numpy(), 0, None)
        hi = np.clip(rows["w1_iqr_high"].to_numpy() - x, 0, None)
        colours = [VERDICT_COLOURS[v] for v in rows["verdict"]]
        ax.errorbar(x, y, xerr=[lo, hi], fmt="none", ecolor="#444444", elinewidth=0.8, zorder=2)
        ax.scatter(x, y, c=colours, marker=markers[j % len(markers)], s=22, zorder=3, label=other)
    ax.set_yticks(range(n_rows), [f"{r.dataset} · {r.score}" for r in pairs.itertuples()], fontsize=7)
    ax.invert_yaxis()
    finite = d[["w1_iqr_high", "margin"]].to_numpy(dtype=float)
    top = np.nanmax(finite) if np.isfinite(finite).any() else 1.0
    ax.set_xscale("symlog", linthresh=max(top / 1000, 1e-4))
    ax.set_xlim(0, top * 1.5 if top > 0 else 1)
    ax.set_xlabel(f"W1 over {result.reference}'s IQR (90% interval); grey band: margin; |: split-half noise")
    legend = ax.legend(fontsize=7, loc="lower right", title="marker: compared model", title_fontsize=7)
    for handle in legend.legend_handles:
        handle.set_color("#444444")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _write_heads(writer: ReportWriter, result: Comparison) -> None:
    writer.heading("Which heads moved")
    across = [o for o in result.others if not result.same_architecture.get(o)]
    if across:
        writer.text(
            f"{', '.join(across)} {'has' if len(across) == 1 else 'have'} another architecture than {result.reference} "
            "(other layers or heads): only the distribution-level results above apply to "
            f"{'it' if len(across) == 1 else 'them'}; a head of one model is not a head of the other."
        )
    if result.head_summary.empty:
        return
    moved = result.moved_heads
    writer.text(
        "Per dataset and score, a paired sign-flip max-T test over the texts (family-wise error 5% over the "
        "heads). Heads listed here moved on at least one score that reads the head alone (raw and head-normalised "
        "scores); a layer-normalised score divides by its layer's mean, so one moved head moves all heads of its "
        "layer there. Effect `d_z`: the mean paired difference in standard deviations of the texts' differences."
    )
    many = len(moved) > 20
    writer.table(moved, "moved_heads", floatfmt=".3g", collapsed=f"The {len(moved)} moved heads" if many else None)
    summary = result.head_summary.copy()
    summary["jaccard [95% CI]"] = [
        _interval(*v) for v in zip(summary["jaccard"], summary["jaccard_low"], summary["jaccard_high"], strict=False)
    ]
    shown = summary[
        [
            "model_b",
            "dataset",
            "score",
            "n_moved",
            "n_heads",
            "spearman",
            "split_half",
            "jaccard [95% CI]",
            "n_selected",
        ]
    ]
    writer.text(
        f"Do the inactive heads stay inactive? `spearman`: rank correlation of the heads' mean scores between the "
        f"two models (`split_half`: the reference's own agreement between halves of its texts); `jaccard`: overlap "
        f"of the {result.spec.rate:.0%} most inactive heads by mean score in each model, with a 95% interval from "
        "resampling texts."
    )
    writer.table(shown, "heads_by_score", collapsed="Per dataset and score: moved heads, rank correlation, overlap")


def _write_methods(writer: ReportWriter, result: Comparison, out: Path) -> None:
    spec, d = result.spec, result.distances
    n_tests, n_perm = int(d["p_value"].notna().sum()), int(d["n_perm"].max())
    with writer.appendix():
        writer.heading("The margin", 3)
        if spec.margin is None:
            writer.text(
                f"The margin of each dataset × score is a yardstick measured on the same texts: W1/IQR between "
                f"{result.reference} with its prompts in the `{spec.prompt_format}` format (the comparison's) and in "
                f"the `{result.format_change}` format. A compared model that moves less than that is as close to the "
                "reference as a change of prompt format."
            )
        else:
            writer.text(f"The margin is {spec.margin:g} W1/IQR for every dataset and score, as given.")
        writer.heading("Verdicts", 3)
        writer.text(
            f"Equivalence by the interval-inclusion rule, which is two one-sided tests (TOST) at {spec.alpha:g} each: "
            f"the {1 - 2 * spec.alpha:.0%} paired cluster-bootstrap interval of W1/IQR ({spec.n_resamples} "
            "resamples of texts; each side the wider of the basic and the percentile bootstrap's bound, since W1 "
            f"is biased upwards) wholly below the margin is *{EQUIVALENT}*, wholly above it *{MOVED}*, "
            f"else *{UNDETERMINED}*, "
            "with the texts that would decide: n × (half-width / |distance − margin|)², if the distance stayed as "
            "observed (for sizing a rerun, not a result). At a true distance equal to the margin, a simulation of "
            "40 paired texts called it equivalent at most 5% of the time, but moved beyond the margin about 8% of "
            "the time: W1 is biased upwards at small samples, so a 'moved beyond' close to the margin is weaker "
            "evidence than its level says. W1/IQR: the Wasserstein-1 distance between the two "
            "models' score distributions over texts, layers and heads, divided by the reference's interquartile "
            "range of the score, so that scores on different scales read alike."
        )
        writer.heading("Movement test", 3)
        writer.text(
            f"Paired permutation test over texts that swaps the two models' labels within each text; {n_perm} "
            f"permutations per test, chosen so that Holm over this report's family of {n_tests} tests can reach "
            f"0.01 (a p-value is at least 1/({n_perm} + 1)). 'Moved' means Holm-adjusted p ≤ 0.01. With enough "
            "texts every pair of models differs: the verdict against the margin says whether it matters."
        )
        writer.heading("Yardsticks", 3)
        if not result.yardstick.empty:
            y = result.yardstick
            table = y[["dataset", "score", "w1_iqr", "w1_iqr_low", "w1_iqr_high", "w1", "n_seq_a"]].rename(
                columns={"n_seq_a": "texts"}
            )
            writer.text(
                f"The format change ({result.reference}: `{spec.prompt_format}` vs `{result.format_change}`), "
                "W1/IQR with its 90% interval:"
            )
            writer.table(table, "format_change", collapsed="Format-change distances")
        writer.text(
            "The split-half mark (|) in the figure is W1/IQR between two random halves of the reference's texts "
            "(95th percentile): resampling noise at half the texts, a description, never a decision."
        )
        left = {s: r for other in result.others for s, r in result.left_out.get(other, {}).items()}
        if left:
            writer.heading("Scores left out", 3)
            writer.text("\n\n".join(f"`{s}`: {r}." for s, r in sorted(left.items())))
        writer.heading("Rebuild", 3)
        models = " ".join(shlex.quote(result.names.get(m, m)) for m in [result.reference, *result.others])
        writer.text(
            f"`headstats compare {models} --data {','.join(spec.data)} --limit {spec.limit} --out {out}`; the "
            f"score tables are under `{Path(spec.scores_dir) if spec.scores_dir else out / 'results'}` "
            f"(`{COMPARED}/` and `{FORMAT_CHANGE}/`) and a rerun reuses them."
        )
        writer.table(result.distances, "distances", collapsed="Every distance, test and verdict (all columns)")


def write_comparison(result: Comparison, out: Path, *, analysis: str | None = None, title: str | None = None) -> Path:
    """Write the comparison's report to ``out`` (``title``, default: what is compared); returns
    ``out/index.html``."""
    spec = result.spec
    out_dir = store.ensure_writable(out)
    title = title or f"{result.reference} compared with {', '.join(result.others)}"
    texts = int(result.distances["n_seq_a"].max())
    subtitle = (
        f"Reference: {_label(result, result.reference)}; compared: "
        + ", ".join(_label(result, o) for o in result.others)
        + f"; {texts} texts per dataset ({', '.join(result.datasets)}), prompt format `{spec.prompt_format}`."
    )
    writer = ReportWriter(out_dir, title, dpi=spec.dpi, subtitle=subtitle)
    writer.abstract(abstract(result))
    writer.headline(
        headline_figure(result),
        "distances",
        "Distance of each compared model from the reference per dataset × score (colour: verdict; red moved beyond "
        "the margin, green equivalent, grey undetermined), with the margin and the split-half noise.",
    )
    writer.main_table(
        main_table(result),
        "verdicts",
        legend="W1 over the reference's IQR with its 90% interval, the margin, the verdict and the Holm-adjusted "
        "permutation p-value.",
        full_legend="verdicts",
    )
    _write_heads(writer, result)
    _write_methods(writer, result, out)
    root = Path(spec.scores_dir) if spec.scores_dir else out / "results"
    if (root / COMPARED).is_dir():
        writer.inputs = report_inputs(root, spec.settings(), analysis)
    return writer.write()
