"""Interventions against docs/concepts.md#zeroing: zeroing policies, calibration, sweeps, curve summaries."""

from __future__ import annotations

import copy
import importlib
import itertools
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from families import CONFIGS, VOCAB, attention_modules, out_projection, tiny_model
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint
from transformers.pytorch_utils import Conv1D

import headstats
from headstats import (
    ablate_heads,
    summarize_curves,
    summarize_interventions,
    threshold_for_fraction,
    thresholds_for_fractions,
)
from headstats.engine.batching import pad_batch
from headstats.engine.probe import Probe
from headstats.stats import curves as C
from headstats.stats.paired import mcnemar_exact

FAMILIES = ["llama", "qwen2", "gpt2"] + [f for f in ("falcon",) if f in CONFIGS]  # Falcon: transformers >= 5.25
SEQUENCES = [
    [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37],
    [2, 4, 6, 8],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12, 14, 15],
    [42, 7, 99],
]


def padded(sequences=SEQUENCES, side="left"):
    return pad_batch(sequences, list(range(len(sequences))), padding_side=side)


def logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch.model_inputs(), use_cache=False).logits


def valid_logits(out: torch.Tensor, batch) -> torch.Tensor:
    return out[batch.attention_mask.bool()]


def without_heads(model, heads_per_layer: dict[int, list[int]]):
    """An independent way to remove heads: a copy whose output projection ignores their outputs
    (the in_features slice of a Linear W_O, the rows of GPT-2's Conv1D c_proj)."""
    surgery = copy.deepcopy(model)
    config = surgery.config
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    with torch.no_grad():
        for layer, heads in heads_per_layer.items():
            proj = out_projection(attention_modules(surgery)[layer])
            for h in heads:
                if isinstance(proj, Conv1D):
                    proj.weight[h * d : (h + 1) * d, :] = 0
                else:
                    proj.weight[:, h * d : (h + 1) * d] = 0
    return surgery


# -- zeroing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_static_zeroing_equals_removing_the_heads_slice_of_w_o(family: str) -> None:
    model = tiny_model(family)
    heads = [(0, 1), (1, 3), (2, 0), (2, 2)]
    batch = padded()
    with ablate_heads(model, heads=heads) as ab:
        got = logits(model, batch)
    ref = logits(without_heads(model, {0: [1], 1: [3], 2: [0, 2]}), batch)
    torch.testing.assert_close(valid_logits(got, batch), valid_logits(ref, batch), rtol=1e-5, atol=2e-5)
    assert not torch.allclose(valid_logits(got, batch), valid_logits(logits(model, batch), batch), atol=1e-3)
    masks = ab.zero_masks()
    assert masks.shape == (len(SEQUENCES), 3, 4)
    expected = torch.zeros(3, 4, dtype=torch.bool)
    for layer, head in heads:
        expected[layer, head] = True
    assert torch.equal(masks, expected.expand_as(masks))
    assert ab.realised_fraction() == pytest.approx(4 / 12)
    assert ab.mode == "static" and ab.scores() == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_layers_by_heads_mask_is_the_pairs_form(family: str) -> None:
    model = tiny_model(family)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[0, 1] = mask[1, 3] = mask[2, 0] = mask[2, 2] = True
    batch = padded()
    with ablate_heads(model, mask=mask) as by_mask:
        got = logits(model, batch)
    with ablate_heads(model, heads=[(0, 1), (1, 3), (2, 0), (2, 2)]) as by_pairs:
        ref = logits(model, batch)
    assert torch.equal(got, ref)
    assert torch.equal(by_mask.zero_masks(), by_pairs.zero_masks())
    assert by_mask.heads == by_pairs.heads and by_mask.mode == "static"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_per_sequence_mask_zeroes_each_rows_heads_in_its_own_sequence(family: str) -> None:
    """Row b of a (batch, layers, heads) mask acts on the b-th sequence as the pairs form of that row
    acts on the sequence alone."""
    model = tiny_model(family)
    mask = torch.rand(len(SEQUENCES), 3, 4, generator=torch.Generator().manual_seed(1)) < 0.3
    mask[0] = False  # a row that zeroes nothing
    batch = padded()
    with ablate_heads(model, mask=mask) as ab:
        got = logits(model, batch)
    assert torch.equal(ab.zero_masks(), mask)
    for b, ids in enumerate(SEQUENCES):
        pairs = [tuple(p) for p in mask[b].nonzero().tolist()]
        with ablate_heads(model, heads=pairs):
            alone = logits(model, padded([ids]))[0]
        torch.testing.assert_close(got[b][batch.attention_mask[b].bool()], alone, rtol=1e-5, atol=2e-5)
    assert not torch.allclose(got[1], logits(model, batch)[1], atol=1e-3)  # row 1 zeroed something


def test_a_per_sequence_mask_refuses_a_batch_of_another_size() -> None:
    model = tiny_model("llama")
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    with (
        pytest.raises(ValueError, match=r"one row per sequence \(2\) but this forward pass has 4"),
        ablate_heads(model, mask=mask),
    ):
        logits(model, padded())
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("score", ["ahon_ln", "awft"])
def test_a_threshold_that_selects_nothing_gives_the_plain_logits(family: str, score: str) -> None:
    model = tiny_model(family)
    batch = padded()
    plain = logits(model, batch)
    table = headstats.score_sequences(model, SEQUENCES, scores=[score])
    tau = threshold_for_fraction(table, score, 0.0)  # the minimum (maximum for awft)
    # The ablated batch is left-padded, the table's right-padded: its scores agree to fp32 round-off, not
    # bit for bit, so the threshold sits a relative 1e-5 beyond the extreme and selects nothing.
    tau *= 1 + 1e-5 if headstats.get_score(score).inactive_when == "above" else 1 - 1e-5
    with ablate_heads(model, score=score, threshold=tau) as ab:
        got = logits(model, batch)
    assert ab.realised_fraction() == 0.0
    assert ab.zeroed_per_sequence().tolist() == [0] * len(SEQUENCES)
    torch.testing.assert_close(valid_logits(got, batch), valid_logits(plain, batch), rtol=1e-5, atol=2e-5)
    # Through the very same attention path with no policy, the numbers are bit-identical.
    with Probe(model, [score]):
        observed = logits(model, batch)
    assert torch.equal(valid_logits(got, batch), valid_logits(observed, batch))


