"""Which heads are inactive? Per head, the share of texts on which a score calls it inactive.

The question: on these texts, which heads does a score call inactive, and how consistently? The
quantity: for each head, the share of texts (sequences) on which its score crosses the threshold,
by the strict rule zeroing applies (:func:`headstats.engine.scores.is_inactive`: below the threshold,
above it for ``awft`` and ``awft_ln``). The threshold is given, or calibrated for a share of heads as a
sweep calibrates it (:mod:`headstats.stats.thresholds`: the quantile of the score pooled over every
(text, layer, head) row of one model on one dataset), so ``share=0.1`` asks about the heads that
zeroing 10% of heads on these texts would zero.

The interval is over texts: a 95% Wilson score interval of the share. Texts of one cluster (an MMLU
subject, whose prompts share their five shots; a source document) answer alike, so where the table
has two or more clusters (:func:`headstats.stats.tables.cluster_column`) the interval is the
Wilson interval at an effective number of texts (Korn and Graubard's, 1998, for proportions from
clustered samples): n / deff, times (z / t_{C-1})^2 for the few clusters there are. deff is Kish's
design effect, the ratio estimator's cluster (linearisation) variance C / (C - 1) * sum_c (y_c -
p m_c)^2 / n^2 (C clusters of m_c texts, y_c of them inactive) over the independent-texts variance
p (1 - p) / n, never taken below 1. Where a head is inactive on every text or on none, the texts say
nothing about how clustered it is: its interval is taken at one text per cluster (n / deff = C), the
most clustered case. Simulated with 4 to 30 clusters at intraclass correlations up to 0.5, the
interval covers at 95% or more, where the same Wilson interval over independent texts covers 56-83%
(``tests/test_inactive.py``). Unlike a bootstrap of the texts, it stays honest at the ends: a head
inactive on none of 8 independent texts gets [0, 0.32], not [0, 0].
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from headstats.engine.scores import get_score
from headstats.stats.tables import cluster_codes, cluster_column, sequence_keys
from headstats.stats.thresholds import thresholds_for_fractions

# The columns of the table :func:`inactive_heads` returns, after the model and dataset columns the
# input has.
COLUMNS = (
    "layer",
    "head",
    "inactive_share",
    "low",
    "high",
    "n_inactive",
    "n_texts",
    "mean_score",
    "score",
    "threshold",
    "cluster",
    "n_clusters",
    "design_effect",
)
GROUP_COLUMNS = ("model", "dataset")


def wilson_bounds(shares: np.ndarray, n: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of each share at its (possibly fractional, effective) count ``n``."""
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p, n = np.asarray(shares, dtype=np.float64), np.asarray(n, dtype=np.float64)
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def design_effects(inactive: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, int]:
    """Kish's design effect of each head's share (columns of the (texts, heads) 0/1 array
    ``inactive``) under the clusters of the texts (one code per text), and the number of clusters.
    NaN where the share is 0 or 1, or where there is one cluster (no between-cluster variance to
    estimate); 1 where every text is its own cluster."""
    n = inactive.shape[0]
    codes, index = np.unique(clusters, return_inverse=True)
    n_clusters = len(codes)
    if n_clusters == n:
        return np.ones(inactive.shape[1]), n_clusters
    share = inactive.mean(axis=0)
    sizes = np.bincount(index, minlength=n_clusters).astype(np.float64)
    counts = np.zeros((n_clusters, inactive.shape[1]))
    np.add.at(counts, index, inactive)
    residual = counts - sizes[:, None] * share[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        cluster_var = n_clusters / (n_clusters - 1) * (residual**2).sum(axis=0) / n**2
        deff = cluster_var / (share * (1 - share) / n)
    deff[(share <= 0) | (share >= 1)] = np.nan
    return deff, n_clusters


def effective_texts(deff: np.ndarray, n_texts: int, n_clusters: int, confidence: float = 0.95) -> np.ndarray:
    """The number of independent texts each head's share is worth (module docstring): n / deff within
    [C, n] (C where deff is NaN: a share of 0 or 1), times (z / t_{C-1})^2 when the texts are clustered."""
    if n_clusters >= n_texts:
        return np.full(len(deff), float(n_texts))
    effective = np.where(np.isfinite(deff), n_texts / np.maximum(np.nan_to_num(deff, nan=1.0), 1.0), n_clusters)
    effective = np.clip(effective, n_clusters, n_texts)
    level = 1 - (1 - confidence) / 2
    return effective * (NormalDist().inv_cdf(level) / stdtrit(n_clusters - 1, level)) ** 2


def _one_group(
    rows: pd.DataFrame, score_id: str, threshold: float, cluster: str | None, confidence: float
) -> pd.DataFrame:
    """The head table of one model on one dataset at ``threshold``."""
    score = get_score(score_id)
    text_codes, texts = sequence_keys(rows).factorize()
    heads = pd.MultiIndex.from_arrays([rows["layer"].astype(int), rows["head"].astype(int)])
    head_codes, head_index = heads.factorize(sort=True)
    values = rows[score.id].to_numpy(dtype=np.float64)
    crossed = values > threshold if score.inactive_when == "above" else values < threshold
    n_texts = len(texts)
    inactive = np.zeros((n_texts, len(head_index)))
    seen = np.zeros((n_texts, len(head_index)), dtype=bool)
    inactive[text_codes, head_codes] = crossed
    seen[text_codes, head_codes] = True
    if not seen.all():
        raise ValueError(
            f"the score table lacks {int((~seen).sum())} (text, head) rows: every text needs a row for every head "
            "(read whole tables; a filter on layers is fine, one on rows within a text is not)"
        )
    column = cluster_column(rows, cluster)
    text_cluster = np.zeros(n_texts, dtype=np.int64)
    text_cluster[text_codes] = cluster_codes(rows, column)
    if len(np.unique(text_cluster)) < 2:  # one cluster: nothing to generalise over but its texts
        column, text_cluster = "sample_id", np.arange(n_texts)
    deff, n_clusters = design_effects(inactive, text_cluster)
    share = inactive.mean(axis=0)
    low, high = wilson_bounds(share, effective_texts(deff, n_texts, n_clusters, confidence), confidence)
    mean = np.bincount(head_codes, weights=values, minlength=len(head_index)) / np.bincount(head_codes)
    table = pd.DataFrame(
        {
            "layer": head_index.get_level_values(0).astype(np.int16),
            "head": head_index.get_level_values(1).astype(np.int16),
            "inactive_share": share,
            "low": low,
            "high": high,
            "n_inactive": inactive.sum(axis=0).astype(np.int64),
            "n_texts": n_texts,
            "mean_score": mean,
            "score": score.id,
            "threshold": float(threshold),
            "cluster": "text" if column == "sample_id" else column,
            "n_clusters": n_clusters,
            "design_effect": deff,
        }
    )
    ascending = score.inactive_when == "below"  # the lowest means of a "below" score are the most inactive
    return table.sort_values(["inactive_share", "mean_score"], ascending=[False, ascending], kind="stable")


def inactive_heads(
    scores: pd.DataFrame,
    score: str,
    *,
    share: float | None = None,
    threshold: float | None = None,
    cluster: str | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Which heads ``score`` calls inactive on the texts of ``scores`` (score tables as
    :func:`headstats.read_scores` or :func:`headstats.score_texts` return them), and on what share of
    the texts: one row per (model, dataset, layer, head), most often inactive first.

    Give ``share`` (a fraction of heads: the threshold that zeroes that share of the pooled (text,
    layer, head) rows of each model on each dataset, as a sweep calibrates it) or ``threshold`` (one
    value for every table). Columns: the input's ``model`` and ``dataset``, then ``layer``, ``head``,
    ``inactive_share`` (the share of texts on which the head is inactive, 0 to 1) with its interval over
    texts ``low, high`` (at ``confidence``; Wilson, at an effective number of texts where the texts
    come in clusters: see the module docstring), ``n_inactive`` of ``n_texts``, the head's ``mean_score``,
    the ``score`` and the ``threshold`` applied, and the ``cluster`` unit with ``n_clusters`` and the
    estimated ``design_effect`` (NaN where the share is 0 or 1).
    """
    sid = get_score(score).id
    if get_score(sid).is_random:
        raise ValueError("the random score calls heads inactive by chance, not by what they do: choose another score")
    if (share is None) == (threshold is None):
        raise ValueError("give either share= (a fraction of heads, e.g. 0.1) or threshold= (a score value), not both")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, not {confidence}")
    if threshold is not None and not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, not {threshold!r}")
    missing = [c for c in ("sample_id", "layer", "head", sid) if c not in scores.columns]
    if missing:
        raise ValueError(
            f"the score table has no {', '.join(missing)} column(s): give score rows as headstats.read_scores or "
            f"headstats.score_texts return them, with {sid!r} among their scores"
        )
    if len(scores) == 0:
        raise ValueError("the score table is empty: no texts to count inactive heads on")
    keys = [c for c in GROUP_COLUMNS if c in scores.columns]
    groups = scores.groupby(keys, sort=True, observed=True) if keys else [((), scores)]
    tables = []
    for key, rows in groups:
        tau = threshold if threshold is not None else float(thresholds_for_fractions(rows, sid, [share])[0])
        table = _one_group(rows, sid, tau, cluster, confidence)
        for name, value in zip(keys, key if isinstance(key, tuple) else (key,), strict=True):
            table.insert(keys.index(name), name, value)
        tables.append(table)
    return pd.concat(tables, ignore_index=True)


__all__ = ["COLUMNS", "design_effects", "effective_texts", "inactive_heads", "wilson_bounds"]
