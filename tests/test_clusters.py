"""Cluster-aware uncertainty (docs/statistics.md#uncertainty): intervals, tests and noise floors resample clusters,
say which, use >= 200 splits, correct split-half correlations to full length and Holm-adjust p-values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from montecarlo import binomial_band
from scipy import stats as st
from statsmodels.stats.multitest import multipletests

from headstats.stats import distances, matrix, multiple, stability
from headstats.stats.distances import model_distance, w1_interval
from headstats.stats.multiple import holm


def _clustered_rows(rng: np.random.Generator, shift: float, n_clusters: int, per_cluster: int, rows: int):
    """Rows whose values share a cluster effect (sd 1), a smaller sequence effect and row noise."""
    cluster = np.repeat(np.arange(n_clusters), per_cluster * rows)
    sequence = np.repeat(np.arange(n_clusters * per_cluster), rows)
    values = (
        rng.normal(0, 1.0, n_clusters)[cluster]
        + rng.normal(0, 0.2, n_clusters * per_cluster)[sequence]
        + rng.normal(0, 0.2, len(cluster))
        + shift
    )
    return values, sequence, cluster


def test_cluster_bootstrap_covers_the_true_w1_where_a_row_bootstrap_does_not() -> None:
    """Two laws N(0, s^2) and N(1, s^2) (true W1 = 1), each sampled as 30 clusters of 8 sequences
    sharing a cluster effect. The cluster bootstrap's 95% interval covers 1 about 95% of the time;
    resampling rows as if independent gives intervals far too narrow."""
    rng = np.random.default_rng(0)
    reps, covered_cluster, covered_row = 120, 0, 0
    for i in range(reps):
        va, sa, ca = _clustered_rows(rng, 0.0, 30, 8, 2)
        vb, sb, cb = _clustered_rows(rng, 1.0, 30, 8, 2)
        _, low, high = w1_interval(va, vb, sa, sb, ca, cb, n_boot=120, seed=i)
        covered_cluster += low <= 1.0 <= high
        rows_a, rows_b = np.arange(len(va)), np.arange(len(vb))
        _, low, high = w1_interval(va, vb, rows_a, rows_b, n_boot=120, seed=i)
        covered_row += low <= 1.0 <= high
    assert covered_cluster / reps >= 0.85, covered_cluster / reps
    assert covered_row / reps <= 0.6, covered_row / reps


def _table(rng: np.random.Generator) -> pd.DataFrame:
    """Two models on the same MMLU-like sequences: 12 subjects x 5 questions, 2 layers x 3 heads."""
    frames = []
    subject_effect = rng.normal(size=12)
    for model, shift in (("a", 0.0), ("b", 0.3)):
        sample = np.repeat(np.arange(60), 6)
        subject = sample // 5
        frames.append(
            pd.DataFrame(
                {
                    "model": model,
                    "dataset": "mmlu",
                    "sample_id": sample,
                    "subject": [f"s{k}" for k in subject],
                    "layer": np.tile(np.repeat([0, 1], 3), 60),
                    "head": np.tile([0, 1, 2], 120),
                    "awft": subject_effect[subject] + 0.3 * rng.normal(size=360) + shift,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def test_every_resampling_output_names_its_cluster_and_counts() -> None:
    table = _table(np.random.default_rng(1))
    res = model_distance(table, "a", "b", depth_bins=0, n_boot=50, n_perm=49)
    row = res.iloc[0]
    assert (row["cluster"], row["n_clusters_a"], row["n_clusters_b"]) == ("subject", 12, 12)
    assert row["n_splits"] == 200 and distances.DEFAULT_SPLITS == 200  # noise floors: >= 200 splits by default
    assert np.isfinite(row["noise_floor"]) and row["p_holm"] >= row["p_value"]
    by_sequence = model_distance(table, "a", "b", depth_bins=0, n_boot=0, n_perm=0, n_split=10, cluster="sample_id")
    assert (by_sequence["cluster"].item(), by_sequence["n_clusters_a"].item()) == ("sample_id", 60)
    assert np.isnan(by_sequence["p_holm_min"].item())  # no permutations, no p-values
    # Halving 12 subjects varies the halves far more than halving 60 questions of them: a higher floor.
    assert (
        row["noise_floor"]
        > model_distance(table, "a", "b", depth_bins=0, n_boot=0, n_perm=0, cluster="sample_id")["noise_floor"].item()
    )
    floor = distances.noise_floor(table, "a", depth_bins=0)
    assert (floor["cluster"].item(), floor["n_clusters"].item(), floor["n_splits"].item()) == ("subject", 12, 200)
    with pytest.raises(ValueError, match="cluster column 'document'"):
        model_distance(table, "a", "b", cluster="document")


def test_a_table_says_when_its_permutations_cannot_reach_significance_after_holm() -> None:
    from headstats.report.sections.context import permutation_resolution

    table = _table(np.random.default_rng(1))
    # 3 depth rows (overall + 2 bins) of one score: a family of 3 tests.
    res = model_distance(table, "a", "b", depth_bins=2, n_boot=0, n_perm=49, n_split=0)
    assert len(res) == 3 and res["n_tests"].eq(3).all()
    assert res["p_holm_min"].eq(3 / 50).all() and (res["p_holm"] >= res["p_holm_min"] - 1e-12).all()
    # The shift of 0.3 is far beyond what relabelling gives: no permutation reaches it, p at its floor.
    assert res["p_value"].eq(1 / 50).all() and res["p_holm"].eq(3 / 50).all()
    text = permutation_resolution(res)
    assert "cannot fall below `p_holm_min` (0.06 here)" in text
    assert "no distance here can test significant at 5%" in text and "at least 59 permutations" in text
    assert multiple.holm_floor(3, 59) <= 0.05 < multiple.holm_floor(3, 58)
    assert multiple.permutations_for(3) == 59 and multiple.permutations_for(84) == 1679
    enough = model_distance(table, "a", "b", depth_bins=2, n_boot=0, n_perm=59, n_split=0)
    assert "no distance here" not in permutation_resolution(enough) and (enough["p_holm"] <= 0.05).all()
    with pytest.raises(ValueError, match="at least one test and one permutation"):
        multiple.holm_floor(0, 10)


def test_paired_cluster_permutation_keeps_its_level() -> None:
    """Both models from one law with shared subject effects: swapping whole subjects gives p-values
    uniform on the permutation grid (39 permutations: P(p <= k/40) = k/40). Over 60 draws the count
    at p <= 0.05 stays at most the top of the 99.9% binomial band of rate 5% (10), and the count at
    p <= 0.5 lies inside the band of rate 50% (17-43), so the test is neither liberal nor far too
    conservative."""
    p_values = []
    for draw in range(60):
        rng = np.random.default_rng(100 + draw)
        table = _table(rng)
        table.loc[table["model"] == "b", "awft"] -= 0.3  # no difference in law
        res = model_distance(table, "a", "b", depth_bins=0, n_boot=0, n_perm=39, n_split=0, seed=draw)
        p_values.append(res["p_value"].item())
    p_values = np.array(p_values)
    assert (p_values <= 0.05).sum() <= binomial_band(60, 0.05)[1], np.sort(p_values)
    low, high = binomial_band(60, 0.5)
    assert low <= (p_values <= 0.5).sum() <= high, np.sort(p_values)


def test_holm_equals_statsmodels_and_keeps_nan() -> None:
    rng = np.random.default_rng(2)
    for n in (2, 40):
        p = rng.random(n) ** 3
        np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1])
    got = holm([0.01, np.nan, 0.04, 0.03])
    np.testing.assert_allclose(got[[0, 2, 3]], multipletests([0.01, 0.04, 0.03], method="holm")[1])
    assert np.isnan(got[1])


def test_split_half_reliability_halves_clusters_with_spearman_brown() -> None:
    """Heads ordered by a fixed per-head effect, but each subject shifts every head its own way: halves
    of questions of one subject agree (they share the shift), halves of subjects do not."""
    rng = np.random.default_rng(3)
    frames = []
    head_effect = rng.normal(size=12)
    for dataset in ("web", "mmlu"):
        sample = np.repeat(np.arange(80), 12)
        subject = sample // 10
        per_subject = rng.normal(0, 3.0, size=(8, 12))
        head = np.tile(np.arange(12), 80)
        frames.append(
            pd.DataFrame(
                {
                    "model": "m",
                    "dataset": dataset,
                    "sample_id": sample,
                    "subject": subject,
                    "layer": head // 4,
                    "head": head % 4,
                    "ahon_ln": head_effect[head] + per_subject[subject, head] + 0.1 * rng.normal(size=960),
                }
            )
        )
    table = pd.concat(frames, ignore_index=True)
    by_subject = stability.rank_stability(table, "m", n_split=200).iloc[0]
    by_question = stability.rank_stability(table, "m", n_split=200, cluster="sample_id").iloc[0]
    assert (by_subject["cluster"], by_subject["n_clusters_a"], by_subject["n_splits"]) == ("subject", 8, 200)
    assert by_question["split_half_a"] > 0.95  # halves sharing every subject look perfectly reliable
    assert by_subject["split_half_a"] < by_question["split_half_a"] - 0.1
    assert stability.spearman_brown(0.5) == pytest.approx(2 / 3)
    a, b = rng.normal(size=30), rng.normal(size=30)
    assert stability.spearman(a, b) == pytest.approx(st.spearmanr(a, b).statistic)


def test_distance_matrix_holm_adjusts_its_pairs_and_names_its_unit() -> None:
    rng = np.random.default_rng(4)
    table = _table(rng)
    third = table[table["model"] == "b"].assign(model="c", awft=lambda f: f["awft"] + 0.5)
    table = pd.concat([table, third], ignore_index=True)
    dm = matrix.distance_matrix(table, ["a", "b", "c"], "awft", depth_bins=0, n_perm=19, n_split=20)
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    raw = [dm.p_value.loc[p] for p in pairs]
    np.testing.assert_allclose([dm.p_holm.loc[p] for p in pairs], multipletests(raw, method="holm")[1])
    assert (dm.cluster, dm.n_splits) == ("subject", 20)
