"""What PyTorch's scaled-dot-product attention computes on a CPU when it is given a mask: the whole
square of keys, whatever the mask leaves out. This is why a pruned model's prefill on a CPU can
gain more than its FLOP ceiling (``docs/statistics.md``, Roof): the ceiling counts the keys a query
needs (a sliding-window layer: at most its window), the kernel computes every key.

    OMP_NUM_THREADS=1 python benchmarks/bench_sdpa_mask.py [--length 2048] [--window 512]
        [--head-dim 256] [--heads 4] [--dtype bfloat16] [--max-seconds 30]

One attention layer's prefill (batch 1, ``--length`` query rows and keys) is
timed in paired, interleaved rounds (:func:`headstats.jobs.timing.paired_rounds`) four ways: the
causal kernel without a mask (``is_causal=True``, what transformers passes when no padding or
window needs a mask), a boolean causal mask, a boolean sliding-window mask of ``--window`` keys
(Gemma-3's local layers), and no mask at all (the whole square). Printed: each way's time relative
to the causal kernel with its 95% interval, and the ratio the needed keys would give (causal rows
attend to (L + 1) / 2 keys on average, window rows to about the window, the whole square to L).
Then the layer with one head fewer (a pruned layer, 3 query heads of 4) under the window mask,
against the 4/3 a per-head kernel gives. Run it on an otherwise idle core.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from headstats.io.models import machine_info
from headstats.jobs.timing import paired_rounds
from headstats.stats.speed import Speedup


def _cpu_seconds(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        start = time.process_time()
        fn()
        return time.process_time() - start

    return run


def _relative(up: Speedup) -> str:
    """A way's time relative to the reference's, from the reference's speed-up over it."""
    return f"x{1 / up.speedup:.3f} [{1 / up.high:.3f}, {1 / up.low:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--head-dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4, help="query heads of the unpruned layer (one fewer after)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-seconds", type=float, default=30.0)
    args = parser.parse_args()
    info = machine_info(torch.device("cpu"))
    units = info["bf16_units"] or "none"
    print(f"machine: {info['cpu']} | bf16 units: {units} | torch threads: {info['torch_threads']}")
    n, w, dtype = args.length, args.window, getattr(torch, args.dtype)
    i = torch.arange(n)
    causal = (i[None, :] <= i[:, None])[None, None]
    window = causal & (i[:, None] - i[None, :] < w)[None, None]
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, args.heads, n, args.head_dim, generator=generator).to(dtype) for _ in range(3))

    def sdpa(heads: int, **mask: object) -> Callable[[], float]:
        return _cpu_seconds(lambda: F.scaled_dot_product_attention(q[:, :heads], k[:, :heads], v[:, :heads], **mask))

    ways = {
        "is_causal": sdpa(args.heads, is_causal=True),
        "causal mask": sdpa(args.heads, attn_mask=causal),
        f"window {w} mask": sdpa(args.heads, attn_mask=window),
        "no mask": sdpa(args.heads),
    }
    causal_keys = (n + 1) / 2
    needed = {"causal mask": 1.0, f"window {w} mask": (w * (w + 1) / 2 + (n - w) * w) / n / causal_keys}
    needed["no mask"] = n / causal_keys
    rounds = paired_rounds(ways, "is_causal", max_seconds=args.max_seconds)
    print(f"\n{args.heads} heads, {n} tokens, head_dim {args.head_dim}, {args.dtype}, CPU time, "
          f"{len(rounds.seconds['is_causal'])} rounds; time relative to is_causal [95%], keys needed:")  # fmt: skip
    for name, up in rounds.speedups.items():
        print(f"  {name:<16} {_relative(up)}   keys needed x{needed[name]:.3f}")
    fewer = args.heads - 1
    heads = paired_rounds(
        {"all": sdpa(args.heads, attn_mask=window), "one fewer": sdpa(fewer, attn_mask=window)},
        "all",
        max_seconds=args.max_seconds,
    )
    up = heads.speedups["one fewer"]
    print(f"\nwindow mask, {fewer} heads instead of {args.heads}: x{up.speedup:.3f} [{up.low:.3f}, {up.high:.3f}] "
          f"as fast ({up.rounds} paired rounds; per head: x{args.heads / fewer:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