def test_random_zeroing_realises_p_within_sampling_error_with_the_documented_draws() -> None:
    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(1)
    sequences = [
        torch.randint(1, 128, (int(n),), generator=gen).tolist() for n in torch.randint(3, 12, (240,), generator=gen)
    ]
    p, seed = 0.3, 7
    with ablate_heads(model, score="random", threshold=p, seed=seed) as ab, torch.no_grad():
        for start in range(0, len(sequences), 60):
            chunk = sequences[start : start + 60]
            batch = pad_batch(chunk, list(range(len(chunk))), padding_side="right")
            ab.probe.forward(batch.model_inputs(), torch.arange(start, start + len(chunk)))
    masks, keys = ab.zero_masks(), ab.sample_keys()
    n = masks.numel()
    assert n == 240 * 3 * 4
    assert abs(ab.realised_fraction() - p) < 4 * math.sqrt(p * (1 - p) / n)
    # Each head of each sequence: one fp32 U(0, 1) draw fixed by (seed, sample key, layer), zeroed when u < p.
    for row, key in enumerate(keys.tolist()):
        for layer in range(3):
            u = np.random.default_rng([seed, 0, key, layer]).random(4, dtype=np.float32)  # salt 0
            assert masks[row, layer].tolist() == (u < p).tolist()
    assert ab.mode == "random"


def test_random_zeroing_at_p_0_and_1() -> None:
    model = tiny_model("llama")
    batch = padded()
    for p, expected in ((0.0, 0.0), (1.0, 1.0)):
        with ablate_heads(model, score="random", threshold=p) as ab:
            logits(model, batch)
        assert ab.realised_fraction() == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_leaving_the_context_restores_the_exact_logits(family: str) -> None:
    model = tiny_model(family)
    batch = padded(side="right")
    before = logits(model, batch)
    impl = model.config._attn_implementation
    with ablate_heads(model, score="ahon_ln", threshold=0.9):
        changed = logits(model, batch)
    assert not torch.allclose(changed, before, atol=1e-3)
    assert torch.equal(logits(model, batch), before) and model.config._attn_implementation == impl
    with pytest.raises(KeyError), ablate_heads(model, heads=[(0, 0)]):
        raise KeyError("an error inside the block")
    assert torch.equal(logits(model, batch), before) and model.config._attn_implementation == impl


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_dynamic_zeroing_is_decided_on_the_already_intervened_model_at_all_positions(family: str) -> None:
    model = tiny_model(family)
    batch = padded()
    plain = headstats.score_sequences(model, SEQUENCES, scores=["ahon_ln"])
    tau = threshold_for_fraction(plain, "ahon_ln", 0.3)
    with ablate_heads(model, score="ahon_ln", threshold=tau, record_scores=True) as ab:
        got = logits(model, batch)
    masks, recorded = ab.zero_masks(), ab.scores()["ahon_ln"]
    assert torch.equal(masks, recorded < tau)  # the decision rule, "below" direction, strict
    plain_scores = torch.tensor(plain["ahon_ln"].to_numpy()).view(len(SEQUENCES), 3, 4)
    changed = 0
    for b, ids in enumerate(SEQUENCES):
        # Independent reference: this sequence's zeroed heads removed from W_O. Scores of layer l
        # depend only on zeroing in layers < l, so the surgery model's scores are what the dynamic
        # policy saw at every layer, and its logits (every position) are what zeroing must give.
        heads = {layer: torch.nonzero(masks[b, layer]).flatten().tolist() for layer in range(3)}
        surgery = without_heads(model, heads)
        ref_scores = torch.tensor(headstats.score_sequences(surgery, [ids], scores=["ahon_ln"])["ahon_ln"].to_numpy())
        torch.testing.assert_close(recorded[b].reshape(-1), ref_scores, rtol=1e-5, atol=1e-6)
        single = pad_batch([ids], [0])
        mine = got[b][batch.attention_mask[b].bool()]
        torch.testing.assert_close(mine, logits(surgery, single)[0], rtol=1e-5, atol=2e-5)
        changed += int(not torch.allclose(recorded[b, 1:], plain_scores[b, 1:], atol=1e-4))
        torch.testing.assert_close(recorded[b, 0], plain_scores[b, 0], rtol=1e-5, atol=1e-6)
    assert changed > 0, "zeroing in early layers should change the scores of later layers"


