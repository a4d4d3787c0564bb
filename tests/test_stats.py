"""Distances, stability, overlap and ranking statistics against independent computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from montecarlo import binomial_band
from scipy import stats as st

from headstats.stats import distances, matrix, overlap, ranking, stability, tables
from headstats.stats.distances import SequenceBlocks, model_distance
from headstats.stats.tables import depth_bin
from headstats.stats.w1 import wasserstein1


def synthetic_scores(
    model: str,
    n_seq: int,
    n_layers: int,
    n_heads: int,
    rng: np.random.Generator,
    *,
    dataset: str = "text",
    shift: float = 0.0,
    seq_effect: np.ndarray | None = None,
    scores: tuple[str, ...] = ("awft", "ahon_ln"),
) -> pd.DataFrame:
    """Rows of the score-table layout whose values share a per-sequence effect (the dependence
    between a sequence's heads that makes the sequence the sampling unit) plus row noise."""
    sample = np.repeat(np.arange(n_seq), n_layers * n_heads)
    layer = np.tile(np.repeat(np.arange(n_layers), n_heads), n_seq)
    head = np.tile(np.arange(n_heads), n_seq * n_layers)
    effect = rng.normal(size=n_seq) if seq_effect is None else seq_effect
    frame = pd.DataFrame({"model": model, "dataset": dataset, "sample_id": sample, "layer": layer, "head": head})
    for i, sid in enumerate(scores):
        frame[sid] = (effect[sample] + 0.3 * rng.normal(size=len(sample)) + shift + i).astype(np.float32)
    return frame


# --- Wasserstein-1 ----------------------------------------------------------------------------------


def test_w1_equals_scipy_on_known_samples() -> None:
    assert wasserstein1([0, 1, 3], [5, 6, 8]) == pytest.approx(5.0)  # a pure shift by 5
    assert wasserstein1([1, 1, 1], [1, 1]) == 0.0
    rng = np.random.default_rng(0)
    for _ in range(5):
        u, v = rng.normal(size=37), rng.exponential(size=53)
        wu, wv = rng.random(37), rng.random(53)
        assert wasserstein1(u, v) == pytest.approx(st.wasserstein_distance(u, v), abs=1e-12)
        assert wasserstein1(u, v, wu, wv) == pytest.approx(st.wasserstein_distance(u, v, wu, wv), abs=1e-12)
    ties = np.array([0.0, 0.0, 1.0, 1.0, 2.0])
    assert wasserstein1(ties, ties[::-1] + 0.5) == pytest.approx(st.wasserstein_distance(ties, ties + 0.5))


def test_w1_rejects_empty_and_non_finite_samples() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        wasserstein1([], [1.0])
    with pytest.raises(ValueError, match="finite"):
        wasserstein1([np.nan, 1.0], [1.0])


def test_sequence_blocks_weight_every_sequence_equally() -> None:
    """A group's distribution gives each sequence block total weight (its group weight), spread over
    its rows: the same as scipy with per-row weights weight / block size."""
    rng = np.random.default_rng(1)
    blocks = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])
    values = rng.normal(size=len(blocks))
    data = SequenceBlocks(values, blocks, 4)
    ga, gb = np.array([2.0, 1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0, 3.0])  # e.g. bootstrap counts
    size = np.bincount(blocks)
    in_a, in_b = np.isin(blocks, [0, 1]), np.isin(blocks, [2, 3])
    expected = st.wasserstein_distance(
        values[in_a], values[in_b], (ga[blocks] / size[blocks])[in_a], (gb[blocks] / size[blocks])[in_b]
    )
    assert data.distance(ga, gb) == pytest.approx(expected, abs=1e-12)


def test_depth_bins_follow_relative_depth() -> None:
    assert depth_bin([0, 1, 2], 3, 5).tolist() == [0, 2, 4]
    binned = depth_bin(np.arange(30), 30, 5)
    assert binned[0] == 0 and binned[29] == 4
    assert np.bincount(binned).tolist() == [6, 6, 6, 6, 6]
    assert tables.depth_labels(5)[0] == "0-0.2"


