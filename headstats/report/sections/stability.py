"""Across datasets: how stable each model's head scores are when the texts change."""

from __future__ import annotations

from headstats.report.sections.context import Context, Writer
from headstats.stats import stability


def across_datasets(writer: Writer, context: Context) -> None:
    scores, opt = context.scores, context.options
    if scores is None:
        return
    models = sorted(scores["model"].unique())
    multi = [m for m in models if scores.loc[scores["model"] == m, "dataset"].nunique() >= 2]
    if not multi:
        return
    writer.heading("Across datasets: stability of each model's heads")
    how = writer.note(
        "Stability across datasets",
        "Spearman correlation of per-head means between datasets, next to the split-half correlation within "
        "each dataset (what re-drawing texts of the same kind gives); and per-layer W1 between datasets.",
    )
    writer.text(f"Per model: do its heads keep their order when the texts change? ([How to read](#{how}).)")
    multi = [m for m in context.model_order if m in multi]
    for model in multi:
        rows = scores[scores["model"] == model]
        measured = context.measured_scores(rows)
        drawn = [s for s in context.figure_scores(rows) if s != "random"]
        writer.table(
            stability.rank_stability(scores, model, measured or None, seed=opt.seed),
            f"stability_{model}",
            floatfmt=".3g",
            collapsed=None if model == multi[0] else f"rank stability across datasets, {model}",
        )
        writer.table(
            stability.layer_distances(scores, model, drawn or None, n_split=min(opt.n_split, 10), seed=opt.seed),
            f"layer_w1_{model}",
            floatfmt=".3g",
            collapsed=f"per-layer W1 between datasets, {model}",
        )
