"""Which heads move between two models of one architecture (a base and its fine-tuned checkpoint)?

W1 (:mod:`headstats.stats.distances`) says how far a score's distribution moved; this module says
*which heads* moved, on the per-head mean of a score over one dataset's sequences (both models
scored on the same texts):

- ``spearman``: rank agreement of the heads' means between the two models (1 = same order);
  ``split_half``: the same correlation between two random halves of the first model's own clusters
  (Spearman-Brown corrected), the agreement noise alone leaves: a ``spearman`` near it means the
  order did not move beyond what re-drawing the texts moves it;
- ``inactive_kept``: of the heads the score calls inactive in the first model (the ``rate`` share of
  heads with the most inactive means, in the score's own direction), the share still among the
  ``rate`` most inactive in the second; ``inactive_iou`` the Jaccard index of the two sets;
- :func:`moved_heads`: the heads whose mean moved most, in units of the spread of the first model's
  head means (so scores of different scales read alike);
- :func:`head_shift_test`: *which heads moved*, as a test: a paired sign-flip max-T test over the
  texts (or their clusters) that controls the family-wise error over all heads of the model
  (:func:`sign_flip_max_t` is its kernel on a matrix of differences). Pooled W1 cannot see heads
  that exchange their values (the pooled distribution is unchanged); this test can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from headstats.engine.scores import get_score
from headstats.stats.distances import interquartile_range
from headstats.stats.overlap import jaccard
from headstats.stats.stability import grouped_mean, spearman, split_half_spearman
from headstats.stats.tables import cluster_codes, cluster_column, model_rows, scores_of, sequence_keys


def dataset_rows(scores: pd.DataFrame, model: str, dataset: str | None) -> pd.DataFrame:
    rows = model_rows(scores, model)
    if dataset is not None and "dataset" in rows.columns:
        rows = rows[rows["dataset"].astype(str) == dataset]
    if rows.empty:
        raise ValueError(f"model {model!r} has no score rows on dataset {dataset!r}")
    return rows


def _head_means(rows: pd.DataFrame, sid: str, heads: pd.MultiIndex) -> np.ndarray:
    codes = heads.get_indexer(pd.MultiIndex.from_arrays([rows["layer"].to_numpy(), rows["head"].to_numpy()]))
    return grouped_mean(rows[sid].to_numpy(dtype=np.float64), codes, len(heads))


def common_heads(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> pd.MultiIndex:
    ha = pd.MultiIndex.from_frame(a[["layer", "head"]].drop_duplicates()).sort_values()
    hb = pd.MultiIndex.from_frame(b[["layer", "head"]].drop_duplicates()).sort_values()
    if not ha.equals(hb):
        raise ValueError(
            f"{names[0]!r} ({len(ha)} heads) and {names[1]!r} ({len(hb)} heads) do not have the same heads: "
            "per-head movement compares checkpoints of one architecture (use W1 across architectures)"
        )
    return ha


def most_inactive(means: np.ndarray, score_id: str, rate: float) -> np.ndarray:
    """Boolean mask of the ``ceil(rate * n)`` heads whose means are most inactive for ``score_id``."""
    n = len(means)
    k = int(np.ceil(rate * n))
    order = np.argsort(-means if get_score(score_id).inactive_when == "above" else means, kind="stable")
    mask = np.zeros(n, dtype=bool)
    mask[order[:k]] = True
    return mask


def head_movement(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    score_ids: Sequence[str] | None = None,
    *,
    dataset: str | None = None,
    rate: float = 0.1,
    n_split: int = 200,
    cluster: str | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Per score: how far the heads' order and the score's inactive heads moved from ``model_a`` to
    ``model_b`` on ``dataset`` (see the module docstring). Columns: ``model_a, model_b, dataset,
    score, spearman, split_half, inactive_kept, inactive_iou, rate, n_heads, cluster, n_splits``."""
    if not 0 < rate < 1:
        raise ValueError(f"rate must lie strictly between 0 and 1, not {rate}")
    a, b = dataset_rows(scores, model_a, dataset), dataset_rows(scores, model_b, dataset)
    heads = common_heads(a, b, (model_a, model_b))
    sids = [s for s in scores_of(a, model_a, score_ids) if s in b.columns and s != "random"]
    unit = cluster_column(a, cluster)
    clusters = cluster_codes(a, unit)
    codes_a = heads.get_indexer(pd.MultiIndex.from_arrays([a["layer"].to_numpy(), a["head"].to_numpy()]))
    out = []
    for si, sid in enumerate(sids):
        ma, mb = _head_means(a, sid, heads), _head_means(b, sid, heads)
        rng = np.random.default_rng([seed, si])
        split = split_half_spearman(a[sid].to_numpy(dtype=np.float64), codes_a, clusters, len(heads), n_split, rng)
        ia, ib = most_inactive(ma, sid, rate), most_inactive(mb, sid, rate)
        out.append(
            {
                "model_a": model_a,
                "model_b": model_b,
                "dataset": dataset,
                "score": sid,
                "spearman": spearman(ma, mb),
                "split_half": split,
                "inactive_kept": float(np.count_nonzero(ia & ib) / max(np.count_nonzero(ia), 1)),
                "inactive_iou": jaccard(ia, ib),
                "rate": rate,
                "n_heads": len(heads),
                "cluster": unit,
                "n_splits": max(n_split, 0),
            }
        )
    return pd.DataFrame(out)


