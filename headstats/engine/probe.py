"""A :class:`Probe`: the per-model state of one observation or intervention.

It says which scores to compute and which zeroing policy to apply, and it turns one forward pass
into one :class:`ForwardRecord`: ``output, record = probe.forward(inputs, keys)``. Inside the
``with`` block a model the user calls directly is observed too (its record is :attr:`Probe.last`),
because the probe's hooks read the 2-D ``attention_mask`` of every call; the hooks and the attention
implementation are restored when the block is left.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

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
    register,
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
class _ForwardState:
    valid: torch.Tensor | None
    sample_keys: torch.Tensor | None
    layers: dict[int, tuple[dict[str, torch.Tensor], torch.Tensor | None]] = field(default_factory=dict)
    calls: int = 0
    masks: dict = field(default_factory=dict)  # per-forward cache of blocked-key masks (see _blocked)


class Probe:
    """Observe (and optionally intervene on) every attention head of ``model``.

    Use as a context manager: entering selects headstats' attention implementation and installs a
    pre-forward hook that reads the batch's 2-D ``attention_mask`` (so padding is known exactly, never
    inferred); leaving restores the previous implementation. Each forward pass run inside leaves a
    :class:`ForwardRecord` in :attr:`last`; ``keep_history`` also appends it to :attr:`history`.
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
    ) -> None:
        check_supported(model)
        self.model = model
        self.score_ids = S.resolve(score_ids) if score_ids else ()
        self.raw_ids = S.raw_closure(self.score_ids)
        self.policy = policy
        self.seed = seed
        self.salt = salt
        self.keep_history = keep_history
        self.record_scores = record_scores
        self.chunk_bytes = chunk_bytes or attention.DEFAULT_CHUNK_BYTES
        config = model.config.get_text_config()
        self.num_layers = config.num_hidden_layers
        self.num_heads = int(getattr(config, "num_attention_heads", 1))
        self.last: ForwardRecord | None = None
        self.history: list[ForwardRecord] = []
        self._keys: torch.Tensor | None = None  # sample keys of the pass forward() is running
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
        register()
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
        ``kwargs`` go to the model call (e.g. ``logits_to_keep``); ``body=True`` calls the base model
        without its LM head (all that scoring needs)."""
        if id(self.model) not in _PROBED:
            raise RuntimeError("Probe.forward runs inside the probe's with-block: `with Probe(model, ...) as probe:`")
        body = bool(kwargs.pop("body", False))
        module = hooked_module(self.model) if body else self.model
        self._keys = None if keys is None else torch.as_tensor(keys, dtype=torch.long)
        self.last = None
        try:
            output = module(**inputs, use_cache=False, **kwargs)
        finally:
            self._keys = None
        if self.last is None:
            raise UnsupportedModelError(
                f"{type(self.model).__name__}: no attention layer called headstats' attention function; the model "
                "must route attention through transformers' AttentionInterface"
            )
        return output, self.last

    def _pre_forward(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        bound = self._forward_signature.bind_partial(*args, **kwargs).arguments
        mask = bound.get("attention_mask")
        if mask is not None and mask.dim() != 2:
            raise ValueError(
                "headstats needs the 2-D (batch, seq) attention_mask to know which tokens are padding; "
                f"got a {mask.dim()}-D mask"
            )
        if bound.get("past_key_values") is not None:
            raise ValueError("headstats scores whole sequences: call the model without past_key_values")
        valid = mask.bool() if mask is not None else None
        keys, self._keys = self._keys, None
        self._state = _ForwardState(valid=valid, sample_keys=keys)
        self._token = ACTIVE.set(self)

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: object) -> None:
        state, self._state = self._state, None
        if self._token is not None:
            ACTIVE.reset(self._token)
            self._token = None
        if state is None or not state.layers:
            return
        if len(state.layers) != self.num_layers:
            raise UnsupportedModelError(
                f"{type(self.model).__name__}: headstats saw {len(state.layers)} of {self.num_layers} attention "
                "layers; every layer must call transformers' AttentionInterface"
            )
        order = sorted(state.layers)
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
        if key.shape[2] != s:
            raise ValueError(
                "headstats scores whole sequences (query length == key length); "
                "call the model with use_cache=False and no past_key_values"
            )
        layer = getattr(module, "layer_idx", None)
        layer = state.calls if layer is None else int(layer)
        state.calls += 1
        valid = state.valid
        if valid is None:
            valid = torch.ones(b, s, dtype=torch.bool, device=query.device)
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
        )
        layer_scores = derive_scores(raw, self.score_ids, layer, keys, (self.seed, self.salt), h)
        zero = None
        if self.policy is not None:
            zero = self.policy(layer, layer_scores, keys)
            if zero is not None:
                zero = zero.to(device=output.device, dtype=torch.bool)
                output = output * (~zero).to(output.dtype)[:, None, :, None]
        layer_scores["__n_tokens__"] = n_tokens
        layer_scores["__keys__"] = keys
        state.layers[layer] = (layer_scores, zero)
        return output
