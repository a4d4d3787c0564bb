"""The one attention function headstats registers with transformers.

Every model family that looks its attention up in ``AttentionInterface`` (Llama, Qwen, Mistral,
OLMo-2, Gemma, Phi-3, GPT-2, ...) calls :func:`headstats_attention` with the layer's queries, keys
and values once headstats' implementation is selected. That function computes attention exactly
(softmax in fp32), feeds the score registry of :mod:`headstats.scores` for every head in the same
pass, and lets a zeroing policy set whole head outputs to 0 before the output projection. No model
file is patched and nothing here names a model family.

A :class:`Probe` is the per-model state of one observation or intervention: which scores to
compute, which policy to apply, the valid-token mask of the current batch, and what was recorded.
Outside a probe the function is plain attention (delegating to PyTorch's SDPA), so a model loaded
with ``attn_implementation="headstats"`` also generates normally.
"""

from __future__ import annotations

import contextvars
import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.pytorch_utils import Conv1D

from headstats import scores as S

ATTN_IMPLEMENTATION = "headstats"

# Where each family keeps the attention output projection W_O (one table, read by fhon only).
OUT_PROJ_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "o")

# Bytes one (B, H, rows, S) fp32 attention tensor may take before query rows are chunked.
# Chunking keeps score memory linear in S; it does not change any number.
DEFAULT_CHUNK_BYTES = int(os.environ.get("HEADSTATS_CHUNK_BYTES", 256 * 2**20))

ZeroingPolicy = Callable[[int, dict[str, torch.Tensor], torch.Tensor], torch.Tensor | None]
"""(layer, scores of this layer as (B, H) fp32 tensors, sample keys (B,)) -> (B, H) bool mask of
heads to zero, or None. Called inside the forward pass, after the layer's scores are computed."""

_ACTIVE: contextvars.ContextVar[Probe | None] = contextvars.ContextVar("headstats_probe", default=None)


class UnsupportedModelError(ValueError):
    """The model does not route attention through transformers' AttentionInterface."""


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
        self.chunk_bytes = chunk_bytes or DEFAULT_CHUNK_BYTES
        self.num_layers = model.config.get_text_config().num_hidden_layers
        self.last: ForwardRecord | None = None
        self.history: list[ForwardRecord] = []
        self.next_sample_keys: torch.Tensor | None = None
        self._sequences_seen = 0
        self._state: _ForwardState | None = None
        self._token: contextvars.Token | None = None
        self._hooks: list = []
        self._previous_impl: str | None = None
        self._grams: dict[int, tuple[int, torch.Tensor]] = {}
        self._forward_signature = inspect.signature(_hooked_module(model).forward)

    # -- context management ---------------------------------------------------------------------

    def __enter__(self) -> Probe:
        if getattr(self.model, "_headstats_probe", None) is not None:
            raise RuntimeError("a headstats probe is already active on this model; leave it first")
        register()
        self._previous_impl = self.model.config._attn_implementation
        if self._previous_impl != ATTN_IMPLEMENTATION:
            self.model.set_attn_implementation(ATTN_IMPLEMENTATION)
        target = _hooked_module(self.model)
        self._hooks = [
            target.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
            target.register_forward_hook(self._post_forward, always_call=True),
        ]
        self.model._headstats_probe = self
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self.model._headstats_probe = None
        if self._previous_impl is not None and self._previous_impl != ATTN_IMPLEMENTATION:
            self.model.set_attn_implementation(self._previous_impl)

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
        keys = self.next_sample_keys
        self.next_sample_keys = None
        self._state = _ForwardState(valid=valid, sample_keys=keys)
        self._token = _ACTIVE.set(self)

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: object) -> None:
        state, self._state = self._state, None
        if self._token is not None:
            _ACTIVE.reset(self._token)
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


def derive_scores(
    raw: dict[str, torch.Tensor],
    score_ids: Sequence[str],
    layer: int,
    keys: torch.Tensor,
    seed: tuple[int, int],
    heads: int,
) -> dict[str, torch.Tensor]:
    """Raw pooled scores -> every requested score id, (B, H) fp32 each."""
    out: dict[str, torch.Tensor] = {}
    device = next(iter(raw.values())).device if raw else keys.device
    for sid in score_ids:
        score = S.SCORES[sid]
        if score.is_random:
            out[sid] = random_draws(seed, keys, layer, heads).to(device)
        elif score.ratio is not None:
            out[sid] = score.ratio.apply(raw)
        else:
            out[sid] = raw[sid]
    return out


