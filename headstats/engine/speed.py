"""What a model costs per token, by arithmetic and by the clock: the roof and the measurement of
pruning's speed-up.

:func:`inference_cost` counts, from the module shapes of a (possibly pruned) model, the
multiply-adds of every projection and of the attention core at a given context length, the bytes of
its weights, and the bytes its KV cache holds per token. Dividing the unpruned model's numbers by the
pruned one's gives the arithmetic ceiling of a speed-up: prefill is bound by FLOPs, one decode step
at small batch by the bytes it reads (all weights once, plus the cache).

:func:`time_inference` measures prefill and cached decode tokens/s of several models side by side
in one process: the models take turns within every repeat (the order alternating), so load on a
shared machine falls on all of them alike, and the median over repeats is reported.

:func:`time_breakdown` splits the same prefill and decode time by component (attention projections,
the KV-cache update, the attention core, MLPs, lm_head, and the rest), which shows where a pruned
model's time goes that its removed FLOPs did not carry.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from transformers import Cache, PreTrainedModel
from transformers.pytorch_utils import Conv1D

from headstats.engine.cost import InferenceCost, LayerCost
from headstats.engine.prefix import cache_argument


def _head_dim(model: PreTrainedModel) -> int:
    config = model.config.get_text_config()
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def _layer_heads(module: torch.nn.Module, head_dim: int) -> tuple[int, int, int]:
    """(query heads attended, K heads cached, V heads cached) of one attention module, from its shapes."""
    heads = getattr(module, "headstats_heads", None)
    if hasattr(module, "c_attn"):
        q = module.c_proj.weight.shape[0] // head_dim
        kv = (module.c_attn.weight.shape[1] - module.split_size) // (2 * head_dim)
        return q, kv, kv
    q = module.o_proj.weight.shape[1] // head_dim
    k = module.k_proj.weight.shape[0] // head_dim
    v = module.v_proj.weight.shape[0] // head_dim
    if heads is not None and heads.q is not None:
        q = len(heads.q)
    return q, k, v


def inference_cost(model: PreTrainedModel) -> InferenceCost:
    """The per-token cost of ``model`` from its module shapes (a pruned model's smaller ones included)."""
    from headstats.engine.prune import attention_modules

    config = model.config.get_text_config()
    head_dim = _head_dim(model)
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear | Conv1D)]
    macs = sum(m.weight.numel() for m in linear)
    weight_bytes = sum(p.numel() * p.element_size() for m in linear for p in m.parameters(recurse=False))
    types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    element = next(model.parameters()).element_size()
    layers = []
    for i, module in enumerate(attention_modules(model)):
        q, k, v = _layer_heads(module, head_dim)
        sliding = i < len(types) and types[i] == "sliding_attention" and window
        layers.append(LayerCost(q, (k + v) * head_dim * element, int(window) if sliding else None))
    head = model.get_output_embeddings()
    head_macs = head.weight.numel() if isinstance(head, torch.nn.Linear | Conv1D) else 0
    return InferenceCost(2.0 * macs, weight_bytes, head_dim, tuple(layers), head_flops=2.0 * head_macs)


