"""Learning evidence on the stats layer (:mod:`headstats.stats.learning`): the bootstrap every learning
metric and its paired change use, checked against direct computation and by simulation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from headstats.stats.learning import learning_verdicts, mean_interval, paired_change, proportion


def test_mean_interval_is_the_weighted_mean_with_the_normal_width_at_large_n():
    rng = np.random.default_rng(1)
    values, weights = rng.normal(2.0, 1.0, 400), rng.integers(1, 5, 400)
    got = mean_interval(values, weights, n_boot=4000)
    mean = np.average(values, weights=weights)
    assert got["value"] == pytest.approx(mean, rel=1e-12) and got["n"] == 400
    # The weighted mean's standard error (ratio estimator): the bootstrap interval's half-width is near 1.96 of it.
    se = math.sqrt(np.sum(weights**2 * (values - mean) ** 2)) / weights.sum()
    assert (got["ci_high"] - got["ci_low"]) / 2 == pytest.approx(1.96 * se, rel=0.1)
    assert got["ci_low"] < mean < got["ci_high"]
    assert mean_interval([])["n"] == 0 and math.isnan(mean_interval([])["value"])


def test_mean_interval_covers_the_true_mean_at_its_level():
    """Two-sided: the interval covers neither far too rarely nor far too often (200 samples of 60)."""
    rng = np.random.default_rng(7)
    covered = [
        (m := mean_interval(rng.exponential(1.0, 60), seed=i))["ci_low"] <= 1.0 <= m["ci_high"] for i in range(200)
    ]
    assert 0.86 <= np.mean(covered) <= 0.99


def test_paired_change_is_the_interval_of_the_differences_and_cancels_example_difficulty():
    rng = np.random.default_rng(3)
    difficulty = rng.normal(0, 5, 80)  # shared by both ends: a paired interval does not see it
    before, after = difficulty + rng.normal(0, 0.1, 80), difficulty + 0.3 + rng.normal(0, 0.1, 80)
    change = paired_change(before, after, seed=4)
    same = mean_interval(after - before, seed=4, n_boot=4000)
    assert change == {"change": same["value"], "ci_low": same["ci_low"], "ci_high": same["ci_high"], "n": 80}
    assert 0.25 < change["ci_low"] < 0.3 < change["ci_high"] < 0.35
    with pytest.raises(ValueError, match="same examples"):
        paired_change(before, after[:-1])


def test_proportion_is_the_wilson_interval():
    from statsmodels.stats.proportion import proportion_confint

    got = proportion(7, 20)
    low, high = proportion_confint(7, 20, alpha=0.05, method="wilson")
    assert got == pytest.approx({"value": 0.35, "ci_low": low, "ci_high": high, "n": 20})
    assert proportion(0, 0)["n"] == 0


def test_learning_verdicts_read_metrics_json():
    """A stage learned when its paired interval excludes 0 in the training direction (losses down)."""
    losses = np.linspace(2.0, 3.0, 30)
    start = {"answer_loss": mean_interval(losses), "per_example": {"answer_loss": list(losses)}}
    end = {"answer_loss": mean_interval(losses - 0.5), "per_example": {"answer_loss": list(losses - 0.5)}}
    same = {"answer_loss": start["answer_loss"], "per_example": start["per_example"]}
    metrics = {"sft": {"checkpoints": {"0": start, "40": end}}, "dpo": {"checkpoints": {"0": start, "30": same}}}
    table = learning_verdicts(metrics)
    assert isinstance(table, pd.DataFrame) and list(table["stage"]) == ["sft", "dpo"]
    sft, dpo = table.iloc[0], table.iloc[1]
    assert sft["learned"] and sft["change"] == pytest.approx(-0.5) and sft["end_step"] == 40
    assert not dpo["learned"] and dpo["change"] == pytest.approx(0.0)
