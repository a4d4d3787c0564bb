"""Accuracy-vs-%-heads-zeroed curves: the study's "within 1 point" number and curve areas (SPEC §3).

A curve is a set of points (realised % of heads zeroed, accuracy %). Functions take plain
sequences so they serve the published curves and headstats' own results alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Crossing:
    """Where a curve last meets ``baseline - drop``. ``value`` is 0 when it never does."""

    value: float
    crosses: bool


def _sorted(realised: Sequence[float], accuracy: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(realised, dtype=float)
    y = np.asarray(accuracy, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("a curve needs as many realised fractions as accuracies")
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def within_one_point(
    realised: Sequence[float], accuracy: Sequence[float], baseline: float, drop: float = 1.0
) -> Crossing:
    """The study's number: x of the *last* crossing of ``accuracy = baseline - drop`` on the
    piecewise-linear curve through the points sorted by realised %, 0 if it never crosses.

    A point lying exactly on the level counts as a crossing (as in the study's notebook); a
    segment crosses when its ends lie strictly on opposite sides of the level. Curves of fewer
    than two points never cross.
    """
    x, y = _sorted(realised, accuracy)
    level = baseline - drop
    last: float | None = None
    if len(x) < 2:
        return Crossing(0.0, False)
    if y[0] == level:
        last = float(x[0])
    for i in range(len(x) - 1):
        y1, y2 = y[i] - level, y[i + 1] - level
        if y1 * y2 < 0:
            last = float(x[i] + (level - y[i]) * (x[i + 1] - x[i]) / (y[i + 1] - y[i]))
        if y2 == 0:
            last = float(x[i + 1])
    return Crossing(0.0, False) if last is None else Crossing(last, True)


def normalised_auc(realised: Sequence[float], accuracy: Sequence[float]) -> float:
    """The study's ranking area: trapezoid area divided by the curve's own x-range.

    Curves over different ranges are thereby compared as mean heights, which rewards a curve that
    stops early; kept for paper figures. NaN for a zero-width curve (the study then used 0).
    """
    x, y = _sorted(realised, accuracy)
    width = x.max() - x.min() if len(x) else 0.0
    if width == 0:
        return float("nan")
    return float(np.trapezoid(y, x) / width)


def grid_auc(realised: Sequence[float], accuracy: Sequence[float], upper: float, points: int = 61) -> float:
    """Mean accuracy over a fixed grid of realised % in [0, ``upper``] (linear interpolation).

    Every curve is judged over the same range, so areas are comparable. The curve must cover the
    range: NaN if its points do not reach from 0 to ``upper`` (choose ``upper`` as the common range
    of the curves being compared, e.g. :func:`common_upper`).
    """
    x, y = _sorted(realised, accuracy)
    if upper <= 0:
        raise ValueError("upper must be positive")
    if len(x) == 0 or x.min() > 0 or x.max() < upper:
        return float("nan")
    grid = np.linspace(0.0, upper, points)
    return float(np.trapezoid(np.interp(grid, x, y), grid) / upper)


def common_upper(curves: Sequence[Sequence[float]]) -> float:
    """The largest realised % that every curve reaches: the range a fixed-grid AUC can use."""
    maxima = [float(np.max(c)) for c in curves if len(c)]
    if not maxima:
        raise ValueError("no curves given")
    return min(maxima)