def test_ablate_heads_refuses_bad_input() -> None:
    model = tiny_model("llama")
    cases = [
        (dict(), "either score="),
        (dict(score="ahon_ln", threshold=0.5, heads=[(0, 0)]), "not both"),
        (dict(score="nope", threshold=0.5), "unknown score id 'nope'"),
        (dict(score="ahon_ln"), "needs a threshold"),
        (dict(score="ahon_ln", threshold=float("nan")), "finite"),
        (dict(score="ahon_ln", threshold=float("inf")), "finite"),
        (dict(score="ahon_ln", threshold="0.5"), "real number"),
        (dict(score="random", threshold=1.5), "outside the values the score takes [0, 1]"),
        (dict(score="random", threshold=-0.1), "outside the values the score takes [0, 1]"),
        (dict(heads=[(3, 0)]), "out of range: the model has 3 layers (0..2) and 4 heads"),
        (dict(heads=[(0, 4)]), "out of range"),
        (dict(heads=[(0, -1)]), "out of range"),
        (dict(heads=[(0, 1.5)]), "pairs of integers"),
        (dict(heads=[0]), "(layer, head) pairs"),
        (dict(heads=[(0, 0)], threshold=0.1), "takes no threshold"),
        (dict(mask=torch.ones(3, 4, dtype=torch.bool), heads=[(0, 0)]), "not both (heads and mask given)"),
        (dict(mask=torch.ones(3, 4)), "must be a bool tensor (True = zero the head), got dtype torch.float32"),
        (dict(mask=torch.ones(3, 5, dtype=torch.bool)), "mask has shape (3, 5): give (layers, heads) = (3, 4)"),
        (dict(mask=torch.ones(4, dtype=torch.bool)), "mask has shape (4,)"),
        (dict(mask="heads"), "must be a bool tensor of shape (layers, heads)"),
        (dict(mask=torch.ones(3, 4, dtype=torch.bool), threshold=0.1), "takes no threshold"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=None) as err, ablate_heads(model, **kwargs):
            pass
        assert message in str(err.value), (kwargs, str(err.value))
    assert model.config._attn_implementation == "eager"


def test_realised_fraction_needs_a_forward_pass() -> None:
    model = tiny_model("llama")
    with ablate_heads(model, heads=[]) as ab:
        pass
    with pytest.raises(ValueError, match="no forward pass"):
        ab.realised_fraction()


# -- calibration -----------------------------------------------------------------------------------


def type4_quantile(values: np.ndarray, level: float) -> float:
    """Hyndman-Fan type 4 by hand: the ECDF through (x_(k), k/N), inverted linearly, clamped."""
    x = np.sort(values)
    k = np.arange(1, len(x) + 1) / len(x)
    return float(np.interp(level, k, x))


def calibration_table(n: int = 997, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "sample_id": np.repeat(np.arange(n // 7 + 1), 7)[:n],
            "ahon_ln": rng.gamma(2.0, 0.5, n).astype(np.float32),
            "awft": rng.beta(0.5, 2.0, n).astype(np.float32),
        }
    )


@pytest.mark.parametrize("score", ["ahon_ln", "awft"])
def test_thresholds_are_the_documented_quantiles(score: str) -> None:
    table = calibration_table()
    values = table[score].to_numpy(np.float64)
    ps = [0.0, 0.001, 0.05, 0.1, 0.137, 0.3, 0.5, 0.99, 1.0]
    got = thresholds_for_fractions(table, score, ps)
    above = score == "awft"
    expected = [type4_quantile(values, 1 - p if above else p) for p in ps]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert [threshold_for_fraction(table, score, p) for p in ps] == got.tolist()
    assert got.dtype == np.float64
    for p, tau in zip(ps, got, strict=True):
        selected = np.mean(values > tau) if above else np.mean(values < tau)
        if p == 0:
            assert selected == 0  # p = 0 selects nothing under the strict inequality
        assert abs(selected - p) <= 1 / len(values) + 1e-12


def test_random_needs_no_calibration_and_bad_calibration_input_is_refused() -> None:
    assert thresholds_for_fractions(None, "random", [0, 0.25, 1]).tolist() == [0, 0.25, 1]
    table = calibration_table()
    cases = [
        (lambda: threshold_for_fraction(table, "entropy", 0.1), "no 'entropy' column"),
        (lambda: threshold_for_fraction(table.iloc[:0], "ahon_ln", 0.1), "empty"),
        (lambda: threshold_for_fraction(None, "ahon_ln", 0.1), "needs a score table"),
        (lambda: threshold_for_fraction(table, "ahon_ln", 1.2), "outside [0, 1]"),
        (lambda: threshold_for_fraction(table, "ahon_ln", -0.01), "outside [0, 1]"),
        (lambda: threshold_for_fraction(table, "ahon_ln", float("nan")), "finite"),
        (lambda: threshold_for_fraction(table, "random", 2.0), "outside [0, 1]"),
        (lambda: threshold_for_fraction(table, "bogus", 0.1), "unknown score id"),
        (lambda: threshold_for_fraction(table.assign(model=["a", "b"] * 498 + ["a"]), "ahon_ln", 0.1), "mixes 2"),
        (lambda: threshold_for_fraction(table.assign(ahon_ln=np.nan), "ahon_ln", 0.1), "non-finite"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as err:
            call()
        assert message in str(err.value), str(err.value)


# -- curves and summaries --------------------------------------------------------------------------


def test_within_one_point_and_areas_on_hand_made_curves() -> None:
    # Crosses once, between 10% (49.5) and 20% (48): 10 + 10 * 0.5 / 1.5.
    x, y = [0, 10, 20, 30], [50, 49.5, 48, 47]
    c = C.within_one_point(x, y, 50)
    assert c.crosses and c.value == pytest.approx(10 + 10 / 3)
    assert C.normalised_auc(x, y) == pytest.approx((497.5 + 487.5 + 475) / 30)
    assert C.grid_auc(x, y, 20) == pytest.approx((497.5 + 487.5) / 20)
    # Goes back up: the first drop counts and the curve is flagged non-monotone (the default reading,
    # docs/statistics.md#within-one-point); the study's reading takes the *last* crossing. The order of
    # the points does not matter.
    c = C.within_one_point([20, 0, 30, 10], [50, 50, 48.5, 48], 50)
    assert c == C.Crossing(5.0, True, censored=False, non_monotone=True)
    c = C.within_one_point([20, 0, 30, 10], [50, 50, 48.5, 48], 50, reading="study")
    assert c.crosses and c.value == pytest.approx(20 + 10 / 1.5)
    # Never drops a point inside the swept range: censored at the largest realised % (a lower bound);
    # the study's reading gives 0.
    c = C.within_one_point([0, 10, 20], [50, 49.8, 49.5], 50)
    assert (c.value, c.crosses, c.censored) == (20.0, False, True)
    c = C.within_one_point([0, 10, 20], [50, 49.8, 49.5], 50, reading="study")
    assert (c.value, c.crosses, c.censored) == (0.0, False, False)
    # A point exactly on the level is a crossing, in both readings.
    assert C.within_one_point([0, 10], [50, 49], 50) == C.Crossing(10.0, True)
    assert C.within_one_point([0, 10], [50, 49], 50, reading="study") == C.Crossing(10.0, True)
    # A curve that does not reach the grid's range has no grid area; a zero-width curve no normalised area.
    assert math.isnan(C.grid_auc([0, 5], [50, 49], 10))
    assert math.isnan(C.normalised_auc([3, 3], [50, 49]))
    assert C.common_upper([[0, 12.5, 30], [0, 8.0], [0, 40]]) == 8.0


def per_question(
    score: str, target: float, realised: float, correct: np.ndarray, threshold: float = 0.5
) -> pd.DataFrame:
    n = len(correct)
    n_heads = 200
    return pd.DataFrame(
        {
            "model": "m",
            "task": "t",
            "subject": np.where(np.arange(n) % 2 == 0, "s1", "s2"),
            "question_id": np.arange(n) // 2,
            "score": score,
            "target": target,
            "threshold": math.nan if score == "baseline" else threshold,
            "correct": correct.astype(bool),
            "n_zeroed": np.full(n, round(realised * n_heads / 100)),
            "n_heads": n_heads,
        }
    )


def flip(correct: np.ndarray, lose: int, gain: int = 0) -> np.ndarray:
    out = correct.copy()
    out[np.flatnonzero(correct)[:lose]] = False
    out[np.flatnonzero(~correct)[:gain]] = True
    return out


def test_point_summary_accuracy_interval_and_paired_tests_against_statsmodels() -> None:
    rng = np.random.default_rng(0)
    base = rng.random(200) < 0.5
    point = flip(base, lose=9, gain=3)
    df = pd.concat([per_question("baseline", math.nan, 0, base), per_question("ahon_ln", 0.1, 12.0, point, 0.8)])
    summary = summarize_interventions(df, n_resamples=4000)
    assert summary["score"].tolist() == ["baseline", "ahon_ln"]
    row = summary.iloc[1]
    k = int(point.sum())
    low, high = proportion_confint(k, 200, alpha=0.05, method="wilson")
    assert row["accuracy"] == pytest.approx(100 * k / 200)
    assert (row["acc_low"], row["acc_high"]) == pytest.approx((100 * low, 100 * high))
    assert row["realised_pct"] == pytest.approx(12.0) and row["threshold"] == 0.8 and row["n_paired"] == 200
    assert row["diff"] == pytest.approx(100 * (point.mean() - base.mean()))
    assert (row["only_baseline"], row["only_intervened"]) == (9, 3)
    table = [[int((base & point).sum()), 9], [3, int((~base & ~point).sum())]]
    # The rows have subjects, so the test flips whole subjects; by question it is McNemar's exact test.
    subjects = np.where(np.arange(200) % 2 == 0, "s1", "s2")
    assert row["cluster"] == "subject"
    assert row["mcnemar_p"] == pytest.approx(mcnemar_exact(base, point, clusters=subjects).pvalue)
    by_question = summarize_interventions(df, n_resamples=4000, cluster="question_id").iloc[1]
    assert by_question["mcnemar_p"] == pytest.approx(sm_mcnemar(table, exact=True).pvalue)
    assert row["diff_low"] <= row["diff"] <= row["diff_high"]
    assert math.isnan(summary.iloc[0]["mcnemar_p"]) and math.isnan(summary.iloc[0]["threshold"])
    # Pairing is by (subject, question_id), not by row order.
    shuffled = pd.concat([df.iloc[:200], df.iloc[200:].sample(frac=1, random_state=1)])
    pd.testing.assert_frame_equal(summarize_interventions(shuffled, n_resamples=4000), summary)


def test_curve_summary_reproduces_the_hand_computed_numbers() -> None:
    base = np.zeros(200, dtype=bool)
    base[:100] = True  # 50%
    df = pd.concat(
        [
            per_question("baseline", math.nan, 0, base),
            # ahon_ln: 50, 49.5, 48, 47.5 at 0, 10, 20, 30%
            per_question("ahon_ln", 0.0, 0.0, base),
            per_question("ahon_ln", 0.1, 10.0, flip(base, 1)),
            per_question("ahon_ln", 0.2, 20.0, flip(base, 4)),
            per_question("ahon_ln", 0.3, 30.0, flip(base, 5)),
            # random: same answers as the baseline at 10%, then 10 points worse at 20%
            per_question("random", 0.1, 10.0, base),
            per_question("random", 0.2, 20.0, flip(base, 20)),
            # awft: never drops a point (49.5 at most); no point at 0% -> the baseline anchors the curve there
            per_question("awft", 0.1, 5.0, flip(base, 1, 1)),
            per_question("awft", 0.2, 25.0, flip(base, 1)),
        ]
    )
    curves = summarize_curves(df).set_index("score")
    ahon = curves.loc["ahon_ln"]
    assert ahon["baseline"] == 50 and ahon["crosses"] and ahon["within_1pt"] == pytest.approx(10 + 10 / 3)
    assert ahon["norm_auc"] == pytest.approx((497.5 + 487.5 + 477.5) / 30)
    assert curves["grid_upper"].unique().tolist() == [20.0]  # the common range of the three curves
    assert ahon["grid_auc"] == pytest.approx((497.5 + 487.5) / 20)
    assert curves.loc["random", "grid_auc"] == pytest.approx((500 + (50 + 40) / 2 * 10) / 20)
    awft = curves.loc["awft"]
    # awft never drops a point: censored at its largest realised % (25), not 0.
    assert (awft["within_1pt"], awft["crosses"], awft["censored"], awft["n_points"]) == (25.0, False, True, 2)
    assert not ahon["censored"] and not ahon["non_monotone"] and (curves["reading"] == "first").all()
    study = summarize_curves(df, reading="study").set_index("score")
    assert (study.loc["awft", "within_1pt"], study.loc["awft", "censored"]) == (0.0, False)
    assert study.loc["ahon_ln", "within_1pt"] == pytest.approx(10 + 10 / 3)
    # Honest bracket. random: identical answers at 10% do not certify it with 200 questions (the
    # score bound of a drop with no changed answer is z^2 / (n + z^2) = 1.3 points); 20% is 10 points
    # worse, significantly more than 1, so it is excluded.
    rnd = curves.loc["random"]
    assert (rnd["within_1pt_certified"], rnd["certified_open"], rnd["within_1pt_not_excluded"]) == (0.0, False, 10.0)
    # ahon_ln at 10%: one question lost of 200 (-0.5 point) cannot be certified within 1 point with
    # 200 questions, nor excluded; 20% (-2, 4 lost, none gained) is not significantly worse than -1,
    # 30% (-2.5, 5 lost) is: its one-sided 95% lower bound is 1.13 points.
    assert ahon["within_1pt_certified"] == 0.0 and ahon["within_1pt_not_excluded"] == pytest.approx(20.0)
    assert ahon["n_questions"] == 200 and 0 < ahon["mdd_80"] < 10


def test_summaries_refuse_bad_input() -> None:
    base = np.ones(10, dtype=bool)
    with pytest.raises(ValueError, match="no intervention rows"):
        summarize_interventions(pd.DataFrame())
    with pytest.raises(ValueError, match="lack the column"):
        summarize_interventions(per_question("baseline", 0, 0, base).drop(columns="n_zeroed"))
    twice = pd.concat([per_question("baseline", 0, 0, base)] * 2)
    with pytest.raises(ValueError, match="appears twice"):
        summarize_interventions(twice)
    with pytest.raises(ValueError, match="no baseline rows"):
        summarize_curves(per_question("random", 0.1, 10, base))


# -- sweeps ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_mmlu_model(smollm2_tiny_llama, smollm2_tokenizer):
    """A tiny random Llama that reads the embedded model's tokenizer, so real MMLU prompts run in seconds."""
    return smollm2_tiny_llama(), smollm2_tokenizer


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 11, 16])
def test_points_run_coarse_to_fine_so_a_stopped_sweep_spans_the_range(n: int) -> None:
    from headstats.jobs.sweep_plan import coarse_to_fine

    targets = [round(i / 20, 2) for i in range(n)]
    order = coarse_to_fine(list(reversed(targets)))
    assert sorted(order) == targets  # every target once
    assert order[: min(n, 2)] == [targets[0], targets[-1]][: min(n, 2)]  # both ends first
    # Every prefix of k points is a grid over the whole range: its widest gap (in target steps) is at
    # most twice the narrowest that k points including both ends allow.
    for k in range(2, n + 1):
        have = sorted(targets.index(t) for t in order[:k])
        widest = max(b - a for a, b in itertools.pairwise(have))
        assert widest <= 2 * math.ceil((n - 1) / (k - 1))
    assert coarse_to_fine([0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]) == [0, 0.3, 0.15, 0.05, 0.2, 0.1, 0.25]


def test_sweep_writes_per_question_rows_one_file_per_point_and_resumes(tiny_mmlu_model, tmp_path, monkeypatch) -> None:
    ev = importlib.import_module("headstats.jobs.evaluate")
    from headstats.io.tasks import collection_source
    from headstats.jobs.sweep import run_sweep

    model, tokenizer = tiny_mmlu_model
    calls, planned = [], []
    real_evaluate, real_plan = ev.evaluate, ev.model_sequences
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: calls.append(1) or real_evaluate(*a, **k))
    monkeypatch.setattr(ev, "model_sequences", lambda *a, **k: planned.append(1) or real_plan(*a, **k))
    sweep = dict(task="mmlu", tokenizer=tokenizer, scores="ahon_ln,random", limit=2, out=tmp_path, progress=False)
    partition = run_sweep(model, targets=[0, 0.5], **sweep)
    assert len(planned) == 1  # the task is tokenised once for all of the sweep's passes
    assert partition == tmp_path / "model=tiny-llama" / "task=mmlu"
    names = sorted(p.name for p in partition.glob("*.parquet"))
    assert names == sorted(
        ["baseline.parquet", *(f"point-{s}-{t}.parquet" for s in ("ahon_ln", "random") for t in (0, 0.5))]
    )
    # The baseline pass doubles as the calibration pass, and p = 0 points (which provably zero
    # nothing when calibrated on the evaluation prompts) reuse its answers: 1 + 2 passes.
    assert len(calls) == 3

    df = headstats.io.store.read_interventions(tmp_path)
    expected = [
        "subject",
        "question_id",
        "score",
        "target",
        "threshold",
        "correct",
        "correct_norm",
        "gold_loglik",
        "pred",
        "n_choices",
        "n_zeroed",
        "n_heads",
        "model",
        "task",
    ]
    assert list(df.columns) == expected and len(df) == 10
    assert str(df["target"].dtype) == "float64" and str(df["threshold"].dtype) == "float64"
    assert set(df["model"]) == {"tiny-llama"} and set(df["task"]) == {"mmlu"} and set(df["n_heads"]) == {8}
    base = df[df.score == "baseline"].sort_values("question_id").reset_index(drop=True)
    assert base["threshold"].isna().all() and (base["n_zeroed"] == 0).all()
    # The p = 0 points carry the baseline's answers.
    for score in ("ahon_ln", "random"):
        p0 = df[(df.score == score) & (df.target == 0)].sort_values("question_id").reset_index(drop=True)
        assert (p0["n_zeroed"] == 0).all()
        assert (
            p0["gold_loglik"].tolist() == base["gold_loglik"].tolist() and p0["pred"].tolist() == base["pred"].tolist()
        )
    # Calibration on the evaluation prompts: the type-4 quantile of the un-intervened scores of exactly
    # those prompts, computed here independently from the collection source of the same questions.
    # (limit=2 draws the same seeded, subject-stratified sample in the sweep and in the source)
    prompts = [ids for _, ids in collection_source("mmlu").iter_sequences(tokenizer, limit=2, sample="random")]
    table = headstats.score_sequences(model, prompts, scores=["ahon_ln"])
    tau = df.loc[(df.score == "ahon_ln") & (df.target == 0.5), "threshold"].unique()
    assert len(tau) == 1 and tau[0] == pytest.approx(type4_quantile(table["ahon_ln"].to_numpy(np.float64), 0.5))
    assert df.loc[(df.score == "ahon_ln") & (df.target == 0.5), "n_zeroed"].sum() > 0
    assert (df.loc[(df.score == "random") & (df.target == 0.5), "threshold"] == 0.5).all()
    prov = headstats.io.store.read_provenance(partition)
    assert prov["model"] == "tiny-llama" and prov["calibration"] == "eval" and prov["seed"] == 0
    assert prov["quantile_method"] == "interpolated_inverted_cdf"
    assert prov["machine"]["device"] == "cpu" and prov["machine"]["torch_threads"] == torch.get_num_threads()
    # Each point's file records its own pass: wall time, or None where it reused the baseline's answers.
    timed = {f.name: headstats.io.store.file_provenance(f)["point"] for f in partition.glob("*.parquet")}
    assert timed["point-ahon_ln-0.parquet"]["seconds"] is None and timed["point-random-0.parquet"]["seconds"] is None
    ran = [timed[n]["seconds"] for n in ("baseline.parquet", "point-ahon_ln-0.5.parquet", "point-random-0.5.parquet")]
    assert all(isinstance(t, float) and t > 0 for t in ran)
    cpu = [timed[n]["cpu_seconds"] for n in ("baseline.parquet", "point-ahon_ln-0.5.parquet")]
    assert all(isinstance(t, float) and t > 0 for t in cpu) and timed["point-ahon_ln-0.parquet"]["cpu_seconds"] is None
    assert isinstance(prov["machine"]["bf16_units"], list)
    assert timed["point-random-0.5.parquet"]["finished"] >= timed["baseline.parquet"]["finished"]

    # Resuming: finished points are skipped; thresholds come from _calibration.json; a new target
    # needs a new calibration (baseline) pass; an interrupted point leaves no file (atomic writes).
    before = (partition / "point-random-0.parquet").stat().st_mtime_ns
    (partition / "point-random-0.5.parquet").unlink()
    (partition / "point-ahon_ln-0.5.parquet").unlink()
    calls.clear()
    run_sweep(model, targets=[0, 0.5], **sweep)
    assert len(calls) == 2 and (partition / "point-random-0.parquet").stat().st_mtime_ns == before
    resumed = headstats.io.store.read_interventions(tmp_path)
    pd.testing.assert_frame_equal(
        resumed.sort_values(["score", "target", "question_id"]).reset_index(drop=True),
        df.sort_values(["score", "target", "question_id"]).reset_index(drop=True),
    )
    calls.clear()
    run_sweep(model, targets=[0, 0.25, 0.5], **sweep)
    assert len(calls) == 3  # calibration pass + ahon_ln @ 0.25 + random @ 0.25
    calls.clear()
    run_sweep(model, targets=[0, 0.5], **sweep)
    assert calls == []
    assert not [p for p in partition.iterdir() if p.name.startswith(".")]
    with pytest.raises(headstats.io.store.StoreError, match="different run"):
        run_sweep(model, targets=[0], **{**sweep, "limit": 1})

    # The summary reads the files back; the CLI prints it without loading a model.
    points = summarize_interventions(headstats.io.store.read_interventions(tmp_path))
    assert len(points) == 7 and points.iloc[0]["score"] == "baseline"
    from headstats.cli import main

    assert main(["summary", str(tmp_path)]) == 0


def test_sweep_calibrates_on_a_held_out_dataset_or_score_tables_and_an_interrupted_point_leaves_nothing(
    tiny_mmlu_model, tmp_path, monkeypatch
) -> None:
    ev = importlib.import_module("headstats.jobs.evaluate")
    from headstats.engine.scoring import iter_score_tables
    from headstats.io.tasks import collection_source
    from headstats.jobs.sweep import run_sweep

    model, tokenizer = tiny_mmlu_model
    books = [ids for _, ids in collection_source("books").iter_sequences(tokenizer, limit=4)]
    table = headstats.score_sequences(model, books, scores=["ahon_ln", "awft"])
    expected = {
        "ahon_ln": type4_quantile(table["ahon_ln"].to_numpy(np.float64), 0.2),
        "awft": type4_quantile(table["awft"].to_numpy(np.float64), 0.8),  # "above": the (1 - p)-quantile
    }
    sweep = dict(task="mmlu", tokenizer=tokenizer, scores="ahon_ln,awft", targets=[0.2], limit=2, progress=False)
    run_sweep(model, out=tmp_path / "a", calibration="books", calibration_limit=4, **sweep)
    # The same data as a score-table directory (what `headstats collect` writes).
    tables_dir = tmp_path / "tables" / "model=tiny-llama" / "dataset=books"
    for i, part in enumerate(iter_score_tables(model, enumerate(books), score_ids=["ahon_ln", "awft"], progress=False)):
        headstats.io.store.write_parquet_atomic(part, tables_dir / f"part-{i}.parquet")
    run_sweep(model, out=tmp_path / "b", calibration=str(tmp_path / "tables"), **sweep)
    for out in ("a", "b"):
        df = headstats.io.store.read_interventions(tmp_path / out)
        for score, tau in expected.items():
            assert df.loc[df.score == score, "threshold"].unique() == pytest.approx([tau], rel=1e-12), (out, score)
    assert (
        "books" in headstats.io.store.read_provenance(tmp_path / "a" / "model=tiny-llama" / "task=mmlu")["calibration"]
    )

    calls = []
    real_evaluate = ev.evaluate

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_evaluate(*a, **k)

    monkeypatch.setattr(ev, "evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(model, out=tmp_path / "c", calibration="books", calibration_limit=4, **sweep)
    partition = tmp_path / "c" / "model=tiny-llama" / "task=mmlu"
    assert sorted(p.name for p in partition.iterdir()) == ["_calibration.json", "_provenance.json", "baseline.parquet"]


def test_one_kernel_per_sweep_so_a_pass_that_zeroes_nothing_is_the_baseline_bit_for_bit_in_bf16() -> None:
    # A bf16 body rounds the explicit kernel's and fused SDPA's outputs differently and amplifies the
    # difference; a sweep with a probability-reading score (awft) runs every pass explicitly.
    # (Wide enough that the two kernels' bf16 outputs differ here without materialise=True: logits
    # by up to 4e-3 on the machine this was written on.)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval().to(torch.bfloat16)
    sequences = [[(7 * i + 3 * j) % (VOCAB - 1) + 1 for j in range(120 + 9 * i)] for i in range(4)]
    batch = pad_batch(sequences, list(range(len(sequences))), padding_side="left")
    heads = model.config.num_attention_heads

    def never(layer, scores, keys):
        return torch.zeros(len(keys), heads, dtype=torch.bool)

    with Probe(model, ("awft",), never, keep_history=True):
        baseline = logits(model, batch)
    with ablate_heads(model, score="ahon_ln", threshold=0.0) as ab:
        fused = logits(model, batch)
    if torch.equal(valid_logits(fused, batch), valid_logits(baseline, batch)):
        pytest.skip("the fused and explicit kernels round alike on this CPU in bf16: nothing to tell apart")
    with ablate_heads(model, score="ahon_ln", threshold=0.0, materialise=True) as ab:
        nothing = logits(model, batch)
    assert ab.realised_fraction() == 0.0
    assert torch.equal(valid_logits(nothing, batch), valid_logits(baseline, batch))
    with ablate_heads(model, score="random", threshold=0.0, materialise=True):
        assert torch.equal(valid_logits(logits(model, batch), batch), valid_logits(baseline, batch))


def _rewrite_point_record(path, **changes) -> None:
    """Rewrite a point file's own record (``None`` removes a field), as files of older runs have it."""
    import pyarrow.parquet as pq

    prov = headstats.io.store.file_provenance(path)
    for key, value in changes.items():
        if value is None:
            prov["point"].pop(key, None)
        else:
            prov["point"][key] = value
    headstats.io.store.write_parquet_atomic(pq.read_table(path), path, prov)


def test_sweep_points_record_their_kernel_and_points_of_another_kernel_are_run_again(
    tiny_mmlu_model, tmp_path, monkeypatch
) -> None:
    ev = importlib.import_module("headstats.jobs.evaluate")
    from headstats.jobs.sweep import run_sweep

    model, tokenizer = tiny_mmlu_model
    calls = []
    real_evaluate = ev.evaluate

    def recording(*a, **k):
        assert k["share_prefix"] is False  # every pass of a sweep runs whole sequences
        calls.append(k["probe"].materialise)
        return real_evaluate(*a, **k)

    monkeypatch.setattr(ev, "evaluate", recording)
    sweep = dict(task="mmlu", tokenizer=tokenizer, targets=[0, 0.5], limit=2, out=tmp_path, progress=False)
    partition = run_sweep(model, scores="awft,ahon_ln,random", **sweep)
    # Every pass (calibration baseline, awft, ahon_ln and random at 0.5) materialised the probabilities.
    assert calls == [True] * 4
    records = {f.name: headstats.io.store.file_provenance(f)["point"] for f in partition.glob("*.parquet")}
    assert len(records) == 7 and all(r["materialise"] is True for r in records.values())
    assert all(r["whole_sequences"] is True for r in records.values())
    before = headstats.io.store.read_interventions(tmp_path)

    # A point computed with the other kernel is computed again; so is a file of a run that predates
    # the record, where the pass's own scores chose the kernel (ahon_ln and random: fused).
    _rewrite_point_record(partition / "point-ahon_ln-0.5.parquet", materialise=False)
    for name in ("point-random-0.5.parquet", "point-awft-0.5.parquet", "baseline.parquet", "point-random-0.parquet"):
        _rewrite_point_record(partition / name, materialise=None)
    calls.clear()
    run_sweep(model, scores="awft,ahon_ln,random", **sweep)
    assert calls == [True, True]  # ahon_ln and random at 0.5; awft, the baseline and its p = 0 copies stay
    records = {f.name: headstats.io.store.file_provenance(f)["point"] for f in partition.glob("*.parquet")}
    assert records["point-ahon_ln-0.5.parquet"]["materialise"] is True
    assert "materialise" not in records["point-awft-0.5.parquet"]
    after = headstats.io.store.read_interventions(tmp_path)
    pd.testing.assert_frame_equal(
        after.sort_values(["score", "target", "question_id"]).reset_index(drop=True),
        before.sort_values(["score", "target", "question_id"]).reset_index(drop=True),
    )

    # A sweep whose scores read no probabilities runs fused SDPA throughout.
    calls.clear()
    other = run_sweep(model, scores="ahon_ln", **{**sweep, "out": tmp_path / "fused"})
    assert calls == [False, False]
    assert {headstats.io.store.file_provenance(f)["point"]["materialise"] for f in other.glob("*.parquet")} == {False}

    # Files of runs that predate the whole-sequence record tried prefix reuse: kept where no two of the
    # task's sequences share a prefix (two questions of two subjects), computed again where they do
    # (two questions of one subject share its 5-shot prefix).
    def forget_path(part):
        for f in part.glob("*.parquet"):
            _rewrite_point_record(f, whole_sequences=None)

    forget_path(other)
    calls.clear()
    run_sweep(model, scores="ahon_ln", **{**sweep, "out": tmp_path / "fused"})
    assert calls == []
    shared = dict(sweep, out=tmp_path / "shared", subjects="abstract_algebra")
    one_subject = run_sweep(model, scores="ahon_ln", **shared)
    forget_path(one_subject)
    calls.clear()
    run_sweep(model, scores="ahon_ln", **shared)
    assert calls == [False, False]  # the baseline and ahon_ln at 0.5; p = 0 copies the new baseline
    assert all(
        headstats.io.store.file_provenance(f)["point"]["whole_sequences"] is True for f in one_subject.glob("*.parquet")
    )
    calibration = headstats.io.store.read_calibration(one_subject)
    assert calibration["path"] == {"materialise": False, "whole_sequences": True}
    # Thresholds from passes of another path (here: a calibration that predates the record, on
    # sequences sharing a prefix) do not prove that p = 0 zeroes nothing on this path: it is run.
    del calibration["path"]
    headstats.io.store.write_calibration(one_subject, calibration)
    calls.clear()  # (the p = 0 copy already made is not trusted either)
    run_sweep(model, scores="ahon_ln", **shared)
    assert calls == [False]
    assert headstats.io.store.file_provenance(one_subject / "point-ahon_ln-0.parquet")["point"]["seconds"] > 0


def test_a_score_tied_at_its_extreme_zeroes_nothing_and_its_points_reuse_the_baseline(
    smollm2_tiny_llama, smollm2_tokenizer, tmp_path, monkeypatch, caplog
) -> None:
    # One KV head per layer (Gemma-3 270M's geometry): avvn is the same for every query head of a
    # layer, so avvn_ln is 1 everywhere, every threshold is 1 and no head crosses it.
    ev = importlib.import_module("headstats.jobs.evaluate")
    from headstats.jobs.sweep import run_sweep

    tokenizer = smollm2_tokenizer
    model = smollm2_tiny_llama("tiny-mqa", num_key_value_heads=1)
    calls = []
    real_evaluate = ev.evaluate
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: calls.append(1) or real_evaluate(*a, **k))
    sweep = dict(task="mmlu", tokenizer=tokenizer, limit=2, out=tmp_path, progress=False)
    with caplog.at_level("WARNING", logger="headstats"):
        partition = run_sweep(model, scores="avvn_ln,ahon_ln", targets=[0, 0.25, 0.5], **sweep)
    warned = [r.getMessage() for r in caplog.records if "one KV head per layer" in r.getMessage()]
    assert len(warned) == 1 and "avvn_ln is the same for every head of a layer" in warned[0]
    assert "ahon_ln" not in warned[0].split(":")[0]
    assert len(calls) == 3  # the calibration baseline, then ahon_ln at 0.25 and 0.5; no avvn_ln pass
    df = headstats.io.store.read_interventions(tmp_path)
    avvn = df[df.score == "avvn_ln"]
    assert set(avvn["threshold"]) == {1.0} and (avvn["n_zeroed"] == 0).all()
    base = df[df.score == "baseline"].sort_values("question_id")
    for t in (0.25, 0.5):
        point = avvn[avvn.target == t].sort_values("question_id")
        assert point["gold_loglik"].tolist() == base["gold_loglik"].tolist()
        assert headstats.io.store.file_provenance(partition / f"point-avvn_ln-{t}.parquet")["point"]["seconds"] is None
    # ... which is what running it gives: with the threshold at the tie nothing is zeroed.
    from headstats.engine.batching import pad_batch as pad

    ids = tokenizer("The cat sat on the mat because it was warm.")["input_ids"]
    batch = pad([ids, ids[:5]], [0, 1], padding_side="left")
    with ablate_heads(model, score="avvn_ln", threshold=1.0) as ab:
        logits(model, batch)
    assert ab.realised_fraction() == 0.0
    assert (df[(df.score == "ahon_ln") & (df.target == 0.5)]["n_zeroed"] > 0).any()
    # The report says the score zeroed nothing rather than reading its flat curve as censored.
    from headstats.report import writer as report

    report.build_report(tmp_path, tmp_path / "r", dpi=30, progress=False)
    table = pd.read_csv(tmp_path / "r" / "tables" / "main_table.csv", dtype=str, keep_default_na=False)
    assert table.loc[0, "avvn_ln"] == "no head zeroed" and table.loc[0, "ahon_ln"] != "no head zeroed"
    # Grouped-query models are not flagged; scores reading the attention or the outputs never are.
    from headstats.engine.zeroing import tied_within_layers

    assert tied_within_layers(model, ["avvn", "ftvvn_ln", "ahon_ln", "awft", "random"]) == ("avvn", "ftvvn_ln")
    assert tied_within_layers(tiny_model("llama"), ["avvn", "ftvvn_ln"]) == ()
    assert tied_within_layers(tiny_model("gpt2"), ["avvn"]) == ()


BUNDLED_DATA = pytest.mark.integration  # these rows read the bundled MMLU data before refusing


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "nope"], "unknown task 'nope'"),
        (["--scores", "ahon_ln,bogus"], "unknown score id 'bogus'"),
        (["--scores", "baseline"], "always run"),
        (["--targets", "0,1.5"], "outside [0, 1]"),
        (["--targets", "0,-0.1"], "outside [0, 1]"),
        (["--targets", "0,x"], "not a number"),
        pytest.param(["--subjects", "not_a_subject"], "unknown MMLU subject", marks=BUNDLED_DATA),
        (["--prompt-format", "weird"], "unknown prompt format"),
        (["--calibration", "no-such-dataset"], "unknown calibration 'no-such-dataset': give eval"),
        pytest.param(["--model", "no/such-model-dir-./"], "not found", marks=BUNDLED_DATA),
        (["--device", "warp-drive"], "unknown device"),
        (["--dtype", "float7"], "unknown dtype"),
    ],
)
def test_cli_refuses_bad_input_before_loading_a_model_and_writes_nothing(args, message, tmp_path, monkeypatch, capsys):
    from headstats.cli import main
    from headstats.io import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model was loaded before validation"))
    out = tmp_path / "out"
    base = {"--model": "smollm2-135m", "--task": "mmlu", "--limit": "2", "--out": str(out)}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    code = main(["ablate", *(x for kv in base.items() for x in kv)])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.integration  # the bundled MMLU data
