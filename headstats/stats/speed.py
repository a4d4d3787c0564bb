"""The speed-up of one model over another from paired, interleaved timing rounds.

Each round times both models on the same work, one after the other (the order alternating between
rounds), so a slow spell of a shared machine falls on both. The speed-up of a round is the ratio of
the reference's seconds to the candidate's; the speed-up reported is the geometric mean of the
rounds' ratios, with a t interval computed on the log ratios and exponentiated (ratios multiply, so
their logarithms are what averages). An identical copy timed the same way is the control: its
interval should contain 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats


@dataclass(frozen=True)
class Speedup:
    """Geometric-mean speed-up of a candidate over a reference, with its interval."""

    speedup: float
    low: float
    high: float
    rounds: int
    confidence: float

    @property
    def half_width(self) -> float:
        """The interval's larger relative distance from the estimate (0.01 = within 1%)."""
        if not math.isfinite(self.low) or not math.isfinite(self.high):
            return math.inf
        return max(self.high / self.speedup - 1.0, 1.0 - self.low / self.speedup)

    @property
    def contains_one(self) -> bool:
        return self.low <= 1.0 <= self.high

    def as_dict(self) -> dict:
        return {
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
            "half_width": self.half_width,
            "rounds": self.rounds,
            "confidence": self.confidence,
        }


def paired_speedup(reference_seconds: ArrayLike, candidate_seconds: ArrayLike, confidence: float = 0.95) -> Speedup:
    """Speed-up of the candidate over the reference from paired per-round times (seconds of the same
    work in the same round): geometric mean of ``reference / candidate`` with a two-sided t interval
    on the log ratios. Fewer than 2 rounds give an unbounded interval."""
    ref = np.asarray(reference_seconds, dtype=float)
    cand = np.asarray(candidate_seconds, dtype=float)
    if ref.shape != cand.shape or ref.ndim != 1:
        raise ValueError(f"paired times must be two 1-d arrays of one length, got {ref.shape} and {cand.shape}")
    if (ref <= 0).any() or (cand <= 0).any():
        raise ValueError("times must be positive seconds")
    n = len(ref)
    if n == 0:
        raise ValueError("no rounds to compare")
    logs = np.log(ref) - np.log(cand)
    centre = float(logs.mean())
    if n < 2:
        return Speedup(math.exp(centre), 0.0, math.inf, n, confidence)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n))
    return Speedup(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, confidence)


def against_ceiling(rows: pd.DataFrame) -> pd.DataFrame:
    """Paired speed rows (``speedup``, ``low``, ``high``, ``ceiling``) with the share of the ceiling's
    gain each reaches: (speed-up - 1) / (ceiling - 1), NaN where the ceiling promises no gain (an
    identical copy); and whether the interval lies wholly above 1 (``faster``) or contains it."""
    gain = rows["ceiling"] - 1.0
    reached = np.where(gain > 1e-9, (rows["speedup"] - 1.0) / gain.where(gain > 1e-9, 1.0), np.nan)
    return rows.assign(
        share_of_ceiling_gain=reached,
        faster=rows["low"] > 1.0,
        contains_one=(rows["low"] <= 1.0) & (rows["high"] >= 1.0),
    )
