"""Heads skipped per prompt: chosen from the prompt, not computed for the continuation (docs/guides/skipping.md).

The prompt runs with every head, scored in the same pass (:func:`score_prompt`: one forward pass
under a :class:`~headstats.engine.probe.Probe` that also keeps the KV cache). :func:`select_heads`
takes the share of heads that look most inactive on it. Inside :func:`skipping`, the model's
attention modules are cut to the kept heads (their query, key, value and output rows sliced, as
:mod:`headstats.engine.pruned_model` cuts a pruned model's) and the prompt's cache loses the
entries of the KV heads no kept query head reads, so the continuation's tokens multiply and cache
only what the kept heads use. Leaving the block puts the model's own modules back.

What it computes is zeroing (:func:`headstats.ablate_heads` with ``mask=``) applied at the
continuation's positions only: the prompt's keys and values are the full model's, the skipped heads
give 0 at every later position (tests/test_skip.py checks the logits agree within 1e-5 in fp32).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from headstats.engine import scores as S
from headstats.engine.probe import Probe
from headstats.engine.pruned_model import ATTENTION, attention_modules, geometry, plan_layer, shrink_layer

UNITS = ("head", "kv-group")


@dataclass(frozen=True)
class PromptDecision:
    """What the prompt's pass gives: the model output (logits and ``past_key_values``) and the
    score of every head on the prompt, (layers, heads) fp32."""

    output: object
    scores: torch.Tensor


def score_prompt(model: PreTrainedModel, inputs: Mapping[str, torch.Tensor], score: str) -> PromptDecision:
    """Run one prompt (a single row, no padding) with every head, keeping its KV cache, and score
    every head on it by ``score`` in the same pass."""
    ids = inputs["input_ids"]
    if ids.shape[0] != 1 or ("attention_mask" in inputs and not bool(inputs["attention_mask"].all())):
        raise ValueError("score_prompt runs one prompt without padding: give input_ids of shape (1, length)")
    sid = S.get_score(score).id
    if S.get_score(sid).is_random:
        raise ValueError("the random score reads no prompt: draw the heads with select_heads(torch.rand(...), ...)")
    with Probe(model, (sid,)) as probe:
        output, record = probe.forward(dict(inputs), use_cache=True)
    return PromptDecision(output, record.scores[sid][0].float())


def inactivity(score: str, values: torch.Tensor) -> torch.Tensor:
    """``values`` turned so that larger means more inactive (``score``'s direction)."""
    return values if S.get_score(score).inactive_when == "above" else -values


def select_heads(
    values: torch.Tensor, share: float, *, score: str = "ahon_ln", unit: str = "head", kv_heads: int | None = None
) -> list[tuple[int, int]]:
    """The ``round(share x heads)`` (layer, head) pairs that look most inactive by ``values``
    ((layers, heads), read in ``score``'s direction; ties broken by position). ``unit="kv-group"``
    ranks each KV group by its heads' mean and takes whole groups (``kv_heads`` per layer), so that
    their cache entries go too; the share then counts the groups' heads."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}: choose from {', '.join(UNITS)}")
    if not 0.0 <= share < 1.0:
        raise ValueError(f"share={share} must lie in [0, 1): the share of heads to skip")
    layers, heads = values.shape
    turned = inactivity(score, values.float())
    group = 1
    if unit == "kv-group":
        if kv_heads is None or heads % kv_heads:
            raise ValueError(f"unit='kv-group' needs kv_heads dividing the {heads} heads of a layer")
        group = heads // kv_heads
        turned = turned.reshape(layers, kv_heads, group).mean(-1)
    n = round(share * turned.numel())
    order = torch.argsort(turned.flatten(), descending=True, stable=True)[:n].tolist()
    width = turned.shape[1]
    return sorted((i // width, (i % width) * group + g) for i in order for g in range(group))


def _saved(module: torch.nn.Module) -> tuple:
    attributes = ("num_key_value_groups", "headstats_heads", "split_size", "num_heads")
    return module.__class__, dict(module._modules), {a: module.__dict__[a] for a in attributes if a in module.__dict__}


def _restore(module: torch.nn.Module, saved: tuple) -> None:
    cls, modules, attributes = saved
    module.__class__ = cls
    module._modules.clear()
    module._modules.update(modules)
    module.__dict__.pop("headstats_heads", None)
    module.__dict__.update(attributes)


def _stored_kv_heads(module: torch.nn.Module, name: str, fallback: int, head_dim: int) -> int:
    proj = getattr(module, name, None)
    weight = getattr(proj, "weight", None)
    return fallback if weight is None else int(weight.shape[0]) // head_dim


def _trim_cache(cache: object, modules: Sequence[torch.nn.Module], plans: Sequence, head_dim: int) -> None:
    """Keep, in every layer of ``cache``, the KV heads its cut module still reads (one zero per token
    for a layer without heads, as :func:`~headstats.engine.pruned_model.attention_free_forward` stores)."""
    for layer, (module, plan) in enumerate(zip(modules, plans, strict=True)):
        if not plan.removed:
            continue
        entry = cache.layers[layer]
        if not plan.q:
            b, _, s, _ = entry.keys.shape
            entry.keys = entry.values = entry.keys.new_zeros(b, 1, s, 1)
            continue
        kv = torch.tensor(plan.kv, dtype=torch.long, device=entry.values.device)
        entry.values = entry.values.index_select(1, kv)
        if hasattr(module, "c_attn") or _stored_kv_heads(module, "k_proj", plan.num_kv_heads, head_dim) == len(kv):
            entry.keys = entry.keys.index_select(1, kv)


@contextmanager
def skipping(model: PreTrainedModel, heads: Sequence[tuple[int, int]], cache: object | None = None) -> Iterator[None]:
    """Inside the block, ``model`` computes none of ``heads`` ((layer, head) pairs): its attention
    projections are cut to the other heads, and ``cache`` (the prompt's KV cache, if given) keeps only
    the KV heads still read. Leaving the block restores the model's modules; the cache stays cut."""
    layers, n_heads, n_kv, head_dim = geometry(model)
    modules = attention_modules(model)
    plans = [plan_layer([h for layer_, h in heads if layer_ == i], n_heads, n_kv) for i in range(layers)]
    saved = [_saved(m) for m in modules]
    implementation = model.config._attn_implementation
    try:
        with torch.no_grad():
            for module, plan in zip(modules, plans, strict=True):
                if plan.removed:
                    shrink_layer(module, plan, head_dim)
            if cache is not None:
                _trim_cache(cache, modules, plans, head_dim)
        if any(getattr(m, "headstats_heads", None) is not None for m in modules):
            from headstats.engine.pruned_model import register_attention

            register_attention()
            model.set_attn_implementation(ATTENTION)
        yield
    finally:
        for module, state in zip(modules, saved, strict=True):
            _restore(module, state)
        if model.config._attn_implementation != implementation:
            model.set_attn_implementation(implementation)


@dataclass(frozen=True)
class SkippedGeneration:
    """What :func:`generate_skipping` did: the generated tokens (1, new), the skipped heads and the
    prompt's head scores they were chosen from."""

    tokens: torch.Tensor
    heads: tuple[tuple[int, int], ...]
    scores: torch.Tensor


def generate_skipping(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    score: str = "ahon_ln",
    share: float = 0.1,
    max_new_tokens: int = 32,
    unit: str = "head",
    eos_token_id: int | None = None,
) -> SkippedGeneration:
    """Greedy generation from one prompt that skips, for every generated token, the ``share`` of
    heads that look most inactive on the prompt by ``score``: the prompt runs whole and is scored,
    the continuation runs without the chosen heads (:func:`skipping`)."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError("generate_skipping takes one prompt: input_ids of shape (1, length)")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: give at least 1")
    _, _, n_kv, _ = geometry(model)
    with torch.no_grad():
        decision = score_prompt(model, {"input_ids": input_ids}, score)
        heads = select_heads(decision.scores, share, score=score, unit=unit, kv_heads=n_kv)
        cache = decision.output.past_key_values
        token = decision.output.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token]
        with skipping(model, heads, cache):
            for _ in range(max_new_tokens - 1):
                if eos_token_id is not None and int(token) == eos_token_id:
                    break
                out = model(input_ids=token, cache=cache, use_cache=True)
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(token)
    return SkippedGeneration(torch.cat(tokens, dim=1), tuple(heads), decision.scores)
