"""Removing attention heads from a model's weights (the surgery behind ``headstats prune``).

:func:`prune_heads` deletes the given (layer, query head) pairs physically:

- the query projection loses the heads' rows, the output projection their columns (biases too);
- a key/value head loses its rows of the key and value projections once every query head of its
  group is gone;
- per-layer head counts then differ, and a layer whose groups lost different numbers of heads no
  longer has equal groups. Such a layer keeps only the KV heads still in use and maps each kept
  query head to its KV head through :class:`HeadMap`, read by headstats' registered attention
  function (:func:`headstats.engine.attention.headstats_attention`), which gathers K and V per query
  head at attention time. The KV cache therefore stores only the kept KV heads (what saves memory);
  re-expanding K/V in the weights (one KV head per query head) would store the shared heads twice.
  A layer whose groups stay equal keeps transformers' ordinary grouped attention
  (``num_key_value_groups`` is set to its new group size) and needs no map.

Two cases keep more than the removed heads' absence requires, so that the pruned model equals the
unpruned one with the same heads zeroed:

- a norm over the concatenated projections of all heads (OLMo-2's ``q_norm``/``k_norm`` of width
  heads x head_dim; recognised by that width, not by family name) divides every head by a statistic
  of all heads, the removed ones included. Such a projection stays whole, and the map selects the
  kept heads after the norm. A per-head norm of width head_dim (Gemma-3, Qwen3) is shared by all
  heads and stays as it is;
- a layer that loses every head keeps its first one with a zero output-projection slice: the
  modeling files infer the head count from the projection width (``view(..., -1, head_dim)``),
  which is undefined for an empty projection. That head's output adds exactly 0.

The structure is a function of the removed heads and the model's shapes alone
(:func:`restructure`), so a saved pruned model is rebuilt from its config's ``headstats_pruning``
entry by the class :func:`pruned_class` returns before its weights are loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel
from transformers.pytorch_utils import Conv1D

from headstats.engine.attention import ATTN_IMPLEMENTATION, register_attention

CONFIG_KEY = "headstats_pruning"


@dataclass(frozen=True)
class LayerPlan:
    """What one layer keeps: query heads, KV heads (original indices) and the KV head of each kept
    query head (an index into ``kv``). ``placeholder`` is the head kept with a zero output slice
    when the layer lost every head (None otherwise)."""

    q: tuple[int, ...]
    kv: tuple[int, ...]
    kv_of_q: tuple[int, ...]
    placeholder: int | None
    num_heads: int
    num_kv_heads: int

    @property
    def removed(self) -> tuple[int, ...]:
        kept = set(self.q) - {self.placeholder}
        return tuple(h for h in range(self.num_heads) if h not in kept)


def plan_layer(removed: Iterable[int], num_heads: int, num_kv_heads: int) -> LayerPlan:
    """The kept heads of a layer with ``num_heads`` query heads in ``num_kv_heads`` consecutive
    groups (transformers' ``repeat_kv`` order) after removing the query heads ``removed``."""
    gone = set(removed)
    q = [h for h in range(num_heads) if h not in gone]
    placeholder = None
    if not q:
        q, placeholder = [0], 0
    group = num_heads // num_kv_heads
    kv = sorted({h // group for h in q})
    return LayerPlan(tuple(q), tuple(kv), tuple(kv.index(h // group) for h in q), placeholder, num_heads, num_kv_heads)


@dataclass(eq=False)
class HeadMap:
    """Which computed heads a pruned layer's attention reads, per kept query head: ``q`` selects
    query heads (None = all computed ones, in order), ``k`` and ``v`` the KV head of each kept query
    head among the computed ones. Read by the registered attention function."""

    q: tuple[int, ...] | None
    k: tuple[int, ...]
    v: tuple[int, ...]
    _cache: dict = field(default_factory=dict, repr=False)

    def _index(self, name: str, device: torch.device) -> torch.Tensor:
        key = (name, device)
        if key not in self._cache:
            self._cache[key] = torch.tensor(getattr(self, name), dtype=torch.long, device=device)
        return self._cache[key]

    def gather(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, heads, S, D) tensors -> one K and V head per kept query head (plain multi-head attention)."""
        if self.q is not None:
            query = query.index_select(1, self._index("q", query.device))
        key = key.index_select(1, self._index("k", key.device))
        value = value.index_select(1, self._index("v", value.device))
        return query, key, value


# -- finding the attention projections --------------------------------------------------------------


def attention_modules(model: PreTrainedModel) -> list[torch.nn.Module]:
    """The self-attention module of every decoder layer, in layer order."""
    found = {}
    for module in model.modules():
        layer = getattr(module, "layer_idx", None)
        if layer is not None and (hasattr(module, "q_proj") or hasattr(module, "c_attn")):
            found.setdefault(int(layer), module)
    config = model.config.get_text_config()
    if sorted(found) != list(range(int(config.num_hidden_layers))):
        raise ValueError(
            f"{type(model).__name__}: found attention projections (q_proj/k_proj/v_proj/o_proj or GPT-2's c_attn/"
            f"c_proj) in layers {sorted(found)} of {config.num_hidden_layers}; headstats prune supports models with "
            "separate or GPT-2-style fused projections in every layer"
        )
    return [found[i] for i in range(len(found))]


def geometry(model: PreTrainedModel) -> tuple[int, int, int, int]:
    """(layers, query heads, KV heads, head_dim) of the unpruned model, from its config."""
    config = model.config.get_text_config()
    heads = int(config.num_attention_heads)
    kv = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(config.num_hidden_layers), heads, kv, int(head_dim)


def _rows(heads: Sequence[int], head_dim: int) -> torch.Tensor:
    return torch.tensor([h * head_dim + i for h in heads for i in range(head_dim)], dtype=torch.long)


def _linear_rows(layer: torch.nn.Linear, rows: torch.Tensor) -> torch.nn.Linear:
    w = layer.weight
    new = torch.nn.Linear(w.shape[1], len(rows), bias=layer.bias is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight = torch.nn.Parameter(w.index_select(0, rows.to(w.device)), requires_grad=w.requires_grad)
        if layer.bias is not None:
            new.bias = torch.nn.Parameter(layer.bias.index_select(0, rows.to(w.device)), requires_grad=w.requires_grad)
    return new


def _linear_columns(layer: torch.nn.Linear, columns: torch.Tensor, zero: torch.Tensor | None) -> torch.nn.Linear:
    w = layer.weight
    new = torch.nn.Linear(len(columns), w.shape[0], bias=layer.bias is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        kept = w.index_select(1, columns.to(w.device))
        if zero is not None:
            kept[:, zero.to(w.device)] = 0
        new.weight = torch.nn.Parameter(kept, requires_grad=w.requires_grad)
        if layer.bias is not None:
            new.bias = layer.bias
    return new


def _conv1d(layer: Conv1D, index: torch.Tensor, dim: int, zero: torch.Tensor | None = None) -> Conv1D:
    """GPT-2's Conv1D (weight (in, out)) keeping ``index`` along ``dim`` (1 = outputs, 0 = inputs)."""
    w = layer.weight
    kept = w.index_select(dim, index.to(w.device))
    new = Conv1D(kept.shape[1], kept.shape[0]).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        if zero is not None:
            kept[zero.to(w.device)] = 0
        new.weight = torch.nn.Parameter(kept, requires_grad=w.requires_grad)
        bias = layer.bias.index_select(0, index.to(w.device)) if dim == 1 else layer.bias
        new.bias = torch.nn.Parameter(bias, requires_grad=w.requires_grad)
    return new


def _spans_heads(module: torch.nn.Module, name: str, heads: int, head_dim: int) -> bool:
    """Whether ``module.<name>`` (a q_norm / k_norm) normalises the concatenation of all heads."""
    norm = getattr(module, name, None)
    weight = getattr(norm, "weight", None)
    return weight is not None and weight.numel() == heads * head_dim and heads > 1


def _shrink_layer(module: torch.nn.Module, plan: LayerPlan, head_dim: int) -> None:
    q_rows = _rows(plan.q, head_dim)
    zero = None if plan.placeholder is None else torch.arange(head_dim)
    if hasattr(module, "c_attn"):  # GPT-2: one fused [q | k | v] projection, multi-head attention
        width = plan.num_heads * head_dim
        kv_rows = _rows(plan.kv, head_dim)
        fused = torch.cat([q_rows, kv_rows + width, kv_rows + 2 * width])
        module.c_attn = _conv1d(module.c_attn, fused, dim=1)
        module.c_proj = _conv1d(module.c_proj, q_rows, dim=0, zero=zero)
        module.split_size = len(q_rows)
        if hasattr(module, "num_heads"):
            module.num_heads = len(plan.q)
        module.headstats_heads = None
        return
    q_whole = _spans_heads(module, "q_norm", plan.num_heads, head_dim)
    k_whole = _spans_heads(module, "k_norm", plan.num_kv_heads, head_dim)
    if not q_whole:
        module.q_proj = _linear_rows(module.q_proj, q_rows)
    k_index = tuple(plan.kv[i] for i in plan.kv_of_q) if k_whole else plan.kv_of_q
    if not k_whole:
        module.k_proj = _linear_rows(module.k_proj, _rows(plan.kv, head_dim))
    module.v_proj = _linear_rows(module.v_proj, _rows(plan.kv, head_dim))
    module.o_proj = _linear_columns(module.o_proj, q_rows, zero)
    n_q, n_kv = len(plan.q), len(plan.kv)
    group = n_q // n_kv
    uniform = not q_whole and not k_whole and n_q % n_kv == 0 and plan.kv_of_q == tuple(i // group for i in range(n_q))
    if uniform:
        module.num_key_value_groups = group
        module.headstats_heads = None
    else:
        module.num_key_value_groups = 1
        module.headstats_heads = HeadMap(plan.q if q_whole else None, k_index, plan.kv_of_q)


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
    """Remove ``heads`` from ``model`` in place (weights sliced, maps set; see the module docstring)
    and record them in ``model.config.headstats_pruning``. Returns the per-layer plans."""
    if getattr(model.config, CONFIG_KEY, None):
        raise ValueError(
            "this model is already pruned (its config has headstats_pruning); prune the unpruned model with the "
            "union of both head sets instead"
        )
    _, _, _, head_dim = geometry(model)
    plans = layer_plans(model, heads)
    for module, plan in zip(attention_modules(model), plans, strict=True):
        if plan.removed:
            _shrink_layer(module, plan, head_dim)
    removed = [[layer, h] for layer, plan in enumerate(plans) for h in plan.removed]
    setattr(model.config, CONFIG_KEY, {"removed_heads": removed})
    if any(getattr(m, "headstats_heads", None) is not None for m in attention_modules(model)):
        # Uneven groups or cross-head norms need the gather of headstats' attention function.
        register_attention()
        if model.config._attn_implementation != ATTN_IMPLEMENTATION:
            model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return plans


def prune_heads(model: PreTrainedModel, heads: Iterable[tuple[int, int]]) -> list[LayerPlan]:
    """Remove the query heads ``heads`` ((layer, head) pairs of the unpruned model) from ``model``
    in place. Its logits then equal those of the unpruned model run with the same heads zeroed
    (``headstats.ablate_heads(model, heads=...)``), with and without a KV cache."""
    return restructure(model, heads)


def pruned_class(base: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """A subclass of ``base`` (e.g. ``LlamaForCausalLM``) that applies its config's
    ``headstats_pruning`` entry when constructed, so ``from_pretrained`` finds every weight of a
    saved pruned model in its shape."""

    def __init__(self: PreTrainedModel, config: object, *args: object, **kwargs: object) -> None:
        base.__init__(self, config, *args, **kwargs)
        entry = getattr(config, CONFIG_KEY, None) or {}
        heads = [tuple(pair) for pair in entry.get("removed_heads", ())]
        setattr(config, CONFIG_KEY, None)  # restructure refuses a model that is already pruned
        restructure(self, heads)

    return type(f"HeadstatsPruned{base.__name__}", (base,), {"__init__": __init__, "__module__": __name__})


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