def test_model_distance_matches_scipy_overall_and_per_depth_across_depths() -> None:
    rng = np.random.default_rng(2)
    a = synthetic_scores("a", 6, 3, 4, rng)
    b = synthetic_scores("b", 6, 6, 2, rng, shift=0.4)  # a deeper, narrower model: compared by relative depth
    table = pd.concat([a, b], ignore_index=True)
    res = model_distance(table, "a", "b", depth_bins=5, n_boot=0, n_perm=0, n_split=0)
    assert set(res["score"]) == {"awft", "ahon_ln"}
    for sid in ("awft", "ahon_ln"):
        overall = res[(res["score"] == sid) & (res["depth"] == "all")]["w1"].item()
        assert overall == pytest.approx(st.wasserstein_distance(a[sid], b[sid]), abs=1e-9)
        for i, label in enumerate(tables.depth_labels(5)):
            in_a = depth_bin(a["layer"], 3, 5) == i
            in_b = depth_bin(b["layer"], 6, 5) == i
            got = res[(res["score"] == sid) & (res["depth"] == label)]["w1"].item()
            if in_a.any() and in_b.any():
                assert got == pytest.approx(st.wasserstein_distance(a[sid][in_a], b[sid][in_b]), abs=1e-9)
            else:
                assert np.isnan(got)  # e.g. a 3-layer model has no layer in the 0.2-0.4 bin


def _null_p_values(paired: bool, n_draws: int = 120, n_perm: int = 39) -> tuple[np.ndarray, float]:
    """Permutation p-values of draws where both models come from one law, for the sequence-level
    test, and the share of draws a naive test that permutes single rows rejects at 5%."""
    rng = np.random.default_rng(3 if paired else 4)
    ours, naive = [], 0
    for draw in range(n_draws):
        effect = rng.normal(size=12)
        a = synthetic_scores("a", 12, 2, 3, rng, scores=("awft",), seq_effect=effect if paired else None)
        b = synthetic_scores("b", 12, 2, 3, rng, scores=("awft",), seq_effect=effect if paired else None)
        res = model_distance(
            pd.concat([a, b]),
            "a",
            "b",
            depth_bins=0,
            n_boot=0,
            n_perm=n_perm,
            n_split=0,
            seed=draw,
            design="paired" if paired else "unpaired",
        )
        ours.append(res["p_value"].item())
        rows = SequenceBlocks(np.concatenate([a["awft"], b["awft"]]), np.arange(2 * len(a)), 2 * len(a))
        observed = rows.distance(np.r_[np.ones(len(a)), np.zeros(len(a))], np.r_[np.zeros(len(a)), np.ones(len(a))])
        perms = [
            rows.distance(m, 1 - m)
            for m in (rng.permutation(np.r_[np.ones(len(a)), np.zeros(len(a))]) for _ in range(n_perm))
        ]
        naive += (1 + sum(p >= observed for p in perms)) / (1 + n_perm) <= 0.05
    return np.array(ours), naive / n_draws


@pytest.mark.parametrize("paired", [False, True], ids=["unpaired", "paired"])
def test_permutation_test_keeps_its_level_on_one_distribution(paired: bool) -> None:
    """Two models drawn from one law: the sequence-level test's p-values are uniform on the
    permutation grid (39 permutations: P(p <= k/40) = k/40). Over 120 draws the count at p <= 0.05
    stays at most the top of the 99.9% binomial band of rate 5% (15), and the count at p <= 0.5 lies
    inside the band of rate 50% (42-78): neither liberal nor far too conservative. Permuting single
    rows, which ignores that a sequence's heads move together, rejects far more often."""
    ours, naive = _null_p_values(paired)
    assert (ours <= 0.05).sum() <= binomial_band(len(ours), 0.05)[1], np.sort(ours)
    low, high = binomial_band(len(ours), 0.5)
    assert low <= (ours <= 0.5).sum() <= high, np.sort(ours)
    if not paired:  # with shared sequence effects the two samples are (nearly) identical in law per pair
        assert naive >= 0.25


