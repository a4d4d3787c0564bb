"""Fine-tuning against training noise, with seeds as the unit: the decision rule of a seed study
(analyses/finetuning_confirm.toml, docs/guides/finetuning-confirm.md).

Several chains of one recipe, differing only in their seed, each give a stage end per stage. Per
(stage, dataset, score) *cell*, the distance ``d`` between two checkpoints is W1 between their pooled
(text, layer, head) score distributions on the same texts, over the base's interquartile range of
that score on that dataset (W1/IQR). Each seed ``s`` gives one contrast

    delta_s = d(base, end_s) - (2 b_s - B),

``b_s`` the mean of d(end_s, end_t) over the other seeds ``t`` and ``B`` the mean over all seed pairs,
so that mean(delta) is the mean base -> stage distance minus the mean seed -> seed distance, and
``2 b_s - B`` is seed s's share of the pairs' mean. The tests are one-sided sign-flip tests of
mean(delta) over all 2^n sign patterns of the n seeds:

- *moved beyond training noise*: mean(delta) > 0, Holm over the cells of a stage end;
- *moved beyond the margin*: mean(delta) > margin, Holm likewise;
- *equivalent within the margin*: mean(delta) < margin, each cell at ``alpha`` (the sign-flip upper
  bound of mean(delta) lies below the margin).

A seed enters a stage's cells only when that stage and every earlier stage of its chain learned
(:func:`seeds_kept`); a stage with fewer than ``min_seeds`` such seeds is undetermined in every cell.

Which heads moved (:func:`head_seed_shifts`, beside the rule, not part of it): per cell and head, each
kept seed's shift of the head's mean from the base, in the base's IQR; a sign-flip max-T test over the
seeds (the seeds are the units, their spread the noise) says which heads moved consistently beyond it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from headstats.stats.distances import interquartile_range
from headstats.stats.learning import STAGES, learning_verdicts
from headstats.stats.movement import sign_flip_max_t
from headstats.stats.multiple import holm
from headstats.stats.w1 import wasserstein1_sorted

BASE = "base"  # the stage label of the base model in a checkpoints table
FROM_BASE, BETWEEN_SEEDS = "from base", "between seeds"
MAX_EXACT_SEEDS = 20  # 2^20 sign patterns: the exact test's limit

MOVED_BEYOND_MARGIN = "moved beyond the margin"
MOVED_WITHIN_MARGIN = "moved beyond training noise, within the margin"
MOVED = "moved beyond training noise"
EQUIVALENT = "equivalent within the margin"
UNDETERMINED = "undetermined"

CELL = ["stage", "dataset", "score"]
HEAD_COLUMNS = [*CELL, "layer", "head", "n_seeds", "shift", "seed_sd", "t", "p_max_t", "moved"]
FAMILIES = {"stage_end": ("stage",), "all": ()}  # a design's Holm family -> the columns its cells share


# --- distances ------------------------------------------------------------------------------------


def _pooled(rows: pd.DataFrame, score: str) -> np.ndarray:
    values = rows[score].to_numpy(dtype=np.float64)
    return np.sort(values[np.isfinite(values)])


def seed_distances(scores: pd.DataFrame, checkpoints: pd.DataFrame, score_ids: Sequence[str]) -> pd.DataFrame:
    """W1/IQR per cell between the base and each seed's stage end (``from base``) and between every
    two seeds' stage ends (``between seeds``), on the texts every checkpoint of the dataset holds.

    ``scores``: score rows (``model``, ``dataset``, ``sample_id``, the score columns), as
    :func:`headstats.io.store.read_scores` gives them. ``checkpoints``: one row per model with its
    ``stage`` (:data:`BASE` for the one base) and ``seed``. Returns one row per distance: the cell,
    ``comparison``, ``seed`` and ``other`` (the second seed; -1 for the base), ``w1``, ``iqr`` (the
    base's) and ``w1_iqr``, ``n_texts``."""
    bases = checkpoints.loc[checkpoints["stage"] == BASE, "model"].astype(str).unique()
    if len(bases) != 1:
        raise ValueError(f"the checkpoints table names {len(bases)} base models; a seed study has one base")
    base = bases[0]
    ends = checkpoints[checkpoints["stage"] != BASE]
    models = {base, *ends["model"].astype(str)}
    missing = sorted(models - set(scores["model"].astype(str)))
    if missing:
        raise ValueError(f"no score rows for {', '.join(missing)}: collect them first")
    rows = []
    for dataset, table in scores[scores["model"].astype(str).isin(models)].groupby("dataset", observed=True):
        texts = set.intersection(*(set(t["sample_id"]) for _, t in table.groupby("model", observed=True)))
        by_model = {str(m): t for m, t in table[table["sample_id"].isin(texts)].groupby("model", observed=True)}
        for score in score_ids:
            pooled = {m: _pooled(t, score) for m, t in by_model.items()}
            reference = pooled[base]
            common = (dataset, score, interquartile_range(reference), len(texts))
            for stage, group in ends.groupby("stage", sort=False):
                seeds = sorted(zip(group["seed"].astype(int), group["model"].astype(str), strict=True))
                for seed, model in seeds:
                    rows.append((stage, FROM_BASE, seed, -1, wasserstein1_sorted(reference, pooled[model]), *common))
                for (s, a), (t, b) in itertools.combinations(seeds, 2):
                    rows.append((stage, BETWEEN_SEEDS, s, t, wasserstein1_sorted(pooled[a], pooled[b]), *common))
    columns = ["stage", "comparison", "seed", "other", "w1", "dataset", "score", "iqr", "n_texts"]
    out = pd.DataFrame(rows, columns=columns)[[*CELL, "comparison", "seed", "other", "w1", "iqr", "n_texts"]]
    out["w1_iqr"] = np.where(out["iqr"] > 0, out["w1"] / out["iqr"].where(out["iqr"] > 0), np.nan)
    return out


def seed_contrasts(distances: pd.DataFrame) -> pd.DataFrame:
    """Per cell and seed: ``from_base`` = d(base, end_s), ``between`` = b_s (the mean of d(end_s,
    end_t) over the other seeds), ``pairs_mean`` = B and ``delta`` = from_base - (2 b_s - B); NaN
    but ``from_base`` for a cell of one seed."""
    rows = []
    for cell, group in distances.groupby(CELL, sort=False):
        to_base = group[group["comparison"] == FROM_BASE].set_index("seed")["w1_iqr"]
        pairs = group[group["comparison"] == BETWEEN_SEEDS]
        seeds = sorted(to_base.index)
        matrix = pd.DataFrame(np.nan, index=seeds, columns=seeds)
        for r in pairs.itertuples():
            matrix.loc[r.seed, r.other] = matrix.loc[r.other, r.seed] = r.w1_iqr
        between = matrix.mean(axis=1)  # NaN diagonal skipped: the mean over the other seeds
        pairs_mean = float(pairs["w1_iqr"].mean()) if len(pairs) else math.nan  # one seed: no pair
        for seed in seeds:
            delta = to_base[seed] - (2 * between[seed] - pairs_mean)
            rows.append((*cell, seed, to_base[seed], between[seed], pairs_mean, delta))
    return pd.DataFrame(rows, columns=[*CELL, "seed", "from_base", "between", "pairs_mean", "delta"])


# --- the sign-flip test ---------------------------------------------------------------------------


def _sign_patterns(n: int) -> np.ndarray:
    if n > MAX_EXACT_SEEDS:
        raise ValueError(f"the exact sign-flip test takes at most {MAX_EXACT_SEEDS} seeds, not {n}")
    return np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # the identity first


def sign_flip_pvalue(values: Sequence[float], null: float = 0.0) -> float:
    """One-sided exact sign-flip p-value of ``mean(values) > null``: the share of the 2^n sign
    patterns of ``values - null`` whose sum is at least the observed one (the identity included)."""
    x = np.asarray(values, dtype=np.float64) - null
    if x.size == 0 or not np.isfinite(x).all():
        return math.nan
    return _at_least(_sign_patterns(x.size) @ x, scale=max(1.0, float(np.abs(x).sum())))


def sign_flip_upper_bound(values: Sequence[float], alpha: float = 0.05) -> float:
    """The one-sided sign-flip upper confidence bound of mean(values) at level ``1 - alpha``: the
    smallest ``m`` at which the test of ``mean(values) < m`` rejects (inf when no m does, as for
    fewer than log2(1/alpha) values). The test of ``mean < m`` counts the sign patterns whose
    flipped values have a mean at least m; that count falls as m grows, so the bound is one of
    those means."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.isfinite(x).all():
        return math.nan
    flips = _sign_patterns(x.size) == -1.0  # which values a pattern flips: the test of m - x
    # The test of mean(x) < m is that of mean(m - x) > 0: pattern F counts when sum_F (x - m) >= 0,
    # i.e. when the mean of x over F is at least m (the empty F always counts).
    sizes = flips.sum(axis=1)
    sums = flips @ x
    means = np.where(sizes > 0, sums / np.maximum(sizes, 1), np.inf)
    allowed = math.floor(alpha * len(means) + 1e-9)  # patterns counted at most, p <= alpha
    if allowed < 1:
        return math.inf
    # Rejects at m when at most `allowed` patterns (the empty one, at +inf, first) have a mean >= m:
    # for every m above the (allowed + 1)-th largest mean.
    return float(np.sort(means)[::-1][allowed])


# --- which heads moved -----------------------------------------------------------------------------


def head_seed_shifts(
    scores: pd.DataFrame,
    checkpoints: pd.DataFrame,
    score_ids: Sequence[str],
    kept: pd.DataFrame | None = None,
    *,
    alpha: float = 0.05,
    stages: Sequence[str] = STAGES,
) -> pd.DataFrame:
    """Per cell and head: which heads' means moved from the base beyond the spread between seeds.

    Each seed ``s`` kept at the stage (``kept`` as :func:`seeds_kept` gives it; every seed without
    it) gives ``shift_s = (m_h(end_s) - m_h(base)) / IQR``, ``m_h`` the head's mean over the texts
    every checkpoint of the dataset holds and IQR the base's over all its heads (the distances'
    scale). :func:`headstats.stats.movement.sign_flip_max_t` over the seeds (all 2^n sign patterns,
    one sign per seed shared by every head) tests mean(shift) = 0 per head, with the family-wise
    error over the heads of the cell controlled by max-T: the null is a stage end whose heads
    scatter around the base as the seeds scatter around one another. ``moved`` when ``p_max_t <=
    alpha``; with n seeds no p falls below 2^(1 - n). Returns one row per (cell, head): ``n_seeds``,
    ``shift`` (the mean), ``seed_sd`` (the seeds' sd of it), ``t``, ``p_max_t``, ``moved``."""
    columns = HEAD_COLUMNS
    bases = checkpoints.loc[checkpoints["stage"] == BASE, "model"].astype(str).unique()
    if len(bases) != 1:
        raise ValueError(f"the checkpoints table names {len(bases)} base models; a seed study has one base")
    ok = None
    if kept is not None:
        ok = set(kept.loc[kept["kept"].astype(bool), ["seed", "stage"]].itertuples(index=False, name=None))
    ends = checkpoints[checkpoints["stage"] != BASE]
    if ok is not None:
        keep = [(int(s), str(t)) in ok for s, t in zip(ends["seed"], ends["stage"], strict=True)]
        ends = ends[np.asarray(keep, dtype=bool)]
    models = {bases[0], *ends["model"].astype(str)}
    frames = []
    for dataset, table in scores[scores["model"].astype(str).isin(models)].groupby("dataset", observed=True):
        texts = set.intersection(*(set(t["sample_id"]) for _, t in table.groupby("model", observed=True)))
        table = table[table["sample_id"].isin(texts)]
        for score in score_ids:
            means = table.groupby(["model", "layer", "head"], observed=True)[score].mean().unstack(["layer", "head"])
            means.index = means.index.astype(str)
            base = means.loc[bases[0]].to_numpy(dtype=np.float64)
            iqr = interquartile_range(_pooled(table[table["model"].astype(str) == bases[0]], score))
            for stage, group in ends.groupby("stage", sort=False):
                seeds = sorted(zip(group["seed"].astype(int), group["model"].astype(str), strict=True))
                shifts = np.stack([means.loc[m].to_numpy(dtype=np.float64) - base for _, m in seeds])
                shifts = shifts / iqr if iqr > 0 else np.full_like(shifts, np.nan)
                test = sign_flip_max_t(shifts, n_perm=2**MAX_EXACT_SEEDS)
                frame = pd.DataFrame(
                    {
                        "stage": stage,
                        "dataset": dataset,
                        "score": score,
                        "layer": means.columns.get_level_values("layer").astype(int),
                        "head": means.columns.get_level_values("head").astype(int),
                        "n_seeds": len(seeds),
                        "shift": test["mean"].to_numpy(),
                        "seed_sd": test["sd"].to_numpy(),
                        "t": test["t"].to_numpy(),
                        "p_max_t": test["p_max_t"].to_numpy(),
                    }
                )
                frame["moved"] = frame["p_max_t"] <= alpha
                frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)[columns]
    order = {stage: i for i, stage in enumerate(stages)}
    keys = [*CELL, "layer", "head"]
    return out.sort_values(keys, key=lambda c: c.map(order) if c.name == "stage" else c, kind="stable").reset_index(
        drop=True
    )


