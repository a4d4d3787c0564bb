"""Time and memory of the score computation against sequence length, next to plain eager and SDPA.

    python benchmarks/bench_seqlen.py [--config smollm2-135m] [--lengths 256,512,1024,2048,4096]
                                      [--layers N] [--repeats 2] [--device cpu|cuda] [--dtype float32|bfloat16]
                                      [--chunk-mib 256]

A randomly initialised model is built from a real configuration (written out below: speed and
memory do not depend on the weights' values, and no weights need to travel). For each length S, one
sequence (batch 1) goes through the decoder body (no LM head, whose logits would dominate memory):

- ``eager``: transformers' eager attention (materialises the (H, S, S) weights of a layer);
- ``sdpa``: PyTorch's scaled_dot_product_attention;
- ``headstats``: headstats' attention computing all 16 scores in the same pass (query rows chunked so
  one (H, rows, S) fp32 block stays under ``--chunk-mib``, default ``HEADSTATS_CHUNK_BYTES`` = 256 MiB).

Time is the median of ``--repeats`` runs. Memory is the peak during the forward above what was held
before it: on CPU the peak resident set (VmHWM, reset before each run through /proc/self/clear_refs),
on CUDA ``torch.cuda.max_memory_allocated``. The growth column is log2(peak(S) / peak(S/2)):
1 = linear, 2 = quadratic. ``--layers`` truncates the model to its first N layers (the peak is
reached inside one layer, so it does not depend on N; time scales with N).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from bench_models import CONFIGS, build_model

import headstats
from headstats.engine.attention import hooked_module
from headstats.engine.probe import Probe

VARIANTS = ("eager", "sdpa", "headstats")


def _rss() -> tuple[float, float]:
    """(current, peak) resident memory of this process in GiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5]] = int(line.split()[1]) / 2**20
    return out["VmRSS"], out["VmHWM"]


def measure(run: Callable[[], None], device: torch.device) -> tuple[float, float]:
    """(seconds, peak extra GiB) of one call."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        with open("/proc/self/clear_refs", "w") as f:  # peak RSS := current RSS
            f.write("5")
        before = _rss()[0]
    start = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = (torch.cuda.max_memory_allocated(device) - before) / 2**30
    else:
        peak = _rss()[1] - before
    return time.perf_counter() - start, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="smollm2-135m", choices=sorted(CONFIGS))
    parser.add_argument("--lengths", default="256,512,1024,2048,4096")
    parser.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on CUDA, fp32 on CPU)")
    parser.add_argument("--chunk-mib", type=int, default=None, help="headstats' chunk size (default: 256 MiB)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu" and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        # glibc otherwise raises its mmap threshold as blocks are freed and keeps later freed blocks
        # in the heap: a run after a larger one would then look free. A fixed threshold returns every
        # large block to the system when it is freed, so each run's peak RSS is its own.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"})
    dtype = headstats.io.models.resolve_dtype(args.dtype, device)
    model = build_model(args.config, args.layers, device, dtype)
    body = hooked_module(model)
    config = model.config
    chunk = args.chunk_mib * 2**20 if args.chunk_mib else None
    lengths = [int(s) for s in args.lengths.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    generator = torch.Generator().manual_seed(0)

    def forward(ids: torch.Tensor, variant: str) -> Callable[[], None]:
        mask = torch.ones_like(ids)

        def run() -> None:
            with torch.inference_mode():
                if variant == "headstats":
                    with Probe(model, headstats.score_ids(), chunk_bytes=chunk):
                        body(input_ids=ids, attention_mask=mask, use_cache=False)
                else:
                    model.set_attn_implementation(variant)
                    body(input_ids=ids, attention_mask=mask, use_cache=False)

        return run

    warm = torch.randint(0, config.vocab_size, (1, lengths[0]), generator=generator).to(device)
    for variant in variants:
        forward(warm, variant)()
    results: dict[tuple[int, str], tuple[float, float]] = {}
    for s in lengths:
        ids = torch.randint(0, config.vocab_size, (1, s), generator=generator).to(device)
        for variant in variants:
            runs = [measure(forward(ids, variant), device) for _ in range(args.repeats)]
            results[s, variant] = (statistics.median(t for t, _ in runs), max(m for _, m in runs))
        line = "  ".join(f"{v} {results[s, v][0]:.2f} s {results[s, v][1]:.3f} GiB" for v in variants)
        print(f"S={s}: {line}", flush=True)

    heads = config.num_attention_heads
    print(f"\n{args.config} (random weights), {config.num_hidden_layers} layers, {heads} heads, batch 1, {dtype}, "
          f"{device}{'' if device.type == 'cuda' else f', {torch.get_num_threads()} threads'}, "
          f"headstats chunk {(chunk or headstats.engine.attention.DEFAULT_CHUNK_BYTES) / 2**20:.0f} MiB, "
          f"median of {args.repeats}")  # fmt: skip
    head = f"  {'S':>6}" + "".join(f" {v + ' s':>12} {v + ' GiB':>14}" for v in variants)
    if "eager" in variants and "headstats" in variants:
        head += f" {'headstats/eager':>16} {'headstats/sdpa':>15}"
    head += f" {'growth (headstats)':>19} {'(H,S,S) fp32 GiB':>17}"
    print(head)
    previous = None
    for s in lengths:
        line = f"  {s:>6}" + "".join(f" {results[s, v][0]:12.3f} {results[s, v][1]:14.3f}" for v in variants)
        if "eager" in variants and "headstats" in variants:
            ours = results[s, "headstats"][0]
            line += f" {ours / results[s, 'eager'][0]:16.2f}"
            line += f" {ours / results[s, 'sdpa'][0]:15.2f}" if "sdpa" in variants else f" {'':>15}"
        if "headstats" in variants and previous is not None:
            now, before = results[s, "headstats"][1], results[previous, "headstats"][1]
            growth = math.log2(now / before) / math.log2(s / previous) if before > 0 and now > 0 else float("nan")
            line += f" {growth:19.2f}"
        else:
            line += f" {'':>19}"
        line += f" {heads * s * s * 4 / 2**30:17.3f}"
        print(line)
        previous = s


if __name__ == "__main__":
    main()
