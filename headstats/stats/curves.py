"""Accuracy-vs-%-heads-zeroed curves: the "within 1 point" readings and curve areas
(docs/statistics.md#within-one-point).

A curve is a set of points (realised % of heads zeroed, accuracy %), read as the piecewise-linear
curve through them sorted by realised %. Functions take plain sequences so they serve the
published curves and headstats' own results alike.

Three readings of "within 1 point" (:func:`within_one_point`, ``reading=``):

- ``"first"`` (default): x of the *first downward* crossing of ``baseline - drop``. A curve that
  later climbs back above the line is flagged ``non_monotone``: the first drop is where the claim
  stops holding, whether the recovery is noise or a real effect;
- a curve that never drops below the line within the tested range is *censored*: its value is
  "at least the largest realised % tested" (``censored=True``), never 0. Tables and rankings treat
  it as a lower bound;
- ``"study"``: the study's rule, x of the *last* crossing in either direction, 0 if none (used only
  to reproduce the paper's numbers).

:func:`within_one_point_monotone` reads the first drop of the curve's non-increasing (isotonic) fit,
a steadier reading of curves that run flat near the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Reading = Literal["first", "study"]
READINGS: tuple[str, ...] = ("first", "study")


@dataclass(frozen=True)
class Crossing:
    """One reading of a curve. ``crosses``: the curve meets ``baseline - drop``; ``censored``: it
    never does, and ``value`` is the largest realised % tested (a lower bound; the ``study``
    reading gives 0 instead and never censors); ``non_monotone``: after its first drop the curve
    climbs back above the line."""

    value: float
    crosses: bool
    censored: bool = False
    non_monotone: bool = False


def _sorted(realised: Sequence[float], accuracy: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(realised, dtype=float)
    y = np.asarray(accuracy, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("a curve needs as many realised fractions as accuracies")
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def _crossings(x: np.ndarray, y: np.ndarray, level: float) -> list[float]:
    """Every x where the piecewise-linear curve meets ``level``, ascending: a point lying exactly
    on the level (as in the study's notebook) and every segment whose ends lie strictly on opposite
    sides of it."""
    found = [float(x[0])] if y[0] == level else []
    for i in range(len(x) - 1):
        y1, y2 = y[i] - level, y[i + 1] - level
        if y1 * y2 < 0:
            found.append(float(x[i] + (level - y[i]) * (x[i + 1] - x[i]) / (y[i + 1] - y[i])))
        if y2 == 0:
            found.append(float(x[i + 1]))
    return found


def within_one_point(
    realised: Sequence[float],
    accuracy: Sequence[float],
    baseline: float,
    drop: float = 1.0,
    *,
    reading: Reading = "first",
) -> Crossing:
    """How far (realised % zeroed) the curve stays within ``drop`` points of ``baseline``.

    ``reading="first"``: x of the first point where the curve reaches ``baseline - drop`` from above
    (the first x if the curve starts at or below the line); ``non_monotone`` when a later point lies
    above the line again; censored at the largest realised % when it never reaches the line.
    ``reading="study"``: x of the last crossing in either direction, 0 if none.
    Curves of fewer than two points never cross (censored at their one point under ``first``).
    """
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {', '.join(READINGS)}, not {reading!r}")
    x, y = _sorted(realised, accuracy)
    level = baseline - drop
    if reading == "study":
        found = _crossings(x, y, level) if len(x) >= 2 else []
        return Crossing(found[-1], True) if found else Crossing(0.0, False)
    if len(x) == 0:
        return Crossing(float("nan"), False, censored=True)
    if len(x) < 2:
        return Crossing(float(x[0]), False, censored=True)
    below = np.flatnonzero(y <= level)
    if below.size == 0:
        return Crossing(float(x[-1]), False, censored=True)
    j = int(below[0])
    value = float(x[0])
    if j > 0:  # the segment (j - 1, j) goes from above the line to on or below it
        value = float(x[j - 1] + (level - y[j - 1]) * (x[j] - x[j - 1]) / (y[j] - y[j - 1]))
    return Crossing(value, True, censored=False, non_monotone=bool((y[j + 1 :] > level).any()))


def within_one_point_monotone(
    realised: Sequence[float], accuracy: Sequence[float], baseline: float, drop: float = 1.0
) -> Crossing:
    """The first-drop reading of the curve's monotone fit: accuracy regressed on realised % under the
    constraint that it never rises (isotonic regression, pool-adjacent-violators, equal weights since
    every point answers the same questions), then read as :func:`within_one_point` against the
    observed ``baseline``. A point that grazes the line and a later point that climbs back are pooled
    instead of deciding the reading alone, so the reading moves less with a few answers. The fit never
    rises, so it is never ``non_monotone``; censored as :func:`within_one_point` when the fit stays
    above the line."""
    x, y = _sorted(realised, accuracy)
    if len(x) < 2:
        return within_one_point(x, y, baseline, drop)
    from scipy.optimize import isotonic_regression

    fitted = isotonic_regression(y, increasing=False).x
    return within_one_point(x, fitted, baseline, drop)


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