def moved_head_counts(heads: pd.DataFrame, *, top: int = 3) -> pd.DataFrame:
    """Per cell of :func:`head_seed_shifts`: the heads, how many moved beyond the seeds (up and down)
    and the ``top`` moved heads by |t| as ``layer.head``."""
    rows = []
    for cell, group in heads.groupby(CELL, sort=False):
        moved = group[group["moved"].astype(bool)]
        order = moved.reindex(moved["t"].abs().sort_values(ascending=False, kind="stable").index)
        rows.append(
            {
                **dict(zip(CELL, cell, strict=True)),
                "n_seeds": int(group["n_seeds"].iloc[0]),
                "heads": len(group),
                "moved": len(moved),
                "up": int((moved["shift"] > 0).sum()),
                "down": int((moved["shift"] < 0).sum()),
                "largest": ", ".join(f"{int(r.layer)}.{int(r.head)}" for r in order.head(top).itertuples()),
            }
        )
    return pd.DataFrame(rows, columns=[*CELL, "n_seeds", "heads", "moved", "up", "down", "largest"])


# --- the machines the seeds trained on ----------------------------------------------------------------

MACHINE_COLUMNS = [*CELL, "n_seeds", "machines", "within", "across", "ratio", "p_value", "p_min", "p_holm"]
MAX_LABELINGS = 20_000  # beyond this many relabelings the permutation test samples them


