"""Prompt-format contrast: the same checkpoints scored on the same texts under another prompt format
(a second results folder, ``ReportSpec.contrast``), so a template's effect is measured on its own
instead of being read as a difference between models."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headstats.io import store
from headstats.report.sections.context import Context, Writer, permutation_resolution
from headstats.stats import distances


def _format_of(results, model: str, dataset: str) -> str:
    """The prompt format a score table was collected with, from its provenance."""
    for p in store.find_partitions(results)[0]:
        if p.kind == "scores" and p.model == model and p.name == dataset:
            return str((p.provenance or {}).get("prompt_format") or "?")
    return "?"


def format_contrast(writer: Writer, context: Context) -> None:
    opt, scores = context.options, context.scores
    if not opt.contrast or scores is None:
        return
    folder = Path(opt.contrast).expanduser()
    other = store.read_scores(folder) if folder.is_dir() and store.find_partitions(folder)[0] else None
    if other is None:
        writer.text(f"(No score tables under the contrast folder `{opt.contrast}` here: no format contrast.)")
        return
    pairs = sorted(
        set(map(tuple, scores[["model", "dataset"]].drop_duplicates().astype(str).to_numpy()))
        & set(map(tuple, other[["model", "dataset"]].drop_duplicates().astype(str).to_numpy()))
    )
    if not pairs:
        return
    writer.heading("Prompt format: the same checkpoint under two formats")
    rows = []
    for model, dataset in pairs:
        here = scores[(scores["model"] == model) & (scores["dataset"] == dataset)]
        there = other[(other["model"] == model) & (other["dataset"] == dataset)]
        fa, fb = _format_of(context.results, model, dataset), _format_of(folder, model, dataset)
        both = pd.concat([here.assign(model=f"{model} [{fa}]"), there.assign(model=f"{model} [{fb}]")])
        measured = [s for s in context.measured_scores(here) if s in there.columns]
        dist = distances.model_distance(
            both,
            f"{model} [{fa}]",
            f"{model} [{fb}]",
            measured or None,
            depth_bins=0,
            n_boot=opt.n_boot,
            n_perm=opt.n_perm,
            n_split=opt.n_split,
            seed=opt.seed,
        )
        rows.append(dist.assign(model=model, dataset=dataset, formats=f"{fa} vs {fb}"))
    table = pd.concat(rows, ignore_index=True)
    checkpoints = [m for m in context.checkpoints if m != context.reference]
    if context.reference is not None and checkpoints:
        # The yardstick: how far any checkpoint moved from the reference on the same dataset and score.
        moved = pd.concat(
            [
                context.distance(d, context.reference, m)
                for d in table["dataset"].unique()
                for m in checkpoints
                if m in set(scores.loc[scores["dataset"] == d, "model"])
            ]
        )
        moved = moved[moved["depth"] == distances.ALL_DEPTHS].groupby(["dataset", "score"])["w1"].max()
        table["largest_finetuning_w1"] = [
            moved.get((d, s), float("nan")) for d, s in zip(table["dataset"], table["score"], strict=True)
        ]
    writer.text(
        "W1 between one checkpoint's score distributions under two prompt formats on the same documents "
        "(a paired design, clusters resampled as elsewhere). This is the template's own effect: a fine-tuning "
        "distance is only readable where it exceeds both its noise floor and this. `largest_finetuning_w1`: the "
        "largest W1 of any checkpoint from the reference on the same dataset and score, for scale."
    )
    resolution = permutation_resolution(table)
    if resolution:
        writer.text(resolution)
    shown = ["model", "dataset", "formats", "score", "w1", "ci_low", "ci_high", "noise_floor", "above_noise", "p_holm"]
    shown += ["p_holm_min"]
    shown += [c for c in ("largest_finetuning_w1",) if c in table.columns]
    writer.table(table[shown], "format_contrast", floatfmt=".3g")


__all__ = ["format_contrast"]
