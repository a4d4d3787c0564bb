"""The size of ``headstats compare``'s verdicts at the margin's boundary, by simulation.

    python benchmarks/compare_margin_size.py [--reps 2000] [--texts 40,64,128] [--margins 0.05,0.1,0.3]

Each replicate draws paired texts (:func:`headstats.testing.margin.paired_texts`) whose two score
distributions are N(0, 1) and N(margin, 1), so the true W1 equals the margin; it runs
:func:`headstats.stats.compare.w1_bounds` at alpha = 5% with 400 resamples and counts how often the
interval-inclusion rule says "moved beyond the margin" (lower bound above it) and "equivalent within
the margin" (upper bound below it). Both are errors at the boundary and should happen at most 5% of
the time, plus Monte Carlo error (printed). Also prints the power of "moved beyond" at a true distance of 2.5 margins.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from headstats.testing.margin import verdict_rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--texts", default="40,64,128")
    parser.add_argument("--margins", default="0.05,0.1,0.3")
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args()
    mc = np.sqrt(args.alpha * (1 - args.alpha) / args.reps)
    print(f"alpha {args.alpha}, {args.reps} replicates: Monte Carlo standard error {mc:.4f}", flush=True)
    for n in map(int, args.texts.split(",")):
        for margin in map(float, args.margins.split(",")):
            started = time.perf_counter()
            at = verdict_rates(n, margin, margin, args.reps, alpha=args.alpha, seed=1000 * n)
            power = verdict_rates(n, margin, 2.5 * margin, args.reps // 2, alpha=args.alpha, seed=1000 * n + 1)
            print(
                f"texts {n:4d} margin {margin:.2f}: at the margin moved {at['moved']:.3f}, equivalent "
                f"{at['equivalent']:.3f}; at 2.5 x margin moved {power['moved']:.3f} "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
