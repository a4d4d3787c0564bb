"""Does one fine-tuning run move a score's distribution by more than the margin? The decision rule of
a seed study whose margin is a distance (``rule = "distance"``; docs/guides/finetuning-confirm.md).

The quantity: per (stage, dataset, score) *cell*, ``theta`` = the expected distance from the base to
one run's stage end, ``E_s d(base, end_s)``, ``d`` being W1 between the two pooled (text, layer,
head) score distributions on the same texts over the base's interquartile range (W1/IQR), the units
the margin is stated in. Each seed is one independent draw of ``d(base, end_s)``; the texts are one
draw of the study's text sample, shared by every seed.

The estimate is the seeds' mean distance, with a standard error of two parts: the seeds' spread
(their sample variance over n) and the texts' (the variance of the seeds' mean distance under a
cluster bootstrap of the texts, the same resampled texts for the base and every seed). One-sided
bounds are ``mean -/+ t(n - 1, 1 - alpha) se``, and the verdicts those of two one-sided t tests:

- *moved beyond the margin*: ``theta > margin``, Holm over the cells of the design's family;
- *equivalent within the margin*: ``theta < margin`` (the upper bound below the margin), each cell
  at ``alpha`` (the study's sentence is an intersection-union test: every cell must be within);
- *undetermined* otherwise.

Beside the rule, the decomposition that explains the distance: the **systematic displacement**, W1
from the base to the seeds' barycentre (the average of their quantile functions: where the seeds
land together), bias-corrected for the finite number of seeds quantile by quantile
(``sqrt(max(mean^2 - var / n, 0))`` of the seeds' shifts at each quantile), with a seed-bootstrap
interval; and the **seed spread**, the mean distance between two seeds' stage ends.

Why not the mean base-to-end distance minus the mean seed-to-seed distance (the contrast rule of
:mod:`headstats.stats.seeds`): distances between noisy distributions do not subtract. With no
systematic move at all that difference is negative (about -0.3 times the seed spread), and a margin
that is a distance is then compared with a quantity in other units, which says "equivalent" far
more often than alpha where the seeds truly land a margin away from the base.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.optimize import brentq

from headstats.stats.distances import interquartile_range
from headstats.stats.multiple import holm
from headstats.stats.tables import cluster_codes, cluster_column

MOVED_BEYOND_MARGIN = "moved beyond the margin"
EQUIVALENT = "equivalent within the margin"
UNDETERMINED = "undetermined"
VERDICTS = (MOVED_BEYOND_MARGIN, EQUIVALENT, UNDETERMINED)

CELL = ["stage", "dataset", "score"]
N_TEXT_BOOT = 100  # text-bootstrap replicates of the texts' share of the standard error
N_SEED_BOOT = 2000  # seed-bootstrap replicates of the systematic displacement's interval
BOOT_GRID = 1024  # quantile levels the seed bootstrap evaluates the displacement on
RESULT_COLUMNS = [
    *CELL,
    "n_seeds",
    "n_texts",
    "n_clusters",
    "mean_distance",
    "lower",
    "upper",
    "se",
    "se_seeds",
    "se_texts",
    "sd_seeds",
    "systematic",
    "systematic_low",
    "systematic_high",
    "seed_spread",
    "p_beyond",
    "p_beyond_holm",
    "p_equivalent",
    "margin",
    "verdict",
]


@dataclass(frozen=True)
class Cell:
    """One cell's scores on its common texts: ``base`` (texts x heads) and ``ends`` (seeds x texts x
    heads), rows in one text order, columns in one head order; ``clusters`` the cluster code of each
    text (MMLU subjects; otherwise each text its own); ``iqr`` the base's interquartile range."""

    base: np.ndarray
    ends: np.ndarray
    clusters: np.ndarray
    iqr: float

    @property
    def n_seeds(self) -> int:
        return int(self.ends.shape[0])

    @property
    def n_texts(self) -> int:
        return int(self.base.shape[0])

    def with_ends(self, ends: np.ndarray) -> Cell:
        return Cell(self.base, ends, self.clusters, self.iqr)


