"""Between models: Wasserstein-1 distances of every score, per dataset two or more models share."""

from __future__ import annotations

from itertools import combinations

import pandas as pd
from tqdm.auto import tqdm

from headstats.report import plots
from headstats.report.sections.context import Context, Writer, permutation_resolution
from headstats.stats import distances, matrix


def between_models(writer: Writer, context: Context) -> None:
    scores, opt = context.scores, context.options
    if scores is None:
        return
    datasets = sorted(scores["dataset"].unique())
    order = context.model_order  # a chain's checkpoints by training step, then the other models
    by_dataset = {d: [m for m in order if m in set(scores.loc[scores["dataset"] == d, "model"])] for d in datasets}
    compared = {d: ms for d, ms in by_dataset.items() if len(ms) >= 2}
    if not compared:
        return
    writer.heading("Between models: Wasserstein-1 distances")
    how = writer.note(
        "Wasserstein-1 distances between models",
        f"W1 between two models' score distributions on one dataset, overall and in {opt.depth_bins} "
        f"relative-depth bins (layer / (L - 1)). Sequences are the sampling unit: {opt.n_boot} bootstrap "
        f"resamples of sequences give the 95% interval (basic bootstrap), {opt.n_perm} permutations of "
        "sequence labels (swaps within a sequence when both models saw the same texts) the p-value, and "
        f"{opt.n_split} random halvings of each model's own sequences the noise floor (95th percentile); "
        "`above_noise` marks distances beyond it.",
    )
    writer.text(f"W1 per dataset and score with intervals, p-values and noise floors ([how to read](#{how})).")
    reference = context.reference
    if reference is not None:
        writer.text(f"Every model is compared with `{reference}` (the reference), not every pair with every pair.")
    jobs = [
        (d, a, b)
        for d, ms in compared.items()
        for a, b in combinations(ms, 2)
        if reference is None or reference in (a, b)
    ]
    jobs = [(d, reference, a if b == reference else b) if reference else (d, a, b) for d, a, b in jobs]
    if not jobs:
        return
    results = [
        context.distance(dataset, a, b) for dataset, a, b in tqdm(jobs, desc="model pairs", disable=not opt.progress)
    ]
    table = pd.concat(results, ignore_index=True)
    table = table[["dataset", *[c for c in table.columns if c != "dataset"]]]
    overall = table["depth"] == distances.ALL_DEPTHS
    resolution = permutation_resolution(table)
    if resolution:
        writer.text(resolution)
    writer.table(table[overall], "w1_overall", floatfmt=".3g", collapsed="W1 over all layers, every pair")
    writer.table(table[~overall], "w1_by_depth", floatfmt=".3g", collapsed="W1 per relative-depth bin")
    _distance_matrices(writer, context, compared)


def _distance_matrices(writer: Writer, context: Context, compared: dict[str, list[str]]) -> None:
    """Per dataset and score, the W1 matrix between the models (three or more), then the table of
    the figures' short labels."""
    scores, opt, labels = context.scores, context.options, context.short_labels
    for dataset, ms in compared.items():
        rows = scores[scores["dataset"] == dataset]
        for sid in context.figure_scores(rows):
            if sid == "random":
                continue
            dm = matrix.distance_matrix(rows, ms, sid, depth_bins=opt.depth_bins, n_split=opt.n_split, seed=opt.seed)
            if not plots.fits_heatmap(dm.w1):  # two models: one number, in the table above
                continue
            writer.figure(
                plots.wasserstein_heatmap(dm, labels=labels),
                f"w1_matrix_{sid}_{dataset}",
                f"W1 of `{sid}` between models on `{dataset}`, in training order where the models are checkpoints "
                "(labels: the model-label table below); hatched cells lie within the noise floor.",
            )
    shortened = {m: label for m, label in labels.items() if label != m}
    if shortened:
        writer.table(
            pd.DataFrame(
                [
                    {"label": label, "model": m, **{k: context.checkpoints[m].get(k) for k in ("stage", "step")}}
                    for m, label in shortened.items()
                ]
            ),
            "model_labels",
            collapsed="model labels of the figures: the full name (with the chain's hash) of each",
        )