def cache_bytes(cache: object) -> int:
    """Bytes of the key and value tensors a transformers cache holds."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = ("wall", "cpu")


def _clock(name: str, device: torch.device) -> Callable[[], float]:
    if name not in CLOCKS:
        raise ValueError(f"a timing clock is one of {', '.join(CLOCKS)}, got {name!r}")
    if name == "cpu" and device.type != "cpu":
        raise ValueError(f"the cpu clock times work on the CPU; a model on {device.type} is timed with clock 'wall'")
    return time.process_time if name == "cpu" else time.perf_counter


@torch.no_grad()
def _run(
    model: PreTrainedModel,
    ids: torch.Tensor,
    new_tokens: int,
    after_prefill: Callable[[], None] = lambda: None,
    clock: str = "wall",
) -> tuple[float, float, int, int]:
    """(prefill seconds, decode seconds, KV-cache bytes after prefill, peak CUDA bytes or 0);
    ``after_prefill`` is called between the two phases, outside both clocks."""
    device = ids.device
    now = _clock(clock, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    start = now()
    out = model(input_ids=ids, use_cache=True)
    _sync(device)
    prefill = now() - start
    after_prefill()
    key = cache_argument(model)  # the output names its cache as the forward does
    cache = getattr(out, key)
    kv = cache_bytes(cache)
    token = out.logits[:, -1:].argmax(-1)
    start = now()
    for _ in range(new_tokens):
        out = model(input_ids=token, use_cache=True, **{key: cache})
        token = out.logits[:, -1:].argmax(-1)
    _sync(device)
    decode = now() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return prefill, decode, kv, peak


def _warm_prompts(models: Mapping[str, PreTrainedModel], batch: int, prompt_length: int, seed: int) -> torch.Tensor:
    """Seeded random prompts on the models' device, after one short warm-up run of each model
    (allocator, kernels)."""
    first = next(iter(models.values()))
    vocab = int(first.config.get_text_config().vocab_size)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, prompt_length), generator=generator).to(next(first.parameters()).device)
    for model in models.values():
        _run(model, ids[:, : min(8, prompt_length)], 1)
    return ids


def _turns(names: list[str], repeats: int) -> Iterator[str]:
    """Every model once per repeat, the order alternating, so load on a shared machine falls alike."""
    for r in range(repeats):
        yield from names if r % 2 == 0 else reversed(names)


def time_inference(
    models: Mapping[str, PreTrainedModel],
    *,
    batch: int = 1,
    prompt_length: int = 128,
    new_tokens: int = 32,
    repeats: int = 3,
    seed: int = 0,
) -> list[dict]:
    """Prefill and decode tokens/s of each model on the same random prompts, side by side (one
    warm-up run each, then ``repeats`` rounds in alternating order; medians). One row per model."""
    ids = _warm_prompts(models, batch, prompt_length, seed)
    names = list(models)
    runs: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in names}
    for name in _turns(names, repeats):
        runs[name].append(_run(models[name], ids, new_tokens))
    rows = []
    for name in names:
        prefill = statistics.median(x[0] for x in runs[name])
        decode = statistics.median(x[1] for x in runs[name])
        rows.append(
            {
                "model": name,
                "batch": batch,
                "prompt_length": prompt_length,
                "new_tokens": new_tokens,
                "repeats": repeats,
                "prefill_tokens_per_s": batch * prompt_length / prefill,
                "decode_tokens_per_s": batch * new_tokens / decode if new_tokens else float("nan"),
                "kv_cache_bytes": runs[name][0][2],
                "peak_cuda_bytes": max(x[3] for x in runs[name]) or None,
            }
        )
    return rows


@dataclass(frozen=True)
class Setting:
    """One timed workload: a prefill of ``context`` tokens, or ``new_tokens`` cached decode steps after a
    prompt of ``context`` tokens (the prompt's prefill is not timed), for ``batch`` sequences."""

    phase: str  # "prefill" or "decode"
    batch: int
    context: int
    new_tokens: int = 32

    def __post_init__(self) -> None:
        if self.phase not in ("prefill", "decode"):
            raise ValueError(f"a timed phase is 'prefill' or 'decode', got {self.phase!r}")
        if self.batch < 1 or self.context < 1 or (self.phase == "decode" and self.new_tokens < 1):
            raise ValueError(f"batch, context and new_tokens must be positive, got {self}")

    @property
    def name(self) -> str:
        if self.phase == "prefill":
            return f"prefill {self.context} x{self.batch}"
        return f"decode {self.new_tokens} after {self.context} x{self.batch}"

    @property
    def tokens(self) -> int:
        """Tokens one run processes (what tokens/s divides by)."""
        return self.batch * (self.context if self.phase == "prefill" else self.new_tokens)


def setting_ceiling(before: InferenceCost, after: InferenceCost, setting: Setting) -> dict:
    """The arithmetic ceiling of ``after``'s speed-up over ``before`` on one setting: the ratio of FLOPs
    for a prefill; for decoding, the ratio of bytes a step reads (weights plus the cache at the mean
    cache length over the decoded tokens), with the FLOP ratio beside it; and the KV-cache bytes the
    removal saves at the setting's context, for its batch."""
    if setting.phase == "prefill":
        flops = before.prefill_flops(setting.context) / after.prefill_flops(setting.context)
        out = {"ceiling": flops, "ceiling_basis": "FLOPs"}
    else:
        context = setting.context + setting.new_tokens // 2
        flops = before.flops(context) / after.flops(context)
        read = before.decode_bytes(context, setting.batch) / after.decode_bytes(context, setting.batch)
        out = {"ceiling": read, "ceiling_basis": "bytes read", "flops_ceiling": flops}
    saved = before.kv_bytes(setting.context, setting.batch) - after.kv_bytes(setting.context, setting.batch)
    return {**out, "kv_bytes_saved": saved}


def random_prompts(model: PreTrainedModel, setting: Setting, seed: int = 0) -> torch.Tensor:
    """Seeded random token ids of the setting's shape on the model's device."""
    vocab = int(model.config.get_text_config().vocab_size)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (setting.batch, setting.context), generator=generator)
    return ids.to(next(model.parameters()).device)