def cell_arrays(table: pd.DataFrame, base: str, ends: Sequence[str], score: str, *, cluster: str | None = None) -> Cell:
    """A :class:`Cell` from one dataset's score rows (``model``, ``sample_id``, ``layer``, ``head``,
    the score; a ``subject`` column makes subjects the clusters) of ``base`` and the stage ends
    ``ends`` (one model per seed, in seed order), on the texts every one of them holds."""
    models = [base, *ends]
    table = table[table["model"].astype(str).isin(models)]
    texts = set.intersection(*(set(t["sample_id"]) for _, t in table.groupby("model", observed=True)))
    table = table[table["sample_id"].isin(texts)]
    wide = table.pivot_table(index=["model", "sample_id"], columns=["layer", "head"], values=score, observed=True)
    order = sorted(texts)
    stack = np.stack([wide.loc[m].reindex(order).to_numpy(dtype=np.float64) for m in models])
    first = table[table["model"].astype(str) == base].drop_duplicates("sample_id").set_index("sample_id")
    clusters = cluster_codes(first.loc[order].reset_index(), cluster_column(first.reset_index(), cluster))
    return Cell(stack[0], stack[1:], clusters, interquartile_range(stack[0].ravel()))


# --- the distances ----------------------------------------------------------------------------------


def _text_weights(clusters: np.ndarray, n_rep: int, rng: np.random.Generator) -> np.ndarray:
    """(n_rep, texts) weights of a cluster bootstrap: each text weighs its cluster's count."""
    _, codes = np.unique(clusters, return_inverse=True)
    n_clusters = int(codes.max()) + 1
    counts = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_rep)
    return counts[:, codes].astype(np.float64)


def base_distances(cell: Cell, text_weights: np.ndarray | None = None) -> np.ndarray:
    """W1/IQR from the base to each seed's stage end: (seeds,) on the texts as they are, or (reps,
    seeds) under each row of ``text_weights`` (reps x texts; a text's values all take its weight).

    On the sorted support of both samples, the gap between the two CDFs is the cumulative sum of
    each value's text weight, signed by its side, over each side's total weight."""
    weights = np.ones((1, cell.n_texts)) if text_weights is None else np.asarray(text_weights, dtype=np.float64)
    heads = cell.base.shape[1]
    text_of = np.repeat(np.arange(cell.n_texts), heads)  # the values are texts x heads, row-major
    base = cell.base.ravel()
    ok_base = np.isfinite(base)
    out = np.empty((weights.shape[0], cell.n_seeds))
    for s in range(cell.n_seeds):
        end = cell.ends[s].ravel()
        ok_end = np.isfinite(end)
        x = np.concatenate([base[ok_base], end[ok_end]])
        order = np.argsort(x, kind="stable")
        texts = np.concatenate([text_of[ok_base], text_of[ok_end]])[order]
        side = np.concatenate([np.ones(ok_base.sum()), -np.ones(ok_end.sum())])[order]
        total_a = weights @ np.bincount(text_of[ok_base], minlength=cell.n_texts)
        total_b = weights @ np.bincount(text_of[ok_end], minlength=cell.n_texts)
        if np.allclose(total_a, total_b):  # every value finite on both sides: one total
            gap = np.cumsum(weights[:, texts[:-1]] * side[:-1], axis=1) / total_a[:, None]
        else:
            per_side = np.where(side[:-1] > 0, 1.0 / total_a[:, None], 1.0 / total_b[:, None])
            gap = np.cumsum(weights[:, texts[:-1]] * side[:-1] * per_side, axis=1)
        out[:, s] = np.abs(gap) @ np.diff(x[order])
    out = out / cell.iqr if cell.iqr > 0 else np.full_like(out, np.nan)
    return out[0] if text_weights is None else out


