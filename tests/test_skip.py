"""Heads skipped per prompt (headstats.engine.skip): skipping computes what zeroing the same heads at
the continuation's positions computes, on tiny models of several families."""

from __future__ import annotations

import copy

import pytest
import torch
from families import tiny_model

from headstats.engine.pruned_model import attention_modules
from headstats.engine.skip import generate_skipping, score_prompt, select_heads, skipping
from headstats.engine.zeroing import ablate_heads

FAMILIES = ("llama", "qwen2", "qwen3", "gemma3", "olmo2", "gpt2")  # the families headstats prune cuts
# Each removes a whole KV group somewhere, keeps part of another, and empties layer 2 (every head).
HEAD_SETS = {
    "groups": [(0, 0), (0, 1), (1, 3)],
    "layer": [(2, 0), (2, 1), (2, 2), (2, 3), (0, 2)],
}


def _continue(model, prompt, continuation, cache, *, heads=None, skip=False):
    mask = torch.ones(1, prompt.shape[1] + continuation.shape[1], dtype=torch.long)
    inputs = dict(input_ids=continuation, attention_mask=mask, cache=cache, use_cache=True)
    if skip:
        with skipping(model, heads, cache):
            return model(**inputs).logits
    with ablate_heads(model, heads=heads):
        return model(**inputs).logits


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("which", sorted(HEAD_SETS))
def test_skipped_heads_give_the_logits_of_the_same_heads_zeroed_in_the_continuation(family, which):
    model = tiny_model(family, attn="sdpa")
    torch.manual_seed(1)
    prompt, continuation = torch.randint(3, 128, (1, 9)), torch.randint(3, 128, (1, 6))
    with torch.no_grad():
        cache = model(input_ids=prompt, use_cache=True).past_key_values
        heads = HEAD_SETS[which]
        zeroed = _continue(model, prompt, continuation, copy.deepcopy(cache), heads=heads)
        skipped = _continue(model, prompt, continuation, copy.deepcopy(cache), heads=heads, skip=True)
        dense = model(input_ids=continuation, cache=copy.deepcopy(cache), use_cache=True).logits
    assert (skipped - zeroed).abs().max().item() < 1e-5
    assert (dense - zeroed).abs().max().item() > 1e-3  # the heads mattered: the test can fail


@pytest.mark.parametrize("family", ("llama", "gemma3", "gpt2"))
def test_skipping_restores_the_model_and_cuts_the_cache(family):
    model = tiny_model(family, attn="sdpa")
    ids = torch.randint(3, 128, (1, 8))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        cache = model(input_ids=ids, use_cache=True).past_key_values
        weights = [m.state_dict() for m in attention_modules(model)]
        stored = sum(layer.values.numel() for layer in cache.layers)
        with skipping(model, HEAD_SETS["layer"], cache):
            pass
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)
    for module, state in zip(attention_modules(model), weights, strict=True):
        assert all(torch.equal(module.state_dict()[k], v) for k, v in state.items())
    assert sum(layer.values.numel() for layer in cache.layers) < stored  # layer 2's entries are gone


@pytest.mark.parametrize("family", ("llama", "gemma3", "gpt2"))
def test_generation_skipping_heads_is_greedy_generation_with_them_zeroed_after_the_prompt(family):
    model = tiny_model(family, attn="sdpa")
    torch.manual_seed(2)
    prompt = torch.randint(3, 128, (1, 10))
    done = generate_skipping(model, prompt, score="ahon_ln", share=0.25, max_new_tokens=6)
    assert len(done.heads) == round(0.25 * done.scores.numel())
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        expected = [token]
        with ablate_heads(model, heads=list(done.heads)):
            for _ in range(5):
                token = model(input_ids=token, cache=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
                expected.append(token)
    assert torch.equal(done.tokens, torch.cat(expected, dim=1))


def test_the_prompt_scores_are_the_whole_prompts_scores():
    model = tiny_model("llama", attn="sdpa")
    ids = torch.randint(3, 128, (1, 12))
    decision = score_prompt(model, {"input_ids": ids}, "ahon_ln")
    from headstats.engine.probe import Probe

    with Probe(model, ("ahon_ln",)) as probe:
        _, record = probe.forward({"input_ids": ids})
    assert torch.allclose(decision.scores, record.scores["ahon_ln"][0].float())
    assert decision.output.past_key_values.get_seq_length() == 12


def test_selection_takes_the_most_inactive_heads_in_the_scores_direction():
    values = torch.tensor([[0.9, 0.1, 0.5, 0.7], [0.2, 0.8, 0.3, 0.6]])
    assert select_heads(values, 0.25, score="ahon_ln") == [(0, 1), (1, 0)]  # low ahon_ln is inactive
    assert select_heads(values, 0.25, score="awft") == [(0, 0), (1, 1)]  # high awft (first-token attention) is inactive
    # KV groups of two heads: group means (0.5, 0.6), (0.5, 0.45); the lowest one goes whole.
    assert select_heads(values, 0.25, score="ahon_ln", unit="kv-group", kv_heads=2) == [(1, 2), (1, 3)]
    with pytest.raises(ValueError, match=r"share=1\.0 must lie in"):
        select_heads(values, 1.0)
    with pytest.raises(ValueError, match="unknown unit 'group': choose from head, kv-group"):
        select_heads(values, 0.1, unit="group")


@pytest.mark.integration
def test_skipping_equals_zeroing_on_the_embedded_model():
    import headstats

    model, tok = headstats.load_model("smollm2-135m", dtype="float32")
    prompt = tok("Water boils at 100 degrees Celsius at sea level, and", return_tensors="pt").input_ids
    continuation = tok(
        " freezes at 0 degrees, so the two points", return_tensors="pt", add_special_tokens=False
    ).input_ids
    with torch.no_grad():
        decision = score_prompt(model, {"input_ids": prompt}, "ahon_ln")
        heads = select_heads(decision.scores, 0.3, score="ahon_ln")
        cache = decision.output.past_key_values
        zeroed = _continue(model, prompt, continuation, copy.deepcopy(cache), heads=heads)
        skipped = _continue(model, prompt, continuation, copy.deepcopy(cache), heads=heads, skip=True)
    # As the pruned model's test reads it (tests/test_prune.py): the largest difference over the largest
    # logit. fp32 sums of fewer terms round differently: about 1.6e-5 absolute on logits up to ~20.
    assert float((skipped - zeroed).abs().max() / zeroed.abs().max()) <= 1e-5
