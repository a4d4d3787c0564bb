"""Wasserstein-1 distances between models' score distributions, with cluster-level uncertainty.

The question (docs/statistics.md#comparison-verdicts): does fine-tuning or scale change how a score
is distributed over the
(sequence, layer, head) triples of a model? The distance is W1 between the two pooled score
distributions, overall and per *relative depth* (layers binned by ``layer / (L - 1)``, so a 16-layer
and a 36-layer model compare bin by bin).

**The unit of sampling is the cluster**, not the row (docs/statistics.md#uncertainty). The rows of one sequence (every
layer and head) are strongly dependent: they all saw the same text. Sequences can be dependent
too: MMLU prompts of one subject share their 5-shot prefix, passages cut from one document share
its text. Treating dependent units as independent makes intervals far too narrow, tests reject far
too often and noise floors far too low. So every resampling here moves whole *clusters* of
sequences, and every output says which (``cluster`` column, ``n_clusters_*``):

- ``cluster=None`` (default) takes the ``subject`` column when the table has one (MMLU), otherwise
  every sequence is its own cluster (``sample_id``); any other column of the table that is
  constant within a sequence can be named (a source document id, a question id). A sequence with a
  missing cluster value is its own cluster. Clusters are keyed within a dataset;
- bootstrap intervals resample clusters with replacement (the same clusters for both models when
  the design is paired);
- the permutation test relabels clusters between the two models;
- the noise floor splits one model's clusters into random halves and measures W1 between them.

Each group's distribution gives every sequence block the same total weight (each row of a block of
``n`` rows weighs ``1/n``). Within one model all blocks have the same size, so this is the plain
row distribution; it also makes blocks of different models (different numbers of heads) into
comparable units, which the permutation test needs.

**Exchangeability.** The permutation test's null hypothesis is that the two models' blocks are
exchangeable cluster by cluster:

- *paired* design (both models scored on the same sequences, keyed by ``(dataset, sample_id)``):
  each cluster's blocks of A and of B are swapped together with probability 1/2, independently per
  cluster. It keeps the texts fixed, so differences between texts cannot masquerade as differences
  between models. Pairing by ``sample_id`` assumes both tables index the same source texts (the
  same dataset collected with the same sample), which is what ``headstats collect`` does; the
  tokenisation may differ between models.
- *unpaired* design (different sequences): every (model, cluster) unit is pooled and the units are
  re-dealt to the two models in their original numbers.

A p-value says whether a distance is distinguishable from sampling noise (the decision "the
distribution moved"); it does not say whether it is large. Size is read in units of the
reference's spread (``w1_iqr``) against yardsticks of the same design: the distance between two
seeds of one training, a prompt-template change, another model family. The noise floor, the W1
between two random halves of one model's own clusters (its 95th percentile over ``n_split`` >= 200
splits by default; the table reports how many), describes sampling noise at half the sample and
between *different* texts: it is not the null distribution of a paired distance, so it describes
and never decides. P-values of one table are Holm-adjusted together (``p_holm``), since a report
reads them side by side; a report reading several tables adjusts them as one family
(:func:`~headstats.stats.multiple.holm_family`) with enough permutations for that family
(:func:`~headstats.stats.multiple.permutations_for`).

Everything runs on numpy arrays sorted once per (score, depth bin) (:mod:`headstats.stats.w1`):
replicates only change the weights, and batches of replicates are one cumulative sum and one
matrix-vector product over the rows, with no re-sorting and no per-row Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from headstats.stats.multiple import holm, holm_floor
from headstats.stats.tables import (
    ALL_DEPTHS,
    block_clusters,
    cluster_codes,
    cluster_column,
    common_scores,
    depth_bin,
    depth_labels,
    model_rows,
    scores_of,
    sequence_keys,
    shared_datasets,
)
from headstats.stats.w1 import w1_on_support, w1_on_support_batch

__all__ = [
    "DEFAULT_SPLITS",
    "SequenceBlocks",
    "interquartile_range",
    "model_distance",
    "noise_floor",
    "split_half_distances",
    "w1_interval",
]

Design = Literal["auto", "paired", "unpaired"]
DEFAULT_SPLITS = 200  # random halvings behind a noise floor (docs/statistics.md#noise-floor: at least 200)
_BATCH_ELEMENTS = 1 << 22  # rows x replicates per vectorised batch: bounded temporaries


# --- sequence blocks ------------------------------------------------------------------------------


class SequenceBlocks:
    """The values of one score (one depth bin), sorted once, each row tagged with its sequence block.

    A *group* is given by a weight per block (0 = absent, k = drawn k times by a bootstrap); its
    distribution gives each block total weight equal to its group weight, spread evenly over the
    block's rows. :meth:`distance` is W1 between two groups, :meth:`distances` between many pairs
    of groups at once (one row of weights per replicate).
    """

    def __init__(self, values: np.ndarray, blocks: np.ndarray, n_blocks: int) -> None:
        values = np.asarray(values, dtype=np.float64)
        blocks = np.asarray(blocks, dtype=np.int64)
        keep = np.isfinite(values)
        values, blocks = values[keep], blocks[keep]
        order = np.argsort(values, kind="stable")
        self.x = values[order]
        self.block = blocks[order]
        self.sizes = np.bincount(blocks, minlength=n_blocks)
        self.present = self.sizes > 0
        self.row_weight = 1.0 / np.maximum(self.sizes, 1)[self.block]

    def distance(self, group_a: np.ndarray, group_b: np.ndarray) -> float:
        wa = group_a[self.block] * self.row_weight
        wb = group_b[self.block] * self.row_weight
        ta, tb = wa.sum(), wb.sum()
        if ta <= 0 or tb <= 0 or len(self.x) < 2:
            return float("nan")
        return w1_on_support(self.x, wa / ta, wb / tb)

    def distances(self, groups_a: np.ndarray, groups_b: np.ndarray) -> np.ndarray:
        """W1 for every row of ``groups_a`` / ``groups_b`` (R x n_blocks weights), in bounded batches."""
        n_rep = len(groups_a)
        out = np.full(n_rep, np.nan)
        if len(self.x) < 2:
            return out
        step = max(1, _BATCH_ELEMENTS // len(self.x))
        for s in range(0, n_rep, step):
            wa = groups_a[s : s + step][:, self.block] * self.row_weight
            wb = groups_b[s : s + step][:, self.block] * self.row_weight
            out[s : s + step] = w1_on_support_batch(self.x, wa, wb)
        return out


# --- the two-model comparison --------------------------------------------------------------------


@dataclass
class _Pair:
    """Two models' rows on a common block numbering: model a's sequence k is block k, model b's is
    block K + k, where K counts the distinct sequence keys of both; ``key_cluster[k]`` is the
    cluster of sequence k."""

    a: pd.DataFrame
    b: pd.DataFrame
    block_a: np.ndarray
    block_b: np.ndarray
    n_keys: int
    paired: bool
    key_cluster: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def n_blocks(self) -> int:
        return 2 * self.n_keys


def _prepare_pair(a: pd.DataFrame, b: pd.DataFrame, design: Design, names: tuple[str, str], cluster: str) -> _Pair:
    keys_a, keys_b = sequence_keys(a), sequence_keys(b)
    set_a, set_b = set(keys_a.unique()), set(keys_b.unique())
    if design == "auto":
        paired = set_a == set_b
    elif design == "paired":
        common = set_a & set_b
        if not common:
            raise ValueError(
                f"design='paired' needs sequences scored by both {names[0]!r} and {names[1]!r}, but they share none; "
                "use design='unpaired'"
            )
        a, b = a[keys_a.isin(list(common))], b[keys_b.isin(list(common))]
        keys_a, keys_b = sequence_keys(a), sequence_keys(b)
        paired = True
    elif design == "unpaired":
        paired = False
    else:
        raise ValueError(f"design must be 'auto', 'paired' or 'unpaired', not {design!r}")
    codes, uniques = pd.MultiIndex.append(keys_a, keys_b).factorize()
    n_keys = len(uniques)
    block_a = codes[: len(keys_a)].astype(np.int64)
    block_b = codes[len(keys_a) :].astype(np.int64) + n_keys
    both = pd.concat([a, b], ignore_index=True)
    if cluster not in both.columns:
        both[cluster] = np.nan
    clusters = cluster_codes(both, cluster)
    key_cluster = np.full(n_keys, -1, dtype=np.int64)
    key_cluster[codes[::-1]] = clusters[::-1]  # a consistent table gives one cluster per sequence
    return _Pair(a, b, block_a, block_b, n_keys, paired, key_cluster)


def _depth_masks(frame: pd.DataFrame, bins: int) -> dict[str, np.ndarray]:
    layers = frame["layer"].to_numpy()
    n_layers = int(layers.max()) + 1 if len(layers) else 1
    binned = depth_bin(layers, n_layers, bins) if bins else np.zeros(len(layers), dtype=np.int64)
    masks = {ALL_DEPTHS: np.ones(len(layers), dtype=bool)}
    for i, label in enumerate(depth_labels(bins) if bins else []):
        masks[label] = binned == i
    return masks


def _indicator(n: int, blocks: np.ndarray) -> np.ndarray:
    out = np.zeros(n)
    out[blocks] = 1.0
    return out


def _units(clusters: np.ndarray) -> tuple[np.ndarray, int]:
    """Unit index (0..U-1) of each entry of ``clusters`` and the number of units."""
    codes, uniques = pd.factorize(clusters)
    return codes.astype(np.int64), len(uniques)


def _cluster_counts(n_units: int, n_rep: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap counts: how often each of ``n_units`` clusters is drawn, ``n_rep`` times (R x U)."""
    return rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=n_rep).astype(np.float64)


