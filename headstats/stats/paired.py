"""Statistics of per-question results: accuracy intervals and paired comparisons (docs/statistics.md).

An intervention and its baseline answer the *same* questions, so their difference is judged
question by question: a question answered correctly by both (or by neither) says nothing about the
difference. That pairing is why intervention results are stored per question.

- :func:`wilson_interval`, :func:`clopper_pearson_interval`: a 95% interval of one accuracy.
- :func:`mcnemar_exact`: the exact McNemar test (a two-sided binomial test on the discordant pairs);
  with ``clusters``, the exact randomisation test that flips whole clusters, which is McNemar's when
  every question is its own cluster.
- :func:`paired_bootstrap`: a percentile bootstrap interval of the mean paired difference,
  resampling questions, or whole clusters of questions (MMLU subjects share their few-shot prefix).
- :func:`drop_bound`: one-sided bounds of the paired accuracy *drop* (baseline - intervened) from
  Tango's score interval, the basis of "certified within 1 point" (docs/statistics.md#certified). A bootstrap of a pair
  of identical answer vectors is exactly [0, 0] and would certify a drop of 0 from 5 questions; the
  score interval stays honest when few or no answers changed: with no changed answer among n
  questions its upper bound is z² / (n + z²) (11.9% for n = 20, 0.054% for n = 5,000). With
  ``clusters`` the bound is taken at the effective number of questions, n over the
  :func:`design_effect` of the changed answers (Korn & Graubard's rule for proportions from
  clustered samples): questions that change together count as fewer independent ones.
- :func:`minimum_detectable_drop`: the drop a one-sided McNemar-type test at level 5% detects with
  80% power for n questions (Connor's sample-size formula, solved for the drop).

All functions take plain arrays of 0/1 (or booleans) and return fractions, not percentages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike


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


def _cluster_codes(clusters: ArrayLike | None, n: int) -> tuple[np.ndarray, int] | None:
    """(code per question, number of clusters), or None when every question is its own cluster."""
    if clusters is None:
        return None
    labels = np.asarray(clusters)
    if labels.shape != (n,):
        raise ValueError(f"clusters needs one label per question: {labels.shape} vs ({n},)")
    codes, uniques = pd.factorize(labels)
    return None if len(uniques) == n else (codes, len(uniques))


def mcnemar_exact(a: ArrayLike, b: ArrayLike, clusters: ArrayLike | None = None) -> McNemar:
    """Exact McNemar test: under H0 (a and b equally accurate) each discordant
    question is a fair coin; the p-value is the two-sided binomial tail of ``min(only_a, only_b)``
    among ``only_a + only_b`` flips at 1/2.

    With ``clusters`` (a label per question), the coins are whole clusters: under H0 each cluster's
    summed difference ``s_c`` is as likely to be ``-s_c``, and the p-value is the exact probability,
    over the 2^k sign flips, that ``|sum of ±s_c|`` reaches the observed ``|sum of s_c|``. Questions
    sharing a few-shot prefix change together, and counting them as independent coins overstates
    the evidence. With singleton clusters this is the test above."""
    x, y = _paired(a, b)
    only_a = int(np.count_nonzero(x & ~y))
    only_b = int(np.count_nonzero(y & ~x))
    if only_a + only_b == 0:
        return McNemar(only_a, only_b, 1.0)
    grouped = _cluster_codes(clusters, len(x))
    if grouped is None:  # statsmodels' mcnemar(exact=True): twice the lower binomial tail, at most 1
        tail = sum(math.comb(only_a + only_b, i) for i in range(min(only_a, only_b) + 1))
        return McNemar(only_a, only_b, min(1.0, 2 * tail / 2 ** (only_a + only_b)))
    codes, k = grouped
    sums = np.bincount(codes, weights=x.astype(np.int64) - y.astype(np.int64), minlength=k).astype(np.int64)
    return McNemar(only_a, only_b, _sign_flip_pvalue(sums))


def _sign_flip_pvalue(sums: np.ndarray) -> float:
    """P(|sum of ±s_c| >= |sum of s_c|) over independent fair signs, exactly: clusters with the same
    |s_c| = v contribute v * (2 Binomial(m, 1/2) - m), and those few distributions are convolved on
    the integer support."""
    observed = abs(int(sums.sum()))
    values, counts = np.unique(np.abs(sums[sums != 0]), return_counts=True)
    pmf = np.ones(1)  # over the support -total..total, offset by total
    for v, m in zip(values.tolist(), counts.tolist(), strict=True):
        kernel = np.zeros(2 * v * m + 1)
        kernel[:: 2 * v] = _fair_coin_pmf(m)
        pmf = np.convolve(pmf, kernel)
    total = (len(pmf) - 1) // 2
    support = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, pmf[support >= observed].sum()))


def _fair_coin_pmf(m: int) -> np.ndarray:
    """P(k heads in m fair flips), k = 0..m: exact integers, each divided once (a float per k)."""
    return np.array([math.comb(m, k) / 2**m for k in range(m + 1)])


def design_effect(baseline: ArrayLike, intervened: ArrayLike, clusters: ArrayLike | None) -> float:
    """How much the clustering of questions inflates the variance of the mean paired difference
    (Kish's design effect): the cluster-robust variance over the independent-questions one, each with
    its small-sample factor. At least 1: the bound is never made narrower than for independent
    questions; and 1 where it cannot be estimated (every question its own cluster, a single cluster,
    or no changed answer, where Korn & Graubard keep the nominal n)."""
    x, y = _paired(baseline, intervened)
    grouped = _cluster_codes(clusters, len(x))
    n = len(x)
    if grouped is None or grouped[1] < 2:
        return 1.0
    codes, k = grouped
    resid = x.astype(float) - y.astype(float)
    resid -= resid.mean()
    within = n / (n - 1) * float(resid @ resid)
    if within <= 0:
        return 1.0
    between = k / (k - 1) * float(np.square(np.bincount(codes, weights=resid, minlength=k)).sum())
    return max(1.0, between / within)


def paired_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    clusters: ArrayLike | None = None,
) -> Interval:
    """Percentile bootstrap interval of mean(b - a), resampling questions with replacement, or whole
    clusters when ``clusters`` gives each question's cluster label (the resampled mean is then the
    ratio of the drawn clusters' summed differences to their summed sizes).

    Per question the difference takes at most three values (-1, 0, 1), and the mean of a resample
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
    rng = np.random.default_rng(seed)
    alpha = 1 - confidence
    grouped = _cluster_codes(clusters, len(diff))
    if grouped is None:  # every question its own cluster
        values, counts = np.unique(diff, return_counts=True)
        n = len(diff)
        draws = rng.multinomial(n, counts / n, size=n_resamples)
        means = draws @ values.astype(float) / n
    else:
        codes, k = grouped
        sums = np.bincount(codes, weights=diff, minlength=k)
        sizes = np.bincount(codes, minlength=k).astype(float)
        means = np.empty(n_resamples)
        step = max(1, (1 << 22) // k)
        for s in range(0, n_resamples, step):
            draws = rng.multinomial(k, np.full(k, 1.0 / k), size=min(step, n_resamples - s)).astype(float)
            means[s : s + len(draws)] = (draws @ sums) / (draws @ sizes)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(diff.mean()), float(low), float(high), confidence)


@dataclass(frozen=True)
class DropBound:
    """The paired drop ``mean(baseline) - mean(intervened)`` with one-sided bounds at ``confidence``
    (each of ``lower`` and ``upper`` holds with that confidence on its own)."""

    drop: float
    lower: float
    upper: float
    lost: int  # questions right in the baseline, wrong when intervened
    gained: int  # wrong in the baseline, right when intervened
    n: int
    confidence: float
    method: str = "Tango score"
    design_effect: float = 1.0  # the bound is taken at n / design_effect questions


def _tango_statistic(lost: float, gained: float, n: float, delta: float) -> float:
    """Tango's score statistic for H0: drop = delta (Tango 1998; Fagerland, Lydersen & Laake 2013):
    the difference of discordant counts against its variance under the constrained maximum
    likelihood estimate of the gain probability."""
    a = 2.0 * n
    b = -lost - gained + (2.0 * n - lost + gained) * delta
    c = -gained * delta * (1.0 - delta)
    p_gain = (math.sqrt(max(b * b - 4.0 * a * c, 0.0)) - b) / (2.0 * a)
    var = n * (2.0 * p_gain + delta * (1.0 - delta))
    numerator = lost - gained - n * delta
    if var <= 0:
        return math.copysign(math.inf, numerator) if numerator else 0.0
    return numerator / math.sqrt(var)


def drop_bound(
    baseline: ArrayLike, intervened: ArrayLike, confidence: float = 0.95, clusters: ArrayLike | None = None
) -> DropBound:
    """One-sided ``confidence`` bounds of the paired accuracy drop, from Tango's score interval.

    The bound is the drop at which the score statistic reaches the one-sided critical value: it
    uses the discordant counts and n only, needs no resampling, and stays away from 0 when nothing
    changed (no changed answer among n questions: upper bound z² / (n + z²)). No library offers a
    score interval for paired proportions, hence the few lines here. ``clusters`` (a label per
    question) takes the bound at the effective number of questions (:func:`design_effect`).
    """
    x, y = _paired(baseline, intervened)
    n = len(x)
    if n == 0:
        raise ValueError("no paired questions: the intervention and the baseline share no question")
    _check_confidence(confidence)
    lost = int(np.count_nonzero(x & ~y))
    gained = int(np.count_nonzero(~x & y))
    return drop_bound_from_counts(lost, gained, n, confidence, design_effect(x, y, clusters))


def drop_bound_from_counts(
    lost: int, gained: int, n: int, confidence: float = 0.95, design_effect: float = 1.0
) -> DropBound:
    """:func:`drop_bound` from the discordant counts and the number of paired questions; with a
    ``design_effect`` above 1 the counts and n are divided by it (the same shares of lost and gained
    answers among fewer independent questions)."""
    if n <= 0 or lost < 0 or gained < 0 or lost + gained > n:
        raise ValueError(f"need 0 <= lost + gained <= n with n >= 1: lost={lost}, gained={gained}, n={n}")
    if not design_effect >= 1:
        raise ValueError(f"a design effect is at least 1 (independent questions), not {design_effect}")
    _check_confidence(confidence)
    z = NormalDist().inv_cdf(confidence)
    drop = (lost - gained) / n
    eff_lost, eff_gained, eff_n = lost / design_effect, gained / design_effect, n / design_effect
    eps = 1e-12

    def statistic(d: float) -> float:
        return _tango_statistic(eff_lost, eff_gained, eff_n, d)

    def solve(target: float, lo: float, hi: float, edge: float) -> float:
        if (statistic(lo) - target) * (statistic(hi) - target) > 0:
            return edge  # the statistic never reaches the critical value inside (-1, 1)
        return _bisect(lambda d: statistic(d) - target, lo, hi)

    upper = solve(-z, drop, 1.0 - eps, 1.0)
    lower = solve(z, -1.0 + eps, drop, -1.0)
    return DropBound(
        drop, min(lower, drop), max(upper, drop), lost, gained, n, confidence, design_effect=float(design_effect)
    )


def questions_to_certify(
    lost: int = 0,
    gained: int = 0,
    n: int = 1,
    drop: float = 1.0,
    confidence: float = 0.95,
    *,
    most: int = 10_000_000,
) -> float:
    """How many paired questions a run needs for the one-sided upper bound of the drop
    (:func:`drop_bound_from_counts`) to reach ``drop`` accuracy points (1 = one point), if the shares
    of lost and gained answers are ``lost / n`` and ``gained / n``: after a run, a figure for sizing
    the next one, not a result (with few questions the observed shares are themselves uncertain);
    with the defaults (no changed answer) the fewest questions with which "within ``drop`` points"
    can be certified at all, z² (100 - drop) / drop rounded up. ``inf`` when the shares' drop is
    ``drop`` or more (no number of questions certifies it) or when more than ``most`` would be needed.
    """
    if n <= 0 or lost < 0 or gained < 0 or lost + gained > n:
        raise ValueError(f"need 0 <= lost + gained <= n with n >= 1: lost={lost}, gained={gained}, n={n}")
    p_lost, p_gained = lost / n, gained / n
    drop = drop / 100  # the bounds are fractions of the questions
    if p_lost - p_gained >= drop:
        return math.inf

    def certifies(m: int) -> bool:
        return drop_bound_from_counts(p_lost * m, p_gained * m, m, confidence).upper <= drop  # type: ignore[arg-type]

    if not certifies(most):
        return math.inf
    lo, hi = 0, most  # certifies(hi); the bound shrinks as questions are added at fixed shares
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if certifies(mid) else (mid, hi)
    return float(hi)


def _bisect(f, lo: float, hi: float, xtol: float = 1e-12) -> float:
    """The root of ``f`` in [lo, hi], where ``f`` changes sign, to ``xtol`` (a few dozen halvings:
    the bounds' root finding needs no scipy.optimize import)."""
    f_lo = f(lo)
    if f_lo == 0:
        return lo
    while hi - lo > xtol:
        mid = 0.5 * (lo + hi)
        f_mid = f(mid)
        if f_mid == 0:
            return mid
        if (f_mid < 0) == (f_lo < 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def minimum_detectable_drop(
    n: float, discordance: float | None = None, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest paired drop (fraction) a one-sided test at level ``alpha`` detects with
    probability ``power`` among ``n`` questions (Connor 1987: n = (z_a sqrt(psi) + z_b sqrt(psi -
    d^2))^2 / d^2, solved for d). ``discordance`` psi is the share of questions whose answer changes;
    it is at least the drop itself, and None (unknown) takes psi = d, the most favourable case
    (every changed answer a loss): real curves, with gains too, need larger drops."""
    if n < 1:
        raise ValueError(f"a detectable drop needs at least one question (n = {n})")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("alpha and power must lie strictly between 0 and 1")
    za, zb = NormalDist().inv_cdf(1 - alpha), NormalDist().inv_cdf(power)
    psi0 = 0.0 if discordance is None or not np.isfinite(discordance) else float(discordance)

    def gap(d: float) -> float:
        psi = max(psi0, d)
        return math.sqrt(n) * d - za * math.sqrt(psi) - zb * math.sqrt(max(psi - d * d, 0.0))

    if gap(1.0) < 0:
        return float("nan")  # not even a drop of 100 points is detectable with these n
    return _bisect(gap, 1e-12, 1.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion: good coverage at small n and near 0 or 1, where the
    normal (Wald) interval collapses. The closed form (statsmodels' ``method="wilson"``, which the
    tests compare against), so that reading an accuracy does not import scipy.stats."""
    _check_counts(successes, n)
    _check_confidence(confidence)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson ("exact") interval (scipy's ``binomtest(...).proportion_ci``): never below
    nominal coverage, so wider."""
    _check_counts(successes, n)
    _check_confidence(confidence)
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def _check_counts(successes: int, n: int) -> None:
    if n <= 0:
        raise ValueError(f"an accuracy interval needs at least one question (n = {n})")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n]: {successes} of {n}")
