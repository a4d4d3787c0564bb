"""Reading a score table's parts: its models, scores, sequences, relative depths and clusters.

Every statistic of two models' score tables starts here: the rows of one model
(:func:`model_rows`), the scores both have (:func:`common_scores`), the datasets both were scored on
(:func:`shared_datasets`), what identifies a sequence (:func:`sequence_keys`), its relative-depth bin
(:func:`depth_bin`) and its cluster (:func:`cluster_column`, :func:`cluster_codes`: the unit every
resampling moves, docs/statistics.md#uncertainty).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from headstats.engine.scores import get_score
from headstats.engine.scores import score_ids as registered_score_ids

ALL_DEPTHS = "all"


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


# --- clusters --------------------------------------------------------------------------------------


def cluster_column(frame: pd.DataFrame, cluster: str | None = None) -> str:
    """The column whose values group sequences into clusters (see the module docstring): ``cluster``
    if given, else ``subject`` when the table has subjects, else ``document`` when its sequences
    come from source documents (HellaSwag's videos and articles), else ``sample_id`` (every
    sequence its own cluster)."""
    if cluster is not None:
        if cluster not in frame.columns:
            raise ValueError(
                f"cluster column {cluster!r} is not in the table; it has: {', '.join(map(str, frame.columns))}. "
                "Name a column that is constant within a sequence (subject, a document id) or leave cluster=None"
            )
        return cluster
    if "subject" in frame.columns and frame["subject"].notna().any():
        return "subject"
    if "document" in frame.columns and frame["document"].notna().any():
        return "document"
    return "sample_id"


def cluster_codes(frame: pd.DataFrame, column: str) -> np.ndarray:
    """Cluster index (0..C-1) of every row: the pair (dataset, value of ``column``); a row whose value
    is missing falls in its own sequence's cluster."""
    dataset = frame["dataset"] if "dataset" in frame.columns else pd.Series("", index=frame.index)
    d_codes, _ = pd.factorize(dataset.astype(str))
    s_codes, _ = sequence_keys(frame).factorize()
    if column == "sample_id":
        return np.asarray(s_codes, dtype=np.int64)
    v_codes, _ = pd.factorize(frame[column])
    own = v_codes < 0
    keys = pd.MultiIndex.from_arrays([d_codes, own.astype(np.int8), np.where(own, s_codes, v_codes)])
    codes, _ = keys.factorize()
    return np.asarray(codes, dtype=np.int64)


def block_clusters(blocks: np.ndarray, clusters: np.ndarray, n_blocks: int) -> np.ndarray:
    """Cluster of each block (-1 for a block with no rows), from per-row block and cluster indices."""
    out = np.full(n_blocks, -1, dtype=np.int64)
    out[blocks] = clusters
    return out