def test_cli_refuses_an_empty_task_slice_an_unwritable_out_and_bad_calibration_tables(tmp_path, monkeypatch, capsys):
    import datasets

    from headstats.cli import main
    from headstats.io import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model was loaded before validation"))
    empty = tmp_path / "data"
    one = datasets.Dataset.from_dict({"goal": ["g"], "sol1": ["a"], "sol2": ["b"], "label": [0]})
    one.filter(lambda _: False).save_to_disk(
        str(empty / "hf_datasets" / "piqa" / "plain_text" / "validation"), num_shards=1
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    scores_dir = tmp_path / "scores"
    table = pd.DataFrame({"sample_id": [0, 0], "layer": [0, 0], "head": [0, 1], "awft": [0.5, 0.2]})
    headstats.io.store.write_parquet_atomic(
        pa.Table.from_pandas(table),
        scores_dir / "model=smollm2-135m" / "dataset=books" / "p.parquet",
    )
    cases = [
        (["--task", "piqa", "--data-dir", str(empty), "--out", str(tmp_path / "o1")], "selected no questions"),
        (["--task", "mmlu", "--out", str(blocker / "sub")], "is a file"),
        (["--task", "mmlu", "--out", str(tmp_path / "o2"), "--calibration", str(scores_dir)], "no 'ahon_ln' column"),
        (
            [
                "--task",
                "mmlu",
                "--out",
                str(tmp_path / "o3"),
                "--calibration",
                str(scores_dir),
                "--model",
                "gemma3-270m",
            ],
            "no rows of model 'gemma3-270m'",
        ),
        (["--task", "mmlu"], "needs --out"),
    ]
    for args, message in cases:
        # A list flag given twice is merged (--model a --model b is both), so each case names its model once.
        model = [] if "--model" in args else ["--model", "smollm2-135m"]
        argv = ["ablate", *model, "--limit", "2", "--scores", "ahon_ln", *args]
        assert main(argv) == 2, args
        assert message in capsys.readouterr().err, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "data", "scores"]


