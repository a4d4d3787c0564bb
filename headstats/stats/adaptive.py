"""Heads skipped per prompt: what each selection costs against the full model on the same items, the
largest share certified within a margin, and per-prompt against static (docs/statistics.md#skipping).

The rows are :mod:`headstats.jobs.adaptive`'s: one per (model, task, item, selection, share), the
full model's as selection ``full``. Every comparison pairs an item with itself. A task's metric is
accuracy (``correct_norm``, lm-eval's acc_norm; drop in points) or a passage's continuation loss
(``loss``, nats per token; its increase). Items of one source document are one cluster.

- accuracy: the one-sided upper bound of the drop is Tango's score bound at the effective number of
  items (:func:`headstats.stats.paired.drop_bound`), and the two-sided interval a cluster bootstrap;
- loss: both from a cluster bootstrap of the mean paired increase.

``upper_fw`` is the bound at family-wise level: Bonferroni over the ``family`` fixed sequences read
(models x tasks x selections), and :func:`certified_shares` reads each (model, task, selection) as a
fixed sequence over increasing shares, stopping at the first whose ``upper_fw`` exceeds the margin.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headstats.stats.paired import drop_bound, paired_bootstrap, questions_to_certify

SELECTIONS = ("per-prompt", "static", "random", "oracle")
FULL = "full"
CONFIDENCE = 0.95


def metric_of(rows: pd.DataFrame) -> str:
    """``loss`` for passages (rows without answers), else ``correct_norm``."""
    return "loss" if "correct_norm" not in rows or rows["correct_norm"].isna().all() else "correct_norm"


def cluster_means(diff: np.ndarray, clusters: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap means of ``diff``, resampling whole clusters (the ratio of the drawn clusters' sums
    to their sizes)."""
    _, codes = np.unique(clusters, return_inverse=True)
    k = int(codes.max()) + 1
    sums = np.bincount(codes, weights=diff, minlength=k)
    sizes = np.bincount(codes, minlength=k).astype(float)
    drawn = np.random.default_rng(seed).integers(0, k, size=(n_resamples, k))  # k clusters with replacement
    return sums[drawn].sum(axis=1) / sizes[drawn].sum(axis=1)


def paired(rows: pd.DataFrame, selection: str, share: float, metric: str) -> pd.DataFrame:
    """One cell's items: ``full`` and ``selected`` values of ``metric`` side by side, with clusters."""
    full = rows[rows["selection"] == FULL][["item", "cluster", metric]].rename(columns={metric: "full"})
    cell = rows[(rows["selection"] == selection) & np.isclose(rows["share"], share)][["item", metric]]
    both = full.merge(cell.rename(columns={metric: "selected"}), on="item", validate="one_to_one")
    if len(both) != len(full):
        raise ValueError(f"{selection} at {share:g} lacks {len(full) - len(both)} of the full model's items")
    return both


def cell_row(both: pd.DataFrame, metric: str, family: int, margin: float, n_resamples: int, seed: int) -> dict:
    """One cell's drop (points) or loss increase (nats), its 95% interval, its one-sided bounds and
    whether the family-wise one is within ``margin``."""
    clusters = both["cluster"].to_numpy()
    level = 1.0 - (1.0 - CONFIDENCE) / family
    if metric == "loss":
        diff = (both["selected"] - both["full"]).to_numpy(float)
        means = cluster_means(diff, clusters, n_resamples, seed)
        low, high = np.quantile(means, [0.025, 0.975])
        upper, upper_fw = np.quantile(means, [CONFIDENCE, level])
        drop, extra = float(diff.mean()), {}
    else:
        full, sel = both["full"].to_numpy(bool), both["selected"].to_numpy(bool)
        bound = drop_bound(full, sel, CONFIDENCE, clusters)
        upper_fw = drop_bound(full, sel, level, clusters).upper * 100
        shift = paired_bootstrap(full, sel, n_resamples=n_resamples, seed=seed, clusters=clusters)  # sel - full
        low, high = -100 * shift.high, -100 * shift.low
        drop, upper = bound.drop * 100, bound.upper * 100
        needed = questions_to_certify(bound.lost, bound.gained, bound.n, margin)
        extra = {
            "lost": bound.lost,
            "gained": bound.gained,
            "design_effect": bound.design_effect,
            "n_to_certify": needed if math.isfinite(needed) else math.nan,
        }
    return {
        "n": len(both),
        "clusters": len(np.unique(clusters)),
        "full": float(both["full"].mean()) * (1 if metric == "loss" else 100),
        "selected": float(both["selected"].mean()) * (1 if metric == "loss" else 100),
        "drop": drop,
        "low": float(low),
        "high": float(high),
        "upper": float(upper),
        "upper_fw": float(upper_fw),
        "margin": margin,
        "within": bool(upper_fw <= margin),
        **extra,
    }


def cells(
    rows: pd.DataFrame, margins: dict[str, float], family: int, *, n_resamples: int = 10_000, seed: int = 0
) -> pd.DataFrame:
    """Every (model, task, selection, share) cell against the full model on the same items; ``margins``
    maps a metric (``correct_norm``, ``loss``) to its margin (points, nats per token)."""
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        metric = metric_of(group)
        for selection in SELECTIONS:
            for share in sorted(group.loc[group["selection"] == selection, "share"].unique()):
                both = paired(group, selection, share, metric)
                row = cell_row(both, metric, family, margins[metric], n_resamples, seed)
                out.append(
                    {"model": model, "task": task, "metric": metric, "selection": selection, "share": share, **row}
                )
    return pd.DataFrame(out)


def certified_shares(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task, selection), the largest share of the fixed sequence over increasing shares
    whose family-wise bound is within the margin (0: the smallest share is not)."""
    rows = []
    for (model, task, selection), group in table.groupby(["model", "task", "selection"], sort=True):
        best = 0.0
        for _, cell in group.sort_values("share").iterrows():
            if not cell["within"]:
                break
            best = float(cell["share"])
        rows.append({"model": model, "task": task, "selection": selection, "certified_share": best})
    return pd.DataFrame(rows)


def versus_static(rows: pd.DataFrame, *, n_resamples: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Per (model, task, share): how much more of the full model's result per-prompt selection keeps
    than the static one (accuracy points, or nats per token of loss, positive = per-prompt better),
    with a 95% cluster-bootstrap interval (an estimate: nothing is decided from it)."""
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        metric = metric_of(group)
        sign, scale = (-1.0, 1.0) if metric == "loss" else (1.0, 100.0)
        for share in sorted(group.loc[group["selection"] == "per-prompt", "share"].unique()):
            a = paired(group, "per-prompt", share, metric)
            b = paired(group, "static", share, metric)
            diff = (
                sign
                * scale
                * (a["selected"].to_numpy(float) - b.set_index("item").loc[a["item"], "selected"].to_numpy(float))
            )
            means = cluster_means(diff, a["cluster"].to_numpy(), n_resamples, seed)
            low, high = np.quantile(means, [0.025, 0.975])
            out.append(
                {
                    "model": model,
                    "task": task,
                    "metric": metric,
                    "share": share,
                    "advantage": float(diff.mean()),
                    "low": float(low),
                    "high": float(high),
                    "n": len(diff),
                }
            )
    return pd.DataFrame(out)


def overlap(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task, share): the mean share of the per-prompt heads the static set also holds."""
    sel = rows[rows["selection"] == "per-prompt"]
    return sel.groupby(["model", "task", "share"], as_index=False)["overlap_static"].mean()