def moved_heads(
    scores: pd.DataFrame, model_a: str, model_b: str, score_id: str, *, dataset: str | None = None, k: int = 5
) -> pd.DataFrame:
    """The ``k`` heads whose mean ``score_id`` moved most from ``model_a`` to ``model_b``: columns
    ``layer, head, mean_a, mean_b, shift`` (``shift`` = (mean_b - mean_a) / sd of model_a's head
    means), largest ``|shift|`` first."""
    a, b = dataset_rows(scores, model_a, dataset), dataset_rows(scores, model_b, dataset)
    heads = common_heads(a, b, (model_a, model_b))
    ma, mb = _head_means(a, score_id, heads), _head_means(b, score_id, heads)
    spread = np.nanstd(ma)
    shift = (mb - ma) / spread if spread > 0 else np.full_like(ma, np.nan)
    frame = pd.DataFrame(
        {
            "layer": heads.get_level_values(0),
            "head": heads.get_level_values(1),
            "mean_a": ma,
            "mean_b": mb,
            "shift": shift,
        }
    )
    return frame.reindex(frame["shift"].abs().sort_values(ascending=False, kind="stable").index).head(k)


_BATCH_ELEMENTS = 1 << 22  # sign vectors x heads per batch: bounded temporaries
_TIE = 1 - 1e-9  # a relabelling reproducing |t| up to summation-order round-off counts as reaching it


def _t_statistics(sums: np.ndarray, sum_squares: np.ndarray, n: np.ndarray) -> np.ndarray:
    """One-sample t of differences given their sums (R x H, one row per sign vector), sums of
    squares and counts (H): ``mean / (sd / sqrt(n))``. Equal non-zero differences (sd = 0) give
    +-inf, all-zero differences 0, fewer than two differences NaN. A sign flip leaves the sum of
    squares unchanged, so every relabelling costs one matrix product."""
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = sums / n
        var = (sum_squares - n * mean**2) / (n - 1)
        # All differences equal in size with one sign: the variance is 0 up to round-off of Q - n m^2.
        tied = var <= 1e-12 * sum_squares / n
        t = mean / np.sqrt(var / n)
        t = np.where(tied, np.where(sum_squares > 0, np.sign(mean) * np.inf, 0.0), t)
    return np.where(n >= 2, t, np.nan)


def _sign_batches(n_units: int, n_perm: int, rng: np.random.Generator, step: int):
    """Batches of sign vectors (R x U of +-1): all 2**U of them when that is at most ``n_perm``
    (the first is the identity), else ``n_perm`` uniform random ones."""
    if n_units < 63 and 2**n_units <= n_perm:
        bits = np.arange(n_units)
        for s in range(0, 2**n_units, step):
            index = np.arange(s, min(s + step, 2**n_units))
            yield 1.0 - 2.0 * ((index[:, None] >> bits) & 1)
        return
    for s in range(0, n_perm, step):
        yield rng.choice(np.array([-1.0, 1.0]), size=(min(step, n_perm - s), n_units))


