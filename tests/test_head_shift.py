"""Did fine-tuning move the distribution, and which heads moved? The paired permutation test of
pooled W1 (headstats.stats.distances) and the per-head sign-flip max-T test
(headstats.stats.movement), checked by simulation (level, power, heads that swap values) and
against an independent brute-force enumeration; scores constant by construction are named with
their reason (headstats.stats.constant)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from montecarlo import binomial_band
from statsmodels.stats.multitest import multipletests

from headstats.engine.scores import score_ids
from headstats.stats.constant import constant_scores
from headstats.stats.distances import model_distance
from headstats.stats.movement import head_shift_test, sign_flip_max_t
from headstats.stats.multiple import holm_family, holm_floor, permutations_for
from headstats.stats.tables import ALL_DEPTHS, depth_labels

LAYERS, HEADS = 3, 4


def _table(
    a: np.ndarray, b: np.ndarray, score: str = "ahon_ln", subject: np.ndarray | None = None, per_layer: int = HEADS
) -> pd.DataFrame:
    """Two models' values (texts x heads each; column k is head k % per_layer of layer k // per_layer)
    as a score table on one dataset."""
    n_text, n_head = a.shape
    frames = []
    for model, values in (("base", a), ("tuned", b)):
        frame = pd.DataFrame(
            {
                "model": model,
                "dataset": "texts",
                "sample_id": np.repeat(np.arange(n_text), n_head),
                "layer": np.tile(np.arange(n_head) // per_layer, n_text),
                "head": np.tile(np.arange(n_head) % per_layer, n_text),
                score: values.reshape(-1),
            }
        )
        if subject is not None:
            frame["subject"] = np.repeat(subject, n_head)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _brute_t(d: np.ndarray) -> np.ndarray:
    """One-sample t per column, written out: equal non-zero differences +-inf, all zero 0."""
    mean, sd = d.mean(axis=0), d.std(axis=0, ddof=1)
    out = np.zeros(d.shape[1])
    for h in range(d.shape[1]):
        if sd[h] > 0:
            out[h] = mean[h] / (sd[h] / np.sqrt(len(d)))
        elif mean[h] != 0:
            out[h] = np.sign(mean[h]) * np.inf
    return out


def test_max_t_equals_a_brute_force_enumeration_of_all_sign_vectors() -> None:
    rng = np.random.default_rng(0)
    # 6 texts x 3 heads on a grid of eighths (exact arithmetic), a head that moved by the same
    # amount on every text (t = inf) and a head that did not move at all (t = 0).
    a = rng.integers(0, 40, size=(6, 5)) / 8
    d = np.c_[rng.integers(-6, 10, size=(6, 3)) / 4, np.full(6, 0.5), np.zeros(6)]
    observed = np.abs(_brute_t(d))
    hits_raw, hits_max = np.zeros(5), np.zeros(5)
    for signs in itertools.product((-1.0, 1.0), repeat=6):
        flipped = np.abs(_brute_t(d * np.array(signs)[:, None]))
        hits_raw += flipped >= observed * (1 - 1e-12)
        hits_max += flipped.max() >= observed * (1 - 1e-12)
    res = sign_flip_max_t(d, n_perm=64)
    assert res["exact"].all() and (res["n_perm"] == 64).all()
    np.testing.assert_allclose(res["t"], _brute_t(d), rtol=1e-12)
    np.testing.assert_allclose(res["p_raw"], hits_raw / 64, rtol=1e-12)
    np.testing.assert_allclose(res["p_max_t"], hits_max / 64, rtol=1e-12)
    assert res["p_max_t"].iloc[3] == 2 / 64 and res["p_max_t"].iloc[4] == 1.0  # inf: only +-identity reach it
    assert (res["p_max_t"] >= res["p_raw"]).all()
    # The table-level test finds the same numbers, head by head.
    rows = head_shift_test(_table(a, a + d, per_layer=5), "base", "tuned", "ahon_ln", n_perm=64)
    assert list(rows["head"]) == [0, 1, 2, 3, 4] and rows["exact"].all() and rows["cluster"].eq("sample_id").all()
    np.testing.assert_allclose(rows["p_max_t"], hits_max / 64, rtol=1e-12)
    np.testing.assert_allclose(rows["mean_diff"], d.mean(axis=0), rtol=1e-12)
    spread = np.subtract(*np.quantile(a, [0.75, 0.25]))
    np.testing.assert_allclose(rows["shift_iqr"], d.mean(axis=0) / spread, rtol=1e-12)
    # the same difference on every text has no spread to standardise by: no d_z, never an infinite one
    assert rows["d_z"].iloc[:3].notna().all() and rows["d_z"].iloc[3:].isna().all()
    # With fewer permutations than sign vectors they are drawn; the p-values stay within Monte
    # Carlo error (4 binomial sd) of the exact ones.
    d12 = rng.normal(0.3, 1.0, size=(12, 3))
    exact, drawn = sign_flip_max_t(d12, n_perm=4096), sign_flip_max_t(d12, n_perm=4000, seed=1)
    assert exact["exact"].all() and not drawn["exact"].any() and drawn["n_perm"].eq(4000).all()
    for column in ("p_raw", "p_max_t"):
        p = exact[column].to_numpy()
        assert (np.abs(drawn[column] - p) <= 4 * np.sqrt(p * (1 - p) / 4000) + 1 / 4000).all(), column


def test_no_change_rejects_at_alpha_for_the_pooled_and_the_per_head_test() -> None:
    """Both models drawn from one law given the text (exchangeable labels): each test rejects at
    rate alpha = 5%, neither more nor (much) less: within a 99.9% binomial band."""
    sids = list(score_ids())
    n_text, heads = 12, 2 * HEADS
    rejected, n_pooled = 0, 0
    for draw in range(12):  # 12 tables x one independent simulation per score column (16 built-in: 192 tests)
        rng = np.random.default_rng([7, draw])
        text = rng.normal(size=(len(sids), n_text, 1))
        head = np.linspace(0, 1, heads)
        frames = []
        for model in ("base", "tuned"):
            values = text + head + 0.5 * rng.normal(size=(len(sids), n_text, heads))
            frame = pd.DataFrame(
                {
                    "model": model,
                    "dataset": "texts",
                    "sample_id": np.repeat(np.arange(n_text), heads),
                    "layer": np.tile(np.arange(heads) // HEADS, n_text),
                    "head": np.tile(np.arange(heads) % HEADS, n_text),
                }
            )
            for i, sid in enumerate(sids):
                frame[sid] = values[i].reshape(-1)
            frames.append(frame)
        res = model_distance(
            pd.concat(frames), "base", "tuned", depth_bins=0, n_boot=0, n_perm=19, n_split=0, seed=draw
        )
        assert (res["design"] == "paired").all()
        rejected += int((res["p_value"] <= 0.05).sum())  # p <= 0.05 needs all 19 relabellings below: rate 1/20
        n_pooled += len(res)
    low, high = binomial_band(n_pooled, 0.05)
    assert low <= rejected <= high, (rejected, n_pooled, low, high)

    # Per head: 400 datasets of 16 texts x 8 heads whose differences share a text effect (dependent
    # heads) and are symmetric about 0. Family-wise rejections and one head's raw rejections.
    family, single = 0, 0
    rng = np.random.default_rng(8)
    for draw in range(400):
        d = rng.standard_t(4, size=(16, 1)) * np.linspace(0.2, 1.0, 8) + rng.normal(size=(16, 8))
        res = sign_flip_max_t(d, n_perm=199, seed=draw)
        family += res["p_max_t"].min() <= 0.05
        single += res["p_raw"].iloc[0] <= 0.05
    low, high = binomial_band(400, 0.05)
    assert low <= family <= high and low <= single <= high, (family, single, low, high)


def test_clusters_are_flipped_whole() -> None:
    """Texts of one cluster share their difference (a cluster-level effect, symmetric under no
    change): flipping cluster means keeps the level, flipping texts one by one does not."""
    rng = np.random.default_rng(9)
    cluster = np.repeat(np.arange(8), 4)
    whole, split = 0, 0
    for draw in range(300):
        d = rng.normal(size=(8, 3))[cluster] + 0.2 * rng.normal(size=(32, 3))
        means = pd.DataFrame(d).groupby(cluster).mean().to_numpy()
        whole += sign_flip_max_t(means, n_perm=256)["p_max_t"].min() <= 0.05
        split += sign_flip_max_t(d, n_perm=99, seed=draw)["p_max_t"].min() <= 0.05
    low, high = binomial_band(300, 0.05)
    assert low <= whole <= high and split > 3 * high, (whole, split, high)
    # head_shift_test averages the texts of a subject before flipping.
    a = rng.normal(size=(32, HEADS))
    subject = np.array([f"s{c}" for c in cluster])
    table = _table(a, a + d[:, :1] + np.arange(HEADS) * 0.1, subject=subject)
    rows = head_shift_test(table, "base", "tuned", "ahon_ln", n_perm=256)
    assert rows["cluster"].eq("subject").all() and rows["n_units"].eq(8).all() and rows["exact"].all()
    by_subject = pd.DataFrame(d[:, :1] + np.arange(HEADS) * 0.1).groupby(subject).mean().to_numpy()
    expected = sign_flip_max_t(by_subject, n_perm=256)
    np.testing.assert_allclose(rows["t"], expected["t"], rtol=1e-9)
    np.testing.assert_allclose(rows["p_max_t"], expected["p_max_t"], rtol=1e-12)


def test_heads_that_swap_values_are_found_per_head_and_invisible_to_pooled_w1() -> None:
    rng = np.random.default_rng(3)
    n_text, heads = 32, LAYERS * HEADS
    swap = np.arange(heads)
    swap[[0, 3]] = [3, 0]  # heads (0, 0) and (0, 3) exchange their values on every text
    level = 0.25 * np.arange(heads)  # head means 0.75 apart, per-text sd 0.42
    a = level + 0.3 * rng.normal(size=(n_text, 1)) + 0.3 * rng.normal(size=(n_text, heads))
    table = _table(a, a[:, swap])
    pooled = model_distance(table, "base", "tuned", depth_bins=3, n_boot=20, n_perm=99, n_split=0)
    # Each text keeps its multiset of values: W1 is 0 overall and in every depth bin, every
    # relabelling reaches it, p = 1.
    assert (pooled["w1"] <= 1e-12).all() and (pooled["p_value"] == 1.0).all(), pooled
    rows = head_shift_test(table, "base", "tuned", "ahon_ln", n_perm=999)
    moved = {(r.layer, r.head) for r in rows.itertuples() if r.moved}
    assert moved == {(0, 0), (0, 3)}
    assert (rows.loc[~rows["moved"], "t"] == 0).all() and (rows.loc[~rows["moved"], "p_max_t"] == 1).all()
    assert np.sign(rows.loc[rows["moved"], "mean_diff"]).tolist() == [1.0, -1.0]  # (0,0) rose, (0,3) fell

    # With re-scoring noise the pooled distribution is unchanged in law: pooled W1 rejects at about
    # 5% (at most 5 of 20 datasets; P(X >= 6) = 3e-4 at 5%), the per-head test finds both heads.
    pooled_hits, found = 0, 0
    for draw in range(20):
        rng = np.random.default_rng([4, draw])
        truth = level + 0.3 * rng.normal(size=(n_text, 1)) + 0.3 * rng.normal(size=(n_text, heads))
        noisy = _table(truth + 0.1 * rng.normal(size=truth.shape), truth[:, swap] + 0.1 * rng.normal(size=truth.shape))
        p = model_distance(noisy, "base", "tuned", depth_bins=0, n_boot=0, n_perm=99, n_split=0, seed=draw)
        pooled_hits += p["p_value"].item() <= 0.05
        rows = head_shift_test(noisy, "base", "tuned", "ahon_ln", n_perm=999, seed=draw)
        found += {(r.layer, r.head) for r in rows.itertuples() if r.moved} >= {(0, 0), (0, 3)}
    assert pooled_hits <= 5 and found == 20, (pooled_hits, found)


def test_heads_shifted_by_less_than_half_an_sd_are_found_by_both_tests() -> None:
    """A quarter of the heads shift by 0.4 SD of their values across texts; re-scoring a text with
    the tuned model moves each head by a further 0.2 SD of noise."""
    n_text, heads = 32, LAYERS * HEADS
    shifted = np.zeros(heads, dtype=bool)
    shifted[[0, 5, 10]] = True
    pooled_p, found, false_alarms = [], 0, 0
    for draw in range(10):
        rng = np.random.default_rng([5, draw])
        a = np.linspace(0, 3, heads) + 0.6 * rng.normal(size=(n_text, 1)) + 0.8 * rng.normal(size=(n_text, heads))
        b = a + 0.4 * shifted + 0.2 * rng.normal(size=a.shape)  # per-head SD across texts is 1
        table = _table(a, b)
        pooled_p.append(
            model_distance(table, "base", "tuned", depth_bins=0, n_boot=0, n_perm=199, n_split=0)["p_value"].item()
        )
        rows = head_shift_test(table, "base", "tuned", "ahon_ln", n_perm=999, seed=draw)
        moved = rows["moved"].to_numpy()
        found += moved[shifted].all()
        false_alarms += moved[~shifted].any()
    assert max(pooled_p) <= 0.01, pooled_p
    # Every shifted head in every dataset; a false alarm in at most 3 of 10 (FWER 5%: P(X >= 4) = 1e-3).
    assert found == 10 and false_alarms <= 3, (found, false_alarms)


def test_pairing_is_within_texts() -> None:
    """Texts differ by far more than the models: a constant shift of 0.05 on every head is found by
    the paired test (labels swapped within texts) and lost by an unpaired one (texts reshuffled)."""
    rng = np.random.default_rng(6)
    a = 10 * rng.normal(size=(32, 1)) + rng.normal(size=(32, 2 * HEADS))
    table = _table(a, a + 0.05)
    paired = model_distance(table, "base", "tuned", depth_bins=0, n_boot=0, n_perm=199, n_split=0)
    unpaired = model_distance(table, "base", "tuned", depth_bins=0, n_boot=0, n_perm=199, n_split=0, design="unpaired")
    assert paired["design"].item() == "paired" and paired["p_value"].item() == 1 / 200
    assert unpaired["p_value"].item() > 0.5


def test_standardised_distance_divides_by_the_reference_iqr_per_depth() -> None:
    rng = np.random.default_rng(2)
    a = rng.gamma(2.0, size=(40, LAYERS * HEADS)) * np.repeat([1.0, 5.0, 20.0], HEADS)
    table = _table(a, a * 1.1 + 0.1)
    res = model_distance(table, "base", "tuned", depth_bins=3, n_boot=50, n_perm=0, n_split=0)
    for row in res.itertuples():
        layers = range(LAYERS) if row.depth == ALL_DEPTHS else [depth_labels(3).index(row.depth)]
        values = a[:, [k for k in range(LAYERS * HEADS) if k // HEADS in layers]]
        iqr = np.quantile(values, 0.75) - np.quantile(values, 0.25)
        assert row.iqr_a == pytest.approx(iqr, rel=1e-12)
        assert row.w1_iqr == pytest.approx(row.w1 / iqr, rel=1e-12)
        assert (row.w1_iqr_low, row.w1_iqr_high) == pytest.approx((row.ci_low / iqr, row.ci_high / iqr), rel=1e-12)
        assert row.w1_iqr_low <= row.w1_iqr <= row.w1_iqr_high
    # Scaling a score rescales W1 and its IQR together: the standardised distance does not change.
    scaled = model_distance(
        _table(a * 7, (a * 1.1 + 0.1) * 7), "base", "tuned", depth_bins=3, n_boot=0, n_perm=0, n_split=0
    )
    np.testing.assert_allclose(scaled["w1_iqr"], res["w1_iqr"], rtol=1e-9)
    np.testing.assert_allclose(scaled["w1"], 7 * res["w1"], rtol=1e-9)


def test_permutation_count_lets_holm_over_the_family_reach_one_percent() -> None:
    for n_tests in (1, 3, 24, 84, 1000):
        n_perm = permutations_for(n_tests, 0.01)
        assert holm_floor(n_tests, n_perm) <= 0.01 < holm_floor(n_tests, n_perm - 1)
    assert permutations_for(24, 0.01) == 2399
    with pytest.raises(ValueError, match="at least one test and 0 < alpha <= 1"):
        permutations_for(0, 0.01)
    # Two comparisons of 3 depth rows each: a family of 6; a clear shift reaches p_holm = 0.006 <= 0.01.
    rng = np.random.default_rng(1)
    a = 0.3 * rng.normal(size=(24, LAYERS * HEADS))
    n_perm = permutations_for(6, 0.01)
    tables = [
        model_distance(_table(a, a + shift), "base", "tuned", depth_bins=2, n_boot=0, n_perm=n_perm, n_split=0)
        for shift in (0.5, 0.3 * rng.normal(size=a.shape))
    ]
    family = holm_family(tables)
    assert len(family) == 6 and family["n_tests"].eq(6).all() and family["p_holm_min"].eq(6 / (1 + n_perm)).all()
    expected = multipletests(pd.concat(tables)["p_value"], method="holm")[1]
    np.testing.assert_allclose(family["p_holm"], expected, rtol=1e-12)
    assert (family["p_holm"].iloc[:3] <= 0.01).all()
    with pytest.raises(ValueError, match="these lack p_value"):
        holm_family(pd.DataFrame({"w1": [0.1]}))


def _mqa_table(kv_column: bool) -> pd.DataFrame:
    """One model of 2 layers x 4 heads sharing one KV head per layer: avvn is equal within a layer
    (it reads the shared value vectors), avvn_ln = avvn / layer mean (1 up to fp32 round-off)."""
    rng = np.random.default_rng(10)
    n_text, layers, heads = 5, 2, 4
    shape = (n_text, layers, heads)
    avvn = np.broadcast_to(rng.gamma(3.0, size=(n_text, layers, 1)), shape).astype(np.float32)
    ahon = rng.gamma(3.0, size=shape).astype(np.float32)
    frame = pd.DataFrame(
        {
            "model": "mqa",
            "dataset": "texts",
            "sample_id": np.repeat(np.arange(n_text), layers * heads),
            "layer": np.tile(np.repeat(np.arange(layers), heads), n_text),
            "head": np.tile(np.arange(heads), n_text * layers),
            "avvn": avvn.reshape(-1),
            "avvn_ln": (avvn / avvn.mean(axis=2, keepdims=True, dtype=np.float32)).reshape(-1),
            "ahon": ahon.reshape(-1),
            "ahon_ln": (ahon / ahon.mean(axis=2, keepdims=True)).reshape(-1),
        }
    )
    if kv_column:
        frame.insert(4, "kv_head", 0)
    return frame


def test_a_score_constant_by_construction_is_named_with_its_reason() -> None:
    table = _mqa_table(kv_column=True)
    found = constant_scores(table, "mqa")
    assert list(found.index) == ["avvn", "avvn_ln"]  # ahon and ahon_ln tell heads apart
    assert "mqa has one KV head per layer" in found["avvn_ln"] and "is 1 for every head" in found["avvn_ln"]
    assert "does not vary at all" in found["avvn_ln"]
    assert "ranks layers, not heads" in found["avvn"]
    # Without the kv_head column the values still show it; the reason then names no cause.
    bare = constant_scores(_mqa_table(kv_column=False), "mqa")
    assert list(bare.index) == ["avvn", "avvn_ln"] and "KV head" not in bare["avvn_ln"]
    # Leaving them out is one filter; what is left keeps its tests.
    kept = [s for s in ("avvn", "avvn_ln", "ahon", "ahon_ln") if s not in found.index]
    assert kept == ["ahon", "ahon_ln"]
    assert constant_scores(table, "mqa", ["ahon_ln"]).empty
    with pytest.raises(ValueError, match="model 'other' is not in the score table"):
        constant_scores(table, "other")


@pytest.mark.integration
def test_on_the_real_models_only_gemmas_value_vector_scores_are_constant() -> None:
    """Gemma-3 270M has one KV head per layer (4 query heads): its value-vector scores are named,
    with the cause; SmolLM2 (3 KV heads for 9 query heads) has none."""
    import headstats

    texts = ["The capital of France is Paris, and the capital of Italy is Rome.", "Water boils at 100 degrees."]
    found = {}
    for name in ("gemma3-270m", "smollm2-135m"):
        model, tokenizer = headstats.load_model(name)
        frame = headstats.score_texts(model, tokenizer, texts).assign(model=name, dataset="texts")
        found[name] = constant_scores(frame, name)
    assert set(found["gemma3-270m"].index) == {"ftvvn", "ftvvn_ln", "avvn", "avvn_ln"}
    assert all("one KV head per layer" in reason for reason in found["gemma3-270m"])
    assert "is 1 for every head" in found["gemma3-270m"]["avvn_ln"]
    assert found["smollm2-135m"].empty
