"""How far did each head move? Per head of two models of one architecture, scored on the same texts:
the shift of the head's mean in the reference's units, a simultaneous interval, a margin and a verdict.

The question, per (compared model, dataset, score, layer, head): did the head's score move from the
reference by more than a margin, by less, or can the texts not tell? Its quantities:

- **the shift** (``shift_iqr``): the paired mean difference ``compared - reference`` of the head's
  score over the texts (averaged within each cluster first: the clusters are the units), divided by
  the reference's interquartile range of that score on that dataset over all its heads and texts: the
  unit of the distribution distances (``w1_iqr``) of :mod:`headstats.stats.compare`, so that a head's
  shift and a distribution's distance read on one scale (every head shifted by ``s`` moves the pooled
  distribution by W1/IQR = ``|s|``). A mean shift, not W1 of the head's values over texts: it is
  paired (each text's difference), unbiased and tested by the same quantity the margin is stated in,
  where W1 over one head's 64 values is biased upwards by about as much as the shifts it would judge;
- **the interval**: a simultaneous bootstrap-t band (:func:`simultaneous_band`): the units are
  resampled with replacement (each dataset on its own), each cell's resampled mean is studentised by
  its own resampled standard error (floored at a third of the sample's: :data:`SE_FLOOR`), and the
  ``1 - 2 alpha`` quantile of the largest absolute
  studentised deviation over every cell of the family (all datasets, scores and heads of one compared
  model) is the critical value: the band covers every cell's true shift at once with probability
  about ``1 - 2 alpha``;
- **the verdict** against a margin (:func:`shift_verdicts`): the band wholly beyond ``+-margin`` is
  "moved beyond the margin", wholly within it "equivalent within the margin", else "undetermined". A
  false "moved beyond" needs a head whose true shift lies within its margin to fall outside the band
  on the side that faces the margin, so the family-wise error of "moved beyond" over the family is
  about alpha at the margin (at most 2 alpha, the band's own level); checked by simulation at the
  margin (:mod:`headstats.testing.head_margin`, ``benchmarks/compare_head_margin_size.py``), where
  each head's own ``1 - 2 alpha`` interval (the distribution rule applied head by head) fails;
- **the margin** (:func:`head_margins`): by default the larger of how far the prompt-format change
  moves that head (its own shift under the change, measured on the same texts) and the distribution
  margin (how far the change moves the pooled distribution: the shift every head would need to move
  it that far). The head's own yardstick says what a change of no consequence does to *this* head;
  the floor keeps a head that happens not to react to the format change from getting a margin near 0;
- **exact** cells: a head whose differences are the same on every unit (an unchanged head, or a score
  that is the same on every text in both models) has a shift that no resampling moves: it is exact,
  has no interval, stays out of the band's maximum, and its verdict compares the shift with the margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headstats.engine.scores import get_score
from headstats.stats.compare import EQUIVALENT, MOVED, UNDETERMINED, head_changes, head_local
from headstats.stats.distances import interquartile_range
from headstats.stats.movement import cluster_means, common_heads, dataset_rows, paired_units, sequence_matrix

__all__ = [
    "MIN_UNITS",
    "HeadDifferences",
    "compare_heads",
    "format_change_shifts",
    "head_differences",
    "head_margins",
    "head_shifts",
    "head_verdicts",
    "shift_verdicts",
    "simultaneous_band",
    "verdict_counts",
]

EXACT_RTOL = 1e-5  # differences this close, relative to the head's size, are one value (a batch's round-off)
# The resampled standard error of a mean is floored at this share of the sample's. A resample whose spread
# collapses below it has left out the few units that carry the sample's spread (a head that differs on a few
# texts only); there the bootstrap-t's tails are an artefact (the sample's few large differences are not
# centred as the population's are) and, through the maximum over the family, would widen every head's band
# (the critical value of the bf16 copy of SmolLM2 was 25.7 without the floor, 5.3 with it). Normal or skewed
# differences of 20 or more units hardly ever fall below a third, so there the bootstrap-t stands as it is:
# simulated at the margin with 20 to 128 units, the family-wise error of "moved beyond" stayed within 5% plus
# two Monte Carlo standard errors for normal, skewed and spiky differences, 24 or 270 heads (at most 0.064;
# at 10 units skewed differences of 270 heads reached 0.11: MIN_UNITS; benchmarks/compare_head_margin_size.py).
SE_FLOOR = 1 / 3
MIN_UNITS = 20  # fewer units than this: the band's level was not kept in simulation (reports say so)
_BATCH_ELEMENTS = 1 << 21  # replicates x cells per batch of the bootstrap: bounded temporaries
CELL_KEYS = ["dataset", "score", "layer", "head"]


@dataclass(frozen=True)
class HeadDifferences:
    """Two models' paired differences on one dataset: ``values`` is units x cells (each cell a (score,
    layer, head), in the order of ``cells``), the mean over each unit's texts of ``b - a``."""

    cells: pd.DataFrame  # score, layer, head, mean_a, mean_b, iqr_a (the reference's IQR of the score)
    values: np.ndarray
    cluster: str  # the column the units are read from
    n_texts: int


