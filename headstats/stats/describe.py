"""Descriptive tables of score tables (pandas in, pandas out): the quartiles and means a report shows
beside its distribution figures.

- :func:`score_quartiles`: per dataset and model, sequences scored and each score's quartiles, pooled
  over (sequence, layer, head);
- :func:`score_means`: per model, sequences, layers and heads, and each score's mean;
- :func:`head_means`: each score's mean per (layer, head);
- :func:`ecdf_points`: a distribution's empirical CDF as a fixed number of quantiles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd


def score_quartiles(scores: pd.DataFrame, score_ids: Callable[[pd.DataFrame], Sequence[str]]) -> pd.DataFrame:
    """One row per (dataset, model): ``sequences`` and ``<score>_q1``, ``<score>_median``, ``<score>_q3``
    of each score ``score_ids(rows)`` names for that dataset and model's rows."""
    rows = []
    for (dataset, model), here in scores.groupby(["dataset", "model"], sort=True):
        row = {"dataset": dataset, "model": model, "sequences": int(here["sample_id"].nunique())}
        for sid in score_ids(here):
            q1, med, q3 = here[sid].quantile([0.25, 0.5, 0.75])
            row |= {f"{sid}_q1": q1, f"{sid}_median": med, f"{sid}_q3": q3}
        rows.append(row)
    return pd.DataFrame(rows)


def score_means(rows: pd.DataFrame, score_ids: Sequence[str]) -> pd.DataFrame:
    """Per model (the index): sequences, layers and heads scored, and the mean of each score."""
    counts = rows.groupby("model").agg(
        sequences=("sample_id", "nunique"), layers=("layer", "nunique"), heads=("head", "nunique")
    )
    return counts.join(rows.groupby("model")[list(score_ids)].mean())


def head_means(rows: pd.DataFrame, score_ids: Sequence[str]) -> pd.DataFrame:
    """Each score's mean per (layer, head) (the index) over the sequences of ``rows``."""
    return rows.groupby(["layer", "head"], observed=True)[list(score_ids)].mean()


def ecdf_points(values: np.ndarray, quantiles: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of the finite ``values`` as ``quantiles`` points (x, level): their quantiles at
    evenly spaced levels from 0 to 1, so a table of millions of rows draws as fast as a small one."""
    values = np.asarray(values, dtype=np.float64)
    levels = np.linspace(0.0, 1.0, quantiles)
    return np.quantile(values[np.isfinite(values)], levels), levels
