"""Score distributions per dataset: every score's mean per model, ECDFs and layer x head maps."""

from __future__ import annotations

from headstats.report import plots
from headstats.report.sections.context import Context, Writer
from headstats.stats import describe


def score_distributions(writer: Writer, context: Context) -> None:
    if context.scores is None:
        return
    writer.heading("Score distributions")
    for dataset, rows, here in context.score_datasets():
        writer.heading(f"Dataset `{dataset}`", 3)
        sids = context.score_ids(rows)
        writer.table(
            describe.score_means(rows, sids),
            f"means_{dataset}",
            index=True,
            collapsed="sequences, layers, heads and the mean of every score per model",
        )
        drawn = context.figure_scores(rows)
        if not drawn:
            continue
        names = " and ".join(f"`{sid}`" for sid in drawn)
        labels = context.short_labels
        writer.figure(
            plots.ecdf(rows, drawn, here, dataset=dataset, labels=labels),
            f"ecdf_{dataset}",
            f"ECDFs of {names} on `{dataset}`.",
        )
        with writer.collapsed(f"mean {names} per (layer, head) of each model on `{dataset}` ({len(here)} figures)"):
            for model in here:
                mine = rows[rows["model"] == model]
                caption = f"Mean {names} per (layer, head) of {context.models.get(model, model)} on `{dataset}`."
                if min(mine["layer"].nunique(), mine["head"].nunique()) < plots.MIN_HEATMAP:
                    writer.text(caption + " Too few layers or heads for a heatmap:")
                    writer.table(describe.head_means(mine, drawn), f"heads_{model}_{dataset}", index=True)
                    continue
                writer.figure(
                    plots.layer_head_heatmap(rows, drawn, model, dataset=dataset, model_label=labels.get(model)),
                    f"heads_{model}_{dataset}",
                    caption,
                )
