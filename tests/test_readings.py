"""Curve readings and certification (docs/statistics.md#within-one-point): first drop with a non-monotone flag,
censored curves as lower bounds, the study's reading for the paper only, and a certification
bound that needs data."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from montecarlo import binomial_band

from headstats.stats import curve_bootstrap, ranking
from headstats.stats import curves as C
from headstats.stats.paired import drop_bound, drop_bound_from_counts, mcnemar_exact, minimum_detectable_drop
from headstats.stats.summary import summarize_curves, summarize_interventions


def test_dip_and_recover_gives_the_first_crossing_and_is_flagged() -> None:
    # baseline 50: drops to 48 at 10% (crossing at 5%), climbs back to 50 at 20%, falls to 45 at 30%.
    x, y = [0, 10, 20, 30], [50, 48, 50, 45]
    first = C.within_one_point(x, y, 50)
    assert first == C.Crossing(5.0, True, censored=False, non_monotone=True)
    study = C.within_one_point(x, y, 50, reading="study")
    assert study.value == pytest.approx(20 + 10 / 5)  # the last crossing, after the recovery
    monotone = C.within_one_point([0, 10, 20], [50, 49.5, 47], 50)
    assert monotone.value == pytest.approx(10 + 10 * 0.5 / 2.5) and not monotone.non_monotone


def test_a_curve_that_never_drops_is_censored_at_its_largest_realised_percent() -> None:
    c = C.within_one_point([0, 12.5, 26.5, 8.0], [50, 49.6, 49.2, 50.3], 50)
    assert (c.value, c.crosses, c.censored, c.non_monotone) == (26.5, False, True, False)
    assert C.within_one_point([0, 12.5, 26.5], [50, 49.6, 49.2], 50, reading="study") == C.Crossing(0.0, False)
    with pytest.raises(ValueError, match="reading must be one of"):
        C.within_one_point([0, 1], [50, 49], 50, reading="last")


def test_censored_values_are_lower_bounds_in_the_awft_vs_best_table() -> None:
    """PIQA's case (issue 10): awft never drops a point up to 26.5%, ahon_ln crosses at 12; with
    the study's 0 awft would lose, as a lower bound it wins and the table says so."""
    curves = pd.DataFrame(
        {
            "model": ["p"] * 3 + ["q"] * 3,
            "score": ["awft", "ahon_ln", "random"] * 2,
            "within_1pt": [26.5, 12.0, 3.0, 4.0, 12.0, 12.0],
            "censored": [True, False, False, False, False, True],
            "non_monotone": [False, True, False, False, False, False],
        }
    )
    table = ranking.compare_with_reference(curves).set_index("model")
    assert table.loc["p", "best_overall_score"] == "awft" and bool(table.loc["p", "awft_censored"])
    assert table.loc["p", "best_other_score"] == "ahon_ln"
    # q: ahon_ln and random tie at 12, random's is a lower bound, so it is the better one
    assert table.loc["q", "best_other_score"] == "random" and bool(table.loc["q", "best_other_censored"])
    assert bool(table.loc["Average", "awft_censored"]) and "lower bounds" in table.loc["Average", "order_note"]
    labels = ranking.within_one_point_labels(curves)
    assert labels.loc["p", "awft"] == "≥ 26.50" and labels.loc["p", "ahon_ln"] == "12.00*"


