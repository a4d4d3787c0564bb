"""Statistics of per-question results: accuracy intervals and paired comparisons (SPEC §3, §6).

An intervention and its baseline answer the *same* questions, so their difference is judged
question by question: a question answered correctly by both (or by neither) says nothing about the
difference. That pairing is why intervention results are stored per question.

- :func:`wilson_interval`, :func:`clopper_pearson_interval`: a 95% interval of one accuracy.
- :func:`mcnemar_exact`: the exact McNemar test (a two-sided binomial test on the discordant pairs).
- :func:`paired_bootstrap`: a percentile bootstrap interval of the mean paired difference,
  resampling questions (the unit that was sampled from the benchmark).

All functions take plain arrays of 0/1 (or booleans) and return fractions, not percentages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as _st


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test of two paired binary outcomes ``a`` and ``b``."""

    only_a: int  # questions right under a and wrong under b
    only_b: int  # questions right under b and wrong under a
    pvalue: float  # two-sided; 1.0 when there are no discordant pairs


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval at ``confidence``."""

    estimate: float
    low: float
    high: float
    confidence: float


def _binary(values: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of per-question outcomes, got shape {arr.shape}")
    if arr.dtype != bool:
        if not np.all(np.isin(arr, (0, 1))):
            raise ValueError(f"{name} must hold 0/1 (or booleans) per question")
        arr = arr.astype(bool)
    return arr


def _paired(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x, y = _binary(a, "a"), _binary(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes need one entry per question in both arrays: {x.shape} vs {y.shape}")
    return x, y


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, not {confidence}")


def mcnemar_exact(a: ArrayLike, b: ArrayLike) -> McNemar:
    """Exact McNemar test: under H0 (a and b equally accurate) each discordant question is a fair
    coin, so the p-value is the two-sided binomial tail of ``min(only_a, only_b)`` among
    ``only_a + only_b`` flips at 1/2 (doubled, capped at 1; the binomial at 1/2 is symmetric, so
    doubling equals summing the outcomes no more likely than the observed one)."""
    x, y = _paired(a, b)
    only_a = int(np.count_nonzero(x & ~y))
    only_b = int(np.count_nonzero(y & ~x))
    n = only_a + only_b
    if n == 0:
        return McNemar(only_a, only_b, 1.0)
    pvalue = min(1.0, 2.0 * float(_st.binom.cdf(min(only_a, only_b), n, 0.5)))
    return McNemar(only_a, only_b, pvalue)


def paired_bootstrap(
    a: ArrayLike, b: ArrayLike, *, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> Interval:
    """Percentile bootstrap interval of mean(b - a), resampling questions with replacement.

    The per-question difference takes at most three values (-1, 0, 1), and the mean of a resample
    depends only on how many of each it drew: a multinomial draw of those counts has exactly the
    distribution of resampling indices, at O(1) memory per resample instead of O(questions).
    """
    x, y = _paired(a, b)
    if len(x) == 0:
        raise ValueError("no paired questions: the intervention and the baseline share no question")
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, not {n_resamples}")
    diff = y.astype(np.int8) - x.astype(np.int8)
    values, counts = np.unique(diff, return_counts=True)
    n = len(diff)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, counts / n, size=n_resamples)
    means = draws @ values.astype(float) / n
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(diff.mean()), float(low), float(high), confidence)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion: good coverage at small n and near 0 or 1, where the
    normal (Wald) interval collapses."""
    _check_counts(successes, n)
    _check_confidence(confidence)
    z = float(_st.norm.ppf(1 - (1 - confidence) / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson ("exact") interval from beta quantiles: never below nominal coverage, so wider."""
    _check_counts(successes, n)
    _check_confidence(confidence)
    alpha = 1 - confidence
    low = 0.0 if successes == 0 else float(_st.beta.ppf(alpha / 2, successes, n - successes + 1))
    high = 1.0 if successes == n else float(_st.beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    return low, high


def _check_counts(successes: int, n: int) -> None:
    if n <= 0:
        raise ValueError(f"an accuracy interval needs at least one question (n = {n})")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n]: {successes} of {n}")