def _quantiles(values: np.ndarray, grid: int) -> np.ndarray:
    """The step quantile function of the finite ``values`` at ``grid`` equally spaced levels."""
    v = np.sort(values[np.isfinite(values)])
    index = np.ceil((np.arange(grid) + 0.5) / grid * v.size).astype(np.int64) - 1
    return v[index]


def systematic_displacement(cell: Cell, *, n_boot: int = N_SEED_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """W1/IQR from the base to the seeds' barycentre, bias-corrected quantile by quantile, with a 95%
    percentile interval over a bootstrap of the seeds (the texts held fixed): (estimate, low, high).
    With no systematic move the uncorrected distance is about the seeds' spread over sqrt(n); the
    correction removes the part of each quantile's squared shift that the seeds' variance explains."""
    grid = cell.base.size
    base = _quantiles(cell.base.ravel(), grid)
    shifts = np.stack([_quantiles(e.ravel(), grid) - base for e in cell.ends])  # seeds x grid
    n = shifts.shape[0]
    scale = cell.iqr if cell.iqr > 0 else math.nan

    def corrected(rows: np.ndarray) -> float:
        mean = rows.mean(axis=0)
        var = rows.var(axis=0, ddof=1) if n > 1 else np.zeros_like(mean)
        return float(np.sqrt(np.maximum(mean**2 - var / n, 0.0)).mean() / scale)

    estimate = corrected(shifts)
    if n < 2:
        return estimate, math.nan, math.nan
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)  # seed draws per replicate
    thin = shifts[:, :: max(1, grid // BOOT_GRID)]  # the interval on at most BOOT_GRID quantile levels
    mean = counts @ thin / n
    var = (counts @ thin**2 / n - mean**2) * n / (n - 1)
    boot = np.sqrt(np.maximum(mean**2 - var / n, 0.0)).mean(axis=1) / scale
    low, high = np.quantile(boot, [0.025, 0.975])
    return estimate, float(low), float(high)


def seed_spread(cell: Cell) -> float:
    """The mean W1/IQR between two seeds' stage ends (NaN for one seed)."""
    n = cell.n_seeds
    if n < 2 or not cell.iqr > 0:
        return math.nan
    sorted_ends = [np.sort(e.ravel()[np.isfinite(e.ravel())]) for e in cell.ends]
    grid = min(len(e) for e in sorted_ends)
    q = np.stack([_quantiles(e, grid) for e in sorted_ends])
    pairs = [np.abs(q[s] - q[t]).mean() for s in range(n) for t in range(s + 1, n)]
    return float(np.mean(pairs) / cell.iqr)


# --- the rule ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """The seeds' mean distance with its standard error's two parts (``se_seeds``, ``se_texts``) and
    the seeds' third central moment (``skew_m3``), which the tests' skewness correction uses.

    Distances are positive and, over seeds, often skewed to the right (a few seeds land far away):
    then a low mean comes with a low spread, and the plain t test says "equivalent" too often. The
    tests use Hall's (1992) monotone transformation of the t statistic, which removes the skewness
    term of its distribution: with ``T = (mean - value) / se`` and ``g`` the seeds' skewness
    (``m3 / s^3``, ``s^2 = n se^2``: the texts' part of the variance counted in),
    ``T_H = T + g / (6 sqrt n) + g T^2 / (3 sqrt n) + g^2 T^3 / (27 n)``, referred to t with
    n - 1 degrees of freedom. It is increasing in T (its derivative is a square), so a bound and its
    test always agree; with no skew it is the plain t."""

    n_seeds: int
    mean: float
    sd_seeds: float
    se_seeds: float
    se_texts: float
    skew_m3: float = 0.0

    @property
    def se(self) -> float:
        return math.hypot(self.se_seeds, self.se_texts)

    def t(self, value: float) -> float:
        """Hall's skewness-corrected t of ``theta = value`` (NaN without two seeds and a spread)."""
        if self.n_seeds < 2 or not self.se > 0:
            return math.nan
        n = self.n_seeds
        g = self.skew_m3 / (math.sqrt(n) * self.se) ** 3
        t = (self.mean - value) / self.se
        root = math.sqrt(n)
        return t + g / (6 * root) + g * t**2 / (3 * root) + g**2 * t**3 / (27 * n)

    def p_above(self, value: float) -> float:
        """One-sided p-value of ``theta > value``."""
        return float(sps.t.sf(self.t(value), self.n_seeds - 1)) if self.n_seeds >= 2 else math.nan

    def p_below(self, value: float) -> float:
        """One-sided p-value of ``theta < value``."""
        return float(sps.t.cdf(self.t(value), self.n_seeds - 1)) if self.n_seeds >= 2 else math.nan

    def bounds(self, alpha: float) -> tuple[float, float]:
        """One-sided (lower, upper) bounds at level 1 - alpha each: the values at which the tests of
        ``theta > value`` and ``theta < value`` reach ``alpha``, so a verdict and its bound agree."""
        if self.n_seeds < 2 or not self.se > 0:
            return math.nan, math.nan
        critical = float(sps.t.ppf(1 - alpha, self.n_seeds - 1))
        reach = 100 * self.se
        lower = _root(lambda v: self.t(v) - critical, self.mean - reach, self.mean + reach)
        upper = _root(lambda v: self.t(v) + critical, self.mean - reach, self.mean + reach)
        return lower, upper


def _root(f, low: float, high: float) -> float:
    """The root of ``f`` in [low, high] when it changes sign there, else NaN."""
    f_low, f_high = f(low), f(high)
    if not (np.isfinite(f_low) and np.isfinite(f_high)) or f_low * f_high > 0:
        return math.nan
    return float(brentq(f, low, high, xtol=1e-12))


def estimate(cell: Cell, *, n_text_boot: int = N_TEXT_BOOT, seed: int = 0) -> Estimate:
    """The seeds' mean base -> stage end distance and its standard error (seeds and texts)."""
    d = base_distances(cell)
    n = d.size
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    se_texts = 0.0
    if n_text_boot > 1:
        weights = _text_weights(cell.clusters, n_text_boot, np.random.default_rng(seed))
        se_texts = float(base_distances(cell, weights).mean(axis=1).std(ddof=1))
    m3 = float(n / ((n - 1) * (n - 2)) * ((d - d.mean()) ** 3).sum()) if n > 2 else 0.0  # unbiased
    return Estimate(n, float(d.mean()), sd, sd / math.sqrt(n) if n > 1 else math.nan, se_texts, m3)


def verdict(p_beyond_adjusted: float, p_equivalent: float, alpha: float) -> str:
    if p_beyond_adjusted <= alpha:
        return MOVED_BEYOND_MARGIN
    if p_equivalent <= alpha:
        return EQUIVALENT
    return UNDETERMINED


def decide_cells(
    cells: dict[tuple[str, str, str], Cell],
    *,
    margin: float,
    alpha: float = 0.05,
    family: Sequence[str] = ("stage",),
    min_seeds: int = 2,
    n_text_boot: int = N_TEXT_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """Per cell (key: stage, dataset, score): the mean distance with its bounds, its parts, the
    decomposition and the verdict (:data:`RESULT_COLUMNS`); ``p_beyond_holm`` adjusts ``p_beyond``
    over the cells sharing ``family``'s columns. A cell with fewer than ``min_seeds`` seeds is
    undetermined and tested by nothing."""
    if not margin > 0:
        raise ValueError(f"the margin must be above 0 (in W1/IQR), not {margin!r}")
    rows = []
    for key, cell in cells.items():
        enough = cell.n_seeds >= min_seeds
        est = estimate(cell, n_text_boot=n_text_boot, seed=seed)
        low, high = est.bounds(alpha) if enough else (math.nan, math.nan)
        systematic = systematic_displacement(cell, seed=seed) if cell.n_seeds else (math.nan,) * 3
        rows.append(
            {
                **dict(zip(CELL, key, strict=True)),
                "n_seeds": cell.n_seeds,
                "n_texts": cell.n_texts,
                "n_clusters": len(np.unique(cell.clusters)),
                "mean_distance": est.mean,
                "lower": low,
                "upper": high,
                "se": est.se,
                "se_seeds": est.se_seeds,
                "se_texts": est.se_texts,
                "sd_seeds": est.sd_seeds,
                "systematic": systematic[0],
                "systematic_low": systematic[1],
                "systematic_high": systematic[2],
                "seed_spread": seed_spread(cell),
                "p_beyond": est.p_above(margin) if enough else math.nan,
                "p_equivalent": est.p_below(margin) if enough else math.nan,
            }
        )
    out = pd.DataFrame(rows, columns=[c for c in RESULT_COLUMNS if c not in ("p_beyond_holm", "margin", "verdict")])
    out["p_beyond_holm"] = np.nan
    groups = out.groupby(list(family), sort=False) if family and len(out) else [(None, out)]
    for _, members in groups:
        tested = members[members["p_beyond"].notna()]
        if len(tested):
            out.loc[tested.index, "p_beyond_holm"] = holm(tested["p_beyond"].to_numpy())
    out["margin"] = margin
    out["verdict"] = [
        verdict(b, e, alpha) if np.isfinite(b) else UNDETERMINED
        for b, e in zip(out["p_beyond_holm"].fillna(math.inf), out["p_equivalent"].fillna(math.inf), strict=True)
    ]
    return out[RESULT_COLUMNS]


def stage_sentences(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per stage end, whether "fine-tuning barely changes heads" holds (every cell equivalent within
    the margin: an intersection-union test, so each cell at alpha), fails (a cell moved beyond the
    margin, Holm-adjusted over the family) or is undetermined."""
    rows = []
    for stage, group in verdicts.groupby("stage", sort=False):
        if (group["verdict"] == MOVED_BEYOND_MARGIN).any():
            sentence = "fails"
        elif (group["verdict"] == EQUIVALENT).all():
            sentence = "holds"
        else:
            sentence = UNDETERMINED
        counts = {v: int((group["verdict"] == v).sum()) for v in VERDICTS}
        rows.append({"stage": stage, "cells": len(group), "sentence": sentence, **counts})
    return pd.DataFrame(rows, columns=["stage", "cells", "sentence", *VERDICTS])


def study_verdicts(
    cells: dict[tuple[str, str, str], Cell],
    *,
    seeds: Sequence[int],
    scored: dict[str, Sequence[int]],
    kept: dict[str, int],
    datasets: Sequence[str],
    score_ids: Sequence[str],
    margin: float,
    alpha: float = 0.05,
    min_seeds: int = 8,
    family: Sequence[str] = ("stage",),
    stages: Sequence[str],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rule over every cell a design names, decided once: (verdicts of every stage x dataset x
    score, sentences per stage end with ``seeds_scored``, ``seeds_kept`` and the ``sentence``).
    ``cells`` holds the kept seeds of each stage (:func:`headstats.jobs.finetune.study.seed_cells`);
    ``scored``: per stage, the seeds scored so far; ``kept``: per stage, how many of them learned. A
    stage end with a seed of the design still unscored is "undetermined: N of M seeds scored" in
    every cell (its numbers are shown; an interim look decides nothing); with every seed scored and
    fewer than ``min_seeds`` kept, "undetermined: N of M seeds learned"."""
    table = decide_cells(cells, margin=margin, alpha=alpha, family=family, min_seeds=min_seeds) if cells else None
    grid = pd.DataFrame([(s, d, c) for s in stages for d in datasets for c in score_ids], columns=CELL)
    verdicts = grid.merge(table, on=CELL, how="left") if table is not None else grid.reindex(columns=RESULT_COLUMNS)
    verdicts["n_seeds"] = verdicts["n_seeds"].fillna(0).astype(int)
    verdicts["margin"] = margin
    verdicts["verdict"] = verdicts["verdict"].fillna(UNDETERMINED)
    rows = []
    for stage in stages:
        of_stage = verdicts["stage"] == stage
        done = len(set(scored.get(stage, ())) & set(seeds))
        if done < len(seeds):
            sentence = f"{UNDETERMINED}: {done} of {len(seeds)} seeds scored"
            verdicts.loc[of_stage, "verdict"] = UNDETERMINED
        elif kept.get(stage, 0) < min_seeds:
            sentence = f"{UNDETERMINED}: {kept.get(stage, 0)} of {len(seeds)} seeds learned"
            verdicts.loc[of_stage, "verdict"] = UNDETERMINED
        else:
            sentence = str(stage_sentences(verdicts[of_stage])["sentence"].iloc[0])
        counts = {v: int((verdicts.loc[of_stage, "verdict"] == v).sum()) for v in VERDICTS}
        rows.append(
            {"stage": stage, "seeds_scored": done, "seeds_kept": kept.get(stage, 0), "sentence": sentence,
             "cells": int(of_stage.sum()), **counts}
        )  # fmt: skip
    return verdicts[RESULT_COLUMNS], pd.DataFrame(rows)


def t_power(theta: float, margin: float, sd_seeds: float, se_texts: float, n_seeds: int, alpha: float) -> float:
    """Power of the one-sided t test at level ``alpha`` to decide a cell whose true distance is
    ``theta``: "moved beyond" when theta > margin, "equivalent" when below; the standard error of n
    seeds is ``hypot(sd_seeds / sqrt(n), se_texts)`` (noncentral t, n - 1 degrees of freedom)."""
    if n_seeds < 2:
        return math.nan
    se = math.hypot(sd_seeds / math.sqrt(n_seeds), se_texts)
    df = n_seeds - 1
    critical = float(sps.t.ppf(1 - alpha, df))
    return float(sps.nct.sf(critical, df, abs(theta - margin) / se))


def achieved_power(verdicts: pd.DataFrame, *, alpha: float = 0.05, family_size: int | None = None) -> pd.DataFrame:
    """Per cell with a decision's inputs, the power the design actually had there: the one-sided t
    test's, with the seeds and the spread these seeds show (their ``sd_seeds``, ``se_texts``), to reach
    the verdict the cell's estimate points to at that estimate ("moved beyond" at Holm's first-step
    level alpha / family_size when above the margin, "equivalent" at alpha below it). A cell whose
    estimate sits on the margin has power near alpha whatever the design: it cannot be decided."""
    rows = []
    for r in verdicts[verdicts["n_seeds"] >= 2].itertuples():
        size = family_size or int((verdicts["stage"] == r.stage).sum())
        above = r.mean_distance > r.margin
        level = alpha / size if above else alpha
        n = int(r.n_seeds)
        power = t_power(r.mean_distance, r.margin, r.sd_seeds, r.se_texts, n, level)
        rows.append(
            {"stage": r.stage, "dataset": r.dataset, "score": r.score, "n_seeds": n, "estimate": r.mean_distance,
             "towards": MOVED_BEYOND_MARGIN if above else EQUIVALENT, "level": level, "power": power}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=["stage", "dataset", "score", "n_seeds", "estimate", "towards", "level", "power"])


__all__ = [
    "CELL",
    "EQUIVALENT",
    "MOVED_BEYOND_MARGIN",
    "UNDETERMINED",
    "VERDICTS",
    "Cell",
    "Estimate",
    "achieved_power",
    "base_distances",
    "cell_arrays",
    "decide_cells",
    "estimate",
    "seed_spread",
    "stage_sentences",
    "study_verdicts",
    "systematic_displacement",
    "t_power",
    "verdict",
]
