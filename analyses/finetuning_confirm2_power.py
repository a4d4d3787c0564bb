"""Power of the distance rule for the fresh confirmation (analyses/finetuning_confirm2.toml), from the
spread the first confirmation's 12 seeds show in every cell.

    python analyses/finetuning_confirm2_power.py                  # the table the design file quotes
    python analyses/finetuning_confirm2_power.py --simulate 400   # and a simulation check of 3 cells

Per (stage end, dataset, score) cell of analyses/finetuning_confirm.toml, from its committed tables
(results/finetuning-confirm/): the seeds' mean base -> stage end distance (theta, W1/IQR), the seeds'
standard deviation of it and the texts' standard error (a cluster bootstrap of the 128 texts;
headstats.stats.seed_margin). The power of n seeds on ``--texts`` fresh texts to reach the verdict
the estimate points to ("moved beyond the margin" above it, at Holm's first-step level alpha / 9, the
hardest case; "equivalent within the margin" below it, at alpha) is that of the one-sided t test
with standard error hypot(sd / sqrt(n), se_texts * sqrt(128 / texts)) at theta (noncentral t,
headstats.stats.seed_power.t_power). The alternative is the 12 seeds' point estimate: a pilot's,
on other texts, so the power is a planning figure, restated from the new seeds after the run.

``--simulate R`` checks the t approximation for three cells against R studies simulated from the
cell's own seeds (headstats.stats.seed_power.Planted, thinned to 24 heads for speed: a cheaper cell
of the same kind, whose theta is that of the thinned cell).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from headstats.jobs.finetune.study import load_seed_study, seed_cells
from headstats.stats import seed_margin, seed_power

DESIGN = Path(__file__).resolve().parent / "finetuning_confirm.toml"
FAMILY = 9  # cells per stage end: Holm's first step tests at alpha / 9


def observed(margin: float) -> tuple[pd.DataFrame, dict]:
    study = load_seed_study(DESIGN)
    cells = seed_cells(study, study.results)
    return seed_margin.decide_cells(cells, margin=margin), cells


def power_table(cells: pd.DataFrame, seeds: list[int], texts: int, margin: float, alpha: float) -> pd.DataFrame:
    rows = []
    for c in cells.itertuples():
        level = alpha / FAMILY if c.mean_distance > margin else alpha
        se_texts = c.se_texts * np.sqrt(c.n_texts / texts)
        power = {n: seed_power.t_power(c.mean_distance, margin, c.sd_seeds, se_texts, n, level) for n in seeds}
        heading = seed_margin.MOVED_BEYOND_MARGIN if c.mean_distance > margin else seed_margin.EQUIVALENT
        rows.append({"stage": c.stage, "dataset": c.dataset, "score": c.score, "theta": c.mean_distance,
                     "sd_seeds": c.sd_seeds, "se_texts": se_texts, "towards": heading, **power})  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="6,8,10,12,16,24")
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--margin", type=float, default=0.12)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--simulate", type=int, default=0, help="simulated studies per checked cell (0: none)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    estimates, cells = observed(args.margin)
    table = power_table(estimates, seeds, args.texts, args.margin, args.alpha)
    pd.set_option("display.width", 200)
    print(f"margin {args.margin} W1/IQR, {args.texts} fresh texts per dataset; power at the 12 seeds' estimates")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for n in seeds:
        column = table[n]
        print(f"{n:3d} seeds: smallest {column.min():.2f}, median {column.median():.2f}, {(column >= 0.8).sum()} of "
              f"{len(column)} cells at 80% or more")  # fmt: skip
    if args.simulate:
        checked = [("sft", "piqa", "ahon_ln"), ("dpo", "mmlu", "ahon_ln"), ("sft", "piqa", "entropy_ln")]
        for key in checked:
            planted = seed_power.Planted.from_cell(cells[key]).thinned(24)
            theta = planted.quantity(move=1.0, draws=400)[0]
            rates = seed_power.rule_rates(planted, n_seeds=12, margin=args.margin, move=1.0, reps=args.simulate)
            name = "/".join(key)
            print(f"simulated {name} (24 heads: theta {theta:.3f}), 12 seeds, {args.simulate} studies: {rates}")


if __name__ == "__main__":
    main()
