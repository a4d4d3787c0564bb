"""The one attention function headstats registers with transformers.

Every model family that looks its attention up in ``AttentionInterface`` (Llama, Qwen, Mistral,
OLMo-2, Gemma, Phi-3, GPT-2, ...) calls :func:`headstats_attention` with the layer's queries, keys
and values once headstats' implementation is selected. That function computes attention exactly
(softmax in fp32), feeds the score registry of :mod:`headstats.engine.scores` for every head in the same
pass, and lets a zeroing policy set whole head outputs to 0 before the output projection. No model
file is patched and nothing here names a model family.

The per-model state of one observation or intervention lives in :mod:`headstats.engine.probe`.
Outside a probed forward pass the function is plain attention (delegating to PyTorch's SDPA), so a
model loaded with ``attn_implementation="headstats"`` also generates normally.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.pytorch_utils import Conv1D

from headstats.engine import scores as S

ATTN_IMPLEMENTATION = "headstats"

# Where each family keeps the attention output projection W_O (one table, read by fhon only).
OUT_PROJ_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "o")

# Bytes one (B, H, rows, S) fp32 attention tensor may take before query rows are chunked.
# Chunking keeps score memory linear in S; it does not change any number.
DEFAULT_CHUNK_BYTES = int(os.environ.get("HEADSTATS_CHUNK_BYTES", 256 * 2**20))

# Query rows per block of the explicit kernel under a boolean mask. Each block computes its rows
# over the keys some row of it may see (:func:`key_window`), so causal attention costs about
# (1 + 1 / blocks) / 2 of the whole rows x keys square and a sliding window about its width; the
# masked keys skipped have probability exactly 0. Blocks of 128 rows keep each product large
# enough for the BLAS kernels (benchmarks/README.md, collection speed).
BLOCK_ROWS = 128

# The observer of the forward pass in progress (a :class:`headstats.engine.probe.Probe`), set by its
# pre-forward hook and reset by its post-forward hook; None outside a probed forward pass, where the
# registered function is plain SDPA. It needs ``attend(...)``, ``num_heads`` and ``chunk_bytes``.
ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("headstats_probe", default=None)


class UnsupportedModelError(ValueError):
    """The model does not route attention through transformers' AttentionInterface."""


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
    pool_sums: bool = False,
    materialise: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """Exact attention plus the pooled raw scores of every head, in one pass over query chunks.

    query (B, H, S, D); key, value (B, KVH, K, D) with H a multiple of KVH (GQA: consecutive query
    heads share a KV head, as in ``repeat_kv``) and K >= S: the queries are the last S of the K
    positions (K > S only when they continue a cached shared prefix, see
    :mod:`headstats.engine.prefix`; the prefix's rows were pooled in its own pass). ``attention_mask``
    is a 4-D boolean (True = attend) or additive float mask broadcastable to (B, 1, S, K); ``valid``
    (B, K) marks real tokens among the K positions.
    Returns the attention output (B, S, H, D) in the query dtype, a (B, H) fp32 tensor per raw
    score id, and the number of valid query rows (B,). With ``pool_sums`` a mean-pooled score is
    returned as its sum over the valid query rows (for a caller that combines passes). The kernel
    is :func:`attention_chunks`' choice (``materialise``: the explicit one).
    """
    b, h, s, d = query.shape
    group = h // key.shape[1]
    k_len = key.shape[2]
    offset = k_len - s
    if offset < 0 or valid.shape[-1] != k_len:
        raise ValueError(f"attention over {k_len} keys for {s} queries with a {tuple(valid.shape)} valid mask")
    valid = valid.bool()
    n_tokens = valid[:, offset:].sum(-1)
    first = valid.int().argmax(-1)
    last = k_len - 1 - valid.flip(-1).int().argmax(-1)
    v32 = value.float()
    if attention_mask is None and causal:
        attention_mask = torch.ones(s, k_len, dtype=torch.bool, device=query.device).tril(offset)[None, None]
    cache = {} if mask_cache is None else mask_cache
    stats = {sid: S.SCORES[sid] for sid in raw_ids}
    explicit = materialise or any(score.needs_weights for score in stats.values())
    chunks = attention_chunks(query, key, v32, attention_mask, scaling, softcap, explicit, chunk_bytes, cache)
    out = torch.empty(b, s, h, d, dtype=query.dtype, device=query.device)
    sums = {sid: torch.zeros(b, h, dtype=torch.float32, device=query.device) for sid in raw_ids}
    for start, probs, logits, o, key_start in chunks:
        stop = start + o.shape[2]
        out[:, start:stop] = o.transpose(1, 2).to(out.dtype)
        if not stats:
            del probs, logits, o
            continue
        # Row and key positions are counted over all K positions (a cached prefix first), so the
        # diagonal, the first token and the pooling span are those of the whole sequence.
        rows = S.TokenRows(
            probs_window=probs,
            logits_window=logits,
            start=offset + start,
            kv_values=v32[:, :, offset + start : offset + stop],
            group_size=group,
            outputs=o,
            first=first,
            out_proj_gram=out_proj_gram,
            key_start=key_start,
            n_keys=k_len,
        )
        pool_chunk(stats, rows, range(offset + start, offset + stop), valid, first, last, sums)
        del probs, logits, o, rows
    raw = {}
    count = n_tokens.clamp_min(1).float().unsqueeze(-1)
    for sid, score in stats.items():
        raw[sid] = sums[sid] / count if score.pool == "mean" and not pool_sums else sums[sid]
    return out, raw, n_tokens


