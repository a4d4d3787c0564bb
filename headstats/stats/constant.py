"""Scores that cannot tell a model's heads apart, found in its score table.

A score that takes the same value for every head of a layer, on every sequence, ranks layers and
not heads; its layer-normalised form is then identically 1. That happens by construction when a
layer's query heads share one KV head (multi-query attention, e.g. Gemma-3 270M) and the score
reads only the value vectors (``avvn``, ``ftvvn`` and their ``_ln`` forms): the rule is
:func:`headstats.engine.scores.tied_within_layer`, the same one that warns before zeroing. Reports
leave such a score out of a model's tests, counts and figures and state the reason once: its
distances are 0 or measure layers, its per-head tests cannot find a head, and counting it inflates
a denominator.

The check reads the values themselves (so it also catches a constant score of a user's own), and
names the architectural cause when the table's ``kv_head`` column shows one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstats.engine.scores import tied_within_layer
from headstats.stats.distances import model_rows, scores_of

__all__ = ["constant_scores"]


def _within_layer_spread(rows: pd.DataFrame, sids: list[str]) -> tuple[pd.Series, pd.Series]:
    """Per score: the largest range over the heads of one (sequence, layer), and the largest
    absolute value of those groups (the scale the range is judged against)."""
    keys = [k for k in ("dataset", "sample_id", "layer") if k in rows.columns]
    grouped = rows.groupby(keys, observed=True, sort=False)[sids]
    high, low = grouped.max(), grouped.min()
    spread = (high - low).max()
    scale = pd.concat([high.abs().max(), low.abs().max()], axis=1).max(axis=1)
    return spread, scale


def constant_scores(
    scores: pd.DataFrame,
    model: str,
    score_ids: Sequence[str] | None = None,
    *,
    dataset: str | None = None,
    rtol: float = 1e-5,
) -> pd.Series:
    """The scores of ``model`` that take the same value for every head of a layer on every sequence
    (on ``dataset``, or every dataset of the model), each with the reason a report states: a Series
    indexed by score id (name ``score``), values the reason, empty when every score separates
    heads. Values count as equal within ``rtol`` of their size (fp32 ratios such as x / mean(x, x)
    are 1 only to round-off). A model with one head per layer is not checked: there every score
    trivially agrees across a layer's heads and the heads are the layers."""
    rows = model_rows(scores, model)
    if dataset is not None and "dataset" in rows.columns:
        rows = rows[rows["dataset"].astype(str) == dataset]
        if rows.empty:
            raise ValueError(f"model {model!r} has no score rows on dataset {dataset!r}")
    sids = scores_of(rows, model, score_ids)
    heads_per_layer = int(rows.groupby("layer")["head"].nunique().max())
    empty = pd.Series([], index=pd.Index([], name="score", dtype=object), name="reason", dtype=object)
    if heads_per_layer <= 1 or not sids:
        return empty
    kv_per_layer = int(rows.groupby("layer")["kv_head"].nunique().max()) if "kv_head" in rows.columns else None
    by_design = set(tied_within_layer(sids, heads_per_layer, kv_per_layer)) if kv_per_layer is not None else set()
    spread, scale = _within_layer_spread(rows, sids)
    reasons = {}
    for sid in sids:
        if not spread[sid] <= rtol * scale[sid]:
            continue
        values = rows[sid].to_numpy(dtype=np.float64)
        values = values[np.isfinite(values)]
        one_value = values.max() - values.min() <= rtol * np.abs(values).max()
        what = f"is {np.median(values):.6g} for every head" if one_value else "is the same for every head of a layer"
        cause = (
            f"{model} has one KV head per layer and {sid} reads only the value vectors, which all of a layer's "
            f"heads share, so it {what}"
            if sid in by_design
            else f"{sid} {what} on every sequence of {model}"
        )
        reasons[sid] = cause + (
            ": it does not vary at all and is left out of this model's tests, counts and figures"
            if one_value
            else ": it ranks layers, not heads, and is left out of this model's tests, counts and figures"
        )
    if not reasons:
        return empty
    return pd.Series(reasons, name="reason").rename_axis("score")