def _labelings(groups: Sequence[int], *, limit: int = MAX_LABELINGS, seed: int = 0) -> np.ndarray:
    """Every distinct assignment of the group labels ``groups`` to their positions (the observed one
    first), or, past ``limit``, the observed one and ``limit - 1`` random shuffles of it."""
    groups = np.asarray(groups, dtype=np.int64)
    counts = np.bincount(groups)
    total = math.factorial(len(groups)) // math.prod(math.factorial(int(c)) for c in counts)
    if total > limit:
        rng = np.random.default_rng(seed)
        return np.vstack([groups, *(rng.permutation(groups) for _ in range(limit - 1))])
    found: list[tuple[int, ...]] = []

    def extend(prefix: list[int], left: np.ndarray) -> None:
        if len(prefix) == len(groups):
            found.append(tuple(prefix))
            return
        for g in np.flatnonzero(left):
            left[g] -= 1
            extend([*prefix, int(g)], left)
            left[g] += 1

    extend([], counts.copy())
    rest = [row for row in found if row != tuple(groups)]
    return np.array([tuple(groups), *rest])


def machine_spread(
    distances: pd.DataFrame, machines: Mapping[int, str], kept: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Whether the machine a seed trained on spread the seeds apart (which would inflate the seed
    spread the decision measures against), per cell: the mean seed -> seed W1/IQR of pairs trained on
    one machine (``within``) and on two (``across``), ``ratio`` = across / within, the one-sided
    permutation p-value of across - within > 0 over every assignment of the machine labels to the
    seeds with the machines' seed counts (with no machine effect the labels are exchangeable),
    ``p_min`` the smallest p-value those relabelings can give (2 / 924 for 6 + 6 seeds: too coarse
    for Holm over many cells) and ``p_holm`` over the cells. When every cell holds the same seeds, a
    last row (stage, dataset and score ``all``) tests them together: ``ratio`` the geometric mean of
    the cells' ratios, its p-value from the same relabelings applied to every cell at once (one test,
    outside the Holm family). ``machines``: seed -> its machine (a seed absent is left out);
    ``kept``: :func:`seeds_kept`, whose seeds alone enter. Empty when fewer than two machines hold at
    least two seeds each (no pair within a second machine to compare)."""
    if kept is not None:
        distances = keep_seeds(distances, kept)
    pairs = distances[distances["comparison"] == BETWEEN_SEEDS]
    rows, logs, seed_sets = [], [], set()
    for cell, group in pairs.groupby(CELL, sort=False):
        group = group[group["seed"].isin(list(machines)) & group["other"].isin(list(machines))]
        seeds = sorted({int(s) for s in group["seed"]} | {int(s) for s in group["other"]})
        names = sorted({machines[s] for s in seeds})
        label = [names.index(machines[s]) for s in seeds]
        sizes = np.bincount(label, minlength=len(names))
        if (sizes >= 2).sum() < 2:
            continue
        index = {s: i for i, s in enumerate(seeds)}
        first = np.array([index[int(s)] for s in group["seed"]])
        second = np.array([index[int(s)] for s in group["other"]])
        values = group["w1_iqr"].to_numpy(dtype=np.float64)
        labelings = _labelings(label)
        same = labelings[:, first] == labelings[:, second]  # labelings x pairs
        within = (same * values).sum(axis=1) / same.sum(axis=1)
        across = (~same * values).sum(axis=1) / (~same).sum(axis=1)
        counts = ", ".join(f"{name}: {n}" for name, n in zip(names, sizes, strict=True))
        ratio = across[0] / within[0]
        excess = across - within
        rows.append((*cell, len(seeds), counts, within[0], across[0], ratio, _at_least(excess), _smallest(excess)))
        logs.append(np.log(across / within))
        seed_sets.add((tuple(seeds), counts))
    out = pd.DataFrame(rows, columns=MACHINE_COLUMNS[:-1])
    out["p_holm"] = holm(out["p_value"]) if len(out) else pd.Series(dtype=float)
    if len(seed_sets) == 1 and len(rows) > 1:  # one seed set: the cells' relabelings are the same ones
        joint = np.mean(logs, axis=0)
        ((seeds, counts),) = seed_sets
        whole = ("all", "all", "all", len(seeds), counts, out["within"].mean(), out["across"].mean())
        out.loc[len(out)] = (*whole, math.exp(joint[0]), _at_least(joint), _smallest(joint), math.nan)
    return out


def _at_least(statistic: np.ndarray, value: float | None = None, scale: float | None = None) -> float:
    """The share of the permutation statistics (the observed one first, and counted) at least
    ``value`` (default: the observed one), ties within 1e-12 of ``scale`` (default max(1, |value|))
    counted."""
    value = statistic[0] if value is None else value
    scale = max(1.0, abs(value)) if scale is None else scale
    return float(np.mean(statistic >= value - 1e-12 * scale))


def _smallest(statistic: np.ndarray) -> float:
    """The smallest p-value these relabelings can give: the share tying with the largest statistic."""
    return _at_least(statistic, float(statistic.max()))


# --- the rule -------------------------------------------------------------------------------------


def learning_by_seed(metrics: Mapping[int, dict], *, n_boot: int = 4000, seed: int = 0) -> pd.DataFrame:
    """Per (seed, stage): the primary metric's paired change on the evidence split with its 95%
    interval and ``learned`` (:func:`headstats.stats.learning.learning_verdicts`), from each seed's
    chain ``metrics.json``."""
    columns = ["seed", "stage", "metric", "change", "ci_low", "ci_high", "n", "learned"]
    rows = []
    for chain_seed, record in metrics.items():
        verdicts = learning_verdicts(record, n_boot=n_boot, seed=seed)
        for row in verdicts[verdicts["primary"].astype(bool)].to_dict("records"):
            rows.append({**row, "seed": int(chain_seed)})
    return pd.DataFrame(rows, columns=columns)


def seeds_kept(
    learning: pd.DataFrame, stages: Sequence[str] = STAGES, seeds: Sequence[int] | None = None
) -> pd.DataFrame:
    """Per (seed, stage): ``kept`` when that stage and every earlier stage of the seed's chain learned
    (``learning``: ``seed``, ``stage``, ``learned``, True / False / None for no interval), and
    ``reason``: ``learned``, or the first stage that did not (``sft did not learn``, ``sft has no
    interval``, ``sft not measured``). ``seeds``: every seed of the study (default: those of
    ``learning``); one that ``learning`` lacks is kept out as not measured, never left unnamed."""
    known = {(int(r.seed), str(r.stage)): r.learned for r in learning.itertuples()}
    rows = []
    for seed in sorted({int(s) for s in learning["seed"]} | {int(s) for s in seeds or ()}):
        reason = "learned"
        for stage in stages:
            if reason == "learned":
                learned = known.get((seed, stage), "missing")
                if learned == "missing":
                    reason = f"{stage} not measured"
                elif learned is None or (isinstance(learned, float) and math.isnan(learned)):
                    reason = f"{stage} has no interval"
                elif not bool(learned):
                    reason = f"{stage} did not learn"
            rows.append((seed, stage, reason == "learned", reason))
    return pd.DataFrame(rows, columns=["seed", "stage", "kept", "reason"])


def keep_seeds(distances: pd.DataFrame, kept: pd.DataFrame) -> pd.DataFrame:
    """``distances`` of the seeds :func:`seeds_kept` keeps at each stage (both seeds of a pair)."""
    ok = set(kept.loc[kept["kept"].astype(bool), ["seed", "stage"]].itertuples(index=False, name=None))
    first = [(int(s), str(t)) in ok for s, t in zip(distances["seed"], distances["stage"], strict=True)]
    second = [o < 0 or (int(o), str(t)) in ok for o, t in zip(distances["other"], distances["stage"], strict=True)]
    return distances[np.asarray(first, dtype=bool) & np.asarray(second, dtype=bool)]


def _verdict(moved: bool, beyond: bool, equivalent: bool) -> str:
    if beyond:
        return MOVED_BEYOND_MARGIN
    if moved:
        return MOVED_WITHIN_MARGIN if equivalent else MOVED
    return EQUIVALENT if equivalent else UNDETERMINED


def seed_verdicts(
    contrasts: pd.DataFrame,
    *,
    margin: float,
    alpha: float = 0.05,
    family: Sequence[str] = ("stage",),
    min_seeds: int = 2,
) -> pd.DataFrame:
    """Per cell: the seeds, mean base -> stage and seed -> seed distances, mean(delta) with its
    sign-flip upper bound, the three tests' p-values (``p_moved`` and ``p_beyond_margin`` also Holm
    adjusted over ``family``: the cells sharing those columns' values) and the ``verdict``. A cell
    with fewer than ``min_seeds`` seeds is undetermined and tested by nothing."""
    if not margin > 0:
        raise ValueError(f"the margin must be above 0 (in W1/IQR), not {margin!r}")
    rows = []
    for cell, group in contrasts.groupby(CELL, sort=False):
        delta = group["delta"].to_numpy(dtype=np.float64)
        n = len(delta)
        enough = n >= min_seeds
        rows.append(
            {
                **dict(zip(CELL, cell, strict=True)),
                "n_seeds": n,
                "seeds": ",".join(str(int(s)) for s in sorted(group["seed"])),
                "from_base": float(group["from_base"].mean()),
                "between_seeds": float(group["pairs_mean"].iloc[0]),
                "mean_delta": float(delta.mean()),
                "sd_delta": float(delta.std(ddof=1)) if n > 1 else math.nan,
                "upper_bound": sign_flip_upper_bound(delta, alpha) if enough else math.nan,
                "p_moved": sign_flip_pvalue(delta, 0.0) if enough else math.nan,
                "p_beyond_margin": sign_flip_pvalue(delta, margin) if enough else math.nan,
                "p_equivalent": sign_flip_pvalue(margin - delta, 0.0) if enough else math.nan,
            }
        )
    tests = ["sd_delta", "upper_bound", "p_moved", "p_beyond_margin", "p_equivalent"]
    out = pd.DataFrame(rows, columns=[*CELL, "n_seeds", "seeds", "from_base", "between_seeds", "mean_delta", *tests])
    for column in ("p_moved", "p_beyond_margin"):
        out[f"{column}_holm"] = np.nan
        groups = out.groupby(list(family), sort=False) if family else [(None, out)]
        for _, members in groups:
            out.loc[members.index, f"{column}_holm"] = holm(members[column].to_numpy())
    out["margin"] = margin
    out["verdict"] = [
        _verdict(bool(m <= alpha), bool(b <= alpha), bool(e <= alpha))
        for m, b, e in zip(out["p_moved_holm"], out["p_beyond_margin_holm"], out["p_equivalent"], strict=True)
    ]
    return out


def stage_sentences(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per stage end, whether "fine-tuning barely changes heads" holds (every cell within the margin:
    equivalent, moved or not), fails (a cell moved beyond the margin) or is undetermined."""
    within = {EQUIVALENT, MOVED_WITHIN_MARGIN}
    rows = []
    for stage, group in verdicts.groupby("stage", sort=False):
        if (group["verdict"] == MOVED_BEYOND_MARGIN).any():
            sentence = "fails"
        elif group["verdict"].isin(within).all():
            sentence = "holds"
        else:
            sentence = UNDETERMINED
        counts = group["verdict"].value_counts()
        rows.append({"stage": stage, "cells": len(group), "sentence": sentence, **counts.to_dict()})
    return pd.DataFrame(rows).fillna(0)