def test_permutation_test_and_noise_floor_see_a_real_shift() -> None:
    rng = np.random.default_rng(5)
    a = synthetic_scores("a", 30, 2, 4, rng)
    b = synthetic_scores("b", 30, 2, 4, rng, shift=1.5)
    same = synthetic_scores("c", 30, 2, 4, rng)
    table = pd.concat([a, b, same], ignore_index=True)
    shifted = model_distance(table, "a", "b", ["awft"], depth_bins=0, n_boot=50, n_perm=99, n_split=10)
    assert shifted["p_value"].item() == pytest.approx(0.01)  # the smallest p-value 99 permutations can give
    assert shifted["above_noise"].item()
    assert shifted["ci_low"].item() <= shifted["w1"].item() <= shifted["ci_high"].item()
    null = model_distance(table, "a", "c", ["awft"], depth_bins=0, n_boot=0, n_perm=0, n_split=10)
    assert not null["above_noise"].item()
    floor = distances.noise_floor(table, "a", ["awft"], depth_bins=0, n_split=10)
    assert 0 < floor["floor"].item() < shifted["w1"].item()


def test_distance_matrix_is_symmetric_with_floors() -> None:
    rng = np.random.default_rng(6)
    table = pd.concat([synthetic_scores(m, 8, 2, 2, rng, shift=s) for m, s in (("x", 0), ("y", 1), ("z", 2))])
    dm = matrix.distance_matrix(table, ["x", "y", "z"], "awft", n_split=5)
    w = dm.w1.to_numpy()
    assert np.allclose(w, w.T) and np.all(np.diag(w) == 0)
    assert w[0, 2] > w[0, 1] > 0
    assert dm.pair_floor().loc["x", "y"] == max(dm.noise_floor["x"], dm.noise_floor["y"])


def test_distance_errors_say_what_is_wrong() -> None:
    rng = np.random.default_rng(7)
    a = synthetic_scores("a", 4, 2, 2, rng, scores=("awft",))
    b = synthetic_scores("b", 4, 2, 2, rng, scores=("ahon_ln",))
    with pytest.raises(ValueError, match="no common score ids"):
        model_distance(pd.concat([a, b]), "a", "b")
    with pytest.raises(ValueError, match="'nope' is not in the score table"):
        model_distance(pd.concat([a, b]), "a", "nope")
    c = synthetic_scores("c", 4, 2, 2, rng, scores=("awft",), dataset="other")
    with pytest.raises(ValueError, match="share no dataset"):
        model_distance(pd.concat([a, c]), "a", "c")


# --- stability ---------------------------------------------------------------------------------------


def test_rank_stability_and_layer_distances_against_direct_computation() -> None:
    rng = np.random.default_rng(8)
    web = synthetic_scores("m", 10, 2, 3, rng, dataset="web", scores=("ahon_ln",))
    qa = synthetic_scores("m", 12, 2, 3, rng, dataset="qa", scores=("ahon_ln",))
    qa["ahon_ln"] += (qa["layer"] * 3 + qa["head"]).astype(np.float32)  # a head ordering the web data lacks
    table = pd.concat([web, qa], ignore_index=True)
    res = stability.rank_stability(table, "m", n_split=4)
    row = res.iloc[0]
    assert (row["dataset_a"], row["dataset_b"]) == ("qa", "web")
    ma = qa.groupby(["layer", "head"])["ahon_ln"].mean()
    mb = web.groupby(["layer", "head"])["ahon_ln"].mean()
    assert row["spearman"] == pytest.approx(st.spearmanr(ma, mb).statistic)
    assert row["n_heads"] == 6 and -1 <= row["split_half_a"] <= 1
    layers = stability.layer_distances(table, "m")
    for lay in (0, 1):
        got = layers[layers["layer"] == lay]["w1"].item()
        want = st.wasserstein_distance(qa.loc[qa["layer"] == lay, "ahon_ln"], web.loc[web["layer"] == lay, "ahon_ln"])
        assert got == pytest.approx(want, abs=1e-9)
    with pytest.raises(ValueError, match="at least two"):
        stability.rank_stability(web, "m")


# --- overlap -----------------------------------------------------------------------------------------


