"""Power of the pre-registered decision rule of analyses/finetuning_confirm.toml, by simulation.

    python analyses/finetuning_confirm_power.py            # the table the design file quotes

The rule, per (stage end, dataset, score) cell, with seeds as the unit: each seed ``s`` contributes
``delta_s = d(base, end_s) - (2 * b_s - B)``, where d is W1 over the base's IQR, ``b_s`` the mean of
d(end_s, end_t) over the other seeds t and ``B`` the mean over all seed pairs (so mean(delta) =
mean d(base, end) - mean d(end, end'), and ``2 b_s - B`` is seed s's first-order share of the pairs'
mean: the contrasts' spread carries the pairs' variation, which a plain ``b_s`` would understate);

- *moved beyond training noise*: the one-sided sign-flip test of mean(delta) > 0 over all 2^n sign
  patterns rejects under Holm over the family at 5%;
- *equivalent within the margin*: the one-sided sign-flip test of mean(delta) < margin rejects at 5%
  (the sign-flip 95% upper bound of mean(delta) lies below the margin).

The simulation: seed ``s``'s stage end sits at a location ``mu + sigma * z_s`` from the base (z standard
normal, one dimension, in IQR units), so that d(base, end_s) = |mu + sigma z_s| and d(end_s, end_t) =
sigma |z_s - z_t|, each distance measured with text-sampling noise of standard deviation ``omega``.
Per cell, ``sigma`` is set from the one existing seed pair (E|z_s - z_t| = 2 / sqrt(pi), so sigma =
d(seed 0, seed 1) * sqrt(pi) / 2) and ``omega`` from the bootstrap interval of the base -> stage distance
on 32 texts, scaled to the design's texts (sqrt(32 / texts)); both from the exploratory run's stage-end
distances, analyses/finetuning_exploratory_distances.csv (its chains and score tables were not kept). ``mu`` is solved so that the expected delta
equals the margin (power of the moved test) or 0 (power of the equivalence test at "no movement beyond
training noise"; at mu = 0 the expected delta is negative, about -0.33 sigma, so 0 is the harder case).
Power is given per cell (27: 3 stage ends x 3 datasets x 3 scores), summarised by its smallest value,
its median and the number of cells at 80% or more. The moved test's power uses the Bonferroni level
alpha / family, Holm's first step (the hardest case: a cell alone among nulls). ``size`` is the moved
test's rejection rate at that level where the expected delta is 0 (the null's boundary: the sign flip
assumes symmetric, independent contrasts, which these are not exactly, so it exceeds the level), and
``size at no movement`` where the stage ends scatter around the base itself (mu = 0).
"""

from __future__ import annotations

import argparse
import itertools
from math import erf, exp, pi, sqrt
from pathlib import Path

import numpy as np
import pandas as pd

TABLE = Path(__file__).resolve().parent / "finetuning_exploratory_distances.csv"
EXPLORATORY_TEXTS = 32  # texts per dataset behind the exploratory table's intervals
STAGE_ENDS = {"sft": 40, "dpo": 30, "grpo": 40}
SCORES = ("ahon_ln", "awft", "entropy_ln")


def cells(texts: int) -> pd.DataFrame:
    """Per (stage, dataset, score): sigma (seed-to-seed location spread) and omega (text noise of one
    distance at ``texts`` texts), from the exploratory run's stage ends."""
    table = pd.read_csv(TABLE)
    table = table[table["score"].isin(SCORES) & (table["step"] == table["stage"].map(STAGE_ENDS))]
    keys = ["stage", "dataset", "score"]
    seeds = table[table["comparison"] == "between seeds"].set_index(keys)["w1_iqr"]
    base = table[table["comparison"] == "from base"].set_index(keys)
    out = pd.DataFrame({"seed_pair": seeds, "from_base": base["w1_iqr"]})
    out["sigma"] = out["seed_pair"] * sqrt(pi) / 2
    half_width = (base["w1_iqr_high"] - base["w1_iqr_low"]) / 2
    out["omega"] = half_width / 1.96 * sqrt(EXPLORATORY_TEXTS / texts)
    return out.reset_index()


