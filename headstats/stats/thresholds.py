"""Thresholds for target fractions of zeroed heads (docs/concepts.md#zeroing).

A score's threshold for a target fraction p is a quantile of that score pooled over every
(sequence, layer, head) row of the un-intervened model's score table on a calibration dataset:
the p-quantile for scores whose inactive heads lie *below* the threshold, the (1 - p)-quantile for
those whose inactive heads lie *above* it (``awft``, ``awft_ln``). The ``random`` score needs no
calibration: its threshold is p itself.

Quantile definition: the study's (github.com/psandovalsegura/inactive-heads, ``create-CDF.py``):
the empirical CDF through the points (x_(k), k/N) of the N sorted values, inverted by linear
interpolation and clamped to [x_(1), x_(N)]. That is Hyndman & Fan's type 4, numpy's
``method="interpolated_inverted_cdf"``. So p = 0 gives the minimum (the maximum for "above" scores),
and the strict inequality of :func:`headstats.engine.scores.is_inactive` then selects nothing; the fraction
selected on the calibration data itself is within 1/N of p.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd

from headstats.engine import scores as S

QUANTILE_METHOD = "interpolated_inverted_cdf"


def _check_fractions(ps: Sequence[float] | np.ndarray) -> np.ndarray:
    values = []
    for p in np.atleast_1d(np.asarray(ps, dtype=object)):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(float(p)):
            raise ValueError(f"target fractions must be finite numbers in [0, 1], not {p!r}")
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"target fraction {float(p)} is outside [0, 1]: give a fraction (0.1 = 10% of heads)")
        values.append(float(p))
    return np.asarray(values, dtype=np.float64)


def pooled_scores(score_table: pd.DataFrame | None, score_id: str) -> np.ndarray:
    """The values of ``score_id`` over every (sequence, layer, head) row, checked, as float64."""
    sid = S.get_score(score_id).id
    if score_table is None:
        raise ValueError(
            f"calibrating a threshold for {sid!r} needs a score table of the un-intervened model "
            "(headstats.read_scores(DIR) or headstats.score_sequences(model, sequences, scores=[...]))"
        )
    if not isinstance(score_table, pd.DataFrame):
        raise ValueError(f"score_table must be a pandas DataFrame of score rows, not {type(score_table).__name__}")
    if sid not in score_table.columns:
        have = [c for c in score_table.columns if c in S.SCORES] or ["none"]
        raise ValueError(
            f"the score table has no {sid!r} column (it has scores: {', '.join(have)}); "
            f"collect the calibration data with {sid!r} among its scores"
        )
    if len(score_table) == 0:
        raise ValueError(f"the score table is empty: no rows to calibrate {sid!r} on")
    for col in ("model", "dataset"):
        # Pooling over several models would give one threshold that fits none of them.
        if col in score_table.columns and score_table[col].nunique() > 1:
            raise ValueError(
                f"the score table mixes {score_table[col].nunique()} values of {col!r} "
                f"({', '.join(map(str, sorted(score_table[col].unique())[:5]))}); select one before calibrating"
            )
    values = score_table[sid].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"the {sid!r} column holds {int(bad.sum())} non-finite values; the score table is corrupt")
    return values


def thresholds_for_fractions(
    score_table: pd.DataFrame | None, score_id: str, ps: Sequence[float] | np.ndarray
) -> np.ndarray:
    """Thresholds (float64) that zero the fractions ``ps`` of the pooled rows, in the order given.

    One sort serves every target. ``random`` returns ``ps`` (no table needed).
    """
    score = S.get_score(score_id)
    if score.is_random:
        return _check_fractions(ps).copy()
    return thresholds_from_values(pooled_scores(score_table, score.id), score.id, ps)


def thresholds_from_values(values: np.ndarray, score_id: str, ps: Sequence[float] | np.ndarray) -> np.ndarray:
    """The calibration rule itself, on an array of pooled values (float64 for the study's numbers):
    the p-quantile (type 4) for "below" scores, the (1 - p)-quantile for "above" scores, ``ps``
    itself for ``random``. Every threshold in headstats (sweeps, overlap, large tables) comes from here."""
    score = S.get_score(score_id)
    fractions = _check_fractions(ps)
    if score.is_random:
        return fractions.copy()
    levels = fractions if score.inactive_when == "below" else 1.0 - fractions
    return np.quantile(values, levels, method=QUANTILE_METHOD).astype(np.float64)


def threshold_for_fraction(score_table: pd.DataFrame | None, score_id: str, p: float) -> float:
    """The threshold of ``score_id`` that zeroes the fraction ``p`` of the calibration rows."""
    return float(thresholds_for_fractions(score_table, score_id, [p])[0])
