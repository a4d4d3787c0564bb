"""Paired statistics against scipy / statsmodels and against a naive bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from montecarlo import binomial_band
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from headstats.stats.paired import (
    clopper_pearson_interval,
    design_effect,
    drop_bound,
    drop_bound_from_counts,
    mcnemar_exact,
    paired_bootstrap,
    questions_to_certify,
    wilson_interval,
)


@pytest.mark.parametrize("n, p_flip, seed", [(40, 0.1, 0), (200, 0.05, 1), (1000, 0.02, 2), (15, 0.4, 3), (7, 0.0, 4)])
def test_mcnemar_exact_matches_statsmodels_and_scipy(n: int, p_flip: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.random(n) < 0.6
    b = np.where(rng.random(n) < p_flip, ~a, a)
    got = mcnemar_exact(a, b)
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    assert (got.only_a, got.only_b) == (table[0][1], table[1][0])
    assert got.pvalue == pytest.approx(sm_mcnemar(table, exact=True).pvalue, rel=1e-12)
    discordant = got.only_a + got.only_b
    if discordant:
        assert got.pvalue == pytest.approx(binomtest(got.only_b, discordant, 0.5).pvalue, rel=1e-9)
    else:
        assert got.pvalue == 1.0


def test_mcnemar_accepts_0_1_integers_and_refuses_bad_input() -> None:
    assert mcnemar_exact([1, 1, 0, 1], [0, 0, 0, 1]) == mcnemar_exact([True, True, False, True], [False] * 3 + [True])
    with pytest.raises(ValueError, match="one entry per question"):
        mcnemar_exact([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact([1, 2], [1, 0])


def test_paired_bootstrap_agrees_with_naive_index_resampling() -> None:
    rng = np.random.default_rng(5)
    n = 150
    a = rng.random(n) < 0.55
    b = np.where(rng.random(n) < 0.15, ~a, a)
    got = paired_bootstrap(a, b, n_resamples=40_000, seed=1)
    diff = b.astype(float) - a.astype(float)
    idx = np.random.default_rng(2).integers(0, n, size=(40_000, n))
    naive = diff[idx].mean(axis=1)
    low, high = np.quantile(naive, [0.025, 0.975])
    assert got.estimate == pytest.approx(diff.mean())
    # Both are Monte Carlo estimates of the same quantiles; they agree to well within one question (1/150).
    assert abs(got.low - low) < 0.4 / n and abs(got.high - high) < 0.4 / n
    assert got.low <= got.estimate <= got.high and got.confidence == 0.95
    same = paired_bootstrap(a, a)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="no paired questions"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap(a, b, confidence=1.0)


@pytest.mark.parametrize("k, n", [(0, 10), (3, 10), (10, 10), (17, 40), (512, 1000), (1, 2)])
def test_accuracy_intervals_match_statsmodels(k: int, n: int) -> None:
    for confidence in (0.95, 0.9):
        alpha = 1 - confidence
        assert wilson_interval(k, n, confidence) == pytest.approx(
            proportion_confint(k, n, alpha=alpha, method="wilson"), abs=1e-12
        )
        assert clopper_pearson_interval(k, n, confidence) == pytest.approx(
            proportion_confint(k, n, alpha=alpha, method="beta"), abs=1e-12
        )
    lo_w, hi_w = wilson_interval(k, n)
    lo_c, hi_c = clopper_pearson_interval(k, n)
    assert 0 <= lo_c <= lo_w <= k / n <= hi_w <= hi_c <= 1 or k in (0, n)


def test_accuracy_intervals_refuse_empty_or_impossible_counts() -> None:
    with pytest.raises(ValueError, match="at least one question"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match=r"\[0, n\]"):
        clopper_pearson_interval(5, 4)


def test_cluster_bootstrap_resamples_whole_clusters() -> None:
    """Changed answers concentrated in 2 of 10 subjects: resampling subjects sees that the drop hangs
    on two clusters and gives a wider interval than resampling questions; one question per cluster
    is the question bootstrap itself."""
    n = 200
    a = np.ones(n, dtype=bool)
    b = a.copy()
    b[:16] = False  # 16 lost answers, all in subjects 0 and 1
    subjects = np.repeat(np.arange(10), 20)
    by_question = paired_bootstrap(a, b, n_resamples=4000, seed=3)
    by_subject = paired_bootstrap(a, b, n_resamples=4000, seed=3, clusters=subjects)
    assert by_subject.estimate == by_question.estimate == pytest.approx(-0.08)
    assert by_subject.high - by_subject.low > 1.5 * (by_question.high - by_question.low)
    own = paired_bootstrap(a, b, n_resamples=4000, seed=3, clusters=np.arange(n))
    assert (own.low, own.high) == (by_question.low, by_question.high)
    with pytest.raises(ValueError, match="one label per question"):
        paired_bootstrap(a, b, clusters=subjects[:-1])


@pytest.mark.parametrize("seed", range(4))
def test_the_clustered_mcnemar_is_the_exact_sign_flip_test_and_mcnemars_for_singletons(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = 48, 9
    a = rng.random(n) < 0.6
    b = np.where(rng.random(n) < 0.25, ~a, a)
    clusters = rng.integers(0, k, n)
    # Every question its own cluster: McNemar's exact test.
    assert mcnemar_exact(a, b, clusters=np.arange(n)).pvalue == pytest.approx(mcnemar_exact(a, b).pvalue, rel=1e-9)
    # Whole clusters: all 2^k sign flips of the clusters' summed differences, enumerated.
    sums = np.bincount(clusters, weights=a.astype(int) - b.astype(int), minlength=k)
    signs = np.array(np.meshgrid(*[[-1, 1]] * k)).reshape(k, -1).T
    expected = np.mean(np.abs(signs @ sums) >= abs(sums.sum()) - 1e-9)
    got = mcnemar_exact(a, b, clusters=clusters)
    assert got.pvalue == pytest.approx(expected, rel=1e-9)
    assert (got.only_a, got.only_b) == (mcnemar_exact(a, b).only_a, mcnemar_exact(a, b).only_b)


def test_losses_in_a_few_clusters_are_weaker_evidence_than_spread_ones() -> None:
    """16 lost answers among 200 questions in 10 subjects: spread over 8 subjects, McNemar's test and
    the clustered one agree that the drop is real; piled into 2 subjects, the clustered test sees
    two coins (half of the four sign patterns are as extreme), and the bound widens with them."""
    a = np.ones(200, dtype=bool)
    subjects = np.repeat(np.arange(10), 20)
    piled, spread = a.copy(), a.copy()
    piled[[*range(8), *range(20, 28)]] = False
    spread[[20 * s + i for s in range(8) for i in range(2)]] = False
    assert mcnemar_exact(a, piled).pvalue == mcnemar_exact(a, spread).pvalue < 1e-4
    assert mcnemar_exact(a, spread, clusters=subjects).pvalue == pytest.approx(2 / 2**8)
    assert mcnemar_exact(a, piled, clusters=subjects).pvalue == pytest.approx(0.5)
    assert design_effect(a, spread, subjects) == 1.0  # an even spread: no inflation
    assert design_effect(a, piled, subjects) > 5
    assert drop_bound(a, piled, clusters=subjects).upper > drop_bound(a, piled).upper + 0.03
    assert drop_bound(a, spread, clusters=subjects).upper == drop_bound(a, spread).upper


def test_the_design_effect_is_the_cluster_robust_variance_over_the_plain_one() -> None:
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    n = 300
    clusters = rng.integers(0, 25, n)
    # Answers that change together: a cluster-level change rate, then per-question changes.
    rate = rng.beta(0.5, 4, 25)[clusters]
    a = rng.random(n) < 0.7
    b = np.where(rng.random(n) < rate, ~a, a)
    d = a.astype(float) - b.astype(float)
    ols = sm.OLS(d, np.ones((n, 1)))
    ratio = ols.fit(cov_type="cluster", cov_kwds={"groups": clusters}).bse[0] ** 2 / ols.fit().bse[0] ** 2
    assert design_effect(a, b, clusters) == pytest.approx(max(1.0, ratio), rel=1e-9)
    assert design_effect(a, b, None) == design_effect(a, b, np.arange(n)) == design_effect(a, b, np.zeros(n)) == 1.0
    assert design_effect(a, a, clusters) == 1.0  # nothing changed: the nominal n is kept
    bound = drop_bound(a, b, clusters=clusters)
    scaled = drop_bound_from_counts(bound.lost, bound.gained, n, design_effect=bound.design_effect)
    assert (bound.lower, bound.upper) == (scaled.lower, scaled.upper)
    with pytest.raises(ValueError, match="at least 1"):
        drop_bound_from_counts(3, 1, 100, design_effect=0.5)


def test_the_clustered_drop_bound_covers_where_the_question_bound_does_not() -> None:
    """Clustered synthetic sweeps, MMLU-sized (57 subjects of 20 questions; each subject loses answers
    at its own rate, mean 2%, most none and a few many): the one-sided 95% upper bound taken at the
    effective n covers the true drop in 92% of the sweeps (a variance estimated from the few subjects
    that lose runs low, as for any cluster-robust estimate); the bound that treats the 1,140
    questions as independent covers 81%. The clustered bound is held to at least 90% and at most the
    top of the 99.9% binomial band of 95% over 400 sweeps (393): not needlessly wide."""
    rng = np.random.default_rng(11)
    k, size, sims = 57, 20, 400
    clusters = np.repeat(np.arange(k), size)
    covered_clustered = covered_plain = 0
    for _ in range(sims):
        rates = rng.beta(0.2, 9.8, k)  # mean 0.02, most subjects lose nothing, a few lose a lot
        a = np.ones(k * size, dtype=bool)
        b = rng.random(k * size) >= rates[clusters]
        truth = 0.02
        covered_clustered += drop_bound(a, b, clusters=clusters).upper >= truth
        covered_plain += drop_bound(a, b).upper >= truth
    assert 0.9 * sims <= covered_clustered <= binomial_band(sims, 0.95)[1], covered_clustered
    assert covered_plain / sims < 0.85


@pytest.mark.parametrize("lost, gained, n", [(0, 0, 20), (1, 1, 20), (2, 2, 20), (3, 2, 200), (10, 9, 1000)])
def test_questions_to_certify_is_the_first_n_whose_bound_at_the_observed_shares_reaches_the_drop(lost, gained, n):
    from statistics import NormalDist

    need = questions_to_certify(lost, gained, n, drop=1.0)
    m = int(need)
    pl, pg = lost / n, gained / n
    assert (
        drop_bound_from_counts(pl * m, pg * m, m).upper
        <= 0.01
        < drop_bound_from_counts(pl * (m - 1), pg * (m - 1), m - 1).upper
    )
    if lost == gained == 0:  # no changed answer among m: the upper bound is z^2 / (m + z^2)
        z = NormalDist().inv_cdf(0.95)
        assert m == int(np.ceil(z * z * (1 - 0.01) / 0.01))
    # Shares as observed, so the answer does not depend on how many questions showed them.
    assert questions_to_certify(10 * lost, 10 * gained, 10 * n, drop=1.0) == need


def test_questions_to_certify_is_infinite_when_the_observed_drop_reaches_the_tolerance() -> None:
    assert questions_to_certify(2, 0, 100, drop=2.0) == float("inf")  # an observed drop of 2 points
    assert questions_to_certify(3, 0, 100, drop=2.0) == float("inf")
    assert questions_to_certify(0, 0, 100, drop=2.0) < float("inf")
    with pytest.raises(ValueError, match="lost \\+ gained <= n"):
        questions_to_certify(5, 6, 10)
