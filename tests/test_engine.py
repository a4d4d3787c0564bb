"""The score engine against docs/concepts.md#scores: every score id on every family, padding, GQA, equivalence."""

from __future__ import annotations

import pytest
import torch
from families import CONFIGS, VOCAB, attention_modules, reference_scores, tiny_model
from inline_model import InlineConfig, InlineForCausalLM

import headstats
from headstats.engine import attention as attention_module
from headstats.engine.attention import UnsupportedModelError
from headstats.engine.probe import Probe
from headstats.engine.scores import score_ids

SCORE_IDS = score_ids()

SEQUENCES = [
    [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37],
    [2, 4, 6, 8],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12, 14, 15],
    [42],
]
NON_RANDOM = [s for s in SCORE_IDS if s != "random"]


def as_tensor(frame, sample_id: int, score: str, shape: torch.Size) -> torch.Tensor:
    rows = frame[frame.sample_id == sample_id].sort_values(["layer", "head"])
    return torch.tensor(rows[score].to_numpy()).view(shape)


@pytest.mark.parametrize("family", list(CONFIGS))
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_every_score_matches_an_independent_eager_computation(family: str, padding_side: str) -> None:
    model = tiny_model(family)
    frame = headstats.score_sequences(model, SEQUENCES, batch_size=3, padding_side=padding_side)
    for i, ids in enumerate(SEQUENCES):
        ref = reference_scores(model, ids)
        for score in NON_RANDOM:
            got = as_tensor(frame, i, score, ref[score].shape)
            torch.testing.assert_close(got, ref[score].float(), rtol=2e-5, atol=1e-6, msg=f"{family} {score} seq {i}")


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3"])
def test_scores_do_not_depend_on_batch_composition(family: str) -> None:
    model = tiny_model(family)
    alone = [headstats.score_sequences(model, [ids]) for ids in SEQUENCES]
    for batch_size, side in [(2, "left"), (4, "right"), (4, "left")]:
        batched = headstats.score_sequences(model, SEQUENCES, batch_size=batch_size, padding_side=side)
        for i in range(len(SEQUENCES)):
            rows = batched[batched.sample_id == i].reset_index(drop=True)
            for score in NON_RANDOM:
                torch.testing.assert_close(
                    torch.tensor(rows[score].to_numpy()), torch.tensor(alone[i][score].to_numpy()), rtol=1e-5, atol=1e-6
                )


def test_table_layout_and_dtypes() -> None:
    model = tiny_model("llama")
    frame = headstats.score_sequences(model, SEQUENCES)
    assert list(frame.columns[:5]) == ["sample_id", "layer", "head", "kv_head", "n_tokens"]
    assert list(frame.columns[5:]) == list(SCORE_IDS)
    assert len(frame) == len(SEQUENCES) * 3 * 4
    assert str(frame["sample_id"].dtype) == "int64" and str(frame["layer"].dtype) == "int16"
    assert all(str(frame[s].dtype) == "float32" for s in SCORE_IDS)
    counts = frame.groupby("sample_id")["n_tokens"].first().tolist()
    assert counts == [len(s) for s in SEQUENCES]
    # GQA: 4 query heads over 2 KV heads -> heads 0,1 read KV head 0.
    assert frame[frame.layer == 0]["kv_head"].tolist()[:4] == [0, 0, 1, 1]


def test_value_scores_are_shared_within_a_kv_group() -> None:
    frame = headstats.score_sequences(tiny_model("llama"), SEQUENCES)
    for score in ("ftvvn", "avvn"):
        spread = frame.groupby(["sample_id", "layer", "kv_head"])[score].agg(lambda x: x.max() - x.min())
        assert spread.max() == 0.0
    # ... while attention-based scores differ between the heads of a group.
    assert frame.groupby(["sample_id", "layer", "kv_head"])["awft"].nunique().max() > 1


def test_layer_normalised_scores_average_to_one_and_zero_means_give_zero() -> None:
    frame = headstats.score_sequences(tiny_model("qwen2"), SEQUENCES)
    long = frame[frame.sample_id == 0]
    for score in ("awft_ln", "ahon_ln", "fhon_ln", "avvn_ln"):
        assert long.groupby("layer")[score].mean().sub(1).abs().max() < 1e-5
    # A one-token sequence has entropy 0 in every head: the layer mean is 0 and entropy_ln is 0, not NaN.
    one = frame[frame.sample_id == 3]
    assert (one["entropy"] == 0).all() and (one["entropy_ln"] == 0).all()
    assert (one["awft"] == 1).all()


