"""A :class:`Probe`: the per-model state of one observation or intervention.

It says which scores to compute and which zeroing policy to apply, and it turns one forward pass
into one :class:`ForwardRecord`: ``output, record = probe.forward(inputs, keys)``. Inside the
``with`` block a model the user calls directly is observed too (its record is :attr:`Probe.last`),
because the probe's hooks read the 2-D ``attention_mask`` of every call; the hooks and the attention
implementation are restored when the block is left.

A probe also runs the two halves of shared-prefix reuse (:mod:`headstats.engine.prefix`):
:meth:`Probe.forward_prefix` pools the rows of a prefix once, and ``forward(..., prefix=stats)`` runs
only the rest of each sequence against the prefix's cached keys and values, combining the pooled sums.
A user's own call with a KV cache (``past_key_values``, ``generate``) runs only under a probe made
with ``cached=True``, which computes no score and whose policy does not depend on the sequence (static
zeroing): scores are defined over whole sequences, but zeroing the same heads at every position is
the same computation whether the earlier positions' keys and values come from a cache or not.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import PreTrainedModel
from transformers.pytorch_utils import Conv1D

from headstats.engine import attention
from headstats.engine import scores as S
from headstats.engine.attention import (
    ACTIVE,
    ATTN_IMPLEMENTATION,
    RowMask,
    UnsupportedModelError,
    attention_with_stats,
    check_supported,
    derive_scores,
    find_out_proj,
    hooked_module,
    register_attention,
)

ZeroingPolicy = Callable[[int, dict[str, torch.Tensor], torch.Tensor], torch.Tensor | None]
"""(layer, scores of this layer as (B, H) fp32 tensors, sample keys (B,)) -> (B, H) bool mask of
heads to zero, or None. Called inside the forward pass, after the layer's scores are computed."""

# Models with a probe entered, so that two probes never stack on one model.
_PROBED: set[int] = set()


@dataclass
class ForwardRecord:
    """What one forward pass under a probe produced. Shapes: (B, L, H)."""

    scores: dict[str, torch.Tensor]
    zero_mask: torch.Tensor | None
    n_tokens: torch.Tensor  # (B,)
    sample_keys: torch.Tensor  # (B,)


@dataclass
class PrefixStats:
    """What a probe keeps of a shared prefix's own pass: per layer, the pooled sums of the prefix's
    rows (mean pools as sums, first pools as the value at the prefix's first token; ``last`` pools
    belong to the suffix) and the heads the policy zeroed in the prefix, (1, H) each."""

    n_tokens: int
    sums: dict[int, dict[str, torch.Tensor]]
    zero: dict[int, torch.Tensor | None]


class PrefixMismatch(RuntimeError):
    """Prefix reuse cannot give the whole-sequence result for this probe (its zeroing policy decides
    heads from the whole sequence); run full forward passes instead."""


PassMode = Literal["whole", "prefix", "suffix", "cached"]


@dataclass
class _ForwardState:
    valid: torch.Tensor | None
    sample_keys: torch.Tensor | None
    layers: dict[int, tuple[dict[str, torch.Tensor], torch.Tensor | None]] = field(default_factory=dict)
    calls: int = 0
    masks: dict = field(default_factory=dict)  # per-forward cache of blocked-key masks (see _blocked)
    mode: PassMode = "whole"
    prefix: PrefixStats | None = None