@pytest.mark.integration
def test_a_tiny_real_sweep_on_the_embedded_model(tmp_path) -> None:
    from headstats.io.tasks import load_task
    from headstats.jobs.evaluate import evaluate
    from headstats.jobs.sweep import run_sweep

    model, tokenizer = headstats.load_model("smollm2-135m", device="cpu")
    run_sweep(
        model, "mmlu", tokenizer=tokenizer, scores="ahon_ln", targets=[0, 0.1], limit=2, out=tmp_path, progress=False
    )
    df = headstats.io.store.read_interventions(tmp_path)
    assert set(df["n_heads"]) == {30 * 9} and len(df) == 3 * 2
    base = df[df.score == "baseline"].sort_values("question_id")
    plain = evaluate(model, tokenizer, load_task("mmlu", limit=2, sample="random"), progress=False).sort_values(
        "question_id"
    )
    # The baseline runs through headstats' attention; it agrees with the plain (SDPA) model.
    np.testing.assert_allclose(base["gold_loglik"], plain["gold_loglik"], rtol=1e-4, atol=1e-4)
    assert base["pred"].tolist() == plain["pred"].astype("int64").tolist()
    zeroed = df[(df.score == "ahon_ln") & (df.target == 0.1)]
    assert 0 < (zeroed["n_zeroed"] / zeroed["n_heads"]).mean() < 0.5
    curves = summarize_curves(df)
    assert curves["score"].tolist() == ["ahon_ln"] and (curves["baseline"] == 100 * base["correct"].mean()).all()