def head_differences(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    dataset: str,
    score_ids: Sequence[str],
    *,
    cluster: str | None = None,
) -> HeadDifferences:
    """Every head's paired differences ``model_b - model_a`` on ``dataset`` for each of ``score_ids``,
    averaged within each unit (:func:`~headstats.stats.movement.paired_units`), with each head's means
    and the reference's (``model_a``'s) IQR of the score over all its heads and the paired texts."""
    names = (model_a, model_b)
    a, b = dataset_rows(scores, model_a, dataset), dataset_rows(scores, model_b, dataset)
    heads = common_heads(a, b, names)
    paired = paired_units(a, b, names, cluster)
    blocks, cells = [], []
    for score_id in score_ids:
        sid = get_score(score_id).id
        va, vb = (sequence_matrix(rows, sid, paired.sequences, heads) for rows in (a, b))
        blocks.append(cluster_means(vb - va, paired.units, paired.n_units))
        with np.errstate(invalid="ignore"):
            mean_a, mean_b = np.nanmean(va, axis=0), np.nanmean(vb, axis=0)
        cells.append(
            pd.DataFrame(
                {
                    "score": sid,
                    "layer": heads.get_level_values(0).astype(int),
                    "head": heads.get_level_values(1).astype(int),
                    "mean_a": mean_a,
                    "mean_b": mean_b,
                    "iqr_a": interquartile_range(va),
                }
            )
        )
    return HeadDifferences(
        pd.concat(cells, ignore_index=True), np.hstack(blocks), paired.cluster, len(paired.sequences)
    )


