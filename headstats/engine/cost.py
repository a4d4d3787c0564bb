"""What a pass costs, by arithmetic and without torch: the tokens it computes in length-sorted batches,
padding included (:func:`padded_tokens`), and a model's FLOPs per token (:class:`InferenceCost`).

:func:`headstats.engine.speed.inference_cost` reads a model's cost from its module shapes (a pruned
model's smaller ones included); :func:`config_cost` gives the same from its configuration alone, for
the decoder layouts it knows (:data:`CONFIG_LAYOUTS`), so that a dry run can cost a pass without
importing torch or transformers. A configuration of any other layout gives None (the caller then
builds the model's shapes instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def padded_tokens(lengths: Sequence[int], batch_size: int) -> int:
    """Tokens computed, padding included, when sequences of these lengths run through
    :func:`headstats.engine.batching.length_sorted_batches` (what a pass costs, rather than its real
    tokens)."""
    ordered = sorted(lengths, reverse=True)
    return sum(
        ordered[start] * len(ordered[start : start + batch_size]) for start in range(0, len(ordered), batch_size)
    )


@dataclass(frozen=True)
class LayerCost:
    """One attention layer: query heads it attends with, bytes its cache holds per token, its window."""

    query_heads: int
    kv_bytes_per_token: int
    window: int | None  # sliding-window layers see at most this many keys


@dataclass(frozen=True)
class InferenceCost:
    """Per-token cost of a model (see :func:`inference_cost`)."""

    projection_flops: float  # 2 x multiply-adds of every linear layer, lm_head included
    weight_bytes: int  # bytes of every linear layer's weights and biases (what a decode step reads)
    head_dim: int
    layers: tuple[LayerCost, ...]
    head_flops: float = 0.0  # 2 x multiply-adds of lm_head alone (part of projection_flops)

    @property
    def query_heads(self) -> int:
        return sum(layer.query_heads for layer in self.layers)

    @staticmethod
    def _span(context: int, window: int | None) -> int:
        return context if window is None else min(context, window)

    def attention_flops(self, context: int) -> float:
        """QK^T and AV of one query token over ``context`` tokens, all layers."""
        return sum(4.0 * layer.query_heads * self.head_dim * self._span(context, layer.window) for layer in self.layers)

    def flops(self, context: int) -> float:
        """FLOPs of one token (a decode step) at ``context`` tokens."""
        return self.projection_flops + self.attention_flops(context)

    def prefill_flops(self, length: int) -> float:
        """FLOPs of a prefill of ``length`` tokens (token t attends over min(t, window) tokens)."""
        total = length * self.projection_flops
        for layer in self.layers:
            w = length if layer.window is None else min(layer.window, length)
            spans = w * (w + 1) / 2 + (length - w) * w  # sum over t = 1..length of min(t, w)
            total += 4.0 * layer.query_heads * self.head_dim * spans
        return total

    def body_prefill_flops(self, length: int) -> float:
        """:meth:`prefill_flops` without lm_head: what a pass that reads the logits of a few positions
        only (an evaluation) or none (a collection) computes for every token."""
        return self.prefill_flops(length) - length * self.head_flops

    def pass_flops(self, lengths: Sequence[int], batch_size: int) -> float:
        """FLOPs of the model body over sequences of ``lengths`` run as a pass runs them: in length-sorted
        batches of ``batch_size`` (:func:`headstats.engine.batching.length_sorted_batches`), each row
        padded to its batch's longest sequence."""
        ordered = sorted(lengths, reverse=True)
        return sum(
            len(ordered[start : start + batch_size]) * self.body_prefill_flops(ordered[start])
            for start in range(0, len(ordered), batch_size)
        )

    def kv_bytes(self, context: int, batch: int = 1) -> int:
        """Bytes of the KV cache of ``batch`` sequences of ``context`` tokens."""
        return batch * sum(layer.kv_bytes_per_token * self._span(context, layer.window) for layer in self.layers)

    def decode_bytes(self, context: int, batch: int = 1) -> float:
        """Bytes one decode step of ``batch`` sequences reads: the weights once, each sequence's cache."""
        return self.weight_bytes + self.kv_bytes(context, batch)


