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

A score can also be the same on every *text* for each head (:func:`constant_across_texts`): a
first-token score (``ftvvn``) when every text of a dataset starts with the same token (PIQA's
prompts). It still separates heads, so it stays in the tests; but resampling texts cannot move it,
so a distance between two models on which it is constant has no sampling error: it is exact, and a
bootstrap interval of it has zero width, which is no interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstats.engine.scores import get_score, tied_within_layer
from headstats.stats.tables import model_rows, scores_of

__all__ = ["constant_across_texts", "constant_scores", "reads_first_token_only", "texts_constant"]


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


def constant_across_texts(
    scores: pd.DataFrame,
    model: str,
    dataset: str,
    score_ids: Sequence[str] | None = None,
    *,
    rtol: float = 1e-5,
) -> list[str]:
    """The scores of ``model`` on ``dataset`` that take the same value on every text for each head
    (within ``rtol`` of the head's size: a batch's round-off is no variation), in the order of
    ``score_ids``; a dataset of one text has nothing to vary over and gives none."""
    rows = model_rows(scores, model)
    rows = rows[rows["dataset"].astype(str) == dataset] if "dataset" in rows.columns else rows
    sids = scores_of(rows, model, score_ids)
    if rows.empty or rows["sample_id"].nunique() < 2 or not sids:
        return []
    grouped = rows.groupby(["layer", "head"], observed=True, sort=False)[sids]
    high, low = grouped.max(), grouped.min()
    size = pd.concat([high.abs(), low.abs()]).groupby(level=[0, 1]).max()
    same = ((high - low) <= rtol * size).all()
    return [sid for sid in sids if bool(same[sid])]


def reads_first_token_only(score_id: str) -> bool:
    """Whether a score reads only the first token of a text (``ftvvn`` and its normalised forms): it
    is the same on every text that starts with the same token."""
    score = get_score(score_id)
    if score.ratio is not None:
        return all(reads_first_token_only(s) for s in score.dependencies())
    return score.pool == "first"


def texts_constant(
    scores: pd.DataFrame, models: Sequence[str], datasets: Sequence[str], score_ids: Sequence[str] | None = None
) -> pd.DataFrame:
    """Every (model, dataset, score) of ``models`` whose score is the same on every text for each head
    (:func:`constant_across_texts`), with ``first_token``: whether the score reads the first token only
    (:func:`reads_first_token_only`), the usual cause (every text of the dataset starts alike)."""
    rows = []
    present = set(scores["model"].astype(str))
    for model in (m for m in models if m in present):
        have = [s for s in scores_of(model_rows(scores, model), model, None) if score_ids is None or s in score_ids]
        for dataset in datasets:
            for sid in constant_across_texts(scores, model, dataset, have):
                rows.append(
                    {"model": model, "dataset": dataset, "score": sid, "first_token": reads_first_token_only(sid)}
                )
    return pd.DataFrame(rows, columns=["model", "dataset", "score", "first_token"])
