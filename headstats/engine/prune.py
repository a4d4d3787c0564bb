"""Removing attention heads from a model's weights (the surgery behind ``headstats prune``).

:func:`prune_heads` deletes the given (layer, query head) pairs physically and records them in the
config's ``headstats_pruning`` entry. The surgery itself (which rows and columns of which projection
go, the map of uneven KV groups, the heads a layer keeps for its shape) lives in
:mod:`headstats.engine.pruned_model`, a file that imports torch and transformers only, because it is
also copied into every saved pruned folder: the class it defines rebuilds the same structure from
the config before ``from_pretrained`` loads the weights, with or without headstats installed. This
module adds what headstats needs around it: checked head lists, the refusal to prune twice, and the
parameter count.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from headstats.engine.pruned_model import (
    CONFIG_KEY,
    HeadMap,
    LayerPlan,
    attention_modules,
    geometry,
    plan_layer,
    shrink_model,
    shrink_to_config,
)

__all__ = [
    "CONFIG_KEY",
    "HeadMap",
    "LayerPlan",
    "attention_modules",
    "check_heads",
    "count_parameters",
    "geometry",
    "layer_plans",
    "plan_layer",
    "prune_heads",
    "pruned_class",
    "restructure",
]


def check_heads(heads: Iterable[object], num_layers: int, num_heads: int) -> tuple[tuple[int, int], ...]:
    """``heads`` as sorted distinct (layer, head) pairs of ints, or ValueError naming the bad one."""
    out = set()
    for item in heads:
        try:
            layer, head = (int(x) for x in item)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise ValueError(f"heads must be (layer, head) pairs of integers, got {item!r}") from None
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise ValueError(
                f"head ({layer}, {head}) is out of range: the model has {num_layers} layers and {num_heads} heads each"
            )
        out.add((layer, head))
    return tuple(sorted(out))


def layer_plans(model: PreTrainedModel, heads: Iterable[tuple[int, int]]) -> list[LayerPlan]:
    """The :class:`LayerPlan` of every layer of the unpruned ``model`` after removing ``heads``."""
    layers, n_heads, n_kv, _ = geometry(model)
    removed = check_heads(heads, layers, n_heads)
    return [plan_layer([h for l_, h in removed if l_ == layer], n_heads, n_kv) for layer in range(layers)]


def restructure(model: PreTrainedModel, heads: Iterable[tuple[int, int]]) -> list[LayerPlan]:
    """Remove ``heads`` from ``model`` in place (weights sliced, maps set; see
    :mod:`headstats.engine.pruned_model`) and record them in ``model.config.headstats_pruning``.
    Returns the per-layer plans."""
    if getattr(model.config, CONFIG_KEY, None):
        raise ValueError(
            "this model is already pruned (its config has headstats_pruning); prune the unpruned model with the "
            "union of both head sets instead"
        )
    layers, n_heads, _, _ = geometry(model)
    plans = shrink_model(model, check_heads(heads, layers, n_heads))
    removed = [[layer, h] for layer, plan in enumerate(plans) for h in plan.removed]
    setattr(model.config, CONFIG_KEY, {"removed_heads": removed})
    return plans


def prune_heads(model: PreTrainedModel, heads: Iterable[tuple[int, int]]) -> list[LayerPlan]:
    """Remove the query heads ``heads`` ((layer, head) pairs of the unpruned model) from ``model``
    in place. Its logits then equal those of the unpruned model run with the same heads zeroed
    (``headstats.ablate_heads(model, heads=...)``), with and without a KV cache."""
    return restructure(model, heads)


def pruned_class(base: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """A subclass of ``base`` (e.g. ``LlamaForCausalLM``) that applies its config's
    ``headstats_pruning`` entry when constructed, so ``from_pretrained`` finds every weight of a
    saved pruned model in its shape (what the class of a saved folder's modeling file does)."""

    def __init__(self: PreTrainedModel, config: object, *args: object, **kwargs: object) -> None:
        base.__init__(self, config, *args, **kwargs)
        shrink_to_config(self)

    return type(f"HeadstatsPruned{base.__name__}", (base,), {"__init__": __init__, "__module__": __name__})


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
