"""The structure of a model with attention heads removed, in one self-contained file.

``headstats prune`` copies this file into every folder it writes (as ``modeling_headstats_pruned.py``,
followed by the class transformers loads), so that
``AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`` rebuilds the pruned model where
headstats is not installed. It therefore imports torch and transformers only.

The removed (layer, query head) pairs of the unpruned model are recorded in the config's
``headstats_pruning`` entry; every layer's plan is a function of them and the model's shapes alone
(:func:`plan_layer`), and :func:`shrink_layer` cuts the layer's projections to it:

- the query projection loses the heads' rows, the output projection their columns (biases too);
- a key/value head loses its rows of the key and value projections once every query head of its
  group is gone, so the KV cache stores fewer heads;
- per-layer head counts then differ, and a layer whose groups lost different numbers of heads no
  longer has equal groups. Such a layer keeps only the KV heads still in use and maps each kept
  query head to its KV head through :class:`HeadMap`, read by :func:`pruned_attention`, which
  pads every group's query heads to the largest group's size and runs grouped attention, reading
  each kept K and V head once (with a cross-head norm, it gathers K and V per query head). The KV
  cache therefore stores only the kept KV heads; re-expanding K/V in the weights (one KV head per
  query head) would store the shared heads twice. A layer whose groups stay equal keeps
  transformers' ordinary grouped attention (``num_key_value_groups`` is set to its new group size)
  and needs no map.

Two cases need more than cut rows and columns for the pruned model to equal the unpruned one with
the same heads zeroed:

- a norm over the concatenated projections of all heads (OLMo-2's ``q_norm``/``k_norm`` of width
  heads x head_dim; recognised by that width, not by family name) divides every head by a statistic
  of all heads, the removed ones included. Such a projection stays whole, and the map selects the
  kept heads after the norm. A per-head norm of width head_dim (Gemma-3, Qwen3) is shared by all
  heads and stays as it is;
- a layer that loses every head computes no attention at all (:func:`attention_free_forward`): its
  projections become empty (the output projection keeps its bias, the layer's whole output) and its
  KV cache entry holds one zero per token instead of K and V, because transformers reads the
  cache's length from a layer's entry (layer 0's, and the first of each attention type's, for the
  positions and the masks), so every layer must keep counting tokens.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.pytorch_utils import Conv1D

CONFIG_KEY = "headstats_pruning"
ATTENTION = "headstats_pruned"


@dataclass(frozen=True)
class LayerPlan:
    """What one layer keeps: query heads, KV heads (original indices) and the KV head of each kept
    query head (an index into ``kv``); all empty when the layer lost every head."""

    q: tuple[int, ...]
    kv: tuple[int, ...]
    kv_of_q: tuple[int, ...]
    num_heads: int
    num_kv_heads: int

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(h for h in range(self.num_heads) if h not in self.q)


def plan_layer(removed: Iterable[int], num_heads: int, num_kv_heads: int) -> LayerPlan:
    """The kept heads of a layer with ``num_heads`` query heads in ``num_kv_heads`` consecutive
    groups (transformers' ``repeat_kv`` order) after removing the query heads ``removed``."""
    gone = set(removed)
    q = [h for h in range(num_heads) if h not in gone]
    group = num_heads // num_kv_heads
    kv = sorted({h // group for h in q})
    return LayerPlan(tuple(q), tuple(kv), tuple(kv.index(h // group) for h in q), num_heads, num_kv_heads)


@dataclass(eq=False)
class HeadMap:
    """Which computed heads a pruned layer's attention reads, per kept query head: ``q`` selects
    query heads (None = all computed ones, in order), ``k`` and ``v`` the KV head of each kept query
    head among the computed ones. Read by the attention function."""

    q: tuple[int, ...] | None
    k: tuple[int, ...]
    v: tuple[int, ...]
    _cache: dict = field(default_factory=dict, repr=False)

    def _index(self, name: str, device: torch.device) -> torch.Tensor:
        key = (name, device)
        if key not in self._cache:
            values = self.padded_groups()[name] if name in ("slots", "kept") else getattr(self, name)
            self._cache[key] = torch.tensor(values, dtype=torch.long, device=device)
        return self._cache[key]

    def padded_groups(self) -> dict | None:
        """The layout that runs this layer as grouped attention without copying K and V per query head:
        ``slots`` (the computed query heads, each KV group's repeated up to the largest group's size;
        a short group repeats its first head), ``kept`` (the positions of the real heads among the
        slots, in query-head order) and ``size`` (the common group size). None when a query head
        reads K and V of different heads or a cross-head norm keeps every query head computed."""
        if "layout" in self._cache:
            return self._cache["layout"]
        layout = None
        members: dict[int, list[int]] = {}
        for i, kv in enumerate(self.v):
            members.setdefault(kv, []).append(i)
        if self.q is None and self.k == self.v and sorted(members) == list(range(len(members))):
            size = max(len(m) for m in members.values())
            slots, kept = [], []
            for j in range(len(members)):
                kept.extend(len(slots) + t for t in range(len(members[j])))
                slots.extend(members[j] + [members[j][0]] * (size - len(members[j])))
            if [slots[i] for i in kept] == list(range(len(self.v))):  # kept heads in group order
                layout = {"slots": tuple(slots), "kept": tuple(kept), "size": size}
        self._cache["layout"] = layout
        return layout

    def grouped_attention(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        dropout: float,
        scaling: float | None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, None]:
        """SDPA's grouped attention over the query heads padded to equal groups (:meth:`padded_groups`):
        K and V, the whole cache when decoding, are read in place instead of copied once per query head;
        the padding's outputs are dropped. The output (B, S, kept heads, D) in query-head order."""
        layout = self.padded_groups()
        grouped = SimpleNamespace(num_key_value_groups=layout["size"], is_causal=getattr(module, "is_causal", True))
        query = query.index_select(1, self._index("slots", query.device))
        out, _ = sdpa_attention_forward(grouped, query, key, value, attention_mask, dropout, scaling, **kwargs)
        return out.index_select(2, self._index("kept", out.device)), None

    def gather(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, heads, S, D) tensors -> one K and V head per kept query head (plain multi-head attention)."""
        if self.q is not None:
            query = query.index_select(1, self._index("q", query.device))
        key = key.index_select(1, self._index("k", key.device))
        value = value.index_select(1, self._index("v", value.device))
        return query, key, value


# -- the attention function of a pruned model -------------------------------------------------------


def pruned_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention transformers calls for ``attn_implementation="headstats_pruned"``: a layer with a
    :class:`HeadMap` runs as grouped attention over padded query groups where it can
    (:meth:`HeadMap.grouped_attention`), else first takes one K and V head per kept query head; then
    PyTorch's SDPA, or the
    family's own eager attention for what SDPA does not compute (logit softcapping, attention sinks)."""
    heads = getattr(module, "headstats_heads", None)
    special = kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None
    if heads is not None and not special and heads.padded_groups() is not None:
        return heads.grouped_attention(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if heads is not None:
        query, key, value = heads.gather(query, key, value)
    if special:
        eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if eager is not None:
            mask = _additive_mask(attention_mask, query, key, getattr(module, "is_causal", True))
            return eager(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def _additive_mask(
    mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, causal: bool
) -> torch.Tensor | None:
    """The float mask an eager attention adds to its logits, from SDPA's boolean mask (True = attend),
    or from causality when SDPA's mask function left the mask out (no padding, no window)."""
    if mask is None:
        if not causal:
            return None
        q_len, k_len = query.shape[2], key.shape[2]
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril(k_len - q_len)[None, None]
    if mask.dtype != torch.bool:
        return mask
    blocked = torch.zeros(mask.shape, dtype=query.dtype, device=query.device)
    return blocked.masked_fill(~mask, torch.finfo(query.dtype).min)


def register_attention() -> None:
    """Register :func:`pruned_attention` (and SDPA's mask function) under ``headstats_pruned`` (idempotent)."""
    AttentionInterface.register(ATTENTION, pruned_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


# -- finding and shrinking the attention projections ------------------------------------------------


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


def _empty_linear(inputs: int, outputs: int, bias: bool, like: torch.Tensor) -> torch.nn.Linear:
    """A Linear layer whose parameters are set next (not initialised: that would be wasted work)."""
    with warnings.catch_warnings():  # an empty layer's (skipped) initialisation warns that it does nothing
        warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
        return torch.nn.utils.skip_init(
            torch.nn.Linear, inputs, outputs, bias=bias, device=like.device, dtype=like.dtype
        )


def _linear_rows(layer: torch.nn.Linear, rows: torch.Tensor) -> torch.nn.Linear:
    w = layer.weight
    new = _empty_linear(w.shape[1], len(rows), layer.bias is not None, w)
    with torch.no_grad():
        new.weight = torch.nn.Parameter(w.index_select(0, rows.to(w.device)), requires_grad=w.requires_grad)
        if layer.bias is not None:
            new.bias = torch.nn.Parameter(layer.bias.index_select(0, rows.to(w.device)), requires_grad=w.requires_grad)
    return new


def _linear_columns(layer: torch.nn.Linear, columns: torch.Tensor) -> torch.nn.Linear:
    w = layer.weight
    new = _empty_linear(len(columns), w.shape[0], layer.bias is not None, w)
    with torch.no_grad():
        kept = w.index_select(1, columns.to(w.device))
        new.weight = torch.nn.Parameter(kept, requires_grad=w.requires_grad)
        if layer.bias is not None:
            new.bias = layer.bias
    return new


def _conv1d(layer: Conv1D, index: torch.Tensor, dim: int) -> Conv1D:
    """GPT-2's Conv1D (weight (in, out)) keeping ``index`` along ``dim`` (1 = outputs, 0 = inputs)."""
    w = layer.weight
    kept = w.index_select(dim, index.to(w.device))
    new = Conv1D(kept.shape[1], kept.shape[0]).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight = torch.nn.Parameter(kept, requires_grad=w.requires_grad)
        bias = layer.bias.index_select(0, index.to(w.device)) if dim == 1 else layer.bias
        new.bias = torch.nn.Parameter(bias, requires_grad=w.requires_grad)
    return new


def _spans_heads(module: torch.nn.Module, name: str, heads: int, head_dim: int) -> bool:
    """Whether ``module.<name>`` (a q_norm / k_norm) normalises the concatenation of all heads."""
    norm = getattr(module, name, None)
    weight = getattr(norm, "weight", None)
    return weight is not None and weight.numel() == heads * head_dim and heads > 1


def shrink_layer(module: torch.nn.Module, plan: LayerPlan, head_dim: int) -> None:
    """Cut one attention module's projections to ``plan`` in place (see the module docstring)."""
    q_rows = _rows(plan.q, head_dim)
    if hasattr(module, "c_attn"):  # GPT-2: one fused [q | k | v] projection, multi-head attention
        width = plan.num_heads * head_dim
        kv_rows = _rows(plan.kv, head_dim)
        fused = torch.cat([q_rows, kv_rows + width, kv_rows + 2 * width])
        module.c_attn = _conv1d(module.c_attn, fused, dim=1)
        module.c_proj = _conv1d(module.c_proj, q_rows, dim=0)
        module.split_size = len(q_rows)
        if hasattr(module, "num_heads"):
            module.num_heads = len(plan.q)
        module.headstats_heads = None
        if not plan.q:
            _make_attention_free(module)
        return
    if not plan.q:  # no head left: empty projections, and no attention computed
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(module, name, _linear_rows(getattr(module, name), q_rows))
        module.o_proj = _linear_columns(module.o_proj, q_rows)
        module.headstats_heads = None
        _make_attention_free(module)
        return
    q_whole = _spans_heads(module, "q_norm", plan.num_heads, head_dim)
    k_whole = _spans_heads(module, "k_norm", plan.num_kv_heads, head_dim)
    if not q_whole:
        module.q_proj = _linear_rows(module.q_proj, q_rows)
    k_index = tuple(plan.kv[i] for i in plan.kv_of_q) if k_whole else plan.kv_of_q
    if not k_whole:
        module.k_proj = _linear_rows(module.k_proj, _rows(plan.kv, head_dim))
    module.v_proj = _linear_rows(module.v_proj, _rows(plan.kv, head_dim))
    module.o_proj = _linear_columns(module.o_proj, q_rows)
    n_q, n_kv = len(plan.q), len(plan.kv)
    group = n_q // n_kv
    uniform = not q_whole and not k_whole and n_q % n_kv == 0 and plan.kv_of_q == tuple(i // group for i in range(n_q))
    if uniform:
        module.num_key_value_groups = group
        module.headstats_heads = None
    else:
        module.num_key_value_groups = 1
        module.headstats_heads = HeadMap(plan.q if q_whole else None, k_index, plan.kv_of_q)


def attention_free_forward(
    self: torch.nn.Module, hidden_states: torch.Tensor, *args: object, **kwargs: object
) -> tuple[torch.Tensor, None]:
    """The forward of an attention module that lost every head: its output is the output projection's
    bias (0 without one), what the zeroed heads give. A KV cache gets one zero per token for this
    layer, so that the cache's length, read from a layer's entry, stays the number of tokens seen."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is not None:
        cache = getattr(cache, "self_attention_cache", cache)  # GPT-2 may be given an encoder-decoder cache
        stub = hidden_states.new_zeros(hidden_states.shape[0], 1, hidden_states.shape[1], 1)
        cache.update(stub, stub, self.layer_idx)
    out = hidden_states.new_zeros(hidden_states.shape)
    bias = (self.o_proj if hasattr(self, "o_proj") else self.c_proj).bias
    return (out if bias is None else out + bias), None


_ATTENTION_FREE: dict[type, type] = {}


def _make_attention_free(module: torch.nn.Module) -> None:
    """Give ``module`` :func:`attention_free_forward` (through a subclass of its class, one per class)."""
    cls = type(module)
    if cls not in _ATTENTION_FREE:
        _ATTENTION_FREE[cls] = type(f"AttentionFree{cls.__name__}", (cls,), {"forward": attention_free_forward})
    module.__class__ = _ATTENTION_FREE[cls]


def shrink_model(model: PreTrainedModel, removed: Iterable[tuple[int, int]]) -> list[LayerPlan]:
    """Remove the query heads ``removed`` ((layer, head) pairs of the unpruned ``model``) in place:
    every layer cut to its :class:`LayerPlan`, and :func:`pruned_attention` selected when a layer
    needs its gather. Returns the plans."""
    layers, heads, kv_heads, head_dim = geometry(model)
    removed = list(removed)
    plans = [plan_layer([h for layer_, h in removed if layer_ == i], heads, kv_heads) for i in range(layers)]
    modules = attention_modules(model)
    for module, plan in zip(modules, plans, strict=True):
        if plan.removed:
            shrink_layer(module, plan, head_dim)
    if any(getattr(m, "headstats_heads", None) is not None for m in modules):
        register_attention()
        if model.config._attn_implementation != ATTENTION:
            model.set_attn_implementation(ATTENTION)
    return plans


def recorded_heads(config: object) -> list[tuple[int, int]]:
    """The removed (layer, head) pairs a pruned model's config records (none for an unpruned one)."""
    entry = getattr(config, CONFIG_KEY, None) or {}
    return [(int(layer), int(head)) for layer, head in entry.get("removed_heads", ())]


def shrink_to_config(model: PreTrainedModel) -> list[LayerPlan]:
    """Cut a freshly built ``model`` to the heads its config's ``headstats_pruning`` entry keeps, so
    that ``from_pretrained`` finds every saved weight in its shape."""
    return shrink_model(model, recorded_heads(model.config))