def test_jaccard_and_missed_share_on_hand_made_sets() -> None:
    a, b = {1, 2, 3, 4}, {3, 4, 5}
    assert overlap.jaccard(a, b) == pytest.approx(2 / 5)
    assert overlap.missed_share(b, a) == pytest.approx(1 / 3)  # of b's {3, 4, 5}, a misses 5
    assert overlap.missed_share(a, b) == pytest.approx(2 / 4)
    assert overlap.jaccard([True, False, True], [True, True, False]) == pytest.approx(1 / 3)
    assert np.isnan(overlap.jaccard(set(), set()))
    assert overlap.jaccard({0, 2}, [True, False, True]) == 1.0  # a mask is the set of its True positions


def test_score_overlap_on_a_hand_made_table() -> None:
    """1 layer x 4 heads x 4 sequences, rate 25%.

    awft ("above"): the 75% quantile (type 4: 0.75 * 16 = 12 -> the 12th value) is exceeded by the
    four largest values, all in head 0, so awft selects head 0 in every sequence.
    ahon_ln ("below"): values below the 25% quantile (the 4th smallest) are the three smallest,
    placed at (seq 0, head 0), (seq 1, head 1), (seq 2, head 1).
    Triples: A = {(s, 0) for s in 0..3}, B = {(0, 0), (1, 1), (2, 1)}: IoU = 1 / 6; a misses 2 of B's 3.
    Usually selected (>= 2 of 4 sequences): awft {head 0}, ahon_ln {head 1}: IoU 0, a misses all.
    """
    seq = np.repeat(np.arange(4), 4)
    head = np.tile(np.arange(4), 4)
    awft = np.where(head == 0, 0.9 + 0.01 * seq, 0.1 + 0.01 * np.arange(16))
    ahon = 1.0 + 0.01 * np.arange(16)
    for rank, (s, h) in enumerate([(0, 0), (1, 1), (2, 1)]):
        ahon[(seq == s) & (head == h)] = 0.1 * (rank + 1)
    table = pd.DataFrame(
        {"model": "m", "dataset": "d", "sample_id": seq, "layer": 0, "head": head, "awft": awft, "ahon_ln": ahon}
    )
    row = overlap.score_overlap(table, "awft", "ahon_ln", [0.25]).iloc[0]
    assert row["selected_a"] == 4 / 16 and row["selected_b"] == 3 / 16
    assert row["iou_triples"] == pytest.approx(1 / 6)
    assert row["triples_missed_by_a"] == pytest.approx(2 / 3)
    assert row["triples_missed_by_b"] == pytest.approx(3 / 4)
    assert (row["heads_a"], row["heads_b"]) == (1, 1)
    assert row["iou_heads"] == 0 and row["missed_by_a"] == 1.0
    matrix = overlap.overlap_matrix(table, "m", ["awft", "ahon_ln"], rate=0.25, level="triples")
    assert matrix.loc["awft", "ahon_ln"] == pytest.approx(1 / 6) and matrix.loc["awft", "awft"] == 1.0


# --- ranking ------------------------------------------------------------------------------------------


def test_ranks_ties_nan_correlation_and_top_k_on_hand_made_curves() -> None:
    curves = pd.DataFrame(
        {
            "model": ["p"] * 4 + ["q"] * 4,
            "score": ["random", "awft", "ahon_ln", "entropy"] * 2,
            "norm_auc": [30.0, 50.0, 50.0, np.nan, 30.0, 40.0, 60.0, 20.0],
            "within_1pt": [1.0, 3.0, 5.0, 0.0, 1.0, 2.0, 8.0, 0.0],
        }
    )
    ranks = ranking.rank_scores(curves, "norm_auc")
    # p: awft and ahon_ln tie at 50 -> canonical order (awft first); NaN (entropy) ranks last
    assert ranks.loc["p"].to_dict() == {"awft": 1, "entropy": 4, "ahon_ln": 2, "random": 3}
    assert ranks.loc["q"].to_dict() == {"awft": 2, "entropy": 4, "ahon_ln": 1, "random": 3}
    # the correlation is the study's (pandas' spearman: tied areas share their average rank), NaN last
    corr = ranking.rank_correlation(curves)
    p_areas, q_areas = [50, -np.inf, 50, 30], [40, 20, 60, 30]  # awft, entropy, ahon_ln, random
    assert corr.loc["p", "q"] == pytest.approx(st.spearmanr(p_areas, q_areas).statistic)
    assert ranking.top_k(curves, 2) == {"p": ["awft", "ahon_ln"], "q": ["ahon_ln", "awft"]}
    assert ranking.top_k_iou(curves, 1).loc["p", "q"] == 0.0
    table = ranking.compare_with_reference(curves)
    assert table["best_other"].tolist() == [5.0, 8.0, 6.5]
    assert table["best_overall_score"].tolist()[:2] == ["ahon_ln", "ahon_ln"]
    assert table["model"].iloc[-1] == "Average"
    with pytest.raises(ValueError, match="several tasks"):
        ranking.rank_scores(curves.assign(task=["a"] * 4 + ["b"] * 4))


