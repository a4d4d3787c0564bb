"""Cross-dataset stability of one model's scores: do the same heads look inactive on other texts?

Two views per score id and pair of datasets:

- :func:`rank_stability`: Spearman correlation of the per-head means (mean over a dataset's
  sequences of each (layer, head)'s score). 1 means the datasets order the heads identically. As a
  yardstick it reports each dataset's *split-half* reliability: the Spearman correlation of the
  per-head means of two random halves of the dataset's *clusters* (MMLU subjects, which share their
  few-shot prefix; otherwise sequences; see :func:`headstats.stats.tables.cluster_column`),
  averaged over ``n_splits`` (>= 200 by default) halvings and corrected to full length by
  Spearman-Brown (``2 r / (1 + r)``: each half holds half the data). A cross-dataset correlation
  near the split-half one means the head ordering moves no more than it does between re-draws of
  the same kind of text. Splitting sequences of one subject would compare halves that share their
  prefix, and the reliability would come out near 1 whatever the heads do.
- :func:`layer_distances`: W1 between the two datasets' score distributions within each layer,
  with an optional split-half noise floor (see :mod:`headstats.stats.distances`; clusters are the
  unit, and sequences of different datasets are different texts, so the comparison is unpaired).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as _st

from headstats.stats.distances import DEFAULT_SPLITS, SequenceBlocks, split_half_distances
from headstats.stats.tables import cluster_codes, cluster_column, model_rows, scores_of, sequence_keys


def _datasets(rows: pd.DataFrame, model: str) -> list[str]:
    if "dataset" not in rows.columns:
        raise ValueError("the score table has no 'dataset' column: read it with headstats.read_scores(ROOT)")
    datasets = sorted(rows["dataset"].astype(str).unique())
    if len(datasets) < 2:
        raise ValueError(
            f"model {model!r} was scored on {len(datasets)} dataset(s) ({', '.join(datasets)}); cross-dataset "
            "stability needs at least two: collect it on another dataset"
        )
    return datasets


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman correlation (average ranks for ties) over the entries finite in both; NaN when
    either side is constant."""
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(_st.spearmanr(a, b).statistic)


def spearman_brown(r: float) -> float:
    """Reliability of the full data from the correlation ``r`` of two halves: ``2 r / (1 + r)``."""
    return float(2 * r / (1 + r)) if np.isfinite(r) and r > -1 else float("nan")


def _head_index(rows: pd.DataFrame) -> tuple[np.ndarray, pd.MultiIndex]:
    codes, heads = pd.MultiIndex.from_arrays([rows["layer"].to_numpy(), rows["head"].to_numpy()]).factorize()
    return codes, heads