def test_a_curve_that_zeroes_no_head_has_no_reading_no_rank_and_does_not_shrink_the_common_range() -> None:
    """Gemma-3's avvn_ln (one KV head per layer): tied at 1, it zeroes nothing at any target. Read
    as a curve it would be censored at 0, rank first by its flat area and pull every other curve's
    common grid range down to 0 (all grid areas NaN)."""
    rng = np.random.default_rng(0)
    n = 400
    base = rng.random(n) < 0.6
    rows = []
    plan = {"baseline": [0.0], "ahon_ln": [0.1, 0.2], "awft": [0.1, 0.2], "avvn_ln": [0.1, 0.2]}
    for score, targets in plan.items():
        for target in targets:
            correct = base.copy()
            zeroed = 0 if score in ("baseline", "avvn_ln") else int(100 * target)
            if score == "awft":
                correct[: int(40 * target)] = False  # awft loses more than ahon_ln
            if score == "ahon_ln":
                correct[: int(10 * target)] = False
            rows.append(
                pd.DataFrame(
                    {
                        "model": "g",
                        "task": "t",
                        "question_id": np.arange(n),
                        "score": score,
                        "target": target,
                        "threshold": 1.0,
                        "correct": correct,
                        "n_zeroed": zeroed,
                        "n_heads": 100,
                    }
                )
            )
    df = pd.concat(rows, ignore_index=True)
    curves = summarize_curves(df, n_resamples=100).set_index("score")
    assert bool(curves.loc["avvn_ln", "zeroes_none"]) and not curves["zeroes_none"].drop("avvn_ln").any()
    silent = curves.loc["avvn_ln"]
    assert all(math.isnan(silent[c]) for c in ("within_1pt", "grid_auc", "norm_auc", "within_1pt_certified"))
    assert not silent["censored"]
    # The other curves keep their common range (20% of heads), so their grid areas are comparable.
    assert curves.loc["awft", "grid_upper"] == pytest.approx(20.0)
    assert curves.loc["ahon_ln", "grid_auc"] > curves.loc["awft", "grid_auc"]
    table = curves.reset_index()
    ranks = ranking.rank_scores(table, "grid_auc")
    assert pd.isna(ranks.loc["g", "avvn_ln"])
    assert (ranks.loc["g", "ahon_ln"], ranks.loc["g", "awft"]) == (1, 2)
    assert ranking.within_one_point_labels(table).loc["g", "avvn_ln"] == ranking.NO_HEAD_ZEROED
    assert ranking.compare_with_reference(table).set_index("model").loc["g", "best_other_score"] == "ahon_ln"
    assert ranking.top_k(table, 3, "grid_auc") == {"g": ["ahon_ln", "awft"]}


def test_no_changed_answer_certifies_with_5000_questions_but_not_with_20() -> None:
    for n, certified in ((20, False), (5000, True)):
        same = np.arange(n) % 3 != 0
        bound = drop_bound(same, same)
        assert (bound.drop, bound.lost, bound.gained) == (0.0, 0, 0)
        z2 = 1.6448536269514722**2
        assert bound.upper == pytest.approx(z2 / (n + z2), rel=1e-6)  # the score bound with no flips
        assert bool(100 * bound.upper <= 1.0) is certified
    # Through the summary tables: the same identical answers, as an intervention point and a curve.
    for n, certified in ((20, False), (5000, True)):
        base = np.arange(n) % 3 != 0
        rows = []
        for score, target in (("baseline", 0.0), ("ahon_ln", 0.1)):
            rows.append(
                pd.DataFrame(
                    {
                        "model": "m",
                        "task": "t",
                        "question_id": np.arange(n),
                        "score": score,
                        "target": target,
                        "threshold": 0.5,
                        "correct": base,
                        "n_zeroed": 0 if score == "baseline" else 20,
                        "n_heads": 100,
                    }
                )
            )
        df = pd.concat(rows, ignore_index=True)
        points = summarize_interventions(df, n_resamples=200)
        point = points[points["score"] == "ahon_ln"].iloc[0]
        assert bool(point["certified"]) is certified and point["cluster"] == "question_id"
        curve = summarize_curves(df, points).iloc[0]
        assert bool(curve["within_1pt_certified"] == pytest.approx(20.0)) is certified
        assert curve["censored"] and curve["within_1pt"] == pytest.approx(20.0)


def test_drop_bounds_cover_and_mdd_shrinks_with_n() -> None:
    # Coverage of the one-sided 95% upper bound on a small design with losses and gains: its exact
    # coverage (the multinomial enumerated) is 94.5%; 400 draws lie in the 99.9% binomial band of 95%
    # (364-393), so the bound is neither liberal nor needlessly wide.
    rng = np.random.default_rng(0)
    n, lose, gain = 60, 0.06, 0.03
    draws = rng.multinomial(n, [lose, gain, 1 - lose - gain], size=400)
    cache: dict[tuple[int, int], float] = {}
    covered = 0
    for lost, gained, _ in draws:
        key = (int(lost), int(gained))
        if key not in cache:
            cache[key] = drop_bound_from_counts(*key, n).upper
        covered += cache[key] >= lose - gain
    low, high = binomial_band(len(draws), 0.95)
    assert low <= covered <= high, covered
    one = drop_bound_from_counts(5, 0, 200)
    assert one.lower > 0.01  # 5 of 200 lost and none gained: shown to exceed 1 point (one-sided 5%)
    assert minimum_detectable_drop(200) > minimum_detectable_drop(5000) > 0
    assert minimum_detectable_drop(200, 0.2) > minimum_detectable_drop(200)  # changed answers both ways cost power
    assert math.isnan(minimum_detectable_drop(1, 1.0)) or minimum_detectable_drop(1, 1.0) <= 1