@torch.no_grad()
def relocate_weights(model: PreTrainedModel) -> None:
    """Give every parameter and buffer of ``model`` freshly allocated memory holding the same values
    (tied weights stay tied: a shared parameter is visited once). Where a model's weights happen to lie
    in memory changes its speed: two identical copies of SmolLM2-135M, each keeping its memory, decoded
    3% apart over 60 paired rounds (x1.034 [1.019, 1.048]); moved before every run, the layout is one
    more random draw per round, which the rounds' interval covers."""
    for tensor in [*model.parameters(), *model.buffers()]:
        tensor.data = tensor.data.clone()


def phase_timer(
    model: PreTrainedModel, setting: Setting, ids: torch.Tensor, clock: str = "wall", relocate: bool = True
) -> Callable[[], float]:
    """A function that runs the setting's work once on ``model`` and returns its seconds. For a decode
    setting the prompt is prefilled once here; every call decodes from a copy of that cache (copied
    outside the clock), so each call does the same work. ``clock``: ``wall`` (elapsed seconds, what a
    user waits) or ``cpu`` (the CPU seconds of this process, on a CPU: the time it ran, without the
    time other processes of a shared machine held its core; with one torch thread, the work itself).
    ``relocate``: every call first moves the model's weights to fresh memory, outside the clock
    (:func:`relocate_weights`), so that paired rounds compare models, not two memory layouts."""
    device = ids.device
    now = _clock(clock, device)
    key = cache_argument(model)
    # Generation computes the logits of the last position only; so does the timed work, where the model can.
    last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}

    @torch.no_grad()
    def prefill() -> float:
        if relocate:
            relocate_weights(model)
        _sync(device)
        start = now()
        model(input_ids=ids, use_cache=True, **last)
        _sync(device)
        return now() - start

    if setting.phase == "prefill":
        return prefill

    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **last)
    prompt_cache, first = getattr(out, key), out.logits[:, -1:].argmax(-1)
    del out

    @torch.no_grad()
    def decode() -> float:
        cache, token = copy.deepcopy(prompt_cache), first
        if relocate:
            relocate_weights(model)
        _sync(device)
        start = now()
        for _ in range(setting.new_tokens):
            out = model(input_ids=token, use_cache=True, **{key: cache}, **last)
            token = out.logits[:, -1:].argmax(-1)
        _sync(device)
        return now() - start

    return decode


COMPONENTS = ("attention projections", "cache update", "attention core", "mlp", "lm_head", "rest")


def _components(model: PreTrainedModel) -> dict[str, list[torch.nn.Module]]:
    """The modules whose time makes each timed component: every layer's attention module, its
    projections (q/k/v/o or GPT-2's c_attn/c_proj), its MLP (the module a decoder layer calls
    ``mlp``), and the output embedding."""
    from headstats.engine.prune import attention_modules

    attention = attention_modules(model)
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "c_attn", "c_proj")
    projections = [getattr(m, n) for m in attention for n in names if isinstance(getattr(m, n, None), torch.nn.Module)]
    mlps = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == "mlp"]
    heads = [model.get_output_embeddings()] if model.get_output_embeddings() is not None else []
    return {"attention": attention, "attention projections": projections, "mlp": mlps, "lm_head": heads}


