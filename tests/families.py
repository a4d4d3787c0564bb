"""Tiny randomly initialised decoders of the families headstats must serve, and an independent
way to read their attention: eager attention weights (``output_attentions``) plus hooks on the value
and output projections. Nothing here uses headstats' own attention code."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import (
    AutoModelForCausalLM,
    FalconConfig,
    FalconForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)

import headstats

VOCAB = 128
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)

CONFIGS: dict[str, Callable[[], PretrainedConfig]] = {
    "llama": lambda: LlamaConfig(**COMMON),
    "qwen2": lambda: Qwen2Config(**COMMON),
    "qwen3": lambda: Qwen3Config(**COMMON, head_dim=16),
    "mistral": lambda: MistralConfig(**COMMON, sliding_window=None),
    "olmo2": lambda: Olmo2Config(**COMMON, pad_token_id=0, eos_token_id=2),
    # Gemma-3: a sliding window shorter than the test sequences, so local layers really are local.
    "gemma3": lambda: Gemma3TextConfig(
        **{**COMMON, "num_key_value_heads": 1},
        head_dim=16,
        sliding_window=4,
        query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
    # Gemma-2: attention-logit softcapping.
    "gemma2": lambda: Gemma2Config(
        **COMMON,
        head_dim=16,
        sliding_window=4,
        query_pre_attn_scalar=16,
        attn_logit_softcapping=5.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
    "phi3": lambda: Phi3Config(**COMMON, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gpt2": lambda: GPT2Config(
        vocab_size=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=256, bos_token_id=1, eos_token_id=2
    ),
}
FALCON = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4)
if FalconForCausalLM._can_set_attn_implementation():  # transformers >= 5.25; earlier ones compute it inline
    # Falcon-7B's layout (rotary, one KV head) and Falcon-RW's (ALiBi through the attention mask, one KV
    # head per query head); both read V from the fused query_key_value projection.
    CONFIGS["falcon"] = lambda: FalconConfig(**FALCON)
    CONFIGS["falcon_alibi"] = lambda: FalconConfig(**FALCON, alibi=True, multi_query=False)
    # Falcon-40B's and 180B's: grouped query attention, the fused projection laid out per KV group.
    CONFIGS["falcon_gqa"] = lambda: FalconConfig(**FALCON, new_decoder_architecture=True, num_kv_heads=2)


# Query and key projections (fused ones included) whose weights the tests scale up, so that random
# heads attend sharply and differ from each other.
SHARPENED = ("q_proj", "k_proj", "c_attn", "qkv_proj", "query_key_value")


def tiny_model(family: str, seed: int = 0, attn: str = "eager") -> torch.nn.Module:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(CONFIGS[family](), attn_implementation=attn)
    # Random init gives near-uniform attention; sharpen queries so scores differ between heads.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name for k in SHARPENED) and p.dim() == 2:
                p.mul_(4.0)
    return model.eval()


def tiny_llama(vocab_size: int, *, seed: int = 0, **config: object) -> torch.nn.Module:
    """A tiny random Llama (2 layers, 4 heads, 2 KV heads, width 64, 2,048 positions) for a vocabulary of
    ``vocab_size``, e.g. the SmolLM2 tokenizer's (conftest's ``tiny_llama_dir``), so real task prompts
    run in seconds; ``config`` overrides any of those settings."""
    settings = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config})).eval()


def tiny_decoder(family: str, vocab_size: int, *, max_positions: int = 1024) -> torch.nn.Module:
    """A randomly initialised 2-layer Llama or GPT-2 for a vocabulary of ``vocab_size`` (the synthetic
    tokenizer's), with headstats' attention; a wide init makes the choices of a task differ clearly."""
    torch.manual_seed(0)
    if family == "llama":
        config = LlamaConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            vocab_size=vocab_size,
            max_position_embeddings=max_positions,
            initializer_range=0.2,
        )
    else:
        config = GPT2Config(
            n_embd=64, n_layer=2, n_head=4, vocab_size=vocab_size, n_positions=max_positions, initializer_range=0.2
        )
    model = AutoModelForCausalLM.from_config(config, attn_implementation=headstats.ATTN_IMPLEMENTATION)
    return model.eval()


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    base = model.base_model
    layers = base.h if hasattr(base, "h") else base.layers
    return [
        next(getattr(layer, a) for a in ("attn", "self_attn", "self_attention") if hasattr(layer, a))
        for layer in layers
    ]


def out_projection(attn: torch.nn.Module) -> torch.nn.Module:
    """W_O of an attention module: o_proj, GPT-2's Conv1D c_proj or Falcon's dense."""
    return next(getattr(attn, name) for name in ("o_proj", "c_proj", "dense") if hasattr(attn, name))


def _geometry(model: torch.nn.Module) -> tuple[int, int, int]:
    config = model.config
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, kv, head_dim


def eager_internals(model: torch.nn.Module, ids: list[int]) -> list[dict[str, torch.Tensor]]:
    """For one unpadded sequence: per layer A (H, S, S), V (H, S, D) expanded to query heads,
    O (H, S, D) and W_O as a (H*D, d_model) matrix mapping concatenated head outputs to the residual."""
    heads, kv, d = _geometry(model)
    captured: list[dict[str, torch.Tensor]] = [{} for _ in attention_modules(model)]
    hooks = []
    for i, attn in enumerate(attention_modules(model)):
        if hasattr(attn, "v_proj"):
            hooks.append(attn.v_proj.register_forward_hook(lambda m, a, out, i=i: captured[i].__setitem__("v", out)))
        elif hasattr(attn, "qkv_proj"):  # Phi-3: [q | k | v]
            hooks.append(
                attn.qkv_proj.register_forward_hook(
                    lambda m, a, out, i=i: captured[i].__setitem__("v", out[..., (heads + kv) * d :])
                )
            )
        elif hasattr(attn, "query_key_value"):  # Falcon
            hooks.append(
                attn.query_key_value.register_forward_hook(
                    lambda m, a, out, i=i, attn=attn: captured[i].__setitem__("v", _falcon_v(attn, out))
                )
            )
        else:  # GPT-2: c_attn = [q | k | v], each of width n_embd
            hooks.append(
                attn.c_attn.register_forward_hook(
                    lambda m, a, out, i=i: captured[i].__setitem__("v", out[..., 2 * heads * d :])
                )
            )
        proj = out_projection(attn)
        hooks.append(proj.register_forward_pre_hook(lambda m, a, i=i: captured[i].__setitem__("o", a[0])))
        w = proj.weight.detach().float()
        captured[i]["w_o"] = w.t() if isinstance(proj, torch.nn.Linear) else w
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    s = len(ids)
    for layer, att in zip(captured, out.attentions, strict=True):
        layer["a"] = att[0].float()
        layer["v"] = layer["v"][0].float().view(s, kv, d).transpose(0, 1).repeat_interleave(heads // kv, dim=0)
        layer["o"] = layer["o"][0].float().view(s, heads, d).transpose(0, 1)
    return captured


def _falcon_v(attn: torch.nn.Module, fused: torch.Tensor) -> torch.Tensor:
    """Falcon's values from its fused projection, (B, S, KV * D): the last of each KV group's block
    (the new decoder architecture), after the queries and the one key with one KV head (multi-query),
    else the third of each head's (q, k, v) triple."""
    d = attn.head_dim
    if attn.new_decoder_architecture:  # per KV group: its queries, then its key and its value
        return fused.unflatten(-1, (attn.num_kv_heads, -1, d))[..., -1, :].flatten(-2)
    if attn.multi_query:
        return fused[..., -d:]
    return fused.unflatten(-1, (attn.num_heads, 3, d))[..., 2, :].flatten(-2)


def reference_scores(model: torch.nn.Module, ids: list[int]) -> dict[str, torch.Tensor]:
    """Every non-random score id of docs/concepts.md#scores, (L, H), by the formulas written out literally."""
    heads, _, d = _geometry(model)
    per_layer: dict[str, list[torch.Tensor]] = {}
    for layer in eager_internals(model, ids):
        a, v, o, w = layer["a"], layer["v"], layer["o"], layer["w_o"]
        raw = {
            "awft": a[:, :, 0].mean(-1),
            "entropy": (-torch.special.xlogy(a, a).sum(-1)).mean(-1),
            "ftvvn": v[:, 0].norm(dim=-1),
            "avvn": v.norm(dim=-1).mean(-1),
            "lthon": o[:, -1].norm(dim=-1),
            "ahon": o.norm(dim=-1).mean(-1),
            "fhon": torch.stack([(o[h] @ w[h * d : (h + 1) * d]).norm(dim=-1).mean() for h in range(heads)]),
        }
        for name in ("awft", "entropy", "ftvvn", "avvn", "ahon", "fhon"):
            raw[f"{name}_ln"] = _ratio(raw[name], raw[name].mean())
        raw["lthon_ln"] = _ratio(raw["lthon"], raw["ahon"].mean())
        raw["lthon_hn"] = _ratio(raw["lthon"], raw["ahon"])
        for k, val in raw.items():
            per_layer.setdefault(k, []).append(val)
    return {k: torch.stack(v) for k, v in per_layer.items()}


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """The score definitions leave 0/0 to headstats, which defines it as 0 (all raw scores are non-negative)."""
    den = torch.as_tensor(den).expand_as(num)
    return torch.where(den == 0, torch.zeros_like(num), num / torch.where(den == 0, 1.0, den))
