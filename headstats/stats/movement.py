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
  head means (so scores of different scales read alike).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstats.engine.scores import get_score
from headstats.stats.distances import cluster_codes, cluster_column, model_rows, scores_of
from headstats.stats.overlap import jaccard
from headstats.stats.stability import _grouped_mean, _split_half_spearman, spearman


def _dataset_rows(scores: pd.DataFrame, model: str, dataset: str | None) -> pd.DataFrame:
    rows = model_rows(scores, model)
    if dataset is not None and "dataset" in rows.columns:
        rows = rows[rows["dataset"].astype(str) == dataset]
    if rows.empty:
        raise ValueError(f"model {model!r} has no score rows on dataset {dataset!r}")
    return rows


def _head_means(rows: pd.DataFrame, sid: str, heads: pd.MultiIndex) -> np.ndarray:
    codes = heads.get_indexer(pd.MultiIndex.from_arrays([rows["layer"].to_numpy(), rows["head"].to_numpy()]))
    return _grouped_mean(rows[sid].to_numpy(dtype=np.float64), codes, len(heads))


def _heads(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> pd.MultiIndex:
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
    a, b = _dataset_rows(scores, model_a, dataset), _dataset_rows(scores, model_b, dataset)
    heads = _heads(a, b, (model_a, model_b))
    sids = [s for s in scores_of(a, model_a, score_ids) if s in b.columns and s != "random"]
    unit = cluster_column(a, cluster)
    clusters = cluster_codes(a, unit)
    codes_a = heads.get_indexer(pd.MultiIndex.from_arrays([a["layer"].to_numpy(), a["head"].to_numpy()]))
    out = []
    for si, sid in enumerate(sids):
        ma, mb = _head_means(a, sid, heads), _head_means(b, sid, heads)
        rng = np.random.default_rng([seed, si])
        split = _split_half_spearman(a[sid].to_numpy(dtype=np.float64), codes_a, clusters, len(heads), n_split, rng)
        ia, ib = most_inactive(ma, sid, rate), most_inactive(mb, sid, rate)
        out.append({
            "model_a": model_a, "model_b": model_b, "dataset": dataset, "score": sid,
            "spearman": spearman(ma, mb), "split_half": split,
            "inactive_kept": float(np.count_nonzero(ia & ib) / max(np.count_nonzero(ia), 1)),
            "inactive_iou": jaccard(ia, ib), "rate": rate, "n_heads": len(heads), "cluster": unit,
            "n_splits": max(n_split, 0),
        })  # fmt: skip
    return pd.DataFrame(out)


def moved_heads(
    scores: pd.DataFrame, model_a: str, model_b: str, score_id: str, *, dataset: str | None = None, k: int = 5
) -> pd.DataFrame:
    """The ``k`` heads whose mean ``score_id`` moved most from ``model_a`` to ``model_b``: columns
    ``layer, head, mean_a, mean_b, shift`` (``shift`` = (mean_b - mean_a) / sd of model_a's head
    means), largest ``|shift|`` first."""
    a, b = _dataset_rows(scores, model_a, dataset), _dataset_rows(scores, model_b, dataset)
    heads = _heads(a, b, (model_a, model_b))
    ma, mb = _head_means(a, score_id, heads), _head_means(b, score_id, heads)
    spread = np.nanstd(ma)
    shift = (mb - ma) / spread if spread > 0 else np.full_like(ma, np.nan)
    frame = pd.DataFrame({
        "layer": heads.get_level_values(0), "head": heads.get_level_values(1), "mean_a": ma, "mean_b": mb,
        "shift": shift,
    })  # fmt: skip
    return frame.reindex(frame["shift"].abs().sort_values(ascending=False, kind="stable").index).head(k)


__all__ = ["head_movement", "most_inactive", "moved_heads"]