def test_a_pinned_kernel_joins_sweeps_of_different_scores_answer_for_answer(
    smollm2_tiny_llama, smollm2_tokenizer, tmp_path
) -> None:
    """``attention_kernel = explicit`` makes a sweep of ``ahon_ln`` alone (which reads no
    probabilities, so ``auto`` runs fused SDPA) run the explicit kernel, so its baseline equals, answer
    for answer and log-likelihood for log-likelihood, the baseline of a sweep with ``awft`` (which
    needs that kernel); the pin is part of the run's key, and a fused pin refuses a score that reads
    the probabilities."""
    from headstats.jobs.sweep import run_sweep
    from headstats.options import SpecError

    tokenizer = smollm2_tokenizer
    # A bf16 body rounds the two kernels differently.
    model = smollm2_tiny_llama().to(torch.bfloat16)
    sweep = dict(task="mmlu", tokenizer=tokenizer, targets=[0, 0.5], limit=6, progress=False)
    run_sweep(model, scores="awft", out=tmp_path / "awft", **sweep)
    run_sweep(model, scores="ahon_ln", out=tmp_path / "pinned", attention_kernel="explicit", **sweep)
    run_sweep(model, scores="ahon_ln", out=tmp_path / "auto", **sweep)

    def baseline(name: str) -> pd.DataFrame:
        rows = headstats.io.store.read_interventions(tmp_path / name)
        rows = rows[rows["score"] == "baseline"].sort_values(["subject", "question_id"])
        return rows[["subject", "question_id", "gold_loglik", "pred", "correct"]].reset_index(drop=True)

    if baseline("auto")["gold_loglik"].equals(baseline("awft")["gold_loglik"]):
        pytest.skip("the fused and explicit kernels round alike on this CPU in bf16: nothing to tell apart")
    pd.testing.assert_frame_equal(baseline("pinned"), baseline("awft"))
    partition = tmp_path / "pinned" / "model=tiny-llama" / "task=mmlu"
    records = [headstats.io.store.file_provenance(f)["point"] for f in partition.glob("*.parquet")]
    assert {r["materialise"] for r in records} == {True}
    assert headstats.io.store.read_provenance(partition)["settings"]["attention_kernel"] == "explicit"
    # Unpinned, ahon_ln runs fused SDPA: its baseline is another path's (equal up to bf16 rounding).
    assert np.allclose(baseline("auto")["gold_loglik"], baseline("awft")["gold_loglik"], atol=0.5)
    with pytest.raises(headstats.io.store.StoreError, match="attention_kernel"):
        run_sweep(model, scores="ahon_ln", out=tmp_path / "pinned", attention_kernel="fused", **sweep)
    with pytest.raises(SpecError, match=r"awft read.* the attention probabilities.*pin attention_kernel = explicit"):
        run_sweep(model, scores="awft", out=tmp_path / "x", attention_kernel="fused", **sweep)