def pool_chunk(
    stats: dict[str, S.Score],
    rows: S.TokenRows,
    span: range,
    valid: torch.Tensor,
    first: torch.Tensor,
    last: torch.Tensor,
    sums: dict[str, torch.Tensor],
) -> None:
    """Add each score's token statistic on one chunk's query rows (``span``, positions in the whole
    sequence), pooled over their valid tokens, to its running ``sums``; a token statistic that several
    scores pool (the value norm: ``ftvvn`` at the first token, ``avvn`` as a mean) is computed once."""
    computed: dict[S.TokenStat, torch.Tensor] = {}
    for sid, score in stats.items():
        assert score.stat is not None and score.pool is not None
        if score.stat not in computed:
            computed[score.stat] = token_stat(sid, score, rows)
        sums[sid] += S.pool_rows(computed[score.stat], score.pool, span, valid, first, last)


def attention_chunks(
    query: torch.Tensor,
    key: torch.Tensor,
    v32: torch.Tensor,
    attention_mask: torch.Tensor | RowMask | None,
    scaling: float,
    softcap: float | None,
    explicit: bool,
    chunk_bytes: int,
    cache: dict,
) -> Iterator[RowChunk]:
    """The attention of ``query`` over ``key`` and ``v32`` (the values in fp32) in chunks of query
    rows (:class:`RowChunk`), from the kernel that serves the pass.

    The probabilities are materialised (the explicit kernel) when ``explicit`` asks (a score reads
    them, or the caller wants it), for logit softcapping or an additive mask; otherwise PyTorch's
    fused SDPA computes the head outputs. The two agree to fp32 rounding, but a bf16 body rounds their
    outputs differently and amplifies the difference layer by layer, so passes whose outputs are
    compared (a sweep's baseline and its points) ask for one kernel (see :attr:`SweepPlan.materialise`).
    """
    b, h = query.shape[:2]
    boolean = attention_mask is None or isinstance(attention_mask, RowMask) or attention_mask.dtype == torch.bool
    chunk = rows_per_chunk(b, h, key.shape[2], chunk_bytes)
    if not explicit and softcap is None and boolean:
        return _fused_rows(query, key, v32, attention_mask, scaling, chunk, cache)
    if boolean and attention_mask is not None:
        chunk = min(chunk, BLOCK_ROWS)
    return _explicit_rows(query, key, v32, attention_mask, scaling, softcap, chunk, cache)


def token_stat(score_id: str, score: S.Score, rows: S.TokenRows) -> torch.Tensor:
    """``score``'s token statistic on ``rows``; a clear error when it reads the attention probabilities
    the fused kernel did not materialise (a statistic that reads them only on some inputs, which
    :func:`headstats.engine.scores.register` cannot see)."""
    try:
        return score.stat(rows)  # type: ignore[misc]
    except (AttributeError, TypeError) as err:
        if rows.probs_window is not None or "NoneType" not in str(err):
            raise
        raise ValueError(
            f"score {score_id!r} read the attention probabilities (rows.probs or rows.logits), which were not "
            f"computed: register it with needs_weights=True (Score({score_id!r}, ..., needs_weights=True))"
        ) from err