def test_random_scores_are_uniform_and_independent_of_batching() -> None:
    model = tiny_model("llama")
    many = [[1 + (i % 50), 2, 3] for i in range(64)]
    a = headstats.score_sequences(model, many, batch_size=64)
    b = headstats.score_sequences(model, many, batch_size=5, padding_side="left")
    assert (a["random"].to_numpy() == b["random"].to_numpy()).all()
    u = a["random"].to_numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.03
    assert len(set(u.tolist())) > 0.99 * len(u)  # independent draws per (sequence, layer, head)
    other_seed = headstats.score_sequences(model, many, seed=1)
    assert (other_seed["random"].to_numpy() != u).mean() > 0.99


@pytest.mark.parametrize("family", ["gemma3"] + [f for f in ("falcon_alibi",) if f in CONFIGS])
def test_chunked_query_rows_give_the_same_numbers(family: str) -> None:
    model = tiny_model(family)
    whole = headstats.score_sequences(model, SEQUENCES, batch_size=4)
    with Probe(model, SCORE_IDS, chunk_bytes=1) as probe, torch.no_grad():  # one query row per chunk
        assert probe.chunk_bytes == 1
        chunked = []
        for ids in SEQUENCES:
            model(torch.tensor([ids]), use_cache=False)
            chunked.append({s: probe.last.scores[s][0] for s in NON_RANDOM})
    for i in range(len(SEQUENCES)):
        for score in NON_RANDOM:
            got = chunked[i][score]
            torch.testing.assert_close(as_tensor(whole, i, score, got.shape), got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", list(CONFIGS))
def test_output_equals_the_unmodified_model(family: str) -> None:
    model = tiny_model(family)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12], [0, 0, 0, 4, 5, 6, 7, 8]])
    mask = torch.tensor([[1] * 8, [0, 0, 0, 1, 1, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, position_ids=positions).logits
        with Probe(model, SCORE_IDS):
            observed = model(ids, attention_mask=mask, position_ids=positions).logits
    valid = mask.bool()
    torch.testing.assert_close(observed[valid], expected[valid], rtol=1e-4, atol=1e-5)
    assert model.config._attn_implementation == "eager"  # restored on exit


def test_plain_headstats_attention_outside_a_probe_generates() -> None:
    model = tiny_model("llama", attn="headstats")
    reference = tiny_model("llama", attn="sdpa")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=5, do_sample=False)
        ref = reference.generate(ids, max_new_tokens=5, do_sample=False)
    assert out.tolist() == ref.tolist()


def test_probe_records_only_requested_scores_and_needs_2d_mask() -> None:
    model = tiny_model("mistral")
    with Probe(model, ["ahon_ln"]) as probe, torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))
        assert set(probe.last.scores) == {"ahon_ln"}
        with pytest.raises(ValueError, match="2-D"):
            model(torch.tensor([[1, 2, 3]]), attention_mask=torch.ones(1, 1, 3, 3))
    with pytest.raises(ValueError, match="unknown score id 'nope'"):
        Probe(model, ["nope"])


def test_architectures_without_the_attention_interface_are_refused() -> None:
    inline = InlineForCausalLM(InlineConfig(vocab_size=VOCAB))  # attention written inline, no AttentionInterface
    with pytest.raises(UnsupportedModelError, match="AttentionInterface"):
        headstats.score_sequences(inline, SEQUENCES)
    with pytest.raises(UnsupportedModelError, match="PreTrainedModel"):
        headstats.score_sequences(torch.nn.Linear(2, 2), SEQUENCES)


def test_bad_sequences_are_refused() -> None:
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="no sequences"):
        headstats.score_sequences(model, [])
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        headstats.score_sequences(model, [[1, 2], []])


