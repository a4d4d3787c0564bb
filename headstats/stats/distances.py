"""Wasserstein-1 distances between models' score distributions, with sequence-level uncertainty.

The question (SPEC §1): does fine-tuning or scale change how a score is distributed over the
(sequence, layer, head) triples of a model? The distance is W1 between the two pooled score
distributions, overall and per *relative depth* (layers binned by ``layer / (L - 1)``, so a 16-layer
and a 36-layer model compare bin by bin).

**The unit of sampling is the sequence**, not the row. The rows of one sequence (every layer and
head) are strongly dependent: they all saw the same text. Treating them as independent would make
intervals far too narrow and tests reject far too often. So every resampling here moves whole
*sequence blocks*:

- bootstrap intervals resample sequences with replacement (the same sequences for both models when
  the design is paired);
- the permutation test relabels sequence blocks between the two models;
- the noise floor splits one model's sequences into random halves and measures W1 between them.

Each group's distribution gives every sequence block the same total weight (each row of a block of
``n`` rows weighs ``1/n``). Within one model all blocks have the same size, so this is the plain
row distribution; it also makes blocks of different models (different numbers of heads) into
comparable units, which the permutation test needs.

**Exchangeability.** The permutation test's null hypothesis is that the two models' sequence blocks
are exchangeable, i.e. that each model's per-sequence score distribution is drawn from the same law.

- *paired* design (both models scored on the same sequences, keyed by ``(dataset, sample_id)``):
  a sequence's two blocks are swapped with probability 1/2, independently per sequence. This is exact
  under H0 "for every sequence, the pair (block of A, block of B) is as likely as (block of B, block
  of A)", and it keeps the text fixed, so differences between texts cannot masquerade as differences
  between models. Pairing by ``sample_id`` assumes both tables index the same source texts (the same
  dataset collected with the same limit), which is what ``headstats collect`` does; the tokenisation
  may differ between models.
- *unpaired* design (different sequences): all blocks are pooled and re-dealt to groups of the
  original sizes; exact under H0 that all blocks are i.i.d. from one law.

A p-value says whether a distance is distinguishable from sampling noise; it does not say whether
it is large. For that, compare with the noise floor, the W1 between two random halves of one model's
own sequences (its 95th percentile over repeated splits). Halves hold half the sequences, so the
floor is somewhat larger than the noise of a full-size comparison: "above the floor" is conservative.

Everything runs on numpy arrays sorted once per (score, depth bin): one bootstrap, permutation or
split replicate costs a gather, a cumulative sum and a dot product over the rows, with no re-sorting
and no per-row Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from headstats.engine.scores import get_score
from headstats.engine.scores import score_ids as registered_score_ids

Design = Literal["auto", "paired", "unpaired"]
ALL_DEPTHS = "all"


# --- W1 on sorted arrays -------------------------------------------------------------------------


def _w1_sorted(x: np.ndarray, wa: np.ndarray, wb: np.ndarray) -> float:
    """W1 = integral of |F_a - F_b| for weighted empirical distributions on the sorted support ``x``
    (``wa``, ``wb`` each sum to 1): between consecutive support points both CDFs are constant."""
    cdf_gap = np.cumsum(wa[:-1] - wb[:-1])
    return float(np.abs(cdf_gap) @ np.diff(x))


def wasserstein1(
    u: ArrayLike, v: ArrayLike, u_weights: ArrayLike | None = None, v_weights: ArrayLike | None = None
) -> float:
    """Wasserstein-1 distance between two (weighted) samples of real numbers.

    Same value as ``scipy.stats.wasserstein_distance``; here as the building block of the
    sequence-level resampling below, which reuses one sort for many replicates.
    """
    a = np.asarray(u, dtype=np.float64).ravel()
    b = np.asarray(v, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("W1 needs at least one value in each sample")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("W1 needs finite values: drop NaN/inf scores first")
    wa = _normalised_weights(u_weights, a.size, "u_weights")
    wb = _normalised_weights(v_weights, b.size, "v_weights")
    x = np.concatenate([a, b])
    order = np.argsort(x, kind="stable")
    side_a = np.concatenate([wa, np.zeros(b.size)])[order]
    side_b = np.concatenate([np.zeros(a.size), wb])[order]
    return _w1_sorted(x[order], side_a, side_b)


def _normalised_weights(weights: ArrayLike | None, n: int, name: str) -> np.ndarray:
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size != n:
        raise ValueError(f"{name} needs one weight per value ({n}), got {w.size}")
    if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"{name} must be finite, non-negative and not all zero")
    return w / w.sum()


class SequenceBlocks:
    """The values of one score (one depth bin), sorted once, each row tagged with its sequence block.

    A *group* is given by a weight per block (0 = absent, k = drawn k times by a bootstrap); its
    distribution gives each block total weight equal to its group weight, spread evenly over the
    block's rows. :meth:`distance` is W1 between two groups.
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
        return _w1_sorted(self.x, wa / ta, wb / tb)