def test_top_k_leaving_out_random_is_each_models_best_areas_sorted_by_hand() -> None:
    """The best curves a figure draws beside random are those a plain sort of each model's areas gives:
    largest first, a NaN area or a curve that zeroed no head last or left out, ties in registry order."""
    from headstats.engine.scores import score_ids

    rng = np.random.default_rng(3)
    scores = ["random", "awft", "entropy", "ahon", "ahon_ln", "lthon_ln", "fhon"]
    curves = pd.DataFrame(
        {
            "model": np.repeat(["p", "q", "r"], len(scores)),
            "score": scores * 3,
            "norm_auc": np.round(rng.uniform(20, 60, 3 * len(scores)), 0),  # rounded: ties happen
            "zeroes_none": [False] * (3 * len(scores) - 1) + [True],
        }
    )
    curves.loc[3, "norm_auc"] = np.nan  # p's ahon: no area, ranked last
    canonical = {sid: i for i, sid in enumerate(score_ids())}
    for k in (1, 3, 10):
        expected = {}
        for model, mine in curves.groupby("model"):
            mine = mine[(mine["score"] != "random") & ~mine["zeroes_none"]]
            keyed = sorted(
                mine.itertuples(), key=lambda r: (-np.nan_to_num(r.norm_auc, nan=-np.inf), canonical[r.score])
            )
            expected[model] = [r.score for r in keyed][:k]
        assert ranking.top_k(curves, k, exclude=("random",)) == expected
    assert all("random" in best for best in ranking.top_k(curves, 10).values())


def test_descriptive_score_tables_match_numpy() -> None:
    from headstats.stats import describe

    rng = np.random.default_rng(0)
    rows = pd.DataFrame(
        {
            "dataset": "d",
            "model": np.repeat(["a", "b"], 24),
            "sample_id": np.tile(np.repeat([0, 1, 2], 8), 2),
            "layer": np.tile(np.repeat([0, 1], 4), 6),
            "head": np.tile([0, 1, 2, 3], 12),
            "s": rng.normal(size=48),
        }
    )
    quartiles = describe.score_quartiles(rows, lambda _: ["s"]).set_index("model")
    for model in ("a", "b"):
        values = rows.loc[rows["model"] == model, "s"].to_numpy()
        want = np.quantile(values, [0.25, 0.5, 0.75])
        got = quartiles.loc[model, ["s_q1", "s_median", "s_q3"]].to_numpy(float)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert quartiles.loc[model, "sequences"] == 3
    means = describe.score_means(rows, ["s"])
    assert means.loc["a", ["sequences", "layers", "heads"]].tolist() == [3, 2, 4]
    assert means.loc["b", "s"] == pytest.approx(rows.loc[rows["model"] == "b", "s"].mean())
    heads = describe.head_means(rows[rows["model"] == "a"], ["s"])
    a = rows[rows["model"] == "a"]
    assert heads.loc[(1, 2), "s"] == pytest.approx(a[(a["layer"] == 1) & (a["head"] == 2)]["s"].mean())
    # An ECDF of n finite values drawn at n levels passes through each sorted value; NaN and inf are left out.
    values = rows["s"].to_numpy()
    x, levels = describe.ecdf_points(np.append(values, [np.nan, np.inf]), quantiles=len(values))
    np.testing.assert_allclose(x, np.sort(values), rtol=1e-12)
    np.testing.assert_allclose(levels, np.arange(len(values)) / (len(values) - 1))