class Probe:
    """Observe (and optionally intervene on) every attention head of ``model``.

    Use as a context manager: entering selects headstats' attention implementation and installs a
    pre-forward hook that reads the batch's 2-D ``attention_mask`` (so padding is known exactly, never
    inferred); leaving restores the previous implementation. Each forward pass run inside leaves a
    :class:`ForwardRecord` in :attr:`last`; ``keep_history`` also appends it to :attr:`history`.
    ``materialise=True`` computes attention with the explicit kernel even where no score reads the
    probabilities (see :func:`headstats.engine.attention.attention_with_stats`), so that passes with
    different scores give bit-identical outputs. ``cached=True`` (no scores allowed) lets the model
    run with a KV cache, e.g. ``model.generate``: for static zeroing, which needs no scores.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        score_ids: Sequence[str] = (),
        policy: ZeroingPolicy | None = None,
        *,
        seed: int = 0,
        salt: int = 0,
        keep_history: bool = False,
        record_scores: bool = True,
        chunk_bytes: int | None = None,
        materialise: bool = False,
        cached: bool = False,
    ) -> None:
        check_supported(model)
        if cached and score_ids:
            raise ValueError("a probe that runs with a KV cache (cached=True) computes no scores: give no score ids")
        self.model = model
        self.score_ids = S.resolve(score_ids) if score_ids else ()
        self.raw_ids = S.raw_closure(self.score_ids)
        self.policy = policy
        self.seed = seed
        self.salt = salt
        self.keep_history = keep_history
        self.record_scores = record_scores
        self.chunk_bytes = chunk_bytes or attention.DEFAULT_CHUNK_BYTES
        self.materialise = materialise
        self.cached = cached
        config = model.config.get_text_config()
        self.num_layers = config.num_hidden_layers
        self.num_heads = int(getattr(config, "num_attention_heads", 1))
        self.last: ForwardRecord | None = None
        self.history: list[ForwardRecord] = []
        # Forward passes of the model in which no attention layer reached headstats (each one raised).
        self.passes_unseen = 0
        self._keys: torch.Tensor | None = None  # sample keys of the pass forward() is running
        self._mode: PassMode = "whole"  # and its kind (see _ForwardState.mode)
        self._prefix: PrefixStats | None = None
        self._prefix_result: PrefixStats | None = None
        self._sequences_seen = 0
        self._state: _ForwardState | None = None
        self._token: contextvars.Token | None = None
        self._hooks: list = []
        self._previous_impl: str | None = None
        self._grams: dict[int, tuple[int, torch.Tensor]] = {}
        self._forward_signature = inspect.signature(hooked_module(model).forward)

    # -- context management ---------------------------------------------------------------------

    def __enter__(self) -> Probe:
        if id(self.model) in _PROBED:
            raise RuntimeError("a headstats probe is already active on this model; leave it first")
        register_attention()
        self._previous_impl = self.model.config._attn_implementation
        if self._previous_impl != ATTN_IMPLEMENTATION:
            self.model.set_attn_implementation(ATTN_IMPLEMENTATION)
        target = hooked_module(self.model)
        self._hooks = [
            target.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
            target.register_forward_hook(self._post_forward, always_call=True),
        ]
        _PROBED.add(id(self.model))
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        _PROBED.discard(id(self.model))
        if self._previous_impl is not None and self._previous_impl != ATTN_IMPLEMENTATION:
            self.model.set_attn_implementation(self._previous_impl)

    def forward(
        self, inputs: Mapping[str, torch.Tensor], keys: torch.Tensor | Sequence[int] | None = None, **kwargs: object
    ) -> tuple[object, ForwardRecord]:
        """Run the model once on ``inputs`` (``input_ids``, the 2-D ``attention_mask``, ...) and return
        its output with this pass's :class:`ForwardRecord`.

        ``keys`` (one int per row) identify the sequences: the random score's draws depend on them, so
        a sequence gets the same draws in any batch; by default rows are numbered in call order.
        ``kwargs`` go to the model call (e.g. ``logits_to_keep``; ``use_cache=True`` keeps the pass's KV
        cache in the output); ``body=True`` calls the base model without its LM head (all that scoring
        needs).

        ``prefix`` (the :class:`PrefixStats` of :meth:`forward_prefix`) runs the sequences' remaining
        tokens only: ``inputs`` then carry the prefix's key/value cache and a 2-D mask over prefix
        and suffix (built by :func:`headstats.engine.prefix.continue_inputs`), and the record holds
        the whole sequences' scores. It raises :class:`PrefixMismatch` when the zeroing policy decides
        differently for a sequence than it did for the prefix alone."""
        if id(self.model) not in _PROBED:
            raise RuntimeError("Probe.forward runs inside the probe's with-block: `with Probe(model, ...) as probe:`")
        body = bool(kwargs.pop("body", False))
        prefix = kwargs.pop("prefix", None)
        if prefix is not None and not isinstance(prefix, PrefixStats):
            raise TypeError(f"prefix must be the PrefixStats of Probe.forward_prefix, not {type(prefix).__name__}")
        module = hooked_module(self.model) if body else self.model
        self._keys = None if keys is None else torch.as_tensor(keys, dtype=torch.long)
        self._mode, self._prefix = ("suffix", prefix) if prefix is not None else ("whole", None)
        self.last = None
        # use_cache=True on a whole pass (no past keys) keeps its KV cache: the scores are still the
        # whole sequence's, and a continuation can run from the cache (headstats.engine.skip).
        use_cache = bool(kwargs.pop("use_cache", False)) or prefix is not None
        try:
            output = module(**inputs, use_cache=use_cache, **kwargs)
        finally:
            self._keys, self._mode, self._prefix = None, "whole", None
        if self.last is None:
            raise UnsupportedModelError(
                f"{type(self.model).__name__}: no attention layer called headstats' attention function; the model "
                "must route attention through transformers' AttentionInterface"
            )
        return output, self.last

    def prefix_refusal(self) -> str | None:
        """Why prefix reuse cannot serve this probe, or None. Random zeroing draws its heads per
        sequence, so a prefix shared by several sequences has no single zeroed set; other policies
        are checked layer by layer while they run (:class:`PrefixMismatch`)."""
        if self.policy is not None and any(S.SCORES[sid].is_random for sid in self.score_ids):
            return "random zeroing draws heads per sequence, so sequences cannot share a prefix's pass"
        return None

    def forward_prefix(
        self, inputs: Mapping[str, torch.Tensor], keys: torch.Tensor | Sequence[int], **kwargs: object
    ) -> tuple[object, PrefixStats]:
        """Run one shared prefix (a single unpadded row) and pool its rows for every score; ``kwargs``
        must carry the (empty) cache that keeps its keys and values (``cache``/``past_key_values``).
        ``keys`` are the sample keys of the sequences that share it: the zeroing policy, if any, is
        asked for each of them, on the prefix's scores, and must zero the same heads for all
        (else :class:`PrefixMismatch`)."""
        if id(self.model) not in _PROBED:
            raise RuntimeError("Probe.forward_prefix runs inside the probe's with-block")
        reason = self.prefix_refusal()
        if reason is not None:
            raise PrefixMismatch(reason)
        ids = inputs["input_ids"]
        if ids.shape[0] != 1 or ("attention_mask" in inputs and not bool(inputs["attention_mask"].all())):
            raise ValueError("a shared prefix is one row without padding")
        self._keys = torch.as_tensor(keys, dtype=torch.long)
        if self._keys.numel() == 0:
            raise ValueError("forward_prefix needs the sample keys of the sequences sharing the prefix")
        self._mode = "prefix"
        self._prefix_result = None
        body = bool(kwargs.pop("body", True))
        module = hooked_module(self.model) if body else self.model
        try:
            output = module(**inputs, use_cache=True, **kwargs)
        finally:
            self._keys, self._mode = None, "whole"
        stats, self._prefix_result = self._prefix_result, None
        if stats is None:
            raise UnsupportedModelError(
                f"{type(self.model).__name__}: no attention layer called headstats' attention function"
            )
        return output, stats

    def _pre_forward(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        bound = self._forward_signature.bind_partial(*args, **kwargs).arguments
        mask = bound.get("attention_mask")
        if mask is not None and mask.dim() != 2:
            raise ValueError(
                "headstats needs the 2-D (batch, seq) attention_mask to know which tokens are padding; "
                f"got a {mask.dim()}-D mask"
            )
        mode, prefix = self._mode, self._prefix
        if _passed_cache(bound) and mode == "whole":
            if not self.cached:
                raise ValueError(
                    "headstats scores whole sequences: call the model without past_key_values (use_cache=False); "
                    "static zeroing (ablate_heads(model, heads=...) or mask=...) runs with a cache, e.g. generate"
                )
            mode = "cached"
        if mode == "suffix" and mask is None:
            raise ValueError("a pass continuing a shared prefix needs the 2-D attention_mask over prefix and suffix")
        valid = mask.bool() if mask is not None else None
        keys, self._keys = self._keys, None
        self._state = _ForwardState(valid=valid, sample_keys=keys, mode=mode, prefix=prefix)
        self._token = ACTIVE.set(self)

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: object) -> None:
        state, self._state = self._state, None
        if self._token is not None:
            ACTIVE.reset(self._token)
            self._token = None
        # No output: the forward pass raised (e.g. PrefixMismatch) and its error is what the caller sees.
        if state is None or output is None:
            return
        if not state.layers:
            self.passes_unseen += 1
            raise UnsupportedModelError(
                f"{type(self.model).__name__} ran, but none of its {self.num_layers} attention layers called "
                "headstats' attention function, so no head was scored or zeroed: something replaced the model's "
                "attention modules or its attention implementation; give headstats the model as transformers loads it"
            )
        if len(state.layers) != self.num_layers:
            raise UnsupportedModelError(
                f"{type(self.model).__name__}: headstats saw {len(state.layers)} of {self.num_layers} attention "
                "layers; every layer must call transformers' AttentionInterface"
            )
        order = sorted(state.layers)
        if state.mode == "prefix":
            first = state.layers[order[0]][0]
            self._prefix_result = PrefixStats(
                n_tokens=int(first["__n_tokens__"][0]),
                sums={i: {sid: state.layers[i][0][sid] for sid in self.raw_ids} for i in order},
                zero={i: state.layers[i][1] for i in order},
            )
            return
        scores = {}
        if self.record_scores:
            scores = {sid: torch.stack([state.layers[i][0][sid] for i in order], dim=1) for sid in self.score_ids}
        masks = [state.layers[i][1] for i in order]
        zero_mask = torch.stack(masks, dim=1) if all(m is not None for m in masks) else None
        first = next(iter(state.layers.values()))
        record = ForwardRecord(scores, zero_mask, first[0]["__n_tokens__"], first[0]["__keys__"])
        self.last = record
        if self.keep_history:
            self.history.append(record)

    # -- the work done in each attention layer ---------------------------------------------------

    def _sample_keys(self, state: _ForwardState, batch: int) -> torch.Tensor:
        if state.sample_keys is None:
            state.sample_keys = torch.arange(self._sequences_seen, self._sequences_seen + batch)
            self._sequences_seen += batch
        return state.sample_keys

    def out_proj_gram(self, module: torch.nn.Module, num_heads: int, head_dim: int) -> torch.Tensor:
        """W_h^T W_h (fp32, (H, D, D)) for each head's slice of the layer's output projection."""
        proj = find_out_proj(module)
        weight = proj.weight
        cached = self._grams.get(id(proj))
        if cached is not None and cached[0] == weight._version:
            return cached[1]
        # Rows of m are the inputs of the projection (the concatenated head outputs).
        m = weight.detach().float() if isinstance(proj, Conv1D) else weight.detach().float().t()
        m = m.reshape(num_heads, head_dim, -1)
        gram = torch.matmul(m, m.transpose(1, 2))
        self._grams[id(proj)] = (weight._version, gram)
        return gram

    def attend(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | RowMask | None,
        scaling: float | None,
        softcap: float | None,
    ) -> torch.Tensor:
        state = self._state
        assert state is not None
        b, h, s, d = query.shape
        if key.shape[2] != s and state.mode not in ("suffix", "cached"):
            raise ValueError(
                "headstats scores whole sequences (query length == key length); "
                "call the model with use_cache=False and no past_key_values"
            )
        layer = getattr(module, "layer_idx", None)
        layer = state.calls if layer is None else int(layer)
        state.calls += 1
        valid = state.valid
        if state.mode == "cached":
            # No score reads it: only the keys of this layer's cache (a sliding window keeps the last
            # ones) must be covered. The attention mask decides what each query sees.
            k_len = key.shape[2]
            valid = None if valid is None or valid.shape[-1] < k_len else valid[:, -k_len:]
        if valid is None:
            valid = torch.ones(b, key.shape[2] if state.mode == "cached" else s, dtype=torch.bool, device=query.device)
        valid = valid.to(query.device)
        keys = self._sample_keys(state, b)
        gram = None
        if any(S.SCORES[r].needs_out_proj for r in self.raw_ids):
            gram = self.out_proj_gram(module, h, d)
        output, raw, n_tokens = attention_with_stats(
            query,
            key,
            value,
            attention_mask,
            scaling if scaling is not None else d**-0.5,
            softcap=softcap,
            valid=valid,
            raw_ids=self.raw_ids,
            out_proj_gram=gram,
            chunk_bytes=self.chunk_bytes,
            causal=getattr(module, "is_causal", True),
            mask_cache=state.masks,
            pool_sums=state.mode in ("prefix", "suffix"),
            materialise=self.materialise,
        )
        if state.mode == "prefix":
            pooled = raw
            raw = {sid: _mean_if_pooled(sid, value, n_tokens) for sid, value in raw.items()}
        elif state.mode == "suffix":
            assert state.prefix is not None
            raw, n_tokens = _combine_with_prefix(raw, n_tokens, state.prefix.sums[layer], state.prefix.n_tokens)
        layer_scores = {}
        if self.policy is not None or state.mode != "prefix":
            layer_scores = derive_scores(raw, self.score_ids, layer, keys, (self.seed, self.salt), h)
        if state.mode == "prefix":
            # The policy is asked for every sequence sharing the prefix, on the prefix's scores.
            layer_scores = {sid: value.expand(len(keys), -1) for sid, value in layer_scores.items()}
        zero = None
        if self.policy is not None:
            zero = self.policy(layer, layer_scores, keys)
            if zero is not None:
                zero = zero.to(device=output.device, dtype=torch.bool)
                if state.mode == "prefix":
                    zero = _one_zeroing_for_prefix(layer, zero)
                output = output * (~zero).to(output.dtype)[:, None, :, None]
        if state.mode == "suffix":
            assert state.prefix is not None
            _check_same_zeroing(layer, zero, state.prefix.zero[layer])
        if state.mode == "prefix":
            layer_scores = pooled
        layer_scores["__n_tokens__"] = n_tokens
        layer_scores["__keys__"] = keys
        state.layers[layer] = (layer_scores, zero)
        return output


def _mean_if_pooled(sid: str, value: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    if S.SCORES[sid].pool != "mean":
        return value
    return value / n_tokens.clamp_min(1).float().unsqueeze(-1)


def _combine_with_prefix(
    suffix: dict[str, torch.Tensor], n_suffix: torch.Tensor, prefix: dict[str, torch.Tensor], n_prefix: int
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Whole-sequence raw scores from the prefix's pooled rows and the suffix's. Under causal
    attention a prefix row is the same in every sequence that starts with the prefix, so a mean is
    (prefix sum + suffix sum) / all tokens, a ``first`` pool is the prefix's value and a ``last``
    pool the suffix's."""
    total = n_suffix + n_prefix
    count = total.clamp_min(1).float().unsqueeze(-1)
    out = {}
    for sid, value in suffix.items():
        pool = S.SCORES[sid].pool
        if pool == "mean":
            out[sid] = (prefix[sid].to(value.device) + value) / count
        elif pool == "first":
            out[sid] = prefix[sid].to(value.device).expand_as(value).clone()
        else:
            out[sid] = value
    return out, total