def sign_flip_max_t(differences: ArrayLike, *, n_perm: int = 9999, seed: int = 0) -> pd.DataFrame:
    """Paired sign-flip test of every column of ``differences`` (U units x H heads: the difference
    model_b - model_a of each head on each text or cluster), with Westfall-Young single-step max-T
    adjustment over the columns.

    Statistic: ``t_h = mean(d_h) / (sd(d_h) / sqrt(n_h))`` over the finite entries of column h
    (+-inf when they are equal and non-zero, 0 when all are zero). Null: the two models' labels are
    exchangeable within each unit, so each unit's whole row of differences flips sign with
    probability 1/2, one sign per unit shared by every head (the dependence between heads is kept).
    ``p_raw`` = share of sign vectors with ``|t*_h| >= |t_h|``; ``p_max_t`` = share with
    ``max_h |t*_h| >= |t_h|``, which controls the family-wise error over the heads. All 2**U sign
    vectors are enumerated when that is at most ``n_perm`` (``exact``; the identity among them,
    p = count / 2**U), else ``n_perm`` are drawn (p = (1 + count) / (1 + n_perm)). With U units no
    p-value falls below 2**(1 - U). Returns one row per column: ``n, mean, sd, t, p_raw, p_max_t,
    n_perm, exact``."""
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"differences must be a units x heads matrix, not an array of shape {d.shape}")
    if n_perm < 1:
        raise ValueError(f"n_perm must be at least 1, not {n_perm}")
    ok = np.isfinite(d)
    x = np.where(ok, d, 0.0)
    n = ok.sum(axis=0).astype(np.float64)
    q = (x * x).sum(axis=0)
    observed = _t_statistics(x.sum(axis=0)[None, :], q, n)[0]
    testable = ~np.isnan(observed)
    reach = np.abs(observed) * _TIE
    n_units, n_heads = d.shape
    exact = n_units < 63 and 2**n_units <= n_perm
    count_raw, count_max, drawn = np.zeros(n_heads), np.zeros(n_heads), 0
    step = max(1, _BATCH_ELEMENTS // max(n_heads, n_units, 1))
    for signs in _sign_batches(n_units, n_perm, np.random.default_rng(seed), step):
        flipped = np.abs(_t_statistics(signs @ x, q, n))
        flipped = np.where(testable, flipped, 0.0)  # an untestable head never sets the maximum
        count_raw += (flipped >= reach).sum(axis=0)
        count_max += (flipped.max(axis=1)[:, None] >= reach).sum(axis=0)
        drawn += len(signs)
    if exact:
        p_raw, p_max = count_raw / drawn, count_max / drawn
    else:
        p_raw, p_max = (1 + count_raw) / (1 + drawn), (1 + count_max) / (1 + drawn)
    with np.errstate(invalid="ignore"):
        sd = np.sqrt(np.maximum(q - n * (x.sum(axis=0) / n) ** 2, 0.0) / (n - 1))
    return pd.DataFrame(
        {
            "n": n.astype(np.int64),
            "mean": np.where(n > 0, x.sum(axis=0) / np.maximum(n, 1), np.nan),
            "sd": np.where(n >= 2, sd, np.nan),
            "t": observed,
            "p_raw": np.where(testable, p_raw, np.nan),
            "p_max_t": np.where(testable, p_max, np.nan),
            "n_perm": drawn,
            "exact": exact,
        }
    )


def sequence_matrix(rows: pd.DataFrame, sid: str, sequences: pd.MultiIndex, heads: pd.MultiIndex) -> np.ndarray:
    """``rows[sid]`` as a sequences x heads matrix (NaN where a pair has no row)."""
    si = sequences.get_indexer(sequence_keys(rows))
    hi = heads.get_indexer(pd.MultiIndex.from_arrays([rows["layer"].to_numpy(), rows["head"].to_numpy()]))
    keep = si >= 0
    si, hi = si[keep], hi[keep]
    if len(np.unique(si * len(heads) + hi)) < len(si):
        raise ValueError(
            "the score table holds several rows for one (dataset, sample_id, layer, head) of a model: "
            "read one collection per model and dataset"
        )
    out = np.full((len(sequences), len(heads)), np.nan)
    out[si, hi] = rows[sid].to_numpy(dtype=np.float64)[keep]
    return out


def cluster_means(values: np.ndarray, units: np.ndarray, n_units: int) -> np.ndarray:
    """Mean of the finite entries of each column over the rows of each unit (units x columns)."""
    ok = np.isfinite(values)
    sums, counts = np.zeros((n_units, values.shape[1])), np.zeros((n_units, values.shape[1]))
    np.add.at(sums, units, np.where(ok, values, 0.0))
    np.add.at(counts, units, ok)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


@dataclass(frozen=True)
class PairedUnits:
    """The texts two models both scored and the units they fall in (clusters, else texts)."""

    sequences: pd.MultiIndex  # (dataset, sample_id) of each paired text
    units: np.ndarray  # each text's unit, 0 .. n_units - 1
    n_units: int
    cluster: str  # the column the units are read from (see cluster_column)


def paired_units(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str], cluster: str | None = None) -> PairedUnits:
    """The texts (dataset, sample_id) both models' rows ``a`` and ``b`` hold, each in its unit: its
    cluster of ``a`` (``cluster`` as in :func:`headstats.stats.tables.cluster_column`: MMLU subjects,
    source documents, else each text is its own). Refused when they share no text or fewer than two
    units, which no paired resampling can use."""
    sequences = sequence_keys(a).unique().intersection(sequence_keys(b).unique())
    if len(sequences) == 0:
        raise ValueError(
            f"{names[0]!r} and {names[1]!r} scored no common text (dataset, sample_id): the per-head test pairs each "
            "text's scores under both models; score both on the same texts"
        )
    unit = cluster_column(a, cluster)
    row_sequence = sequences.get_indexer(sequence_keys(a))
    sequence_cluster = np.full(len(sequences), -1, dtype=np.int64)
    sequence_cluster[row_sequence[row_sequence >= 0]] = cluster_codes(a, unit)[row_sequence >= 0]
    units, uniques = pd.factorize(sequence_cluster)
    if len(uniques) < 2:
        raise ValueError(
            f"the per-head test needs at least two units ({unit}) to flip, but {names[0]!r} and {names[1]!r} share "
            f"{len(uniques)}: score more texts, or name a finer cluster column"
        )
    return PairedUnits(sequences, np.asarray(units, dtype=np.int64), len(uniques), unit)


