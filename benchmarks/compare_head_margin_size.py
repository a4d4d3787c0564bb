"""The family-wise error of ``headstats compare``'s per-head verdicts at the margin, by simulation.

    python benchmarks/compare_head_margin_size.py [--reps 2000] [--units 10,20,40,64,128] [--heads 24,270]

Each replicate draws a units x heads matrix of paired differences
(:func:`headstats.testing.head_margin.differences`) with every head at its margin (half at +margin,
half at -margin, spreads of 0.5 to 3 margins, a shared unit effect), normal, skewed or spiky; it runs
:func:`headstats.stats.heads.simultaneous_band` at alpha = 5% with 400 resamples and counts the
replicates in which any head is called "moved beyond the margin" (the family-wise error, which should
be at most 5% plus Monte Carlo error, printed). Beside it, at 24 heads, the same with each head's own
90% interval (the distribution rule applied head by head, no adjustment for the heads), and the power
to find one head shifted by 3 margins among heads that stay put.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from headstats.testing.head_margin import NOISES, family_error, power


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--units", default="10,20,40,64,128")
    parser.add_argument("--heads", default="24,270")
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args()
    margin = 0.1
    for heads in map(int, args.heads.split(",")):
        reps = args.reps if heads <= 30 else max(args.reps // 4, 100)
        mc = np.sqrt(args.alpha * (1 - args.alpha) / reps)
        print(f"{heads} heads, alpha {args.alpha}, {reps} replicates: Monte Carlo standard error {mc:.4f}", flush=True)
        for units in map(int, args.units.split(",")):
            started = time.perf_counter()
            rates = {n: family_error(units, heads, margin, reps, noise=n, alpha=args.alpha, seed=units) for n in NOISES}
            line = ", ".join(f"{n} {r:.3f}" for n, r in rates.items())
            if heads <= 30:
                wrong = family_error(units, heads, margin, reps // 10, rule="per head", alpha=args.alpha, seed=units)
                found = power(units, heads, margin, 3 * margin, reps // 10, alpha=args.alpha, seed=units + 1)
                line += f"; each head's own interval {wrong:.3f}; power at 3 margins {found:.3f}"
            print(f"units {units:4d}: 'moved beyond' family-wise {line} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
