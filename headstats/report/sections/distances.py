"""Between models: Wasserstein-1 distances of every score, per dataset two or more models share."""

from __future__ import annotations

from itertools import combinations

import pandas as pd
from tqdm.auto import tqdm

from headstats.report import plots
from headstats.report.sections.context import Context, Writer, permutation_resolution
from headstats.stats import distances


def between_models(writer: Writer, context: Context) -> None:
    scores, opt = context.scores, context.options
    if scores is None:
        return
    datasets = sorted(scores["dataset"].unique())
    by_dataset = {d: sorted(scores.loc[scores["dataset"] == d, "model"].unique()) for d in datasets}
    compared = {d: ms for d, ms in by_dataset.items() if len(ms) >= 2}
    if not compared:
        return
    writer.heading("Between models: Wasserstein-1 distances")
    writer.text(
        f"W1 between two models' score distributions on one dataset, overall and in {opt.depth_bins} "
        f"relative-depth bins (layer / (L - 1)). Sequences are the sampling unit: {opt.n_boot} bootstrap "
        f"resamples of sequences give the 95% interval (basic bootstrap), {opt.n_perm} permutations of "
        "sequence labels (swaps within a sequence when both models saw the same texts) the p-value, and "
        f"{opt.n_split} random halvings of each model's own sequences the noise floor (95th percentile); "
        "`above_noise` marks distances beyond it."
    )
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
    writer.table(table[overall], "w1_overall", floatfmt=".3g")
    writer.table(table[~overall], "w1_by_depth", floatfmt=".3g", collapsed="W1 per relative-depth bin")
    for dataset, ms in compared.items():
        rows = scores[scores["dataset"] == dataset]
        for sid in context.figure_scores(rows):
            if sid == "random":
                continue
            dm = distances.distance_matrix(rows, ms, sid, depth_bins=opt.depth_bins, n_split=opt.n_split, seed=opt.seed)
            writer.figure(
                plots.wasserstein_heatmap(dm),
                f"w1_matrix_{sid}_{dataset}",
                f"W1 of `{sid}` between models on `{dataset}`; hatched cells lie within the noise floor.",
            )