def folded_mean(mu: float, sigma: float) -> float:
    """E|mu + sigma z| for standard normal z."""
    phi = 0.5 * (1 + erf(-mu / (sigma * sqrt(2))))
    return sigma * sqrt(2 / pi) * exp(-(mu**2) / (2 * sigma**2)) + mu * (1 - 2 * phi)


def location_for(target: float, sigma: float) -> float:
    """The location mu >= 0 at which the expected delta is ``target`` (bisection)."""
    low, high = 0.0, 10 * sigma + 10 * abs(target)
    for _ in range(100):
        mid = (low + high) / 2
        if folded_mean(mid, sigma) - 2 * sigma / sqrt(pi) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def deltas(mu: float, sigma: float, omega: float, n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` x ``n`` simulated per-seed contrasts delta_s."""
    z = rng.standard_normal((reps, n))
    where = mu + sigma * z
    to_base = np.abs(where) + omega * rng.standard_normal((reps, n))
    pair = np.abs(where[:, :, None] - where[:, None, :]) + omega * rng.standard_normal((reps, n, n))
    pair = (pair + pair.transpose(0, 2, 1)) / 2  # one measurement per pair
    mask = ~np.eye(n, dtype=bool)
    between = (pair * mask).sum(axis=2) / (n - 1)
    return to_base - (2 * between - between.mean(axis=1, keepdims=True))


def sign_flip_p(values: np.ndarray) -> np.ndarray:
    """One-sided sign-flip p-values (H1: the mean is above 0) over every sign pattern, per row."""
    n = values.shape[1]
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # 2^n x n, the identity first
    flipped = values @ signs.T  # reps x 2^n sums
    observed = flipped[:, :1]
    return (flipped >= observed - 1e-12).mean(axis=1)


def power(n: int, margin: float, family: int, texts: int, reps: int, alpha: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng([48, seed, n])
    rows = []
    for cell in cells(texts).itertuples():
        moved = deltas(location_for(margin, cell.sigma), cell.sigma, cell.omega, n, reps, rng)
        flat = deltas(location_for(0.0, cell.sigma), cell.sigma, cell.omega, n, reps, rng)
        still = deltas(0.0, cell.sigma, cell.omega, n, reps, rng)
        rows.append(
            {
                "stage": cell.stage,
                "dataset": cell.dataset,
                "score": cell.score,
                "sigma": cell.sigma,
                "omega": cell.omega,
                "power_moved": float((sign_flip_p(moved) <= alpha / family).mean()),
                "power_equivalent": float((sign_flip_p(margin - flat) <= alpha).mean()),
                "size_moved": float((sign_flip_p(flat) <= alpha / family).mean()),
                "size_no_movement": float((sign_flip_p(still) <= alpha / family).mean()),
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="6,8,10,12", help="seed counts to simulate")
    parser.add_argument("--margin", type=float, default=0.10, help="margin in W1/IQR")
    parser.add_argument("--family", type=int, default=9, help="tests in one Holm family")
    parser.add_argument("--texts", type=int, default=128, help="texts per dataset")
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--cells", action="store_true", help="print every cell, not only the summary")
    args = parser.parse_args()
    print(f"margin {args.margin} W1/IQR, Holm family of {args.family}, {args.texts} texts, {args.reps} replicates")
    print(
        "seeds | moved at the margin: power worst / median, cells >= 80%, size (worst) at the boundary / "
        "at no movement | equivalent at no movement beyond noise: power worst / median, cells >= 80%"
    )
    for n in (int(s) for s in args.seeds.split(",")):
        table = power(n, args.margin, args.family, args.texts, args.reps, args.alpha, seed=0)
        moved, equivalent = table["power_moved"], table["power_equivalent"]
        print(
            f"{n:5d} | {moved.min():.2f} / {moved.median():.2f}, {(moved >= 0.8).sum()} of {len(table)}, "
            f"{table['size_moved'].max():.3f} / {table['size_no_movement'].max():.3f} | "
            f"{equivalent.min():.2f} / {equivalent.median():.2f}, {(equivalent >= 0.8).sum()} of {len(table)}"
        )
        if args.cells:
            print(table.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