# --- relative depth ------------------------------------------------------------------------------


def depth_bin(layer: ArrayLike, n_layers: int, bins: int) -> np.ndarray:
    """Bin index of each layer by relative depth ``layer / (n_layers - 1)`` in ``bins`` equal bins
    of [0, 1] (the last bin closed): the first layer is depth 0, the last depth 1."""
    if bins < 1:
        raise ValueError(f"bins must be at least 1, not {bins}")
    layer = np.asarray(layer, dtype=np.float64)
    depth = layer / (n_layers - 1) if n_layers > 1 else np.zeros_like(layer)
    return np.minimum(np.floor(depth * bins), bins - 1).astype(np.int64)


def depth_labels(bins: int) -> list[str]:
    """Readable labels of the depth bins, e.g. ``0.0-0.2`` ... ``0.8-1.0``."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    return [f"{edges[i]:.2g}-{edges[i + 1]:.2g}" for i in range(bins)]


# --- reading models out of a score table ---------------------------------------------------------


def score_columns(frame: pd.DataFrame) -> list[str]:
    """The score ids with at least one value in ``frame`` (a column of NaN means "not collected")."""
    return [sid for sid in registered_score_ids() if sid in frame.columns and frame[sid].notna().any()]


def scores_of(rows: pd.DataFrame, model: str, score_ids: Sequence[str] | None) -> list[str]:
    """The score ids to analyse for one model's ``rows``: all it has, or the requested ones (canonical
    ids), with an error naming what is missing and what is there."""
    have = score_columns(rows)
    if score_ids is None:
        return have
    wanted = [get_score(s).id for s in dict.fromkeys(score_ids)]
    missing = [s for s in wanted if s not in have]
    if missing:
        raise ValueError(
            f"model {model!r} has no values for {', '.join(missing)} (it has {', '.join(have) or 'none'}): "
            "collect them first"
        )
    return wanted


def model_rows(scores: pd.DataFrame, model: str) -> pd.DataFrame:
    """The rows of one model, with a clear error when it is not in the table."""
    if "model" not in scores.columns:
        raise ValueError("the score table has no 'model' column: read it with headstats.read_scores(ROOT)")
    rows = scores[scores["model"] == model]
    if rows.empty:
        have = ", ".join(sorted(map(str, scores["model"].unique())))
        raise ValueError(f"model {model!r} is not in the score table; it holds: {have}")
    return rows


def sequence_keys(frame: pd.DataFrame) -> pd.MultiIndex:
    """What identifies a sequence: ``(dataset, sample_id)`` (sample ids restart in every dataset)."""
    dataset = frame["dataset"] if "dataset" in frame.columns else pd.Series("", index=frame.index)
    return pd.MultiIndex.from_arrays([dataset.astype(str).to_numpy(), frame["sample_id"].to_numpy()])


def common_scores(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str], wanted: Sequence[str] | None) -> list[str]:
    have_a, have_b = score_columns(a), score_columns(b)
    common = [s for s in have_a if s in have_b]
    if wanted is not None:
        for sid in wanted:
            get_score(sid)
        common = [s for s in common if s in set(wanted)]
    if not common:
        raise ValueError(
            f"{names[0]!r} and {names[1]!r} have no common score ids"
            + (f" among {', '.join(wanted)}" if wanted is not None else "")
            + f": {names[0]} has {', '.join(have_a) or 'none'}; {names[1]} has {', '.join(have_b) or 'none'}. "
            "Collect the same scores for both models."
        )
    return common


def shared_datasets(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> list[str] | None:
    """Datasets both models were scored on (None when the table has no dataset column)."""
    if "dataset" not in a.columns:
        return None
    da, db = set(a["dataset"].astype(str)), set(b["dataset"].astype(str))
    shared = sorted(da & db)
    if not shared:
        raise ValueError(
            f"{names[0]!r} (datasets {', '.join(sorted(da))}) and {names[1]!r} (datasets {', '.join(sorted(db))}) "
            "share no dataset: a distance between models must compare them on the same texts. Collect both on one "
            "dataset, or compare datasets within a model with headstats.stats.stability."
        )
    return shared


# --- the two-model comparison --------------------------------------------------------------------


@dataclass
class _Pair:
    """Two models' rows on a common block numbering: model a's sequence k is block k, model b's is
    block K + k, where K counts the distinct sequence keys of both."""

    a: pd.DataFrame
    b: pd.DataFrame
    block_a: np.ndarray
    block_b: np.ndarray
    n_keys: int
    paired: bool

    @property
    def n_blocks(self) -> int:
        return 2 * self.n_keys


def _prepare_pair(a: pd.DataFrame, b: pd.DataFrame, design: Design, names: tuple[str, str]) -> _Pair:
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
    return _Pair(a, b, block_a, block_b, n_keys, paired)


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


def _bootstrap(data: SequenceBlocks, pair: _Pair, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    k = pair.n_keys
    blocks_a = np.flatnonzero(data.present[:k])
    blocks_b = np.flatnonzero(data.present[k:]) + k
    both = np.intersect1d(blocks_a, blocks_b - k)
    out = np.empty(n_boot)
    for i in range(n_boot):
        ga, gb = np.zeros(pair.n_blocks), np.zeros(pair.n_blocks)
        if pair.paired:
            counts = np.bincount(rng.integers(0, len(both), len(both)), minlength=len(both))
            ga[both] = counts
            gb[both + k] = counts
        else:
            ga[blocks_a] = np.bincount(rng.integers(0, len(blocks_a), len(blocks_a)), minlength=len(blocks_a))
            gb[blocks_b] = np.bincount(rng.integers(0, len(blocks_b), len(blocks_b)), minlength=len(blocks_b))
        out[i] = data.distance(ga, gb)
    return out


def _permutations(data: SequenceBlocks, pair: _Pair, n_perm: int, rng: np.random.Generator) -> np.ndarray:
    k = pair.n_keys
    blocks_a = np.flatnonzero(data.present[:k])
    blocks_b = np.flatnonzero(data.present[k:]) + k
    out = np.empty(n_perm)
    if pair.paired:
        both = np.intersect1d(blocks_a, blocks_b - k)
        for i in range(n_perm):
            swap = rng.random(len(both)) < 0.5
            ga, gb = np.zeros(pair.n_blocks), np.zeros(pair.n_blocks)
            ga[np.where(swap, both + k, both)] = 1.0
            gb[np.where(swap, both, both + k)] = 1.0
            out[i] = data.distance(ga, gb)
    else:
        pooled = np.concatenate([blocks_a, blocks_b])
        for i in range(n_perm):
            shuffled = rng.permutation(pooled)
            ga = _indicator(pair.n_blocks, shuffled[: len(blocks_a)])
            gb = _indicator(pair.n_blocks, shuffled[len(blocks_a) :])
            out[i] = data.distance(ga, gb)
    return out


def split_half_distances(
    data: SequenceBlocks, blocks: np.ndarray, n_split: int, rng: np.random.Generator
) -> np.ndarray:
    """W1 between two random halves of ``blocks`` (one model's sequences), ``n_split`` times."""
    blocks = blocks[data.present[blocks]]
    if len(blocks) < 2 or n_split < 1:
        return np.full(max(n_split, 0), np.nan)
    n = len(data.present)
    out = np.empty(n_split)
    for i in range(n_split):
        shuffled = rng.permutation(blocks)
        half = len(shuffled) // 2
        out[i] = data.distance(_indicator(n, shuffled[:half]), _indicator(n, shuffled[half : 2 * half]))
    return out


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


def _floor(split: np.ndarray, quantile: float) -> float:
    split = split[np.isfinite(split)]
    return float(np.quantile(split, quantile)) if split.size else float("nan")


def model_distance(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    score_ids: Sequence[str] | None = None,
    *,
    depth_bins: int = 5,
    n_boot: int = 200,
    n_perm: int = 200,
    n_split: int = 20,
    confidence: float = 0.95,
    floor_quantile: float = 0.95,
    design: Design = "auto",
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """W1 between two models' score distributions, per score id, overall and per relative depth.

    ``scores`` is a table from :func:`headstats.read_scores` (several models; the comparison uses
    the datasets both were scored on and the score ids both have). Returns one row per
    (score, depth) with ``w1``, a basic bootstrap interval ``ci_low``/``ci_high`` at
    ``confidence`` (sequences resampled; see :func:`_interval`), the permutation ``p_value``
    (``(1 + #{W1_perm >= W1}) / (1 + n_perm)``), the ``noise_floor`` (the larger of the two
    models' ``floor_quantile``-quantiles of split-half W1) and ``above_noise``. W1 is biased
    upwards in small samples (noise alone gives a positive distance), so read the interval
    together with the floor. ``n_boot``, ``n_perm`` or ``n_split`` = 0 skip that part (NaN
    columns); ``depth_bins`` = 0 gives the overall row only.
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
    pair = _prepare_pair(a, b, design, names)
    depth_a, depth_b = _depth_masks(pair.a, depth_bins), _depth_masks(pair.b, depth_bins)
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
            k = pair.n_keys
            present_a, present_b = np.flatnonzero(data.present[:k]), np.flatnonzero(data.present[k:]) + k
            observed = data.distance(_indicator(pair.n_blocks, present_a), _indicator(pair.n_blocks, present_b))
            row: dict[str, object] = {
                "model_a": model_a, "model_b": model_b, "score": sid, "depth": depth, "w1": observed,
                "ci_low": np.nan, "ci_high": np.nan, "p_value": np.nan, "noise_floor": np.nan,
                "n_seq_a": len(present_a), "n_seq_b": len(present_b), "design": "paired" if pair.paired else "unpaired",
            }  # fmt: skip
            if n_boot > 0 and np.isfinite(observed):
                row["ci_low"], row["ci_high"] = _interval(observed, _bootstrap(data, pair, n_boot, rng), confidence)
            if n_perm > 0 and np.isfinite(observed):
                perm = _permutations(data, pair, n_perm, rng)
                # A relative tolerance keeps ties (e.g. a permutation that reproduces the observed
                # labelling) from being lost to summation-order round-off.
                row["p_value"] = (1 + np.count_nonzero(perm >= observed * (1 - 1e-9))) / (1 + n_perm)
            if n_split > 0:
                floors = [
                    _floor(split_half_distances(data, present, n_split, rng), floor_quantile)
                    for present in (present_a, present_b)
                ]
                row["noise_floor"] = np.nanmax(floors) if np.isfinite(floors).any() else np.nan
            rows.append(row)
            bar.update()
    bar.close()
    out = pd.DataFrame(rows)
    out["above_noise"] = out["w1"] > out["noise_floor"]
    return out


def noise_floor(
    scores: pd.DataFrame,
    model: str,
    score_ids: Sequence[str] | None = None,
    *,
    depth_bins: int = 5,
    n_split: int = 20,
    quantile: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """W1 between random halves of one model's own sequences, per (score, depth): ``mean`` and the
    ``floor`` (its ``quantile`` over ``n_split`` splits). A distance between two models below the
    floor cannot be told apart from re-drawing the texts."""
    rows_m = model_rows(scores, model)
    sids = scores_of(rows_m, model, score_ids)
    codes, uniques = sequence_keys(rows_m).factorize()
    masks = _depth_masks(rows_m, depth_bins)
    out = []
    for si, sid in enumerate(sids):
        values = rows_m[sid].to_numpy()
        for di, (depth, mask) in enumerate(masks.items()):
            data = SequenceBlocks(values[mask], codes[mask], len(uniques))
            split = split_half_distances(data, np.arange(len(uniques)), n_split, np.random.default_rng([seed, si, di]))
            finite = split[np.isfinite(split)]
            out.append({
                "model": model, "score": sid, "depth": depth,
                "mean": float(finite.mean()) if finite.size else np.nan, "floor": _floor(split, quantile),
                "n_seq": int(data.present.sum()),
            })  # fmt: skip
    return pd.DataFrame(out)


@dataclass
class DistanceMatrix:
    """W1 between every pair of a list of models for one score and depth bin."""

    score: str
    depth: str
    w1: pd.DataFrame  # models x models, symmetric, 0 on the diagonal
    noise_floor: pd.Series  # per model: its split-half floor
    p_value: pd.DataFrame | None  # models x models, None when no permutations were run

    def pair_floor(self) -> pd.DataFrame:
        """The floor a pair's distance is judged against: the larger of the two models' floors."""
        f = self.noise_floor.to_numpy()
        return pd.DataFrame(np.maximum.outer(f, f), index=self.w1.index, columns=self.w1.columns)


def distance_matrix(
    scores: pd.DataFrame,
    models: Sequence[str],
    score_id: str,
    *,
    depth: str = ALL_DEPTHS,
    depth_bins: int = 5,
    n_perm: int = 0,
    n_split: int = 20,
    floor_quantile: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> DistanceMatrix:
    """W1 matrix over ``models`` (a fine-tuning chain, a scale series) for one score and depth bin
    (``"all"`` or a label of :func:`depth_labels`), with each model's noise floor."""
    models = list(dict.fromkeys(models))
    if len(models) < 2:
        raise ValueError("a distance matrix needs at least two models")
    labels = [ALL_DEPTHS, *depth_labels(depth_bins)]
    if depth not in labels:
        raise ValueError(f"depth must be one of {', '.join(labels)}, not {depth!r}")
    w1 = pd.DataFrame(0.0, index=models, columns=models)
    pv = pd.DataFrame(np.nan, index=models, columns=models) if n_perm > 0 else None
    pairs = list(combinations(models, 2))
    for a, b in tqdm(pairs, desc=f"W1 matrix {score_id}", unit="pair", disable=not progress):
        res = model_distance(
            scores, a, b, [score_id], depth_bins=depth_bins, n_boot=0, n_perm=n_perm, n_split=0, seed=seed
        )
        row = res[res["depth"] == depth].iloc[0]
        w1.loc[a, b] = w1.loc[b, a] = row["w1"]
        if pv is not None:
            pv.loc[a, b] = pv.loc[b, a] = row["p_value"]
    floors = {}
    for m in models:
        nf = noise_floor(
            scores, m, [score_id], depth_bins=depth_bins, n_split=n_split, quantile=floor_quantile, seed=seed
        )
        floors[m] = float(nf.loc[nf["depth"] == depth, "floor"].iloc[0])
    return DistanceMatrix(score_id, depth, w1, pd.Series(floors, name="noise_floor"), pv)