def _sweep_rows(n: int, losses: dict[str, float], subjects: int = 0, seed: int = 0) -> pd.DataFrame:
    """Per-question rows of a sweep at targets 0.1 and 0.2: score s loses ``losses[s] * target * n``
    of the baseline's right answers (10x the target as % of heads zeroed); ``subjects`` > 0 gives
    the questions subjects, with the losses all in the first subjects (a clustered effect)."""
    rng = np.random.default_rng(seed)
    base = rng.random(n) < 0.6
    subject = np.repeat([f"s{i}" for i in range(subjects)], n // subjects) if subjects else np.full(n, "")
    rows = []
    for score, targets in {"baseline": [0.0], **{s: [0.1, 0.2] for s in losses}}.items():
        for target in targets:
            correct = base.copy()
            if score != "baseline":
                right = np.flatnonzero(correct)
                correct[right[: int(losses[score] * target * n)]] = False
            rows.append(
                pd.DataFrame(
                    {
                        "model": "m",
                        "task": "t",
                        "subject": subject,
                        "question_id": np.arange(n),
                        "score": score,
                        "target": target,
                        "threshold": 0.5,
                        "correct": correct,
                        "n_zeroed": 0 if score == "baseline" else int(100 * target),
                        "n_heads": 1000,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_curve_intervals_give_the_summary_areas_and_ranks_and_resample_curves_together() -> None:
    df = _sweep_rows(600, {"ahon_ln": 0.05, "awft": 0.6, "entropy_ln": 0.6, "random": 0.3})
    curves = summarize_curves(df, n_resamples=100)
    for by in ranking.RANK_METRICS:
        got = curve_bootstrap.curve_intervals(df, by=by, n_resamples=300).set_index("score")
        want = curves.set_index("score")[by]
        assert got["area"].to_numpy() == pytest.approx(want[got.index].to_numpy(), rel=1e-12)
        assert got["rank"].to_dict() == ranking.rank_scores(curves, by).loc["m"].astype(int).to_dict()
        assert (got["area_low"] <= got["area"]).all() and (got["area"] <= got["area_high"]).all()
    got = curve_bootstrap.curve_intervals(df, n_resamples=300).set_index("score")
    # The first-drop reading is the summary's, inside its interval; ahon_ln's curve (a 0.6-point loss
    # at 20%) never drops, so its reading and the top of its interval are lower bounds.
    assert got["first_drop"].to_dict() == pytest.approx(curves.set_index("score")["within_1pt"].to_dict())
    assert (got["first_low"] <= got["first_drop"]).all() and (got["first_drop"] <= got["first_high"]).all()
    assert got.loc["ahon_ln", "first_high_open"] and not got.loc["awft", "first_high_open"]
    # ahon_ln loses least by far: first in every resample, and better than random.
    assert (got.loc["ahon_ln", ["rank_low", "rank_high", "p_best"]] == [1, 1, 1.0]).all()
    assert got.loc["ahon_ln", "vs_reference_low"] > 0 and got.loc["awft", "vs_reference_high"] < 0
    # awft and entropy_ln lose the same answers: equal areas in every resample (the curves are
    # resampled together), so their difference from random is the same and their ranks tie in order.
    assert got.loc["awft", "area"] == got.loc["entropy_ln", "area"]
    assert got.loc["awft", ["vs_reference_low", "vs_reference_high"]].tolist() == pytest.approx(
        got.loc["entropy_ln", ["vs_reference_low", "vs_reference_high"]].tolist()
    )
    assert (got.loc["awft", "rank"], got.loc["entropy_ln", "rank"]) == (3, 4)
    assert np.isnan(got.loc["random", "vs_reference"]) and got["cluster"].eq("question_id").all()
    verdict = curve_bootstrap.verdicts(got.reset_index()).iloc[0]
    assert (verdict["better"], verdict["worse"], verdict["best"]) == ("ahon_ln", "awft, entropy_ln", "ahon_ln")
    assert verdict["indistinguishable"] == ""
    # Two scores that lose about the same answers cannot be told apart, nor ordered.
    close = curve_bootstrap.curve_intervals(
        _sweep_rows(600, {"ahon_ln": 0.1, "awft": 0.11, "random": 0.1}), n_resamples=300
    )
    verdict = curve_bootstrap.verdicts(close).iloc[0]
    assert verdict["indistinguishable"] == "awft, ahon_ln" and verdict["best"].startswith("undecided: ")
    alone = curve_bootstrap.curve_intervals(_sweep_rows(300, {"ahon_ln": 0.1, "awft": 0.5}), n_resamples=50)
    verdict = curve_bootstrap.verdicts(alone).iloc[0]  # no random curve: nothing to compare with
    assert (verdict["reference"], verdict["indistinguishable"], verdict["best"]) == ("", "", "ahon_ln")


def test_curve_intervals_resample_clusters_and_skip_curves_that_zero_nothing() -> None:
    # The losses sit in a few subjects: resampling subjects (the default where a task has them)
    # gives a wider interval than pretending the questions were independent.
    df = _sweep_rows(1200, {"ahon_ln": 0.2, "random": 0.5}, subjects=40)
    by_subject = curve_bootstrap.curve_intervals(df, n_resamples=400).set_index("score")
    by_question = curve_bootstrap.curve_intervals(df, n_resamples=400, cluster="question_id").set_index("score")
    assert by_subject["cluster"].eq("subject").all() and by_subject["n_clusters"].eq(40).all()
    width = lambda t: t.loc["ahon_ln", "vs_reference_high"] - t.loc["ahon_ln", "vs_reference_low"]  # noqa: E731
    assert width(by_subject) > 1.5 * width(by_question)
    # A tied score zeroes nothing at either target: its answers are the baseline's.
    base = df[df["score"] == "baseline"]
    tied = pd.concat([base.assign(score="avvn_ln", target=t, threshold=1.0) for t in (0.1, 0.2)])
    got = curve_bootstrap.curve_intervals(pd.concat([df, tied]), n_resamples=100)
    assert "avvn_ln" not in set(got["score"]) and len(got) == 2
    with pytest.raises(ValueError, match="rank by one of"):
        curve_bootstrap.curve_intervals(df, by="auc")
    with pytest.raises(ValueError, match="n_resamples must be at least 1"):
        curve_bootstrap.curve_intervals(df, n_resamples=0)


def test_rank_interval_coverage_on_clustered_answers() -> None:
    """Zeroing by ahon_ln costs answers in 30% of the subjects only (a subject effect). Over 100
    synthetic tasks of 30 subjects x 20 questions, the subject bootstrap's 95% interval of its area
    difference from random covers the true difference about 95% of the time; resampling questions as
    if independent covers far less."""
    rng = np.random.default_rng(0)
    subjects, per = 30, 20
    subject = np.repeat(np.arange(subjects), per)
    n = subjects * per

    def task() -> pd.DataFrame:
        base = rng.random(n) < 0.6
        heavy = rng.random(subjects) < 0.3
        points = [("baseline", 0.0, base)]
        for t in (0.1, 0.2):
            points.append(("ahon_ln", t, base & ~(rng.random(n) < np.where(heavy, 2.0 * t, 0.0)[subject])))
            points.append(("random", t, base & ~(rng.random(n) < 0.5 * t)))
        return pd.concat(
            [
                pd.DataFrame(
                    {
                        "model": "m",
                        "task": "t",
                        "subject": [f"s{k}" for k in subject],
                        "question_id": np.arange(n),
                        "score": s,
                        "target": t,
                        "threshold": 0.5,
                        "correct": c,
                        "n_zeroed": int(100 * t),
                        "n_heads": 100,
                    }
                )
                for s, t, c in points
            ],
            ignore_index=True,
        )

    # Expected accuracies: 60% x (1 - loss); ahon_ln's loss is 0.3 x 2t on average, random's 0.5 t.
    x = np.array([0.0, 10.0, 20.0])
    truth = C.grid_auc(x, 60 * (1 - 0.6 * np.array([0, 0.1, 0.2])), 20) - C.grid_auc(
        x, 60 * (1 - 0.5 * np.array([0, 0.1, 0.2])), 20
    )
    covered = {"subject": 0, "question_id": 0}
    for draw in range(100):
        rows = task()
        for unit in covered:
            got = curve_bootstrap.curve_intervals(rows, cluster=unit, n_resamples=200, seed=draw).set_index("score")
            covered[unit] += got.loc["ahon_ln", "vs_reference_low"] <= truth <= got.loc["ahon_ln", "vs_reference_high"]
    assert covered["subject"] >= 88 and covered["question_id"] <= 85


def test_passages_of_one_document_are_one_cluster() -> None:
    """HellaSwag's contexts come from videos and articles, several from one: rows that carry a
    ``document`` resample by document; another task in the same table keeps its own unit."""
    from headstats.jobs.sweep import to_rows
    from headstats.jobs.sweep_plan import Point

    rng = np.random.default_rng(0)
    n = 60
    evaluated = pd.DataFrame(
        {
            "task": "hellaswag",
            "subject": None,
            "question_id": np.arange(n),
            "correct": rng.random(n) < 0.5,
            "correct_norm": pd.array([None] * n, dtype="boolean"),
            "gold_loglik": -1.0,
            "pred": np.int16(0),
            "n_choices": np.int16(4),
            "n_zeroed": 0.0,
            "document": [f"v{i // 3}" for i in range(n)],
        }
    )
    rows = to_rows(evaluated, Point("baseline", 0.0), float("nan"), 100)
    assert rows["document"].tolist() == evaluated["document"].tolist()  # the intervention rows keep it
    zeroed = to_rows(evaluated.assign(correct=rng.random(n) < 0.5, n_zeroed=10.0), Point("ahon_ln", 0.1), 0.5, 100)
    hella = pd.concat([rows, zeroed]).assign(model="m", task="hellaswag")
    arc = _sweep_rows(40, {"ahon_ln": 0.1}).drop(columns="subject").assign(task="arc_easy")
    arc = arc[arc["target"] <= 0.1]
    points = summarize_interventions(pd.concat([hella, arc], ignore_index=True), n_resamples=50)
    units = points.groupby("task")[["cluster", "n_clusters"]].first()
    assert units.loc["hellaswag"].tolist() == ["document", 20] and units.loc["arc_easy"].tolist() == ["question_id", 40]


def test_points_of_a_clustered_task_take_their_bound_and_test_at_the_cluster_level() -> None:
    """Losses all in the first subjects (clustered): the points table's bound is taken at the
    effective n and its McNemar test flips subjects; by question the same answers give design
    effect 1 and the plain bound."""
    df = _sweep_rows(1200, {"ahon_ln": 0.2}, subjects=40)
    by_subject = summarize_interventions(df, n_resamples=50).set_index(["score", "target"])
    by_question = summarize_interventions(df, n_resamples=50, cluster="question_id").set_index(["score", "target"])
    base = df[df["score"] == "baseline"].sort_values("question_id")
    for target in (0.1, 0.2):
        point = df[(df["score"] == "ahon_ln") & (df["target"] == target)].sort_values("question_id")
        a, b, subjects = base["correct"].to_numpy(), point["correct"].to_numpy(), point["subject"].to_numpy()
        row, plain = by_subject.loc[("ahon_ln", target)], by_question.loc[("ahon_ln", target)]
        assert row["cluster"] == "subject" and row["design_effect"] > 2
        assert row["drop_upper"] == pytest.approx(100 * drop_bound(a, b, clusters=subjects).upper, rel=1e-12)
        assert row["mcnemar_p"] == pytest.approx(mcnemar_exact(a, b, clusters=subjects).pvalue, rel=1e-12)
        assert plain["design_effect"] == 1.0 and plain["drop_upper"] == pytest.approx(100 * drop_bound(a, b).upper)
        assert row["drop_upper"] > plain["drop_upper"] and row["mcnemar_p"] > plain["mcnemar_p"]
    # The curve's detectable drop is taken at the effective number of questions too.
    points = summarize_interventions(df, n_resamples=50)
    curve = summarize_curves(df, points).set_index("score").loc["ahon_ln"]
    measured = points[points["score"] == "ahon_ln"]
    changed = ((measured["only_baseline"] + measured["only_intervened"]) / measured["n_paired"]).mean()
    effective = 1200 / measured["design_effect"].mean()
    assert curve["mdd_80"] == pytest.approx(100 * minimum_detectable_drop(effective, changed))
    assert curve["mdd_80"] > 100 * minimum_detectable_drop(1200, changed)