def _moments(values: np.ndarray, rtol: float, size: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per column of a units x cells block: the count, mean and standard error of its finite entries,
    and whether they are all one value (``exact``, within ``rtol`` of ``size``: the cell's magnitude)."""
    ok = np.isfinite(values)
    n = ok.sum(axis=0)
    x = np.where(ok, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(axis=0) / n
        centred = np.where(ok, values - mean, 0.0)
        se = np.sqrt((centred**2).sum(axis=0) / (n - 1) / n)
        spread = np.where(ok, values, -np.inf).max(axis=0) - np.where(ok, values, np.inf).min(axis=0)
    magnitude = np.abs(x).max(axis=0) if size is None else np.abs(size)
    exact = (n >= 1) & (spread <= rtol * magnitude)
    return {"ok": ok, "centred": centred, "n": n, "mean": mean, "se": np.where(n >= 2, se, np.nan), "exact": exact}


def simultaneous_band(
    blocks: Sequence[np.ndarray],
    sizes: Sequence[np.ndarray] | None = None,
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    seed: int = 0,
    rtol: float = EXACT_RTOL,
) -> tuple[list[pd.DataFrame], float]:
    """A simultaneous ``1 - 2 alpha`` band for the means of every column of every block (units x
    cells; NaN where a unit lacks a cell), by the bootstrap-t of the maximum: each block's units are
    resampled with replacement (``n_boot`` times, blocks independently), each resampled mean is
    studentised by its own resampled standard error (at least :data:`SE_FLOOR` of the sample's), and
    the critical value ``c`` is the ``1 - 2 alpha`` quantile of the largest ``|mean* - mean| / se*``
    over every varying cell of every block.
    Returns per block a frame with ``n``, ``mean``, ``se``, ``low`` = mean - c se, ``high`` = mean +
    c se and ``exact`` (a column whose entries are one value within ``rtol`` of its size, ``sizes``
    per block, default its largest entry: it has no sampling error and no interval, NaN bounds), and
    ``c``; NaN bounds where a cell has fewer than two units or ``c`` is not finite."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie strictly between 0 and 0.5, not {alpha}")
    rng = np.random.default_rng(seed)
    largest = np.zeros(n_boot)
    moments = []
    for k, block in enumerate(blocks):
        values = np.asarray(block, dtype=np.float64)
        m = _moments(values, rtol, None if sizes is None else np.asarray(sizes[k], dtype=np.float64))
        moments.append(m)
        varying = np.flatnonzero(~m["exact"] & (m["n"] >= 2) & (m["se"] > 0))
        n_units = values.shape[0]
        if varying.size == 0 or n_units < 2:
            continue
        ok, centred = m["ok"][:, varying].astype(np.float64), m["centred"][:, varying]
        floor = SE_FLOOR * m["se"][varying]
        draws = rng.multinomial(n_units, np.full(n_units, 1 / n_units), size=n_boot).astype(np.float64)
        step = max(1, _BATCH_ELEMENTS // varying.size)
        for s in range(0, n_boot, step):
            w = draws[s : s + step]
            count = w @ ok
            with np.errstate(invalid="ignore", divide="ignore"):
                deviation = (w @ centred) / count  # mean* - mean
                var = ((w @ centred**2) - count * deviation**2) / (count - 1)
                t = np.abs(deviation) / np.fmax(np.sqrt(np.maximum(var, 0.0) / count), floor)
            largest[s : s + step] = np.fmax(largest[s : s + step], np.max(np.nan_to_num(t, nan=0.0), axis=1))
    critical = (
        float(np.quantile(largest, 1 - 2 * alpha))
        if any((~m["exact"] & (m["n"] >= 2)).any() for m in moments)
        else float("nan")
    )
    frames = []
    for m in moments:
        band = np.isfinite(critical) & ~m["exact"] & np.isfinite(m["se"])
        frames.append(
            pd.DataFrame(
                {
                    "n": m["n"],
                    "mean": m["mean"],
                    "se": m["se"],
                    "low": np.where(band, m["mean"] - critical * m["se"], np.nan),
                    "high": np.where(band, m["mean"] + critical * m["se"], np.nan),
                    "exact": m["exact"],
                }
            )
        )
    return frames, critical


def shift_verdicts(
    shift: np.ndarray, low: np.ndarray, high: np.ndarray, margin: np.ndarray, exact: np.ndarray
) -> np.ndarray:
    """The verdict of each signed shift against its margin: the interval ``[low, high]`` (the shift
    itself where ``exact``) wholly beyond ``+-margin`` is "moved beyond the margin", wholly inside it
    "equivalent within the margin", anything else (a straddling interval, no interval, no margin)
    "undetermined"."""
    shift, exact = np.asarray(shift, dtype=np.float64), np.asarray(exact, dtype=bool)
    low = np.where(exact, shift, np.asarray(low, dtype=np.float64))
    high = np.where(exact, shift, np.asarray(high, dtype=np.float64))
    margin = np.asarray(margin, dtype=np.float64)
    moved = (low > margin) | (high < -margin)
    equivalent = (low > -margin) & (high < margin)
    return np.where(moved, MOVED, np.where(equivalent, EQUIVALENT, UNDETERMINED))


def format_change_shifts(
    scores: pd.DataFrame,
    reference: str,
    changed: str,
    datasets: Sequence[str],
    score_ids: Sequence[str],
    *,
    cluster: str | None = None,
) -> pd.DataFrame:
    """The per-head yardstick: how far each head of ``reference`` moves when its prompts change format
    (``changed``: the same model's rows under the other format, on the same texts), as the absolute
    shift of its mean in the reference's IQR (``format_shift``), per (dataset, score, layer, head)."""
    frames = []
    for dataset in datasets:
        diff = head_differences(scores, reference, changed, dataset, score_ids, cluster=cluster)
        with np.errstate(invalid="ignore", divide="ignore"):
            shift = np.nanmean(diff.values, axis=0) / diff.cells["iqr_a"].where(diff.cells["iqr_a"] > 0)
        frames.append(diff.cells.assign(dataset=dataset, format_shift=np.abs(shift)))
    return pd.concat(frames, ignore_index=True)[[*CELL_KEYS, "format_shift"]]


def head_margins(format_shifts: pd.DataFrame, distribution_margins: pd.DataFrame) -> pd.DataFrame:
    """Each head's margin per (dataset, score): the larger of its own shift under the format change
    (:func:`format_change_shifts`) and the distribution margin of that dataset and score
    (``distribution_margins``: ``dataset``, ``score``, ``margin`` in W1/IQR), with ``margin_from``
    saying which (``head`` or ``distribution``)."""
    table = format_shifts.merge(
        distribution_margins[["dataset", "score", "margin"]].rename(columns={"margin": "distribution_margin"}),
        on=["dataset", "score"],
        how="left",
    )
    own = table["format_shift"] > table["distribution_margin"]
    table["margin"] = table["format_shift"].where(own, table["distribution_margin"])
    table["margin_from"] = np.where(own, "head", "distribution")
    return table


def _with_margins(table: pd.DataFrame, margins: pd.DataFrame | float | None) -> pd.DataFrame:
    if isinstance(margins, pd.DataFrame):
        keep = margins[[*CELL_KEYS, "margin", "margin_from"]]
        return table.merge(keep, on=CELL_KEYS, how="left").fillna({"margin_from": "none"})
    if margins is None:
        return table.assign(margin=np.nan, margin_from="none")
    return table.assign(margin=float(margins), margin_from="given")


def head_shifts(
    scores: pd.DataFrame,
    reference: str,
    other: str,
    datasets: Sequence[str],
    score_ids: Sequence[str],
    margins: pd.DataFrame | float | None,
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    cluster: str | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Per (dataset, score, layer, head) of ``other`` against ``reference``: the shift of the head's
    mean in the reference's IQR (``shift_iqr``) with its simultaneous ``1 - 2 alpha`` band over the
    whole family (``shift_iqr_low``, ``shift_iqr_high``; NaN where ``exact``), the ``margin`` (one
    number, or per head from :func:`head_margins`), ``margin_from``, the ``verdict``
    (:func:`shift_verdicts`), ``head_local`` (whether the score reads the head alone), and the
    family's ``critical`` value, ``family`` size, ``confidence``, ``n_units`` and ``cluster``. A score
    whose reference IQR on a dataset is 0 has no unit to measure a shift in: its cells are left out."""
    diffs = [head_differences(scores, reference, other, d, score_ids, cluster=cluster) for d in datasets]
    sizes = [np.maximum(np.abs(d.cells["mean_a"]), np.abs(d.cells["mean_b"])).to_numpy() for d in diffs]
    bands, critical = simultaneous_band([d.values for d in diffs], sizes, alpha=alpha, n_boot=n_boot, seed=seed)
    frames = []
    for dataset, diff, band in zip(datasets, diffs, bands, strict=True):
        cells = diff.cells.assign(dataset=dataset, model_a=reference, model_b=other)
        iqr = cells["iqr_a"].where(cells["iqr_a"] > 0)
        cells["shift_iqr"] = band["mean"] / iqr
        cells["shift_iqr_low"], cells["shift_iqr_high"] = band["low"] / iqr, band["high"] / iqr
        cells["exact"], cells["n_units"], cells["cluster"] = band["exact"], band["n"], diff.cluster
        frames.append(cells[iqr.notna()])
    table = _with_margins(pd.concat(frames, ignore_index=True), margins)
    table["verdict"] = shift_verdicts(
        table["shift_iqr"], table["shift_iqr_low"], table["shift_iqr_high"], table["margin"], table["exact"]
    )
    table["head_local"] = table["score"].map(head_local)
    table = table.assign(critical=critical, family=len(table), confidence=1 - 2 * alpha, n_boot=n_boot)
    first = ["model_a", "model_b", *CELL_KEYS, "head_local", "shift_iqr", "shift_iqr_low", "shift_iqr_high"]
    return table[first + [c for c in table.columns if c not in first]]


def verdict_counts(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (compared model, dataset, score) of :func:`head_shifts`' cells: how many heads moved beyond
    their margin (``n_beyond``), are equivalent within it (``n_equivalent``), undetermined
    (``n_undetermined``), and exact (``n_exact``)."""
    keys = ["model_b", "dataset", "score"]
    grouped = cells.groupby(keys, sort=False)
    return pd.DataFrame(
        {
            "n_beyond": grouped["verdict"].agg(lambda v: int((v == MOVED).sum())),
            "n_equivalent": grouped["verdict"].agg(lambda v: int((v == EQUIVALENT).sum())),
            "n_undetermined": grouped["verdict"].agg(lambda v: int((v == UNDETERMINED).sum())),
            "n_exact": grouped["exact"].sum().astype(int),
        }
    ).reset_index()


def head_verdicts(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (compared model, layer, head) over its head-local cells (the scores that read one
    head alone, on every dataset): ``verdict`` (moved beyond the margin on at least one cell,
    equivalent within it on every cell, else undetermined), the counts of each, ``moved_on`` (the
    cells it moved beyond on, farthest beyond first: ``score (dataset)``, and the first one's shift, band
    and margin: ``beyond_shift``, ``beyond_low``, ``beyond_high``, ``beyond_exact``, ``beyond_margin``), its
    largest shift (``largest_shift`` in the reference's IQR, signed, with ``largest_on`` and that cell's
    interval and margin) and, where the cells carry the sign-flip test, ``n_significant`` (significance
    only)."""
    local = cells[cells["head_local"]].copy()
    local["cell"] = local["score"] + " (" + local["dataset"].astype(str) + ")"
    local["beyond_by"] = local["shift_iqr"].abs() / local["margin"]
    keys = ["model_b", "layer", "head"]
    grouped = local.groupby(keys, sort=True)
    table = pd.DataFrame(
        {
            "n_cells": grouped.size(),
            "n_beyond": grouped["verdict"].agg(lambda v: int((v == MOVED).sum())),
            "n_equivalent": grouped["verdict"].agg(lambda v: int((v == EQUIVALENT).sum())),
        }
    )
    table["n_undetermined"] = table["n_cells"] - table["n_beyond"] - table["n_equivalent"]
    table["verdict"] = np.where(
        table["n_beyond"] > 0, MOVED, np.where(table["n_equivalent"] == table["n_cells"], EQUIVALENT, UNDETERMINED)
    )
    moved = local[local["verdict"] == MOVED].sort_values("beyond_by", ascending=False)
    table["moved_on"] = moved.groupby(keys)["cell"].agg(", ".join).reindex(table.index).fillna("")
    farthest = moved.drop_duplicates(keys).set_index(keys)  # the cell it moved farthest beyond its margin on
    table["beyond_shift"], table["beyond_margin"] = farthest["shift_iqr"], farthest["margin"]
    table["beyond_low"], table["beyond_high"] = farthest["shift_iqr_low"], farthest["shift_iqr_high"]
    table["beyond_exact"] = farthest["exact"].reindex(table.index).fillna(False).astype(bool)
    top = local.loc[local["shift_iqr"].abs().groupby([local[k] for k in keys]).idxmax().dropna()]
    top = top.set_index(keys)
    table["largest_shift"] = top["shift_iqr"]
    table["largest_on"] = top["cell"]
    table["largest_low"], table["largest_high"] = top["shift_iqr_low"], top["shift_iqr_high"]
    table["largest_exact"], table["largest_margin"] = top["exact"], top["margin"]
    if "significant" in local:
        table["n_significant"] = grouped["significant"].sum().astype(int)
    return table.reset_index()


def compare_heads(
    scores: pd.DataFrame,
    reference: str,
    other: str,
    datasets: Sequence[str],
    score_ids: Sequence[str],
    margins: pd.DataFrame | float | None,
    *,
    rate: float = 0.1,
    alpha: float = 0.05,
    n_perm: int = 9999,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-head comparison of two models of one architecture: every cell of :func:`head_shifts`
    with the sign-flip max-T test's ``p_max_t`` and ``significant`` beside it (significance only:
    family-wise ``alpha`` over the heads of each dataset and score), and per (dataset, score)
    :func:`~headstats.stats.compare.head_changes`' summary (its ``n_significant``, rank correlation
    and overlap of inactive sets) with the :func:`verdict_counts`. Returns (summary, cells)."""
    summary, tests = head_changes(
        scores, reference, other, datasets, score_ids, rate=rate, alpha=alpha, n_perm=n_perm, n_boot=n_boot, seed=seed
    )
    cells = head_shifts(scores, reference, other, datasets, score_ids, margins, alpha=alpha, n_boot=n_boot, seed=seed)
    significance = tests[[*CELL_KEYS, "p_max_t", "n_perm"]].rename(columns={"n_perm": "n_flips"})
    cells = cells.merge(significance.astype({"layer": int, "head": int}), on=CELL_KEYS, how="left")
    cells["significant"] = cells["p_max_t"] <= alpha
    summary = summary.merge(verdict_counts(cells), on=["model_b", "dataset", "score"], how="left")
    return summary, cells