def _one_zeroing_for_prefix(layer: int, zero: torch.Tensor) -> torch.Tensor:
    if not bool((zero == zero[:1]).all()):
        raise PrefixMismatch(
            f"layer {layer}: the zeroing policy zeroes different heads for sequences that share a prefix; "
            "run full forward passes"
        )
    return zero[:1]


def _check_same_zeroing(layer: int, zero: torch.Tensor | None, prefix_zero: torch.Tensor | None) -> None:
    """Prefix reuse is exact when every sequence zeroes, layer by layer, the heads the prefix's own
    pass zeroed (by induction over layers the prefix's rows are then what the whole pass computes).
    A policy that decides from the whole sequence (dynamic zeroing) generally does not."""
    same = (zero is None and prefix_zero is None) or (
        zero is not None
        and prefix_zero is not None
        and bool((zero == prefix_zero.to(zero.device).expand_as(zero)).all())
    )
    if not same:
        raise PrefixMismatch(
            f"layer {layer}: the zeroing policy chose other heads for a whole sequence than for its shared prefix "
            "(it decides from the whole sequence); run full forward passes"
        )


# transformers 5.x renamed the cache argument from past_key_values to cache (the old name is still
# accepted, through the model's **kwargs); either one given means a cached continuation.
CACHE_ARGUMENTS = ("cache", "past_key_values")


def _passed_cache(bound: dict) -> bool:
    extra = bound.get("kwargs") if isinstance(bound.get("kwargs"), dict) else {}
    return any(bound.get(name) is not None or extra.get(name) is not None for name in CACHE_ARGUMENTS)
