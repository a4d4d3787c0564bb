"""Shared-prefix reuse (engine/prefix.py): running a few-shot prefix once gives the numbers of whole
passes — scores, log-likelihoods, static zeroing — with left and right padding, and the policies that
decide heads from the whole sequence keep whole passes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from families import CONFIGS, SHARPENED
from transformers import AutoModelForCausalLM, DynamicCache

import headstats
import headstats.engine.prefix as P
import headstats.jobs.evaluate as ev
from headstats.engine import scores as S
from headstats.engine.probe import Probe
from headstats.engine.scoring import iter_score_tables
from headstats.io.tasks import PromptRenderer, load_task, resolve_format

# Llama (GQA), Gemma-3 (sliding windows shorter than the prompts, so suffix batches of a local model),
# Gemma-2 (softcapping: the explicit-probabilities path for every score), GPT-2 (absolute positions) and,
# where transformers routes it through the interface, Falcon with ALiBi (the model adds its position
# bias to the mask itself: an additive mask that blocks every key of a padded row, and lazy row masks
# it must see whole).
FAMILIES = ["llama", "gemma3", "gemma2", "gpt2"] + [f for f in ("falcon_alibi",) if f in CONFIGS]
NON_RANDOM = [sid for sid in S.score_ids() if not S.SCORES[sid].is_random]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def mmlu(data_dir):
    return load_task("mmlu", data_dir=data_dir)


def family_model(family: str, vocab_size: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    config = CONFIGS[family]()
    config.vocab_size = vocab_size
    for attr in ("max_position_embeddings", "n_positions"):  # the 5-shot prompts are ~290 tokens: no truncation
        if hasattr(config, attr):
            setattr(config, attr, 1024)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=headstats.ATTN_IMPLEMENTATION)
    with torch.no_grad():  # sharper attention than random init, so heads and choices differ
        for name, p in model.named_parameters():
            if any(k in name for k in SHARPENED) and p.dim() == 2:
                p.mul_(4.0)
    return model.to(dtype).eval()


@pytest.fixture(scope="module", params=FAMILIES)
def model(request: pytest.FixtureRequest, tokenizer) -> torch.nn.Module:
    return family_model(request.param, len(tokenizer))


def contexts(mmlu, tokenizer) -> list[list[int]]:
    """The MMLU 5-shot prompts (header, five dev shots, question), one per question."""
    renderer = PromptRenderer(resolve_format("tokenizer", tokenizer), tokenizer)
    return [renderer.requests(q)[0][0] for q in mmlu.questions]


@pytest.fixture
def prefix_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lengths of the prefixes actually run once (proof that reuse happened)."""
    calls: list[int] = []
    original = P.encode_prefix

    def counting(model, ids, *args, **kwargs):
        calls.append(len(ids))
        return original(model, ids, *args, **kwargs)

    monkeypatch.setattr(P, "encode_prefix", counting)
    return calls


def collect(model, sequences, *, share_prefix: bool, padding_side: str = "right", batch_size: int = 3):
    tables = iter_score_tables(
        model,
        enumerate(sequences),
        batch_size=batch_size,
        padding_side=padding_side,
        progress=False,
        share_prefix=share_prefix,
    )
    frame = pa.concat_tables(list(tables)).to_pandas()
    return frame.sort_values(["sample_id", "layer", "head"]).reset_index(drop=True)


# -- grouping ---------------------------------------------------------------------------------------


def test_groups_are_sequences_sharing_a_long_prefix_and_keep_their_read_positions() -> None:
    header = list(range(100, 110))
    shots_a, shots_b = list(range(200, 260)), list(range(300, 360))
    seqs = [
        header + shots_a + [1, 2, 3],
        header + shots_b + [4, 5],
        header + shots_a + [1, 7],
        header + shots_a + [8],
        header + shots_b + [4, 6, 6],
        [9] * 50,
    ]
    groups, rest = P.shared_prefix_groups(seqs, keep=1, min_length=32)
    found = {tuple(g.members): g.length for g in groups}
    # Members in token order; a group's prefix is what all its members share (subject b: "4" too).
    assert found == {(0, 2, 3): 70, (1, 4): 71}
    assert rest == [5]  # alone; and subjects sharing only the 10-token header never merge
    # Every position the evaluator reads stays out of the prefix.
    groups, _ = P.shared_prefix_groups(seqs, keep=[1, 1, 1, 1, 3, 1], min_length=32)
    for group in groups:
        assert all(group.length <= len(seqs[i]) - k for i, k in zip(group.members, [1, 1, 1, 1, 3, 1], strict=False))
    assert P.shared_prefix_groups(seqs, min_length=80) == ([], list(range(6)))