def test_full_head_output_norm_uses_each_heads_slice_of_w_o() -> None:
    # Scaling one head's slice of W_O scales that head's fhon and no other score of that layer.
    model = tiny_model("llama")
    before = headstats.score_sequences(model, SEQUENCES[:1])
    proj = attention_modules(model)[1].o_proj
    with torch.no_grad():
        proj.weight[:, 16:32] *= 3.0  # head 1 of layer 1 (head_dim 16)
    after = headstats.score_sequences(model, SEQUENCES[:1])
    ratio = after["fhon"].to_numpy() / before["fhon"].to_numpy()
    changed = (after["layer"] == 1) & (after["head"] == 1)
    assert abs(ratio[changed.to_numpy()][0] - 3.0) < 1e-4
    same_input = ((after["layer"] <= 1) & ~changed).to_numpy()  # layer 2 reads the changed output
    assert abs(ratio[same_input] - 1.0).max() < 1e-5


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3"])
def test_scores_without_attention_weights_take_the_fused_path_with_the_same_numbers(family: str) -> None:
    # No awft/entropy requested: outputs come from PyTorch's fused SDPA kernel instead of explicit
    # probabilities. Numbers and model outputs must not change.
    model = tiny_model(family)
    fused_ids = ["ftvvn", "avvn_ln", "lthon", "lthon_ln", "lthon_hn", "ahon_ln", "fhon", "fhon_ln"]
    assert not any(headstats.SCORES[s].needs_weights for s in fused_ids)
    full = headstats.score_sequences(model, SEQUENCES, batch_size=4, padding_side="left")
    fused = headstats.score_sequences(model, SEQUENCES, batch_size=4, padding_side="left", scores=fused_ids)
    for score in fused_ids:
        torch.testing.assert_close(
            torch.tensor(fused[score].to_numpy()), torch.tensor(full[score].to_numpy()), rtol=1e-5, atol=1e-6
        )
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [0, 0, 4, 5, 6, 7]])
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, position_ids=positions).logits
        with Probe(model, ["ahon_ln"]):
            observed = model(ids, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(observed[mask.bool()], expected[mask.bool()], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", ["gemma3", "llama", "gpt2"])
@pytest.mark.parametrize("scores", [SCORE_IDS, ["ahon_ln", "fhon", "avvn"]], ids=["explicit", "fused"])
def test_long_sequence_mode_builds_mask_rows_lazily_with_the_same_numbers(
    family: str, scores: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # When attention is chunked (long sequences), the mask function hands the attention a RowMask
    # and each chunk builds only its own rows: the S x S mask never exists. Forced here with a
    # tiny chunk budget; padding, sliding windows and every score must come out unchanged.
    model = tiny_model(family)
    whole = headstats.score_sequences(model, SEQUENCES, batch_size=4, padding_side="left", scores=scores)
    built: list[int] = []
    rows = attention_module.RowMask.rows
    monkeypatch.setattr(attention_module.RowMask, "rows", lambda m, a, b: built.append(b - a) or rows(m, a, b))
    monkeypatch.setattr(attention_module, "DEFAULT_CHUNK_BYTES", 64)
    chunked = headstats.score_sequences(model, SEQUENCES, batch_size=4, padding_side="left", scores=scores)
    assert built and max(built) < max(map(len, SEQUENCES))  # row blocks, never the whole mask
    for score in [s for s in scores if s != "random"]:
        torch.testing.assert_close(
            torch.tensor(chunked[score].to_numpy()), torch.tensor(whole[score].to_numpy()), rtol=1e-5, atol=1e-6
        )
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13], [0, 0, 0, 4, 5, 6, 7, 8, 9]])
    mask = torch.tensor([[1] * 9, [0, 0, 0, 1, 1, 1, 1, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, position_ids=positions).logits
        with Probe(model, scores):
            observed = model(ids, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(observed[mask.bool()], expected[mask.bool()], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_padded_tokens_count_what_length_sorted_batches_compute(batch_size: int) -> None:
    from headstats.engine.batching import length_sorted_batches, padded_tokens

    gen = torch.Generator().manual_seed(batch_size)
    lengths = torch.randint(1, 90, (37,), generator=gen).tolist()
    batches = length_sorted_batches([[1] * n for n in lengths], batch_size)
    assert padded_tokens(lengths, batch_size) == sum(b.input_ids.numel() for b in batches)
    assert padded_tokens([5, 5, 5], 2) == 15 and padded_tokens([9, 1, 1, 1], 2) == 20  # padding counts