class _Clock:
    """Seconds spent inside each group of :func:`_components` (``spent``), and snapshots of them."""

    def __init__(self) -> None:
        self.spent: Counter = Counter()
        self.marks: list[Counter] = []

    def mark(self) -> None:
        self.marks.append(Counter(self.spent))


@contextlib.contextmanager
def _component_clock(model: PreTrainedModel, device: torch.device, clock: str = "wall") -> Iterator[_Clock]:
    """A :class:`_Clock` summing the time inside each component's modules while the block runs
    (forward hooks; on CUDA each hook synchronises, which slows the run but not the split), and the
    time of every KV-cache update (transformers' ``Cache.update``, timed while the block runs), by
    ``clock`` (as :func:`phase_timer`'s)."""
    now = _clock(clock, device)
    totals, started, handles = _Clock(), {}, []
    update = Cache.update

    def timed_update(cache: Cache, *args: object, **kwargs: object) -> object:
        _sync(device)
        start = now()
        out = update(cache, *args, **kwargs)
        _sync(device)
        totals.spent["cache update"] += now() - start
        return out

    def before(module: torch.nn.Module, *_: object) -> None:
        _sync(device)
        started[id(module)] = now()

    def after(group: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, *_: object) -> None:
            _sync(device)
            totals.spent[group] += now() - started.pop(id(module))

        return hook

    try:
        for group, modules in _components(model).items():
            for module in modules:
                handles.append(module.register_forward_pre_hook(before))
                handles.append(module.register_forward_hook(after(group)))
        Cache.update = timed_update
        yield totals
    finally:
        Cache.update = update
        for handle in handles:
            handle.remove()


def _split(spent: Counter, total: float) -> dict[str, float]:
    core = spent["attention"] - spent["attention projections"] - spent["cache update"]
    named = {
        "attention projections": spent["attention projections"],
        "cache update": spent["cache update"],
        "attention core": core,
        "mlp": spent["mlp"],
        "lm_head": spent["lm_head"],
    }
    return {**named, "rest": total - sum(named.values())}


def time_breakdown(
    models: Mapping[str, PreTrainedModel],
    *,
    batch: int = 1,
    prompt_length: int = 128,
    new_tokens: int = 32,
    repeats: int = 3,
    seed: int = 0,
    clock: str = "wall",
) -> list[dict]:
    """Where prefill and decode time goes, per model, on the same random prompts as
    :func:`time_inference` (models in alternating turns, medians over ``repeats``). One row per model,
    phase and component of :data:`COMPONENTS` with its seconds per token; ``rest`` is the phase's
    time less the named components (embedding, norms, rotary tables, masks, sampling, Python
    between modules). ``clock``: as :func:`phase_timer`'s (``cpu`` on a shared CPU machine)."""
    ids = _warm_prompts(models, batch, prompt_length, seed)
    device, names = ids.device, list(models)
    runs: dict[str, list[dict[tuple[str, str], float]]] = {name: [] for name in names}
    for name in _turns(names, repeats):
        with _component_clock(models[name], device, clock) as spent:
            prefill, decode, _, _ = _run(models[name], ids, new_tokens, spent.mark, clock)
        split = {("prefill", c): t / (batch * prompt_length) for c, t in _split(spent.marks[0], prefill).items()}
        decoded = _split(spent.spent - spent.marks[0], decode)
        runs[name].append(split | {("decode", c): t / (batch * max(new_tokens, 1)) for c, t in decoded.items()})
    return [
        {
            "model": name,
            "batch": batch,
            "phase": phase,
            "component": component,
            "seconds_per_token": statistics.median(run[phase, component] for run in runs[name]),
        }
        for name in names
        for phase in ("prefill", "decode")
        for component in COMPONENTS
    ]
