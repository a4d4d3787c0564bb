"""Did a fine-tuning stage learn? Paired changes of its held-out metrics between its start and its end.

``headstats finetune`` measures each stage's own metric on the same held-out examples at the stage's
start and at its checkpoints, and keeps the per-example values (``metrics.json``: ``per_example``).
A stage learned when the mean change of its primary metric, end minus start on the same examples, has
a 95% interval that excludes 0 in the direction training pushes it (losses down, margins and rewards
up). The interval is a percentile bootstrap over held-out examples, paired: one resample draws the
same examples at both ends, so the examples' own difficulty cancels.

The metrics themselves are measured in one form: a mean with a bootstrap interval over held-out
examples (:func:`mean_interval`) or a share with a Wilson interval (:func:`proportion`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headstats.stats.paired import wilson_interval

# The direction training moves each metric (+1 up, -1 down) and the metric that decides a stage.
DIRECTION = {
    "answer_loss": -1,
    "completion_loss": -1,
    "reward_margin": 1,
    "likelihood_preference": 1,
    "accuracy": 1,
    "greedy_reward": 1,
    "sampled_reward": 1,
    "exact_match": 1,
}
PRIMARY = {"sft": "answer_loss", "dpo": "reward_margin", "grpo": "sampled_reward"}
STAGES = ("sft", "dpo", "grpo")


def mean_interval(
    values: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """The (weighted) mean of ``values`` over examples with a percentile bootstrap interval that
    resamples examples: ``value``, ``ci_low``, ``ci_high`` and ``n``, the form of every learning
    metric in ``metrics.json``."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0}
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    boot = (x[idx] * w[idx]).sum(1) / w[idx].sum(1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha])
    return {"value": float((x * w).sum() / w.sum()), "ci_low": float(low), "ci_high": float(high), "n": int(x.size)}


def proportion(successes: int, n: int, confidence: float = 0.95) -> dict[str, float]:
    """A share of successes with its Wilson interval, in the form of :func:`mean_interval`."""
    if not n:
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0}
    low, high = wilson_interval(int(successes), int(n), confidence)
    return {"value": successes / n, "ci_low": float(low), "ci_high": float(high), "n": int(n)}


def paired_change(
    before: np.ndarray,
    after: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    n_boot: int = 4000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Mean of ``after`` minus mean of ``before`` over the same examples (weighted means when
    ``weights`` are given, e.g. tokens per answer), with a percentile bootstrap interval that
    resamples examples jointly at both ends (:func:`mean_interval` of the differences)."""
    x, y = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired values need the same examples at both ends, not shapes {x.shape} and {y.shape}")
    change = mean_interval(y - x, weights, n_boot=n_boot, confidence=confidence, seed=seed)
    return {"change": change.pop("value"), **change}


def _ends(measured: dict) -> tuple[str, str] | None:
    steps = sorted((int(k) for k in measured), key=int)
    return (str(steps[0]), str(steps[-1])) if len(steps) >= 2 else None


def learning_verdicts(metrics: dict, *, n_boot: int = 4000, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Per (stage, metric) of a chain's ``metrics.json``: its value at the stage's first and last
    measured checkpoint, the paired change with its interval, and ``learned``: the interval excludes
    0 in the metric's training direction (:data:`DIRECTION`). ``primary`` marks the metric that decides
    the stage (:data:`PRIMARY`). Metrics measured without per-example values get no interval."""
    rows = []
    for stage in STAGES:
        measured = (metrics.get(stage) or {}).get("checkpoints") or {}
        ends = _ends(measured)
        if ends is None:
            continue
        first, last = measured[ends[0]], measured[ends[1]]
        per_first, per_last = first.get("per_example") or {}, last.get("per_example") or {}
        for name, direction in DIRECTION.items():
            if not isinstance(first.get(name), dict) or not isinstance(last.get(name), dict):
                continue
            row = {
                "stage": stage,
                "metric": name,
                "primary": PRIMARY.get(stage) == name,
                "start_step": int(ends[0]),
                "end_step": int(ends[1]),
                "start": first[name]["value"],
                "end": last[name]["value"],
            }
            if name in per_first and name in per_last:
                weights = per_first.get(f"{name}_tokens")
                change = paired_change(
                    per_first[name], per_last[name], weights, n_boot=n_boot, confidence=confidence, seed=seed
                )
                low, high = change["ci_low"], change["ci_high"]
                row |= change | {"learned": bool(low > 0) if direction > 0 else bool(high < 0)}
            else:
                row |= {"change": row["end"] - row["start"], "ci_low": math.nan, "ci_high": math.nan, "learned": None}
            rows.append(row)
    columns = [
        "stage",
        "metric",
        "primary",
        "start_step",
        "end_step",
        "start",
        "end",
        "change",
        "ci_low",
        "ci_high",
        "n",
        "learned",
    ]
    return pd.DataFrame(rows, columns=columns)


__all__ = [
    "DIRECTION",
    "PRIMARY",
    "learning_verdicts",
    "mean_interval",
    "paired_change",
    "proportion",
]