# Decoder layouts whose linear layers a configuration decides, by model_type: "gated" = separate q/k/v/o
# projections and a gated MLP of three matrices (Llama's layout), "gpt2" = GPT-2's fused c_attn and
# two-matrix MLP. With each, which projections carry a bias: "attention_bias" / "mlp_bias" name the
# configuration field that switches them, True and False are fixed by the modeling file.
CONFIG_LAYOUTS: dict[str, tuple[str, object, object, object]] = {
    # model_type: (layout, q/k/v bias, o bias, MLP bias)
    "llama": ("gated", "attention_bias", "attention_bias", "mlp_bias"),
    "mistral": ("gated", False, False, False),
    "qwen2": ("gated", True, False, False),
    "qwen3": ("gated", "attention_bias", "attention_bias", False),
    "olmo2": ("gated", "attention_bias", "attention_bias", False),
    "gemma": ("gated", "attention_bias", "attention_bias", False),
    "gemma2": ("gated", "attention_bias", "attention_bias", False),
    "gemma3_text": ("gated", "attention_bias", "attention_bias", False),
    "gpt2": ("gpt2", True, True, True),
}


def _flag(config: Mapping, rule: object) -> bool:
    return bool(config.get(rule, False)) if isinstance(rule, str) else bool(rule)


def _layer_windows(config: Mapping, layers: int) -> list[int | None] | None:
    """Each layer's sliding window as the model's shapes give it (the configuration's ``layer_types``
    and ``sliding_window``); None when the configuration leaves them to its class's defaults."""
    window, types = config.get("sliding_window"), config.get("layer_types")
    if types is None:
        return None if window else [None] * layers
    if len(types) != layers:
        return None
    return [int(window) if kind == "sliding_attention" and window else None for kind in types]


def config_cost(config: Mapping, element_size: int) -> InferenceCost | None:
    """The :class:`InferenceCost` of the model a ``config.json`` (a mapping of its fields) describes, in a
    dtype of ``element_size`` bytes: what :func:`headstats.engine.speed.inference_cost` gives its
    shapes. None for a layout not in :data:`CONFIG_LAYOUTS`, a pruned, quantised or multimodal
    configuration, or one that leaves a shape to its class's defaults."""
    rules = CONFIG_LAYOUTS.get(str(config.get("model_type")))
    if rules is None or any(k in config for k in ("headstats_pruning", "quantization_config", "text_config")):
        return None
    layout, qkv_bias, o_bias, mlp_bias = rules
    if layout == "gpt2":
        config = {
            **config,
            "hidden_size": config.get("n_embd"),
            "num_attention_heads": config.get("n_head"),
            "num_hidden_layers": config.get("n_layer"),
            "num_key_value_heads": config.get("n_head"),
            "intermediate_size": config.get("n_inner") or 4 * int(config.get("n_embd") or 0),
        }
    try:
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        layers, inner, vocab = (
            int(config["num_hidden_layers"]),
            int(config["intermediate_size"]),
            int(config["vocab_size"]),
        )
        kv_heads = int(config.get("num_key_value_heads") or heads)
    except (KeyError, TypeError, ValueError):
        return None
    head_dim = int(config.get("head_dim") or hidden // heads)
    windows = _layer_windows(config, layers)
    if windows is None:
        return None
    q, kv = heads * head_dim, kv_heads * head_dim
    if layout == "gpt2":  # c_attn (hidden -> 3 hidden), c_proj, c_fc and the MLP's c_proj, each with a bias
        weights = hidden * 3 * hidden + hidden * hidden + 2 * hidden * inner
        biases = 3 * hidden + hidden + inner + hidden
    else:
        weights = hidden * (q + 2 * kv) + q * hidden + 3 * hidden * inner
        biases = (q + 2 * kv) * _flag(config, qkv_bias) + hidden * _flag(config, o_bias)
        biases += (2 * inner + hidden) * _flag(config, mlp_bias)
    macs = layers * weights + vocab * hidden
    kv_bytes = 2 * kv * element_size
    return InferenceCost(
        2.0 * macs,
        (macs + layers * biases) * element_size,
        head_dim,
        tuple(LayerCost(heads, kv_bytes, window) for window in windows),
        head_flops=2.0 * vocab * hidden,
    )


__all__ = ["CONFIG_LAYOUTS", "InferenceCost", "LayerCost", "config_cost", "padded_tokens"]