def decide(
    distances: pd.DataFrame,
    learning: pd.DataFrame,
    *,
    margin: float,
    alpha: float = 0.05,
    min_seeds: int = 8,
    stages: Sequence[str] = STAGES,
    family: str = "stage_end",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The pre-registered rule end to end: the seeds each stage keeps (:func:`seeds_kept`), the
    verdict per cell over the kept seeds only (:func:`seed_verdicts`, Holm over each stage end's
    cells, or over every cell with ``family="all"``) and the study's sentence per stage end.
    Returns (kept, verdicts, sentences)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    kept = seeds_kept(learning, stages, seeds=sorted(set(distances["seed"].astype(int))))
    contrasts = seed_contrasts(keep_seeds(distances, kept))
    verdicts = seed_verdicts(contrasts, margin=margin, alpha=alpha, family=FAMILIES[family], min_seeds=min_seeds)
    cells = distances[CELL].drop_duplicates()
    empty = cells.merge(verdicts[CELL], how="left", indicator=True).query("_merge == 'left_only'")[CELL]
    if len(empty):  # every seed of the stage kept out: a cell of no seeds, undetermined
        none = empty.assign(n_seeds=0, seeds="", margin=margin, verdict=UNDETERMINED)
        verdicts = pd.concat([verdicts, none], ignore_index=True)
    order = {stage: i for i, stage in enumerate(stages)}
    verdicts = verdicts.sort_values(CELL, key=lambda c: c.map(order) if c.name == "stage" else c, kind="stable")
    return kept, verdicts.reset_index(drop=True), stage_sentences(verdicts)


def study_decision(
    distances: pd.DataFrame,
    learning: pd.DataFrame,
    *,
    seeds: Sequence[int],
    datasets: Sequence[str],
    score_ids: Sequence[str],
    margin: float,
    alpha: float = 0.05,
    min_seeds: int = 8,
    stages: Sequence[str] = STAGES,
    family: str = "stage_end",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """:func:`decide` over every cell a design names (``stages`` x ``datasets`` x ``score_ids``), with
    the seeds scored so far (``distances`` may be empty). Returns (kept: every seed of ``seeds`` at
    every stage, verdicts: every cell, sentences: per stage end ``seeds_scored``, ``seeds_kept`` and
    the ``sentence``).

    The decision is taken once, with every seed of the design scored: a stage end with a seed still
    unscored is "undetermined: N of M seeds scored" and its cells' verdicts are undetermined (their
    numbers are shown, but an interim look decides nothing, so the level of the design's single
    look holds). With every seed scored, a stage end with fewer than ``min_seeds`` seeds kept is
    "undetermined: N of M seeds learned"."""
    kept = seeds_kept(learning, stages, seeds=seeds)
    verdicts = pd.DataFrame(columns=[*CELL, "n_seeds", "seeds", "margin", "verdict"])
    if len(distances):
        _, verdicts, _ = decide(
            distances, learning, margin=margin, alpha=alpha, min_seeds=min_seeds, stages=stages, family=family
        )
    cells = pd.DataFrame(list(itertools.product(stages, datasets, score_ids)), columns=CELL)
    verdicts = cells.merge(verdicts, on=CELL, how="left")
    verdicts["n_seeds"] = verdicts["n_seeds"].fillna(0).astype(int)
    verdicts["seeds"] = verdicts["seeds"].fillna("")
    verdicts["margin"] = margin
    verdicts["verdict"] = verdicts["verdict"].fillna(UNDETERMINED)
    ok = set(kept.loc[kept["kept"].astype(bool), ["seed", "stage"]].itertuples(index=False, name=None))
    rows = []
    for stage in stages:
        scored = sorted(
            set(distances.loc[(distances["stage"] == stage) & (distances["comparison"] == FROM_BASE), "seed"])
        )
        n_kept = sum((int(s), stage) in ok for s in scored)
        cells_of = verdicts[verdicts["stage"] == stage]
        if len(set(scored) & {int(s) for s in seeds}) < len(seeds):
            sentence = f"{UNDETERMINED}: {len(scored)} of {len(seeds)} seeds scored"
            verdicts.loc[cells_of.index, "verdict"] = UNDETERMINED
            cells_of = verdicts.loc[cells_of.index]
        elif n_kept < min_seeds:
            sentence = f"{UNDETERMINED}: {n_kept} of {len(seeds)} seeds learned"
        else:
            sentence = str(stage_sentences(cells_of)["sentence"].iloc[0])
        counts = cells_of["verdict"].value_counts().to_dict()
        rows.append(
            {
                "stage": stage,
                "seeds_scored": len(scored),
                "seeds_kept": n_kept,
                "sentence": sentence,
                "cells": len(cells_of),
                **counts,
            }
        )
    sentences = pd.DataFrame(rows).fillna(0)
    return kept, verdicts, sentences


__all__ = [
    "BASE",
    "EQUIVALENT",
    "MOVED",
    "MOVED_BEYOND_MARGIN",
    "MOVED_WITHIN_MARGIN",
    "UNDETERMINED",
    "decide",
    "head_seed_shifts",
    "keep_seeds",
    "learning_by_seed",
    "machine_spread",
    "moved_head_counts",
    "seed_contrasts",
    "seed_distances",
    "seed_verdicts",
    "seeds_kept",
    "sign_flip_pvalue",
    "sign_flip_upper_bound",
    "stage_sentences",
    "study_decision",
]