# -- collection -------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_prefix_reused_collection_equals_whole_sequences(
    model, mmlu, tokenizer, padding_side: str, prefix_calls: list[int]
) -> None:
    sequences = contexts(mmlu, tokenizer)
    whole = collect(model, sequences, share_prefix=False, padding_side=padding_side)
    assert prefix_calls == []
    reused = collect(model, sequences, share_prefix=True, padding_side=padding_side)
    assert len(prefix_calls) == 2  # one per subject
    assert all(n > 0.6 * min(len(s) for s in sequences) for n in prefix_calls)
    assert reused["n_tokens"].tolist() == whole["n_tokens"].tolist()
    np.testing.assert_allclose(reused[NON_RANDOM].to_numpy(), whole[NON_RANDOM].to_numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(reused["random"], whole["random"])  # draws depend on the key only


def test_a_sequence_equal_to_the_prefix_plus_one_token_and_mixed_lengths(model, prefix_calls) -> None:
    """Suffixes of one token (every score's `last` row) and of very different lengths in one batch."""
    rng = np.random.default_rng(1)
    shared = rng.integers(3, 128, 48).tolist()
    sequences = [shared + rng.integers(3, 128, n).tolist() for n in (1, 17, 2, 9, 1)]
    for side in ("left", "right"):
        whole = collect(model, sequences, share_prefix=False, padding_side=side, batch_size=5)
        reused = collect(model, sequences, share_prefix=True, padding_side=side, batch_size=5)
        np.testing.assert_allclose(reused[NON_RANDOM].to_numpy(), whole[NON_RANDOM].to_numpy(), rtol=1e-4, atol=1e-7)
    assert prefix_calls == [48, 48]


# -- evaluation -------------------------------------------------------------------------------------


def logliks(model, tokenizer, mmlu, **kwargs) -> np.ndarray:
    out = ev.question_logliks(model, tokenizer, mmlu.questions, batch_size=3, progress=False, **kwargs)
    return np.stack([q.logliks for q in out])


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_prefix_reused_baseline_logliks_equal_whole_passes(
    model, mmlu, tokenizer, padding_side: str, prefix_calls: list[int]
) -> None:
    whole = logliks(model, tokenizer, mmlu, padding_side=padding_side, share_prefix=False)
    reused = logliks(model, tokenizer, mmlu, padding_side=padding_side, share_prefix=True)
    assert len(prefix_calls) == 2
    np.testing.assert_allclose(reused, whole, rtol=0, atol=1e-5)


def test_baseline_and_calibration_pass_through_a_probe_records_whole_sequence_scores(
    model, mmlu, tokenizer, prefix_calls
) -> None:
    """The sweep's baseline: an all-False policy recording calibration scores, through a probe."""
    heads = model.config.num_attention_heads

    def never(layer, scores, keys):
        return torch.zeros(len(keys), heads, dtype=torch.bool)

    runs = {}
    for share in (False, True):
        with Probe(model, ("ahon_ln", "entropy"), never, keep_history=True) as probe:
            ll = logliks(model, tokenizer, mmlu, probe=probe, share_prefix=share)
        keys = torch.cat([r.sample_keys for r in probe.history])
        order = keys.argsort()
        scores = {sid: torch.cat([r.scores[sid] for r in probe.history])[order] for sid in ("ahon_ln", "entropy")}
        runs[share] = (ll, keys[order], scores)
    assert len(prefix_calls) == 2
    np.testing.assert_allclose(runs[True][0], runs[False][0], atol=1e-5)
    assert runs[True][1].tolist() == runs[False][1].tolist()
    for sid in ("ahon_ln", "entropy"):
        torch.testing.assert_close(runs[True][2][sid], runs[False][2][sid], rtol=1e-4, atol=1e-7)


def test_static_zeroing_with_prefix_reuse_equals_whole_passes(model, mmlu, tokenizer, prefix_calls) -> None:
    heads = [(0, 0), (0, 3), (1, 2)]
    results = {}
    for share in (False, True):
        with headstats.ablate_heads(model, heads=heads) as ablation:
            frame = ev.evaluate(
                model, tokenizer, mmlu, batch_size=3, probe=ablation.probe, progress=False, share_prefix=share
            )
            results[share] = (frame, logliks(model, tokenizer, mmlu, probe=ablation.probe, share_prefix=share))
    assert len(prefix_calls) == 4  # two subjects, two evaluations
    plain = logliks(model, tokenizer, mmlu, share_prefix=False)
    assert not np.allclose(results[True][1], plain, atol=1e-4)  # zeroing does change the answers
    np.testing.assert_allclose(results[True][1], results[False][1], atol=1e-5)
    np.testing.assert_array_equal(results[True][0]["n_zeroed"], np.full(len(mmlu.questions), 3.0))
    np.testing.assert_allclose(results[True][0]["gold_loglik"], results[False][0]["gold_loglik"], atol=1e-5)


def test_dynamic_zeroing_falls_back_to_whole_passes(
    model, mmlu, tokenizer, prefix_calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dynamic zeroing decides from the whole sequence: the first disagreement with the prefix's own
    decisions switches to whole passes, and the answers and zero masks are those of whole passes."""
    fallbacks: list[str] = []
    original = P.PrefixRunner.fall_back
    monkeypatch.setattr(P.PrefixRunner, "fall_back", lambda self, r="": (fallbacks.append(str(r)), original(self, r)))
    # lthon reads the last token, which the prefix's own pass does not have: decisions must differ.
    whole_scores = collect(model, contexts(mmlu, tokenizer), share_prefix=False)
    tau = float(np.median(whole_scores["lthon"]))
    runs = {}
    for share in (False, True):
        with headstats.ablate_heads(model, score="lthon", threshold=tau) as ablation:
            ll = logliks(model, tokenizer, mmlu, probe=ablation.probe, share_prefix=share)
            keys, order = ablation.sample_keys(), ablation.sample_keys().argsort()
            runs[share] = (ll, ablation.zero_masks()[order], keys[order])
    # The prefix's own decisions hold for all its sequences (same scores), a whole sequence's do not.
    assert len(fallbacks) == 1 and "decides from the whole sequence" in fallbacks[0]
    np.testing.assert_allclose(runs[True][0], runs[False][0], atol=1e-5)
    assert torch.equal(runs[True][1], runs[False][1])
    assert runs[True][2].tolist() == runs[False][2].tolist() == sorted(q.sample_key for q in mmlu.questions)


def test_random_zeroing_is_refused_up_front(model, mmlu, tokenizer, prefix_calls) -> None:
    results = {}
    for share in (False, True):
        with headstats.ablate_heads(model, score="random", threshold=0.3, seed=4) as ablation:
            assert "per sequence" in ablation.probe.prefix_refusal()
            results[share] = (
                logliks(model, tokenizer, mmlu, probe=ablation.probe, share_prefix=share),
                ablation.zero_masks()[ablation.sample_keys().argsort()],
            )
    assert prefix_calls == []
    np.testing.assert_allclose(results[True][0], results[False][0], atol=1e-5)
    assert torch.equal(results[True][1], results[False][1])


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")
def test_a_user_call_with_a_cache_is_still_refused(model) -> None:
    ids = torch.tensor([[5, 6, 7, 8]])
    with Probe(model, ("ahon",)), torch.no_grad():
        for name in ("past_key_values", P.cache_argument(model)):
            with pytest.raises(ValueError, match="headstats scores whole sequences"):
                model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **{name: DynamicCache()})


# -- bf16 -------------------------------------------------------------------------------------------


def test_bf16_model_gives_fp32_scores_and_prefix_reuse_stays_close(tokenizer, mmlu, prefix_calls) -> None:
    """A bf16 model body still computes softmax and every score in fp32 (docs/concepts.md#scores)."""
    model = family_model("llama", len(tokenizer), torch.bfloat16)
    sequences = contexts(mmlu, tokenizer)
    with Probe(model, S.score_ids()) as probe, torch.inference_mode():
        batch = headstats.engine.batching.pad_batch(sequences[:2], [0, 1])
        _, record = probe.forward(batch.model_inputs(), [0, 1], body=True)
    assert {v.dtype for v in record.scores.values()} == {torch.float32}
    whole = collect(model, sequences, share_prefix=False)
    reused = collect(model, sequences, share_prefix=True)
    assert reused[NON_RANDOM].dtypes.eq("float32").all()
    # bf16 round-off differs between one long pass and prefix + suffix; both stay close to each other.
    np.testing.assert_allclose(reused[NON_RANDOM].to_numpy(), whole[NON_RANDOM].to_numpy(), rtol=5e-2, atol=1e-3)
    ll_whole = logliks(model, tokenizer, mmlu, share_prefix=False)
    ll_reused = logliks(model, tokenizer, mmlu, share_prefix=True)
    np.testing.assert_allclose(ll_reused, ll_whole, atol=0.1)
    assert prefix_calls  # reuse ran in bf16 too


def test_row_chunked_suffix_attention_gives_the_same_scores(model) -> None:
    """Long inputs split query rows into chunks (lazy row masks with a query offset): a suffix pass
    chunked 3 rows at a time against the cached prefix still gives the whole pass's scores."""
    rng = np.random.default_rng(2)
    shared = rng.integers(3, 128, 40).tolist()
    suffixes = [rng.integers(3, 128, n).tolist() for n in (5, 9, 3)]
    ids = S.score_ids()
    heads = model.config.num_attention_heads
    with Probe(model, ids) as probe, torch.inference_mode():
        whole = headstats.engine.batching.pad_batch([shared + s for s in suffixes], [0, 1, 2])
        _, expected = probe.forward(whole.model_inputs(), [0, 1, 2])
    with Probe(model, ids, chunk_bytes=3 * heads * 49 * 4 * 3) as probe, torch.inference_mode():
        prefix = P.encode_prefix(model, shared, probe, [0, 1, 2])
        side = "right" if P.has_local_attention(model) else "left"  # as PrefixRunner lays them out
        batch = headstats.engine.batching.pad_batch(suffixes, [0, 1, 2], padding_side=side)
        _, got = probe.forward(P.continue_inputs(prefix, batch.model_inputs()), [0, 1, 2], prefix=prefix.stats)
    for sid in NON_RANDOM:
        torch.testing.assert_close(got.scores[sid], expected.scores[sid], rtol=1e-4, atol=1e-7)
    assert got.n_tokens.tolist() == expected.n_tokens.tolist() == [45, 49, 43]