def grouped_mean(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """Mean of the finite ``values`` in each of the ``n`` groups (codes 0..n-1): a per-head mean over
    sequences when ``groups`` are head codes; NaN for a group with no finite value."""
    ok = np.isfinite(values)
    total = np.bincount(groups[ok], weights=values[ok], minlength=n)
    count = np.bincount(groups[ok], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count


def head_means(scores: pd.DataFrame, model: str, score_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-head mean of each score over a dataset's sequences: index (dataset, layer, head)."""
    rows = model_rows(scores, model)
    sids = scores_of(rows, model, score_ids)
    keys = ["dataset", "layer", "head"] if "dataset" in rows.columns else ["layer", "head"]
    return rows.groupby(keys, observed=True, sort=True)[sids].mean()


def rank_stability(
    scores: pd.DataFrame,
    model: str,
    score_ids: Sequence[str] | None = None,
    *,
    n_split: int = DEFAULT_SPLITS,
    cluster: str | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Spearman correlation of per-head means between every pair of datasets of ``model``.

    Columns: ``model, score, dataset_a, dataset_b, spearman, n_heads, split_half_a, split_half_b``
    (each dataset's split-half reliability: mean Spearman correlation between two random halves of
    its clusters over ``n_splits`` halvings, Spearman-Brown corrected; NaN when ``n_split`` is 0 or
    a dataset has fewer than two clusters), ``cluster`` (the split unit) and ``n_clusters_a``,
    ``n_clusters_b``, ``n_splits``.
    """
    rows = model_rows(scores, model)
    datasets = _datasets(rows, model)
    sids = scores_of(rows, model, score_ids)
    unit = cluster_column(rows, cluster)
    heads, head_keys = _head_index(rows)
    n_heads = len(head_keys)
    per_dataset = {d: np.flatnonzero(rows["dataset"].astype(str).to_numpy() == d) for d in datasets}
    clusters = cluster_codes(rows, unit)
    n_clusters = {d: len(np.unique(clusters[idx])) for d, idx in per_dataset.items()}
    out = []
    for si, sid in enumerate(sids):
        values = rows[sid].to_numpy(dtype=np.float64)
        means = {d: grouped_mean(values[idx], heads[idx], n_heads) for d, idx in per_dataset.items()}
        split = {}
        for di, (d, idx) in enumerate(per_dataset.items()):
            rng = np.random.default_rng([seed, si, di])
            split[d] = split_half_spearman(values[idx], heads[idx], clusters[idx], n_heads, n_split, rng)
        for da, db in combinations(datasets, 2):
            both = np.isfinite(means[da]) & np.isfinite(means[db])
            out.append(
                {
                    "model": model,
                    "score": sid,
                    "dataset_a": da,
                    "dataset_b": db,
                    "spearman": spearman(means[da], means[db]),
                    "n_heads": int(both.sum()),
                    "split_half_a": split[da],
                    "split_half_b": split[db],
                    "cluster": unit,
                    "n_clusters_a": n_clusters[da],
                    "n_clusters_b": n_clusters[db],
                    "n_splits": max(n_split, 0),
                }
            )
    return pd.DataFrame(out)


def split_half_spearman(
    values: np.ndarray, heads: np.ndarray, clusters: np.ndarray, n_heads: int, n_split: int, rng: np.random.Generator
) -> float:
    """Split-half reliability of per-head means: the Spearman correlation between the means of two
    random halves of the ``clusters`` (``n_split`` halvings drawn from ``rng``), averaged and
    Spearman-Brown corrected to full length; NaN with fewer than two clusters or no halving."""
    codes, uniques = pd.factorize(clusters)
    if n_split < 1 or len(uniques) < 2:
        return float("nan")
    rhos = []
    for _ in range(n_split):
        half = rng.permutation(len(uniques)) < len(uniques) // 2
        in_first = half[codes]
        first = grouped_mean(values[in_first], heads[in_first], n_heads)
        second = grouped_mean(values[~in_first], heads[~in_first], n_heads)
        rhos.append(spearman(first, second))
    finite = [r for r in rhos if np.isfinite(r)]
    return spearman_brown(float(np.mean(finite))) if finite else float("nan")


def layer_distances(
    scores: pd.DataFrame,
    model: str,
    score_ids: Sequence[str] | None = None,
    *,
    n_split: int = 0,
    floor_quantile: float = 0.95,
    cluster: str | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """W1 between two datasets' distributions of a score within each layer of ``model``.

    Columns: ``model, score, dataset_a, dataset_b, layer, w1, noise_floor`` (the larger of the two
    datasets' split-half floors for that layer, halving clusters; NaN when ``n_split`` is 0),
    ``cluster`` and ``n_splits``.
    """
    rows = model_rows(scores, model)
    datasets = _datasets(rows, model)
    sids = scores_of(rows, model, score_ids)
    unit = cluster_column(rows, cluster)
    dataset = rows["dataset"].astype(str).to_numpy()
    codes, uniques = sequence_keys(rows).factorize()
    n_blocks = len(uniques)
    block_cluster = np.full(n_blocks, -1, dtype=np.int64)
    block_cluster[codes] = cluster_codes(rows, unit)
    layer = rows["layer"].to_numpy()
    layers = np.unique(layer)
    out = []
    for si, sid in enumerate(sids):
        values = rows[sid].to_numpy(dtype=np.float64)
        for li, lay in enumerate(layers):
            in_layer = layer == lay
            data = SequenceBlocks(values[in_layer], codes[in_layer], n_blocks)
            group = {d: _members(codes[in_layer & (dataset == d)], n_blocks) for d in datasets}
            floors = {}
            if n_split > 0:
                rng = np.random.default_rng([seed, si, li])
                for d in datasets:
                    blocks = np.flatnonzero(group[d])
                    split = split_half_distances(data, blocks, n_split, rng, block_cluster[blocks])
                    split = split[np.isfinite(split)]
                    floors[d] = float(np.quantile(split, floor_quantile)) if split.size else np.nan
            for da, db in combinations(datasets, 2):
                pair = [f for f in (floors.get(da, np.nan), floors.get(db, np.nan)) if np.isfinite(f)]
                pair_floor = max(pair) if pair else np.nan
                out.append(
                    {
                        "model": model,
                        "score": sid,
                        "dataset_a": da,
                        "dataset_b": db,
                        "layer": int(lay),
                        "w1": data.distance(group[da], group[db]),
                        "noise_floor": pair_floor,
                        "cluster": unit,
                        "n_splits": max(n_split, 0),
                    }
                )
    return pd.DataFrame(out)


def _members(blocks: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n)
    out[np.unique(blocks)] = 1.0
    return out
