"""The distance rule of a seed study (headstats.stats.seed_margin): its distances against an
independent computation, its bounds against the t formula, the decomposition, and its error rates
at the margin by simulation, beside the contrast rule's (headstats.stats.seeds), which fails them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.stats import wasserstein_distance

from headstats.io.tasks import sample_order, select_sample
from headstats.stats import seed_margin as sm
from headstats.stats import seed_power as sp
from tests.montecarlo import binomial_band

ROOT = Path(__file__).resolve().parents[1]
MARGIN, ALPHA = 0.12, 0.05


def synthetic_cell(n_seeds: int = 12, texts: int = 48, heads: int = 16, *, seed: int = 0, spread: float = 0.06):
    """A cell like a study's: a skewed base (per-head levels and text noise), a systematic field (a few
    heads moved) and seeds scattered about it (per-head shifts), in units where the base's IQR is ~1."""
    rng = np.random.default_rng(seed)
    level = rng.lognormal(0.0, 0.5, heads)
    base = level[None, :] * rng.lognormal(0.0, 0.3, (texts, heads))
    iqr = float(np.subtract(*np.quantile(base, [0.75, 0.25])))
    systematic = np.zeros(heads)
    systematic[: heads // 4] = 0.3 * iqr
    seeds = spread * iqr * rng.standard_normal((n_seeds, heads)) * 3
    ends = (
        base[None]
        + systematic[None, None, :]
        + seeds[:, None, :]
        + 0.02 * iqr * rng.standard_normal((n_seeds, texts, heads))
    )
    return sm.Cell(base, ends, np.arange(texts), sm.interquartile_range(base.ravel()))


# --- the arithmetic ------------------------------------------------------------------------------------


def test_the_distances_are_scipys_w1_on_the_texts_and_under_text_weights():
    cell = synthetic_cell(n_seeds=3)
    got = sm.base_distances(cell)
    want = [wasserstein_distance(cell.base.ravel(), e.ravel()) / cell.iqr for e in cell.ends]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    weights = sm._text_weights(cell.clusters, 4, np.random.default_rng(3))
    boot = sm.base_distances(cell, weights)
    per_value = np.repeat(weights, cell.base.shape[1], axis=1)
    for r in range(4):
        for s in range(3):
            want = wasserstein_distance(cell.base.ravel(), cell.ends[s].ravel(), per_value[r], per_value[r])
            assert boot[r, s] == pytest.approx(want / cell.iqr, rel=1e-12)


def test_a_missing_value_is_left_out_of_its_side_only():
    cell = synthetic_cell(n_seeds=2)
    cell.ends[0][0, 0] = np.nan
    end = cell.ends[0].ravel()
    want = wasserstein_distance(cell.base.ravel(), end[np.isfinite(end)]) / cell.iqr
    assert sm.base_distances(cell)[0] == pytest.approx(want, rel=1e-12)


def test_the_bounds_and_p_values_are_the_one_sided_t_test_of_the_mean_distance():
    cell = synthetic_cell()
    est = sm.estimate(cell, n_text_boot=50, seed=1)
    d = sm.base_distances(cell)
    assert est.mean == pytest.approx(d.mean())
    assert est.se_seeds == pytest.approx(d.std(ddof=1) / math.sqrt(d.size))
    assert est.skew_m3 == pytest.approx(sps.skew(d, bias=False) * d.std(ddof=1) ** 3, rel=1e-9)
    assert 0 < est.se_texts < est.se_seeds * 5
    # without skew, Hall's t is the plain t: mean -/+ t(n - 1) se
    plain = sm.Estimate(est.n_seeds, est.mean, est.sd_seeds, est.se_seeds, est.se_texts, 0.0)
    t = sps.t.ppf(0.95, d.size - 1)
    assert plain.bounds(0.05) == pytest.approx((est.mean - t * est.se, est.mean + t * est.se))
    assert plain.p_below(0.2) == pytest.approx(sps.t.cdf((est.mean - 0.2) / est.se, d.size - 1))
    # a bound lies where its test reaches alpha, so a verdict and its bound agree
    low, high = est.bounds(0.05)
    assert est.p_below(high) == pytest.approx(0.05) and est.p_above(low) == pytest.approx(0.05)
    assert (est.p_below(high + 1e-6) < 0.05) and (est.p_above(low - 1e-6) < 0.05)


def test_a_right_skewed_spread_of_seeds_raises_both_bounds():
    """Seeds of which a few land far away: a low mean comes with a low spread, so the upper bound
    (the one an equivalence rests on) moves up, away from the plain t's."""
    d = np.array([0.05, 0.055, 0.06, 0.062, 0.065, 0.07, 0.072, 0.075, 0.08, 0.14, 0.15, 0.16])
    n = d.size
    skewed = sm.Estimate(n, d.mean(), d.std(ddof=1), d.std(ddof=1) / math.sqrt(n), 0.0,
                         n / ((n - 1) * (n - 2)) * ((d - d.mean()) ** 3).sum())  # fmt: skip
    plain = sm.Estimate(n, d.mean(), d.std(ddof=1), d.std(ddof=1) / math.sqrt(n), 0.0, 0.0)
    assert skewed.bounds(0.05)[1] > plain.bounds(0.05)[1] and skewed.bounds(0.05)[0] > plain.bounds(0.05)[0]


def test_the_systematic_displacement_is_the_w1_to_the_seeds_common_end_when_they_agree():
    """With every seed at one stage end there is no spread to correct: the displacement is W1 from
    the base to that end, and its interval is that point."""
    cell = synthetic_cell(n_seeds=1)
    same = cell.with_ends(np.repeat(cell.ends, 5, axis=0))
    value, low, high = sm.systematic_displacement(same)
    want = wasserstein_distance(cell.base.ravel(), cell.ends[0].ravel()) / cell.iqr
    assert value == pytest.approx(want, rel=1e-9)
    assert low == pytest.approx(want, rel=1e-9) and high == pytest.approx(want, rel=1e-9)


def test_the_correction_shrinks_the_displacement_the_spread_alone_makes_and_keeps_a_real_one():
    """Seeds scattered about the base itself: the uncorrected distance to their barycentre is about
    the spread over sqrt(n) and the corrected one well below it. Seeds scattered about a shift of
    every value by c: both recover c (W1 of a shift is the shift)."""
    rng = np.random.default_rng(5)
    cell = synthetic_cell()
    heads = cell.base.shape[1]

    def both(shift: float) -> tuple[float, float]:
        ends = cell.base[None] + shift * cell.iqr + 0.2 * cell.iqr * rng.standard_normal((8, 1, heads))
        barycentre = np.mean([np.sort(e.ravel()) for e in ends], axis=0)
        naive = np.abs(barycentre - np.sort(cell.base.ravel())).mean() / cell.iqr
        return sm.systematic_displacement(cell.with_ends(ends), n_boot=10)[0], naive

    at_zero = np.array([both(0.0) for _ in range(20)]).mean(axis=0)
    assert at_zero[0] < 0.75 * at_zero[1]
    shifted = np.array([both(0.5) for _ in range(20)]).mean(axis=0)
    assert shifted == pytest.approx([0.5, 0.5], abs=0.03)


def test_the_verdicts_and_the_holm_family():
    cells = {("sft", "a", "x"): synthetic_cell(seed=1), ("sft", "b", "x"): synthetic_cell(seed=2, spread=0.0)}
    far = synthetic_cell(seed=3)
    cells[("dpo", "a", "x")] = far.with_ends(far.ends + 2 * far.iqr)
    table = sm.decide_cells(cells, margin=MARGIN, n_text_boot=20)
    assert list(table.columns) == sm.RESULT_COLUMNS
    assert table.loc[table["stage"] == "dpo", "verdict"].item() == sm.MOVED_BEYOND_MARGIN
    sft = table[table["stage"] == "sft"]
    np.testing.assert_allclose(sft["p_beyond_holm"], np.minimum(1, np.maximum.accumulate(
        np.sort(sft["p_beyond"]) * np.array([2, 1]))[np.argsort(np.argsort(sft["p_beyond"]))]))  # fmt: skip
    sentences = sm.stage_sentences(table)
    assert dict(zip(sentences["stage"], sentences["sentence"], strict=True))["dpo"] == "fails"


def test_a_cell_of_too_few_seeds_is_tested_by_nothing():
    table = sm.decide_cells({("sft", "a", "x"): synthetic_cell(n_seeds=3)}, margin=MARGIN, min_seeds=4)
    row = table.iloc[0]
    assert row["verdict"] == sm.UNDETERMINED and np.isnan(row["p_beyond"]) and np.isnan(row["upper"])


# --- the rule at its margin, by simulation ------------------------------------------------------------


def _rates(planted: sp.Planted, move: float, reps: int, old_rule: bool = False) -> dict[str, float]:
    return sp.rule_rates(planted, n_seeds=12, margin=MARGIN, move=move, reps=reps, n_text_boot=30, old_rule=old_rule)


def test_at_the_margin_the_distance_rule_keeps_its_level_and_the_contrast_rule_does_not():
    """Seeds whose stage ends lie, in expectation, exactly one margin from the base: "equivalent"
    and "moved beyond" each at most alpha (up to Monte Carlo error); the contrast rule (mean base ->
    end minus mean seed -> seed distance against the margin) says "equivalent" nearly always."""
    planted = sp.Planted.from_cell(synthetic_cell())
    move = planted.move_for(MARGIN, draws=300)
    theta, mc = planted.quantity(move=move, draws=2000, seed=9)
    assert theta == pytest.approx(MARGIN, abs=4 * mc + 0.002)
    reps = 400
    rates = _rates(planted, move, reps, old_rule=True)
    high = binomial_band(reps, ALPHA)[1] / reps
    print(f"at theta = margin ({theta:.4f}): {rates}; band for alpha: <= {high:.3f}")
    assert rates["equivalent"] <= high
    assert rates["beyond"] <= high
    assert rates["old_equivalent"] > 0.5  # the contrast rule's bias towards "equivalent"


def test_the_rule_decides_at_no_move_and_at_twice_the_margin():
    planted = sp.Planted.from_cell(synthetic_cell(spread=0.02))
    assert planted.quantity(move=0.0, draws=200)[0] < MARGIN / 2
    assert _rates(planted, 0.0, 100)["equivalent"] > 0.8
    far = planted.move_for(2 * MARGIN, draws=200)
    assert _rates(planted, far, 100)["beyond"] > 0.8


def test_the_estimate_is_unbiased_with_no_systematic_move():
    """theta with no systematic move is the seeds' spread seen from the base: positive, and the
    rule's estimate (the seeds' mean distance) averages it, where the contrast rule's difference of
    distances is negative."""
    planted = sp.Planted.from_cell(synthetic_cell())
    theta, mc = planted.quantity(move=0.0, draws=3000, seed=4)
    rng = np.random.default_rng(8)
    estimates, contrasts = [], []
    for _ in range(300):
        cell = planted.draw(12, rng, move=0.0)
        d = sm.base_distances(cell)
        estimates.append(d.mean())
        contrasts.append(d.mean() - sm.seed_spread(cell))
    sd = np.std(estimates, ddof=1) / math.sqrt(len(estimates))
    assert theta > 0
    assert np.mean(estimates) == pytest.approx(theta, abs=4 * math.hypot(sd, mc))
    assert np.mean(contrasts) < -0.1 * theta


# --- the sample of a fresh confirmation -------------------------------------------------------------------


@pytest.mark.parametrize("strata", [[None] * 50, [i % 7 for i in range(50)]])
def test_a_skipped_sample_is_the_next_part_of_the_seeded_order(strata):
    first = set(select_sample(strata, 10, sample="random", seed=48))
    fresh = select_sample(strata, 12, sample="random", seed=48, skip=10)
    assert first.isdisjoint(fresh)
    assert fresh == sorted(sample_order(strata, 48)[10:22])
    assert select_sample(strata, 5, sample="first", skip=3) == [3, 4, 5, 6, 7]


# --- the first confirmation's own seeds (committed tables) ---------------------------------------------


@pytest.fixture(scope="module")
def confirmation_cells():
    from headstats.jobs.finetune.study import load_seed_study, seed_cells

    study = load_seed_study(ROOT / "analyses" / "finetuning_confirm.toml")
    return seed_cells(study, ROOT / study.results)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("cell", "spread"),
    [(("sft", "piqa", "ahon_ln"), 0.5), (("dpo", "piqa", "awft"), 0.5), (("grpo", "wikipedia", "awft"), 0.5)],
)
def test_planted_from_the_seeds_own_tables_the_rule_keeps_its_level(confirmation_cells, cell, spread):
    """Systematic displacements and seed spreads taken from the 12 seeds of the first confirmation
    (thinned to 24 heads, a cheaper cell of the same kind), the displacement scaled so that theta
    equals the margin: the distance rule's "equivalent" and "moved beyond" stay within alpha, the
    contrast rule says "equivalent" far above it; and power at no move and at twice the margin."""
    planted = sp.Planted.from_cell(confirmation_cells[cell]).thinned(24)
    move = planted.move_for(MARGIN, spread=spread, draws=200)
    reps = 300
    rates = sp.rule_rates(
        planted, n_seeds=12, margin=MARGIN, move=move, spread=spread, reps=reps, n_text_boot=20, old_rule=True
    )
    high = binomial_band(reps, ALPHA)[1] / reps
    at_zero = sp.rule_rates(planted, n_seeds=12, margin=MARGIN, move=0.0, spread=spread, reps=100, n_text_boot=20)
    twice = planted.move_for(2 * MARGIN, spread=spread, draws=200)
    at_twice = sp.rule_rates(planted, n_seeds=12, margin=MARGIN, move=twice, spread=spread, reps=100, n_text_boot=20)
    print(f"{'/'.join(cell)} at theta = margin: {rates} (band {high:.3f}); no move: {at_zero}; 2x margin: {at_twice}")
    assert rates["equivalent"] <= high and rates["beyond"] <= high
    assert rates["old_equivalent"] > 3 * ALPHA
    assert at_twice["beyond"] > 0.8


@pytest.mark.integration
def test_the_fresh_confirmation_scores_texts_the_first_never_used():
    from headstats.jobs.collect import collection_sample
    from headstats.jobs.finetune.study import load_seed_study

    first = load_seed_study(ROOT / "analyses" / "finetuning_confirm.toml")
    fresh = load_seed_study(ROOT / "analyses" / "finetuning_confirm2.toml")
    assert fresh.rule == "distance" and first.rule == "contrast"
    assert set(fresh.design.seeds).isdisjoint(first.design.seeds)
    scored = pd.concat(
        [pd.read_parquet(p, columns=["sample_id"]).assign(dataset=p.parent.name.split("=")[1])
         for p in (ROOT / first.results / "seed-0").glob("model=*-base/dataset=*/*.parquet")]
    )  # fmt: skip
    for dataset in first.datasets:
        _, old = collection_sample(dataset, first.collect)
        _, new = collection_sample(dataset, fresh.collect)
        assert old == set(scored.loc[scored["dataset"] == dataset, "sample_id"])
        assert len(new) == fresh.design.texts and old.isdisjoint(new)
