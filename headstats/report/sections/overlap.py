"""Do two scores select the same heads? Overlap at matched selection rates, per dataset."""

from __future__ import annotations

from headstats.report import plots
from headstats.report.sections.context import Context, Writer
from headstats.stats import overlap


def score_overlap(writer: Writer, context: Context) -> None:
    if context.scores is None:
        return
    writer.heading("Overlap of the heads scores select")
    for dataset, rows, here in context.score_datasets():
        pair = context.figure_scores(rows)
        writer.heading(f"Dataset `{dataset}`", 3)
        if len(pair) == 2:
            a, b = pair
            how = writer.note(
                "Overlap of two scores",
                f"Overlap of `{a}` and `{b}` at matched selection rates (each thresholded at its own quantile, as an "
                "intervention calibrates it): IoU of the selected (sequence, layer, head) triples and of the heads "
                "selected in at least half of the sequences; "
                f"`missed_by_a` = share of `{b}`'s heads that `{a}` misses.",
            )
            writer.text(f"Do `{a}` and `{b}` select the same heads? ([How to read](#{how}).)")
            writer.table(
                overlap.score_overlap(rows, a, b, context.options.rates, models=here),
                f"overlap_{dataset}",
                floatfmt=".3g",
            )
        labels = context.short_labels
        with writer.collapsed(f"IoU between every two scores' heads, per model on `{dataset}` ({len(here)} models)"):
            for model in here:
                matrix = overlap.overlap_matrix(rows, model, rate=0.10, dataset=dataset)
                title = f"{labels.get(model, model)} on {dataset}: IoU of usually-selected heads at 10%"
                caption = "IoU between every two score functions' usually-selected heads at a 10% selection rate."
                if not plots.fits_heatmap(matrix):
                    writer.text(caption + " Too few scores for a heatmap:")
                    writer.table(matrix, f"overlap_{model}_{dataset}", floatfmt=".2f", index=True)
                    continue
                blank = sorted({tuple(sorted((str(a), str(b)))) for a, b in plots.blank_cells(matrix)})
                if blank:
                    caption += (
                        " Grey (blank) cells: " + ", ".join(f"{a} with {b}" for a, b in blank) + ": neither score "
                        "selects any head in at least half of the sequences at this rate, so their IoU is undefined."
                    )
                writer.figure(plots.overlap_heatmap(matrix, title=title), f"overlap_{model}_{dataset}", caption)
