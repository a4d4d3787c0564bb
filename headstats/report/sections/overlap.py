"""Do two scores select the same heads? Overlap at matched selection rates, per dataset."""

from __future__ import annotations

from headstats.report import plots
from headstats.report.sections.context import Context, Writer
from headstats.stats import overlap


def score_overlap(writer: Writer, context: Context) -> None:
    scores = context.scores
    if scores is None:
        return
    writer.heading("Overlap of the heads scores select")
    for dataset in sorted(scores["dataset"].unique()):
        rows = scores[scores["dataset"] == dataset]
        here = sorted(rows["model"].unique())
        pair = context.figure_scores(rows)
        writer.heading(f"Dataset `{dataset}`", 3)
        if len(pair) == 2:
            a, b = pair
            writer.text(
                f"Overlap of `{a}` and `{b}` at matched selection rates (each thresholded at its own quantile, as an "
                "intervention calibrates it): IoU of the selected (sequence, layer, head) triples and of the heads "
                f"selected in at least half of the sequences; `missed_by_a` = share of `{b}`'s heads that `{a}` misses."
            )
            writer.table(
                overlap.score_overlap(rows, a, b, context.options.rates, models=here),
                f"overlap_{dataset}",
                floatfmt=".3g",
            )
        for model in here:
            matrix = overlap.overlap_matrix(rows, model, rate=0.10, dataset=dataset)
            writer.figure(
                plots.overlap_heatmap(matrix, title=f"{model} on {dataset}: IoU of usually-selected heads at 10%"),
                f"overlap_{model}_{dataset}",
                "IoU between every two score functions' usually-selected heads at a 10% selection rate.",
            )