def head_shift_test(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    score_id: str,
    *,
    dataset: str | None = None,
    n_perm: int = 9999,
    cluster: str | None = None,
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """Which heads moved from ``model_a`` (the reference) to ``model_b`` on ``score_id``: a paired
    sign-flip max-T test per head over the texts both models scored (``dataset``, or every dataset
    both have), controlling the family-wise error over all heads.

    Each text's difference ``model_b - model_a`` per head is averaged within its cluster first
    (``cluster`` as in :func:`headstats.stats.tables.cluster_column`: MMLU subjects, source
    documents, else each text is its own); the clusters are the units of :func:`sign_flip_max_t`.
    Returns one row per head (by layer, head): ``mean_a``, ``mean_b`` (the head's means over the
    paired texts), ``mean_diff`` (mean over units of the difference: what ``t`` tests),
    ``shift_iqr`` (``mean_diff`` divided by ``iqr_a``, the interquartile range of ``model_a``'s
    values of the score over all its heads on these texts: the scale of
    :func:`~headstats.stats.distances.model_distance`'s ``w1_iqr``), ``d_z`` (``mean_diff`` over the
    sd of the unit differences; NaN when they are the same on every unit: nothing to standardise by),
    ``t``, ``p_raw``, ``p_max_t`` and ``moved`` (``p_max_t <= alpha``),
    with ``n_units``, ``n_seq``, ``cluster``, ``n_perm`` and ``exact``.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, not {alpha}")
    sid = get_score(score_id).id
    names = (model_a, model_b)
    a, b = dataset_rows(scores, model_a, dataset), dataset_rows(scores, model_b, dataset)
    for name, rows in zip(names, (a, b), strict=True):
        if sid not in rows.columns or not rows[sid].notna().any():
            raise ValueError(f"model {name!r} has no values for {sid!r}: collect them first")
    heads = common_heads(a, b, names)
    paired = paired_units(a, b, names, cluster)
    sequences, units, unit = paired.sequences, paired.units, paired.cluster
    va, vb = sequence_matrix(a, sid, sequences, heads), sequence_matrix(b, sid, sequences, heads)
    test = sign_flip_max_t(cluster_means(vb - va, units, paired.n_units), n_perm=n_perm, seed=seed)
    iqr = interquartile_range(va)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_a, mean_b = np.nanmean(va, axis=0), np.nanmean(vb, axis=0)
        # no spread to standardise by when a head's differences are the same on every unit (to the
        # round-off _t_statistics ties): no d_z, rather than an infinite one
        sd, mean = test["sd"].to_numpy(), test["mean"].to_numpy()
        d_z = np.where(sd > 1e-6 * np.abs(mean), mean / sd, np.nan)
    return pd.DataFrame(
        {
            "model_a": model_a,
            "model_b": model_b,
            "dataset": dataset,
            "score": sid,
            "layer": heads.get_level_values(0),
            "head": heads.get_level_values(1),
            "mean_a": mean_a,
            "mean_b": mean_b,
            "mean_diff": test["mean"].to_numpy(),
            "shift_iqr": test["mean"].to_numpy() / iqr if iqr > 0 else np.nan,
            "d_z": d_z,
            "t": test["t"].to_numpy(),
            "p_raw": test["p_raw"].to_numpy(),
            "p_max_t": test["p_max_t"].to_numpy(),
            "moved": test["p_max_t"].to_numpy() <= alpha,
            "alpha": alpha,
            "iqr_a": iqr,
            "n_units": test["n"].to_numpy(),
            "n_seq": len(sequences),
            "cluster": unit,
            "n_perm": test["n_perm"].to_numpy(),
            "exact": test["exact"].to_numpy(),
        }
    )


__all__ = [
    "PairedUnits",
    "cluster_means",
    "common_heads",
    "dataset_rows",
    "head_movement",
    "head_shift_test",
    "most_inactive",
    "moved_heads",
    "paired_units",
    "sequence_matrix",
    "sign_flip_max_t",
]