def random_draws(seed: tuple[int, int], keys: torch.Tensor, layer: int, heads: int) -> torch.Tensor:
    """U(0, 1) fp32 draws that depend only on (seed, salt, sample key, layer), never on the batch, so
    a sequence gets the same draws whatever it is batched with. The salt separates streams that
    share sample keys (collection salts with the model and dataset, so their baselines are independent)."""
    rows = [np.random.default_rng([*seed, int(k), layer]).random(heads, dtype=np.float32) for k in keys.tolist()]
    return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, heads)


def attention_with_stats(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | RowMask | None,
    scaling: float,
    *,
    valid: torch.Tensor,
    raw_ids: Sequence[str],
    softcap: float | None = None,
    out_proj_gram: torch.Tensor | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    causal: bool = True,
    mask_cache: dict | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """Exact attention plus the pooled raw scores of every head, in one pass over query chunks.

    query (B, H, S, D); key, value (B, KVH, S, D) with H a multiple of KVH (GQA: consecutive query
    heads share a KV head, as in ``repeat_kv``). ``attention_mask`` is a 4-D boolean (True = attend) or
    additive float mask broadcastable to (B, 1, S, S); ``valid`` (B, S) marks real tokens.
    Returns the attention output (B, S, H, D) in the query dtype, a (B, H) fp32 tensor per raw
    score id, and the token count (B,).
    """
    b, h, s, d = query.shape
    group = h // key.shape[1]
    valid = valid.bool()
    n_tokens = valid.sum(-1)
    first = valid.int().argmax(-1)
    last = s - 1 - valid.flip(-1).int().argmax(-1)
    v32 = value.float()
    if attention_mask is None and causal:
        attention_mask = torch.ones(s, s, dtype=torch.bool, device=query.device).tril()[None, None]
    cache = {} if mask_cache is None else mask_cache
    stats = {sid: S.SCORES[sid] for sid in raw_ids}
    needs_weights = any(score.needs_weights for score in stats.values())
    boolean = attention_mask is None or isinstance(attention_mask, RowMask) or attention_mask.dtype == torch.bool
    chunk = rows_per_chunk(b, h, s, chunk_bytes)
    if not needs_weights and softcap is None and boolean:
        chunks = _fused_rows(query, key, v32, attention_mask, scaling, chunk, cache)
    else:
        chunks = _explicit_rows(query, key, v32, attention_mask, scaling, softcap, chunk, cache)
    out = torch.empty(b, s, h, d, dtype=query.dtype, device=query.device)
    sums = {sid: torch.zeros(b, h, dtype=torch.float32, device=query.device) for sid in raw_ids}
    for start, probs, logits, o in chunks:
        stop = start + o.shape[2]
        out[:, start:stop] = o.transpose(1, 2).to(out.dtype)
        if not stats:
            del probs, logits, o
            continue
        rows = S.TokenRows(
            probs=probs,
            logits=logits,
            start=start,
            kv_values=v32[:, :, start:stop],
            group_size=group,
            outputs=o,
            first=first,
            out_proj_gram=out_proj_gram,
        )
        computed: dict[S.TokenStat, torch.Tensor] = {}
        span = range(start, stop)
        for sid, score in stats.items():
            assert score.stat is not None and score.pool is not None
            if score.stat not in computed:
                computed[score.stat] = score.stat(rows)
            sums[sid] += S.pool_rows(computed[score.stat], score.pool, span, valid, first, last)
        del probs, logits, o, rows, computed
    raw = {}
    count = n_tokens.clamp_min(1).float().unsqueeze(-1)
    for sid, score in stats.items():
        raw[sid] = sums[sid] / count if score.pool == "mean" else sums[sid]
    return out, raw, n_tokens


def rows_per_chunk(batch: int, heads: int, length: int, chunk_bytes: int) -> int:
    """Query rows per chunk: as many as keep one (B, H, rows, S) fp32 block within ``chunk_bytes``."""
    return max(1, min(length, chunk_bytes // max(1, batch * heads * length * 4)))


RowChunk = tuple[int, torch.Tensor | None, torch.Tensor | None, torch.Tensor]
"""(first query row, probabilities (B, H, C, S) or None, logits or None, head outputs (B, H, C, D) fp32)"""


def _explicit_rows(
    query: torch.Tensor,
    key: torch.Tensor,
    v32: torch.Tensor,
    attention_mask: torch.Tensor | RowMask | None,
    scaling: float,
    softcap: float | None,
    chunk: int,
    cache: dict,
) -> Iterator[RowChunk]:
    """Attention with the probabilities materialised, ``chunk`` query rows at a time."""
    b, h, s, d = query.shape
    kvh = key.shape[1]
    group = h // kvh
    k32 = key.float().transpose(-1, -2)
    neg = torch.finfo(torch.float32).min
    for start in range(0, s, chunk):
        stop = min(s, start + chunk)
        c = stop - start
        # Scaling q before the product saves a pass over the (rows x keys) logits.
        q = (query[:, :, start:stop].float() * scaling).reshape(b, kvh, group * c, d)
        logits = torch.matmul(q, k32).view(b, h, c, s)
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        if attention_mask is not None:
            if isinstance(attention_mask, RowMask) or attention_mask.dtype == torch.bool:
                logits = logits.masked_fill_(_blocked(attention_mask, start, stop, cache), neg)
            else:
                logits = logits.add_(attention_mask[:, :, start:stop].float()).clamp_min_(neg)
        probs = torch.softmax(logits, dim=-1)
        o = torch.matmul(probs.view(b, kvh, group * c, s), v32).view(b, h, c, d)
        yield start, probs, logits, o
        # Drop this chunk before computing the next, so one chunk is alive at a time.
        del q, logits, probs, o


def _fused_rows(
    query: torch.Tensor,
    key: torch.Tensor,
    v32: torch.Tensor,
    attention_mask: torch.Tensor | RowMask | None,
    scaling: float,
    chunk: int,
    cache: dict,
) -> Iterator[RowChunk]:
    """When no requested score reads the attention probabilities (head-output and value scores,
    static and random zeroing), PyTorch's fused SDPA kernel computes the same fp32 head outputs
    without materialising the (rows x keys) matrix. Rows are still taken ``chunk`` at a time so that
    the boolean mask of a long sequence is never whole."""
    s = query.shape[2]
    k32 = key.float()
    for start in range(0, s, chunk):
        stop = min(s, start + chunk)
        allowed = None if attention_mask is None else ~_blocked(attention_mask, start, stop, cache)
        o = torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:stop].float(), k32, v32, attn_mask=allowed, scale=scaling, enable_gqa=True
        )
        yield start, None, None, o
        del allowed, o


def _blocked(mask: torch.Tensor | RowMask, start: int, stop: int, cache: dict) -> torch.Tensor:
    """Keys a chunk of query rows must not see, computed once per mask and chunk per forward pass
    (layers of one type share their mask). Every row may see itself: a padded query row may
    otherwise see no key at all, and its softmax would be 0/0. Such rows are never scored or read,
    and a valid row always sees itself, so this changes no number that matters."""
    key = (id(mask), start, stop)
    if key in cache:
        return cache[key]
    allowed = mask.rows(start, stop) if isinstance(mask, RowMask) else mask[:, :, start:stop]
    rows = torch.arange(start, stop, device=allowed.device)[:, None]
    diagonal = rows == torch.arange(allowed.shape[-1], device=allowed.device)
    blocked = ~(allowed | diagonal)
    # Keep it for the other layers only when the rows are not chunked: the chunks of a long
    # sequence together would be another (rows x keys) mask, and memory must stay linear there.
    if start == 0 and stop == mask.shape[-2]:
        cache[key] = blocked
    return blocked


@dataclass(frozen=True, eq=False)
class RowMask:
    """A boolean attention mask that is never materialised whole: :meth:`rows` builds the
    (B, 1, rows, keys) block of a chunk of query rows with transformers' own ``sdpa_mask`` (so
    padding, causality, sliding windows and chunked attention follow the model's mask function).

    headstats' mask function returns one instead of a (B, 1, S, S) tensor when the attention of a
    forward pass will be computed in row chunks, which is what keeps memory linear in S for long
    sequences: the whole mask would be S^2 bytes per sequence, a chunk's block is rows x S."""

    arguments: dict

    @property
    def shape(self) -> tuple[int, int, int, int]:
        a = self.arguments
        return (a["batch_size"], 1, a["q_length"], a["kv_length"])

    def rows(self, start: int, stop: int) -> torch.Tensor:
        q_offset = self.arguments.get("q_offset", 0)
        arguments = {**self.arguments, "q_length": stop - start, "q_offset": q_offset + start}
        return sdpa_mask(**arguments)

    def materialise(self) -> torch.Tensor:
        return self.rows(0, self.shape[2])


# -- registration with transformers ----------------------------------------------------------------


def headstats_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | RowMask | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """The function transformers calls for ``attn_implementation="headstats"``."""
    probe = _ACTIVE.get()
    if probe is None or probe._state is None:
        if isinstance(attention_mask, RowMask):
            attention_mask = attention_mask.materialise()
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if kwargs.get("s_aux") is not None:
        raise UnsupportedModelError("attention sinks (s_aux, e.g. gpt-oss) are not supported by headstats yet")
    softcap = kwargs.get("softcap")
    out = probe.attend(module, query, key, value, attention_mask, scaling, softcap)  # type: ignore[arg-type]
    return out, None


def _headstats_mask(*args: object, **kwargs: object) -> torch.Tensor | RowMask | None:
    # Always a boolean mask (never "skip, use is_causal"): the attention function applies it row
    # chunk by row chunk, sliding windows included. Under a probe, when the attention of this
    # forward pass will be chunked, a lazy RowMask instead of the quadratic tensor.
    kwargs["allow_is_causal_skip"] = False
    probe = _ACTIVE.get()
    if probe is not None and probe._state is not None and not args and _chunked(probe, kwargs):
        return RowMask(dict(kwargs))
    return sdpa_mask(*args, **kwargs)


def _chunked(probe: Probe, arguments: dict) -> bool:
    """Whether ``attention_with_stats`` will split these query rows into chunks (its own rule)."""
    try:
        b, q, kv = int(arguments["batch_size"]), int(arguments["q_length"]), int(arguments["kv_length"])
    except (KeyError, TypeError, ValueError):
        return False
    if q != kv:
        return False  # not a whole-sequence pass; the probe refuses it anyway
    heads = getattr(probe.model.config.get_text_config(), "num_attention_heads", 1)
    return rows_per_chunk(b, heads, q, probe.chunk_bytes) < q


def register() -> None:
    """Register headstats' attention and mask functions with transformers (idempotent)."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, headstats_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _headstats_mask)


def check_supported(model: torch.nn.Module) -> None:
    """Raise :class:`UnsupportedModelError` unless ``model`` selects attention through the interface."""
    if not isinstance(model, PreTrainedModel):
        raise UnsupportedModelError(
            f"{type(model).__name__} is not a transformers PreTrainedModel; headstats needs a decoder model "
            "loaded with transformers (AutoModelForCausalLM)"
        )
    if not type(model)._can_set_attn_implementation():
        raise UnsupportedModelError(
            f"{type(model).__name__} does not use transformers' AttentionInterface, so headstats cannot see its "
            "attention heads; use a model whose modeling file calls ALL_ATTENTION_FUNCTIONS.get_interface"
        )


def find_out_proj(module: torch.nn.Module) -> torch.nn.Module:
    for name in OUT_PROJ_NAMES:
        proj = getattr(module, name, None)
        if isinstance(proj, torch.nn.Linear | Conv1D):
            return proj
    raise UnsupportedModelError(
        f"{type(module).__name__} has no output projection named one of {OUT_PROJ_NAMES}; "
        "fhon/fhon_ln need it (other scores do not)"
    )


def _hooked_module(model: PreTrainedModel) -> torch.nn.Module:
    # The base model receives the attention mask whether the user calls the LM head model or the
    # base model itself.
    base = getattr(model, "base_model", None)
    return base if isinstance(base, torch.nn.Module) else model