def rows_per_chunk(batch: int, heads: int, length: int, chunk_bytes: int) -> int:
    """Query rows per chunk: as many as keep one (B, H, rows, ``length`` keys) fp32 block within
    ``chunk_bytes``."""
    return max(1, min(length, chunk_bytes // max(1, batch * heads * length * 4)))


RowChunk = tuple[int, torch.Tensor | None, torch.Tensor | None, torch.Tensor, int]
"""(first query row, probabilities (B, H, C, W) or None, logits or None, head outputs (B, H, C, D) fp32,
the key position of the probabilities' first column)"""


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
    """Attention with the probabilities materialised, ``chunk`` query rows at a time; under a
    boolean mask each chunk over its :func:`key_window` only."""
    b, h, s, d = query.shape
    kvh, k_len = key.shape[1], key.shape[2]
    group = h // kvh
    k32 = key.float()
    neg = torch.finfo(torch.float32).min
    boolean = isinstance(attention_mask, RowMask) or (attention_mask is not None and attention_mask.dtype == torch.bool)
    for start in range(0, s, chunk):
        stop = min(s, start + chunk)
        c = stop - start
        lo, hi, blocked = 0, k_len, None
        if boolean:
            lo, hi, blocked = key_window(attention_mask, start, stop, cache)  # type: ignore[arg-type]
        # Scaling q before the product saves a pass over the (rows x keys) logits.
        q = (query[:, :, start:stop].float() * scaling).reshape(b, kvh, group * c, d)
        logits = torch.matmul(q, k32[:, :, lo:hi].transpose(-1, -2)).view(b, h, c, hi - lo)
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        if blocked is not None:
            logits = logits.masked_fill_(blocked, neg)
        elif attention_mask is not None:
            logits = logits.add_(attention_mask[:, :, start:stop].float()).clamp_min_(neg)
            logits = _see_itself(logits, start + k_len - s, neg)
        probs = torch.softmax(logits, dim=-1)
        o = torch.matmul(probs.view(b, kvh, group * c, hi - lo), v32[:, :, lo:hi]).view(b, h, c, d)
        yield start, probs, logits, o, lo
        # Drop this chunk before computing the next, so one chunk is alive at a time.
        del q, logits, probs, o


def key_window(mask: torch.Tensor | RowMask, start: int, stop: int, cache: dict) -> tuple[int, int, torch.Tensor]:
    """``(lo, hi, blocked)``: the keys ``[lo, hi)`` that some row of ``[start, stop)`` may see, in
    some sequence of the batch, and :func:`_blocked` over them (B, 1, rows, hi - lo). Every key
    outside the window is blocked for every row, so its probability is exactly 0 and it adds
    nothing to a row's softmax, head output or any sum over keys. Computed once per mask and chunk
    per forward pass (layers of one type share their mask)."""
    key = ("window", id(mask), start, stop)
    if key in cache:
        return cache[key]
    blocked = _blocked(mask, start, stop, cache)
    seen = (~blocked).flatten(0, -2).any(0).nonzero()
    # Every row sees itself, so the window is never empty.
    lo, hi = int(seen[0]), int(seen[-1]) + 1
    window = (lo, hi, blocked[..., lo:hi])
    if not isinstance(mask, RowMask):
        # The whole boolean mask exists already; its chunks together are of its size.
        cache[key] = window
    return window


def _see_itself(logits: torch.Tensor, first_key: int, neg: float) -> torch.Tensor:
    """An additive mask of the model's own (Falcon's ALiBi adds its bias to it) may block every key of a
    padded query row; such a row sees itself, as :func:`_blocked` lets every row, so that its softmax and
    entropy stay finite (TokenRows' promise). ``first_key``: the key position of the chunk's first query
    row. Rows whose own key is allowed are unchanged."""
    b, h, c, _ = logits.shape
    index = torch.arange(first_key, first_key + c, device=logits.device).view(1, 1, c, 1).expand(b, h, c, 1)
    own = logits.gather(-1, index)
    return logits.scatter_(-1, index, own.masked_fill(own <= neg, 0.0))


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
        yield start, None, None, o, 0
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
    # Query row i is key position i + offset (offset > 0 when the queries continue a cached prefix).
    offset = mask.shape[-1] - mask.shape[-2]
    rows = torch.arange(start, stop, device=allowed.device)[:, None] + offset
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
    sequences: the whole mask would be S^2 bytes per sequence, a chunk's block is rows x S.

    A model that computes with its mask itself (Falcon's ALiBi adds its position bias to it) gets the
    whole boolean tensor from any torch function or tensor method it applies; its memory is then
    quadratic, as that model's own additive mask is."""

    arguments: dict
    dtype = torch.bool

    @property
    def device(self) -> torch.device:
        return torch.device(self.arguments.get("device", "cpu"))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        def whole(x: object) -> object:
            return x.materialise() if isinstance(x, RowMask) else x

        return func(*(whole(a) for a in args), **{k: whole(v) for k, v in (kwargs or {}).items()})

    def __getattr__(self, name: str) -> object:
        if name.startswith("_") or name == "arguments":  # copy and pickle machinery: not a tensor method
            raise AttributeError(name)
        return getattr(self.materialise(), name)

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
    probe = ACTIVE.get()
    if probe is not None and getattr(getattr(module, "config", None), "headstats_pruning", None):
        raise UnsupportedModelError(
            "this model was pruned by headstats prune (its layers have different head counts); score and zero heads "
            "of the unpruned model, or run the pruned one without headstats.ablate_heads / Probe"
        )
    heads = getattr(module, "headstats_heads", None)
    if heads is not None:
        # A pruned layer with unequal KV groups: one K/V head per kept query head (headstats.engine.prune).
        query, key, value = heads.gather(query, key, value)
    if probe is None:
        if isinstance(attention_mask, RowMask):
            attention_mask = attention_mask.materialise()
        if kwargs.get("softcap") is not None:
            # SDPA has no logit softcapping (Gemma-2): the explicit kernel computes it, no scores.
            d, k_len = query.shape[-1], key.shape[2]
            valid = torch.ones(query.shape[0], k_len, dtype=torch.bool, device=query.device)
            out, _, _ = attention_with_stats(
                query,
                key,
                value,
                attention_mask,
                scaling if scaling is not None else d**-0.5,
                valid=valid,
                raw_ids=(),
                softcap=kwargs["softcap"],
                causal=getattr(module, "is_causal", True),
            )
            return out, None
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if kwargs.get("s_aux") is not None:
        raise UnsupportedModelError("attention sinks (s_aux, e.g. gpt-oss) are not supported by headstats yet")
    softcap = kwargs.get("softcap")
    out = probe.attend(module, query, key, value, attention_mask, scaling, softcap)  # type: ignore[arg-type]
    return out, None


def _headstats_mask(*args: object, **kwargs: object) -> torch.Tensor | RowMask | None:
    # Outside a probed pass the attention is plain SDPA, which may skip a purely causal mask and use
    # its causal kernels. Under a probe always a boolean mask (never "skip, use is_causal"): the
    # attention function applies it row chunk by row chunk, sliding windows included; when the
    # attention of this forward pass will be chunked, a lazy RowMask instead of the quadratic tensor.
    probe = ACTIVE.get()
    if probe is None:
        return sdpa_mask(*args, **kwargs)
    kwargs["allow_is_causal_skip"] = False
    if not args and _chunked(probe, kwargs):
        return RowMask(dict(kwargs))
    return sdpa_mask(*args, **kwargs)


def _chunked(probe: Any, arguments: dict) -> bool:
    """Whether ``attention_with_stats`` will split these query rows into chunks (its own rule)."""
    try:
        b, q, kv = int(arguments["batch_size"]), int(arguments["q_length"]), int(arguments["kv_length"])
    except (KeyError, TypeError, ValueError):
        return False
    if q > kv:
        return False
    return rows_per_chunk(b, probe.num_heads, kv, probe.chunk_bytes) < q


def register_attention() -> None:
    """Register headstats' attention and mask functions with transformers (idempotent)."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, headstats_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _headstats_mask)


# Wrappers of other interpretability libraries, by the top-level package of the class (or a base
# class): what to pass to headstats instead.
FOREIGN_MODELS = {
    "transformer_lens": (
        "TransformerLens' {name} is not supported: its hook points compute attention in TransformerLens' own "
        "modules, outside transformers' AttentionInterface, where headstats sees heads. Load the same weights "
        "as a transformers model: model, tok = headstats.load_model(NAME_OR_DIR) (or "
        "transformers.AutoModelForCausalLM.from_pretrained(NAME_OR_DIR)) and pass that model"
    ),
    "nnsight": (
        "nnsight's {name} wraps a transformers model: pass the wrapped model to headstats (the PreTrainedModel "
        "given to {name}(...)); its zeroing and scores then apply inside {name}.trace(...) too"
    ),
}

# Libraries that replace a transformers model's own attention modules in place (TransformerLens 4's
# TransformerBridge.boot_transformers(..., hf_model=model)), by the top-level package of the replacement.
REPLACED_ATTENTION = {
    "transformer_lens": (
        "{path} of this {model} is TransformerLens' {name}: TransformerBridge.boot_transformers(..., hf_model=model) "
        "replaced the model's attention modules with its own, which compute attention outside transformers' "
        "AttentionInterface, so headstats can neither see nor zero heads there. Give headstats a copy that was not "
        "booted (headstats.load_model(PATH) or AutoModelForCausalLM.from_pretrained(PATH)), or zero heads in the "
        "bridge with hooks on blocks.L.attn.hook_z (docs/guides/transformerlens.md)"
    ),
}


def foreign_model_message(model: object) -> str | None:
    """What to do instead, when ``model`` is a TransformerLens or nnsight model; else None."""
    for cls in type(model).__mro__:
        package = (cls.__module__ or "").partition(".")[0]
        if package in FOREIGN_MODELS:
            return FOREIGN_MODELS[package].format(name=type(model).__name__)
    return None


def replaced_attention_message(model: torch.nn.Module) -> str | None:
    """What to do instead, when a library has replaced modules inside ``model`` with its own; else None."""
    replaced = [
        (path, module)
        for path, module in model.named_modules()
        if (type(module).__module__ or "").partition(".")[0] in REPLACED_ATTENTION
    ]
    if not replaced:
        return None
    # Name an attention module when one was replaced (a bridge replaces embeddings and blocks too).
    path, module = next(((p, m) for p, m in replaced if "Attention" in type(m).__name__), replaced[0])
    package = type(module).__module__.partition(".")[0]
    path = path.replace("._original_component", "")  # the bridge's own attribute, which the block forwards
    return REPLACED_ATTENTION[package].format(path=path, model=type(model).__name__, name=type(module).__name__)


def check_supported(model: torch.nn.Module) -> None:
    """Raise :class:`UnsupportedModelError` unless ``model`` selects attention through the interface."""
    foreign = foreign_model_message(model)
    if foreign is not None:
        raise UnsupportedModelError(foreign)
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
    replaced = replaced_attention_message(model)
    if replaced is not None:
        raise UnsupportedModelError(replaced)


def find_out_proj(module: torch.nn.Module) -> torch.nn.Module:
    for name in OUT_PROJ_NAMES:
        proj = getattr(module, name, None)
        if isinstance(proj, torch.nn.Linear | Conv1D):
            return proj
    raise UnsupportedModelError(
        f"{type(module).__name__} has no output projection named one of {OUT_PROJ_NAMES}; "
        "fhon/fhon_ln need it (other scores do not)"
    )


def hooked_module(model: PreTrainedModel) -> torch.nn.Module:
    # The base model receives the attention mask whether the user calls the LM head model or the
    # base model itself.
    base = getattr(model, "base_model", None)
    return base if isinstance(base, torch.nn.Module) else model


# Registered on import: every headstats path that sets attn_implementation="headstats" imports this
# module first, and a user's `attn_implementation=headstats.ATTN_IMPLEMENTATION` does too.
register_attention()