def _sides(data: SequenceBlocks, pair: _Pair) -> tuple[np.ndarray, np.ndarray]:
    k = pair.n_keys
    return np.flatnonzero(data.present[:k]), np.flatnonzero(data.present[k:])


def _paired_units(pair: _Pair, keys_a: np.ndarray, keys_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Paired design: the texts both models scored, each one's cluster unit, and the number of units."""
    both = np.intersect1d(keys_a, keys_b)
    unit, n_units = _units(pair.key_cluster[both])
    return both, unit, n_units


def _bootstrap(data: SequenceBlocks, pair: _Pair, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    k, n = pair.n_keys, pair.n_blocks
    keys_a, keys_b = _sides(data, pair)
    ga, gb = np.zeros((n_boot, n)), np.zeros((n_boot, n))
    if pair.paired:
        both, unit, n_units = _paired_units(pair, keys_a, keys_b)
        counts = _cluster_counts(n_units, n_boot, rng)
        ga[:, both] = counts[:, unit]
        gb[:, both + k] = counts[:, unit]
    else:
        for keys, offset, g in ((keys_a, 0, ga), (keys_b, k, gb)):
            unit, n_units = _units(pair.key_cluster[keys])
            g[:, keys + offset] = _cluster_counts(n_units, n_boot, rng)[:, unit]
    return data.distances(ga, gb)


def _ranks(n_rep: int, n_units: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of 0..U-1 per replicate (R x U): the rank of each unit."""
    return rng.random((n_rep, n_units)).argsort(axis=1).argsort(axis=1)


def _permutations(data: SequenceBlocks, pair: _Pair, n_perm: int, rng: np.random.Generator) -> np.ndarray:
    """W1 of ``n_perm`` relabellings drawn under the null of exchangeable models.

    Paired design: one fair coin per *cluster* of the texts both models scored; heads swaps the
    two models' blocks of every text of the cluster (model a's block of text k goes to group b and
    model b's to group a), tails keeps them. Every text keeps one block in each group, so
    differences between texts never enter the null distribution. Flipping every coin gives the
    mirrored labelling, whose W1 is the same: with U clusters the null has at most 2**(U - 1)
    distinct values, so no number of permutations gives a p-value below about 2**(1 - U).
    Unpaired design: the (model, cluster) units are shuffled and re-dealt in their original numbers.
    """
    k, n = pair.n_keys, pair.n_blocks
    keys_a, keys_b = _sides(data, pair)
    ga, gb = np.zeros((n_perm, n)), np.zeros((n_perm, n))
    if pair.paired:
        both, unit, n_units = _paired_units(pair, keys_a, keys_b)
        swap = (rng.random((n_perm, n_units)) < 0.5)[:, unit]
        ga[:, both], ga[:, both + k] = ~swap, swap
        gb[:, both], gb[:, both + k] = swap, ~swap
    else:
        unit_a, n_a = _units(pair.key_cluster[keys_a])
        unit_b, n_b = _units(pair.key_cluster[keys_b])
        in_a = _ranks(n_perm, n_a + n_b, rng) < n_a  # the first n_a units of the shuffle go to model a
        ga[:, keys_a], ga[:, keys_b + k] = in_a[:, unit_a], in_a[:, n_a + unit_b]
        gb[:, keys_a], gb[:, keys_b + k] = ~in_a[:, unit_a], ~in_a[:, n_a + unit_b]
    return data.distances(ga, gb)


def split_half_distances(
    data: SequenceBlocks,
    blocks: np.ndarray,
    n_split: int,
    rng: np.random.Generator,
    clusters: np.ndarray | None = None,
) -> np.ndarray:
    """W1 between two random halves of the clusters of ``blocks`` (one model's sequences), ``n_split``
    times. ``clusters`` gives the cluster of each block of ``blocks`` (None: each block is its own)."""
    blocks = np.asarray(blocks, dtype=np.int64)
    clusters = blocks if clusters is None else np.asarray(clusters)
    present = data.present[blocks]
    blocks, clusters = blocks[present], clusters[present]
    unit, n_units = _units(clusters)
    if n_units < 2 or n_split < 1:
        return np.full(max(n_split, 0), np.nan)
    half = n_units // 2
    rank = _ranks(n_split, n_units, rng)[:, unit]
    n = len(data.present)
    ga, gb = np.zeros((n_split, n)), np.zeros((n_split, n))
    ga[:, blocks] = rank < half
    gb[:, blocks] = (rank >= half) & (rank < 2 * half)
    return data.distances(ga, gb)


def _interval(observed: float, boot: np.ndarray, confidence: float) -> tuple[float, float]:
    """Basic (reverse-percentile) bootstrap interval, clipped at 0.

    W1 is biased upwards (two samples of one law are at a positive distance), and a resample is
    biased upwards again relative to the sample: the percentile interval then sits above the
    estimate and can exclude it. The basic interval [2 W1 - q_hi, 2 W1 - q_lo] reflects the
    bootstrap deviations around the estimate, which corrects that first-order bias.
    """
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return float("nan"), float("nan")
    alpha = 1 - confidence
    q_lo, q_hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return max(0.0, 2 * observed - q_hi), max(0.0, 2 * observed - q_lo)


def interquartile_range(values: ArrayLike) -> float:
    """The interquartile range (75th minus 25th percentile, linear interpolation) of the finite
    ``values``; NaN when there are none."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan")
    q1, q3 = np.quantile(values, [0.25, 0.75])
    return float(q3 - q1)


def _per(distance: object, spread: float) -> float:
    """``distance`` in units of ``spread``; NaN when the spread is 0 or unknown (a score that takes
    one value on half its rows has no scale to read a distance against)."""
    return float(distance) / spread if np.isfinite(spread) and spread > 0 else float("nan")


def _floor(split: np.ndarray, quantile: float) -> float:
    split = split[np.isfinite(split)]
    return float(np.quantile(split, quantile)) if split.size else float("nan")


def w1_interval(
    values_a: ArrayLike,
    values_b: ArrayLike,
    sequences_a: ArrayLike,
    sequences_b: ArrayLike,
    clusters_a: ArrayLike | None = None,
    clusters_b: ArrayLike | None = None,
    *,
    paired: bool = False,
    n_boot: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(w1, ci_low, ci_high)`` of two samples of rows given as arrays: the kernel of
    :func:`model_distance` (sequence blocks of equal weight, basic bootstrap interval resampling
    clusters) without a score table. ``sequences_*`` label each row's sequence (equal labels on both
    sides are the same text when ``paired``), ``clusters_*`` each row's cluster (None: each sequence
    is its own)."""
    seq_a, seq_b = np.asarray(sequences_a), np.asarray(sequences_b)
    clu_a = seq_a if clusters_a is None else np.asarray(clusters_a)
    clu_b = seq_b if clusters_b is None else np.asarray(clusters_b)
    side = np.r_[np.zeros(len(seq_a), dtype=np.int8), np.ones(len(seq_b), dtype=np.int8)]
    seq = np.concatenate([seq_a, seq_b])
    keys = pd.MultiIndex.from_arrays([np.zeros_like(side) if paired else side, seq])
    codes, uniques = keys.factorize()
    n_keys = len(uniques)
    cluster_keys = pd.MultiIndex.from_arrays([np.zeros_like(side) if paired else side, np.concatenate([clu_a, clu_b])])
    key_cluster = np.zeros(n_keys, dtype=np.int64)
    key_cluster[codes] = cluster_keys.factorize()[0]
    blocks = codes.astype(np.int64) + n_keys * side.astype(np.int64)
    data = SequenceBlocks(np.concatenate([np.asarray(values_a), np.asarray(values_b)]), blocks, 2 * n_keys)
    pair = _Pair(pd.DataFrame(), pd.DataFrame(), blocks[side == 0], blocks[side == 1], n_keys, paired, key_cluster)
    keys_a, keys_b = _sides(data, pair)
    observed = data.distance(_indicator(2 * n_keys, keys_a), _indicator(2 * n_keys, keys_b + n_keys))
    low, high = _interval(observed, _bootstrap(data, pair, n_boot, np.random.default_rng(seed)), confidence)
    return observed, low, high


def model_distance(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    score_ids: Sequence[str] | None = None,
    *,
    depth_bins: int = 5,
    n_boot: int = 200,
    n_perm: int = 200,
    n_split: int = DEFAULT_SPLITS,
    confidence: float = 0.95,
    floor_quantile: float = 0.95,
    design: Design = "auto",
    cluster: str | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """W1 between two models' score distributions, per score id, overall and per relative depth.

    ``scores`` is a table from :func:`headstats.read_scores` (several models; the comparison uses
    the datasets both were scored on and the score ids both have). Returns one row per (score,
    depth) with ``w1``, a basic bootstrap interval ``ci_low``/``ci_high`` at ``confidence``
    (clusters resampled; see :func:`_interval`), the standardised distance ``w1_iqr`` = W1 divided
    by ``iqr_a``, the interquartile range of ``model_a``'s (the reference's) values of that score in
    that depth bin, with its interval ``w1_iqr_low``/``w1_iqr_high`` (the W1 interval divided by the
    same IQR, read as fixed; NaN when the IQR is 0), so distances of scores on different scales read
    alike; the permutation ``p_value`` (``(1 + #{W1_perm >= W1}) / (1 + n_perm)``; in the paired
    design each permutation swaps the two models' labels within every text of a cluster, see
    :func:`_permutations`) and ``p_holm`` (Holm-adjusted over every p-value of the returned table,
    ``n_tests`` of them) with ``p_holm_min``, the smallest value ``p_holm`` can take with ``n_perm``
    permutations and ``n_tests`` tests (:func:`holm_floor`: a ``p_holm`` there says only that no
    permutation reached the observed distance). A report whose Holm family spans several tables
    chooses ``n_perm = permutations_for(family size, 0.01)`` and adjusts the concatenated tables
    together with :func:`holm_family`. Then the ``noise_floor`` (the larger of the two models'
    ``floor_quantile``-quantiles of split-half W1, over ``n_splits`` random halvings) and
    ``above_noise``; ``cluster`` names the resampled unit (see :func:`cluster_column`) and
    ``n_clusters_a``/``n_clusters_b`` count them. W1 is biased upwards in small samples (noise alone
    gives a positive distance), so read the interval together with the floor. ``n_boot``, ``n_perm``
    or ``n_split`` = 0 skip that part (NaN columns); ``depth_bins`` = 0 gives the overall row only.
    ``design`` (see the module docstring): ``"auto"`` pairs the sequences when both models were
    scored on exactly the same ``(dataset, sample_id)`` keys.
    """
    names = (model_a, model_b)
    a, b = model_rows(scores, model_a), model_rows(scores, model_b)
    datasets = shared_datasets(a, b, names)
    if datasets is not None:
        a, b = a[a["dataset"].isin(datasets)], b[b["dataset"].isin(datasets)]
    sids = common_scores(a, b, names, score_ids)
    if not 0 < confidence < 1 or not 0 < floor_quantile < 1:
        raise ValueError("confidence and floor_quantile must lie strictly between 0 and 1")
    unit = cluster_column(scores, cluster)
    pair = _prepare_pair(a, b, design, names, unit)
    depth_a, depth_b = _depth_masks(pair.a, depth_bins), _depth_masks(pair.b, depth_bins)
    how = dict(n_boot=n_boot, n_perm=n_perm, n_split=n_split, confidence=confidence, floor_quantile=floor_quantile)
    rows = []
    total = len(sids) * len(depth_a)
    bar = tqdm(total=total, desc=f"W1 {model_a} vs {model_b}", unit="cmp", disable=not progress)
    for si, sid in enumerate(sids):
        va, vb = pair.a[sid].to_numpy(), pair.b[sid].to_numpy()
        for di, depth in enumerate(depth_a):
            ma, mb = depth_a[depth], depth_b[depth]
            data = SequenceBlocks(
                np.concatenate([va[ma], vb[mb]]), np.concatenate([pair.block_a[ma], pair.block_b[mb]]), pair.n_blocks
            )
            rng = np.random.default_rng([seed, si, di])
            compared = _compare(data, pair, unit, interquartile_range(va[ma]), rng, **how)
            rows.append({"model_a": model_a, "model_b": model_b, "score": sid, "depth": depth, **compared})
            bar.update()
    bar.close()
    return _as_family(pd.DataFrame(rows), n_perm)


def _as_family(out: pd.DataFrame, n_perm: int) -> pd.DataFrame:
    """The rows of one comparison as one Holm family: ``above_noise``, then ``p_holm`` and its floor
    ``p_holm_min`` beside ``p_value``, and ``n_tests``, the tests of the family."""
    out["above_noise"] = out["w1"] > out["noise_floor"]
    out.insert(out.columns.get_loc("p_value") + 1, "p_holm", holm(out["p_value"]))
    tested = int(out["p_value"].notna().sum())
    out.insert(out.columns.get_loc("p_holm") + 1, "p_holm_min", holm_floor(tested, n_perm) if tested else np.nan)
    out["n_tests"] = tested  # the Holm family: every test of this comparison
    return out


def _compare(
    data: SequenceBlocks,
    pair: _Pair,
    unit: str,
    spread: float,
    rng: np.random.Generator,
    *,
    n_boot: int,
    n_perm: int,
    n_split: int,
    confidence: float,
    floor_quantile: float,
) -> dict[str, object]:
    """One (score, depth) comparison of :func:`model_distance`: W1 with its bootstrap interval, its
    size in the reference's IQR (``spread``), the permutation p-value and the split-half floor
    (``unit``: the resampled cluster's column)."""
    k = pair.n_keys
    keys_a, keys_b = _sides(data, pair)
    observed = data.distance(_indicator(pair.n_blocks, keys_a), _indicator(pair.n_blocks, keys_b + k))
    row: dict[str, object] = {
        "w1": observed,
        "ci_low": np.nan,
        "ci_high": np.nan,
        "iqr_a": spread,
        "w1_iqr": _per(observed, spread),
        "w1_iqr_low": np.nan,
        "w1_iqr_high": np.nan,
        "p_value": np.nan,
        "noise_floor": np.nan,
        "n_seq_a": len(keys_a),
        "n_seq_b": len(keys_b),
        "design": "paired" if pair.paired else "unpaired",
        "cluster": unit,
        "n_clusters_a": len(np.unique(pair.key_cluster[keys_a])),
        "n_clusters_b": len(np.unique(pair.key_cluster[keys_b])),
        "n_splits": max(n_split, 0),
        "n_perm": max(n_perm, 0),
    }
    if n_boot > 0 and np.isfinite(observed):
        row["ci_low"], row["ci_high"] = _interval(observed, _bootstrap(data, pair, n_boot, rng), confidence)
        row["w1_iqr_low"], row["w1_iqr_high"] = _per(row["ci_low"], spread), _per(row["ci_high"], spread)
    if n_perm > 0 and np.isfinite(observed):
        perm = _permutations(data, pair, n_perm, rng)
        # A relative tolerance keeps ties (e.g. a permutation that reproduces the observed
        # labelling) from being lost to summation-order round-off.
        row["p_value"] = (1 + np.count_nonzero(perm >= observed * (1 - 1e-9))) / (1 + n_perm)
    if n_split > 0:
        floors = [
            _floor(split_half_distances(data, keys + offset, n_split, rng, pair.key_cluster[keys]), floor_quantile)
            for keys, offset in ((keys_a, 0), (keys_b, k))
        ]
        row["noise_floor"] = np.nanmax(floors) if np.isfinite(floors).any() else np.nan
    return row


def noise_floor(
    scores: pd.DataFrame,
    model: str,
    score_ids: Sequence[str] | None = None,
    *,
    depth_bins: int = 5,
    n_split: int = DEFAULT_SPLITS,
    quantile: float = 0.95,
    cluster: str | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """W1 between random halves of one model's own clusters, per (score, depth): ``mean`` and the
    ``floor`` (its ``quantile`` over ``n_splits`` splits), with the ``cluster`` unit and
    ``n_clusters``. A distance between two models below the floor cannot be told apart from
    re-drawing the texts."""
    rows_m = model_rows(scores, model)
    sids = scores_of(rows_m, model, score_ids)
    unit = cluster_column(rows_m, cluster)
    codes, uniques = sequence_keys(rows_m).factorize()
    block_cluster = block_clusters(codes, cluster_codes(rows_m, unit), len(uniques))
    masks = _depth_masks(rows_m, depth_bins)
    out = []
    for si, sid in enumerate(sids):
        values = rows_m[sid].to_numpy()
        for di, (depth, mask) in enumerate(masks.items()):
            data = SequenceBlocks(values[mask], codes[mask], len(uniques))
            blocks = np.arange(len(uniques))
            rng = np.random.default_rng([seed, si, di])
            split = split_half_distances(data, blocks, n_split, rng, block_cluster)
            finite = split[np.isfinite(split)]
            out.append(
                {
                    "model": model,
                    "score": sid,
                    "depth": depth,
                    "mean": float(finite.mean()) if finite.size else np.nan,
                    "floor": _floor(split, quantile),
                    "n_seq": int(data.present.sum()),
                    "cluster": unit,
                    "n_clusters": len(np.unique(block_cluster[data.present])),
                    "n_splits": max(n_split, 0),
                }
            )
    return pd.DataFrame(out)
