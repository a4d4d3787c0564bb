"""How sure are a curve's readings and its rank? Every curve of a model resampled together by clusters
of questions, and the verdicts against a reference curve.

Input: per-question intervention rows (:func:`headstats.read_interventions`). :func:`curve_intervals`
gives, per curve, its area (as :mod:`headstats.stats.ranking` ranks by) and rank, its first drop of one
point, and the area's difference from the reference curve (``random``), each with a cluster-bootstrap
interval; :func:`against_reference` and :func:`verdicts` turn the differences into Holm-adjusted
verdicts (better, worse, indistinguishable) and name the best curve where the resamples agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headstats.stats import curves as C
from headstats.stats import summary as S
from headstats.stats.multiple import holm
from headstats.stats.ranking import check_metric, score_order

CURVE_INTERVAL_COLUMNS = (
    "model",
    "task",
    "score",
    "by",
    "area",
    "area_low",
    "area_high",
    "rank",
    "rank_low",
    "rank_high",
    "p_best",
    "reference",
    "vs_reference",
    "vs_reference_low",
    "vs_reference_high",
    "first_drop",
    "first_low",
    "first_high",
    "first_low_open",
    "first_high_open",
    "first_median",
    "first_q25",
    "first_q75",
    "first_unstable",
    "first_mono",
    "first_mono_low",
    "first_mono_high",
    "first_mono_low_open",
    "first_mono_high_open",
    "vs_reference_p",
    "cluster",
    "n_clusters",
    "n_resamples",
)


def curve_intervals(
    df: pd.DataFrame,
    *,
    by: str = "grid_auc",
    metric: str = "correct",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    cluster: str | None = None,
    reference: str = "random",
    drop: float = 1.0,
    grid_points: int = 61,
    seed: int = 0,
) -> pd.DataFrame:
    """How sure are a curve's readings? One row per (model, task, score) curve of per-question
    intervention rows ``df`` (:func:`headstats.read_interventions`): the curve's area ``by`` (the value
    :func:`headstats.summarize_curves` gives) with a percentile interval, its rank (1 = largest area, as
    :func:`~headstats.stats.ranking.rank_scores`) with an interval, ``p_best`` (the share of resamples
    in which it ranks first), ``vs_reference``, its area minus ``reference``'s (``random``: does the
    score find heads better than chance?) with an interval, and ``first_drop``, the realised % at the
    curve's first drop of ``drop`` points below its baseline (the ``first`` reading), with an interval
    ``first_low``, ``first_high``. A resample in which the curve never drops is censored at its largest
    realised %; where an interval end falls on such a resample it is a lower bound (``first_low_open``,
    ``first_high_open``: read ``≥``). On a curve that runs flat near the line the first-drop interval is
    wide: that is how far the reading can be trusted. The first drop is not a smooth statistic (it jumps
    where a point grazes the line); the coverage of its percentile interval is checked by simulation
    (``tests/test_claims.py``).

    How far the point reading can be trusted: ``first_median``, ``first_q25`` and ``first_q75`` are
    the median and quartiles of its bootstrap distribution (censored resamples sort as their lower
    bound), and ``first_unstable`` is True when the reading lies outside that central half, that is,
    when most resamples read it elsewhere. ``first_mono`` is the first drop of the curve's monotone
    (isotonic) fit (:func:`headstats.stats.curves.within_one_point_monotone`) with its percentile
    interval ``first_mono_low``, ``first_mono_high`` (``*_open`` as above). ``vs_reference_p``: the
    two-sided bootstrap p-value of ``vs_reference`` (twice the smaller share of resamples on either
    side of 0, each counted as (k + 1) / (B + 1)), so that verdicts over many curves can be adjusted
    for multiplicity (:func:`verdicts`).

    Every resample draws the questions' clusters with replacement (``cluster`` as in
    :func:`headstats.summarize_interventions`: the subject where the task has one, else the
    question) and recomputes every point's accuracy and realised % on the same draw, so the
    curves of one model move together, as they do: they answer the same questions. Only questions
    answered at every point of the (model, task) take part. A curve that zeroes no head has no area
    and no rank (``zeroes_none``); an area undefined in a resample (a curve short of the common
    range) ranks last there, as in :func:`~headstats.stats.ranking.rank_scores`.
    """
    check_metric(by)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, not {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), not {confidence}")
    frame = S.prepare_rows(df, metric)
    rng = np.random.default_rng(seed)
    alpha = (1 - confidence) / 2
    rows = []
    for (model, task), group in frame.groupby(list(S.GROUP), sort=True):
        points = _resampled_points(group, model, task, cluster, rng, n_resamples)
        readings = _resampled_readings(points, by, drop, grid_points)
        ref = readings.scores.index(reference) if reference in readings.scores else None
        for j, s in enumerate(readings.scores):
            row = {"model": model, "task": task, "score": s, "by": by}
            row.update(_interval_columns(readings, j, ref, alpha))
            row["reference"] = reference if ref is not None else ""
            row.update(cluster=points.unit, n_clusters=points.n_clusters, n_resamples=n_resamples)
            rows.append(row)
    return pd.DataFrame(rows, columns=list(CURVE_INTERVAL_COLUMNS))


@dataclass(frozen=True)
class _ResampledPoints:
    """Every point of one (model, task) in the observed sample (row 0) and in each cluster resample
    (rows 1..): accuracy (points) and realised % of heads zeroed, columns as ``columns``."""

    accuracy: np.ndarray
    realised: np.ndarray
    columns: list[tuple[str, float]]
    unit: str
    n_clusters: int


def _resampled_points(
    group: pd.DataFrame, model: str, task: str, cluster: str | None, rng: np.random.Generator, n_resamples: int
) -> _ResampledPoints:
    """The points of one (model, task) on the questions answered at every point, recomputed on each
    draw of the questions' clusters with replacement (one draw for all points: they answer the same
    questions)."""
    unit, labels = S.question_clusters(group, cluster)
    group = group.assign(_cluster=labels, _share=100.0 * group["n_zeroed"] / group["n_heads"])
    if not (group["score"] == S.BASELINE).any():
        raise ValueError(f"no baseline rows for model {model!r}, task {task!r}: the curves need the baseline run")
    index = ["score", "target"]
    ok = group.pivot_table(index=list(S.QUESTION), columns=index, values="_ok", aggfunc="first").dropna()
    if ok.empty:
        raise ValueError(f"no question of {model}/{task} was answered at every point: mixed runs?")
    share = group.pivot_table(index=list(S.QUESTION), columns=index, values="_share", aggfunc="first")
    share = share.reindex(index=ok.index, columns=ok.columns)
    clusters = group.drop_duplicates(list(S.QUESTION)).set_index(list(S.QUESTION))["_cluster"].reindex(ok.index)
    codes, uniques = pd.factorize(clusters.to_numpy())
    k = len(uniques)
    sizes = np.bincount(codes, minlength=k).astype(float)
    ok_sums = np.stack([np.bincount(codes, weights=ok[c].to_numpy(float), minlength=k) for c in ok.columns])
    share_sums = np.stack([np.bincount(codes, weights=share[c].to_numpy(float), minlength=k) for c in ok.columns])
    weights = np.vstack([np.ones(k), rng.multinomial(k, np.full(k, 1.0 / k), size=n_resamples)])
    total = weights @ sizes
    accuracy = 100.0 * (weights @ ok_sums.T) / total[:, None]  # (1 + resamples) x points
    realised = (weights @ share_sums.T) / total[:, None]
    return _ResampledPoints(accuracy, realised, list(ok.columns), unit, k)


@dataclass(frozen=True)
class _Readings:
    """Per resample (rows, 0 = observed) and curve (columns, as ``scores``): the area, its rank, the
    first drop and the monotone fit's first drop, each with whether it is censored."""

    scores: list[str]
    areas: np.ndarray
    ranks: np.ndarray
    firsts: np.ndarray
    censored: np.ndarray
    monos: np.ndarray
    mono_censored: np.ndarray


def _resampled_readings(points: _ResampledPoints, by: str, drop: float, grid_points: int) -> _Readings:
    """Every curve's readings in every resample; curves that zero no head are left out."""
    accuracy, realised, columns = points.accuracy, points.realised, points.columns
    base_col = next(i for i, (s, _) in enumerate(columns) if s == S.BASELINE)
    by_score: dict[str, list[int]] = {}
    for i, (s, _) in enumerate(columns):
        if s != S.BASELINE:
            by_score.setdefault(str(s), []).append(i)
    targets = np.array([t for _, t in columns], dtype=float)
    silent = {s for s, cols in by_score.items() if S.zeroes_none(targets[cols], realised[0, cols])}
    scores = score_order([s for s in by_score if s not in silent])
    shape = (len(accuracy), len(scores))
    areas, firsts, monos = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    censored, mono_censored = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    for r in range(len(accuracy)):
        curves = {}
        for s in scores:
            x, y = realised[r, by_score[s]], accuracy[r, by_score[s]]
            if not (x == 0).any():
                x, y = np.append(0.0, x), np.append(accuracy[r, base_col], y)
            curves[s] = (x, y)
        upper = C.common_upper([x for x, _ in curves.values()]) if curves else 0.0
        for j, (x, y) in enumerate(curves.values()):
            crossing = C.within_one_point(x, y, accuracy[r, base_col], drop)
            firsts[r, j], censored[r, j] = crossing.value, crossing.censored
            mono = C.within_one_point_monotone(x, y, accuracy[r, base_col], drop)
            monos[r, j], mono_censored[r, j] = mono.value, mono.censored
            if by == "norm_auc":
                areas[r, j] = C.normalised_auc(x, y)
            elif upper > 0:
                areas[r, j] = C.grid_auc(x, y, upper, grid_points)
    return _Readings(scores, areas, _row_ranks(areas), firsts, censored, monos, mono_censored)


def _interval_columns(readings: _Readings, j: int, ref: int | None, alpha: float) -> dict[str, object]:
    """Curve ``j``'s readings with their bootstrap intervals (``ref``: the reference curve's column)."""
    areas, ranks = readings.areas, readings.ranks
    firsts, censored = readings.firsts[1:, j], readings.censored[1:, j]
    monos, mono_censored = readings.monos[1:, j], readings.mono_censored[1:, j]
    boot_rank = ranks[1:, j]
    low, high = _percentiles(areas[1:, j], alpha)
    vs = vs_low = vs_high = vs_p = np.nan
    if ref is not None and ref != j:
        diffs = areas[:, j] - areas[:, ref]
        vs = diffs[0]
        vs_low, vs_high = _percentiles(diffs[1:], alpha)
        vs_p = bootstrap_pvalue(diffs[1:])
    first_low, first_low_open = _order_statistic(firsts, censored, alpha)
    first_high, first_high_open = _order_statistic(firsts, censored, 1 - alpha)
    q25, median, q75 = [_order_statistic(firsts, censored, q)[0] for q in (0.25, 0.5, 0.75)]
    mono_low, mono_low_open = _order_statistic(monos, mono_censored, alpha)
    mono_high, mono_high_open = _order_statistic(monos, mono_censored, 1 - alpha)
    return {
        "area": areas[0, j],
        "area_low": low,
        "area_high": high,
        "rank": int(ranks[0, j]),
        "rank_low": int(np.quantile(boot_rank, alpha, method="lower")),
        "rank_high": int(np.quantile(boot_rank, 1 - alpha, method="higher")),
        "p_best": float((boot_rank == 1).mean()),
        "vs_reference": vs,
        "vs_reference_low": vs_low,
        "vs_reference_high": vs_high,
        "first_drop": readings.firsts[0, j],
        "first_low": first_low,
        "first_high": first_high,
        "first_low_open": first_low_open,
        "first_high_open": first_high_open,
        "first_median": median,
        "first_q25": q25,
        "first_q75": q75,
        "first_unstable": unstable(readings.firsts[0, j], q25, q75),
        "first_mono": readings.monos[0, j],
        "first_mono_low": mono_low,
        "first_mono_high": mono_high,
        "first_mono_low_open": mono_low_open,
        "first_mono_high_open": mono_high_open,
        "vs_reference_p": vs_p,
    }


def unstable(reading: float, q25: float, q75: float) -> bool:
    """Whether a point reading lies outside the central half [``q25``, ``q75``] of its bootstrap
    distribution (False when either is undefined)."""
    if not (np.isfinite(reading) and np.isfinite(q25) and np.isfinite(q75)):
        return False
    return bool(reading < q25 or reading > q75)


def bootstrap_pvalue(diffs: np.ndarray) -> float:
    """Two-sided p-value of "the difference is 0" from its bootstrap resamples ``diffs``: twice the
    smaller of the shares at or below and at or above 0, each as (k + 1) / (B + 1) so that it is never
    0; at most 1. It rejects at level a where the percentile interval at 1 - a excludes 0 (NaN when no
    resample is defined)."""
    d = diffs[np.isfinite(diffs)]
    if not len(d):
        return np.nan
    below = (np.count_nonzero(d <= 0) + 1) / (len(d) + 1)
    above = (np.count_nonzero(d >= 0) + 1) / (len(d) + 1)
    return float(min(1.0, 2.0 * min(below, above)))


def _row_ranks(areas: np.ndarray) -> np.ndarray:
    """The ranks of :func:`~headstats.stats.ranking.rank_scores` for every row of a (resamples x
    scores) array whose columns are in canonical order: 1 = largest, NaN last, ties in column order."""
    keyed = np.where(np.isnan(areas), -np.inf, areas)
    order = np.argsort(-keyed, axis=1, kind="stable")
    ranks = np.empty(areas.shape, dtype=np.int64)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(1, areas.shape[1] + 1), areas.shape), axis=1)
    return ranks


def _order_statistic(values: np.ndarray, censored: np.ndarray, q: float) -> tuple[float, bool]:
    """The ``q``-quantile of resampled readings (the order statistic below for q < 0.5, above
    otherwise, so the interval is never narrower than the data allow) and whether it is a censored
    reading (a lower bound)."""
    keep = np.isfinite(values)
    if not keep.any():
        return np.nan, False
    v, c = values[keep], censored[keep]
    order = np.lexsort((c, v))  # among equal values, an exact reading before a censored one
    k = int(np.floor(q * (len(v) - 1))) if q < 0.5 else int(np.ceil(q * (len(v) - 1)))
    return float(v[order[k]]), bool(c[order[k]])


def _percentiles(values: np.ndarray, alpha: float) -> tuple[float, float]:
    """Percentile interval of the defined resampled values (NaN when none is)."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return np.nan, np.nan
    return float(np.quantile(finite, alpha)), float(np.quantile(finite, 1 - alpha))


AGAINST_REFERENCE_COLUMNS = (
    "model",
    "task",
    "score",
    "reference",
    "vs_reference",
    "vs_reference_low",
    "vs_reference_high",
    "vs_reference_p",
    "vs_reference_p_holm",
    "unadjusted",
    "holm",
)


def _verdict(diff: float, significant: bool) -> str:
    if not significant:
        return "indistinguishable"
    return "better" if diff > 0 else "worse"


def against_reference(intervals: pd.DataFrame, level: float = 0.05) -> pd.DataFrame:
    """One row per curve of :func:`curve_intervals` that has a reference to be held to: its paired
    area difference from the reference with interval and bootstrap p-value, ``vs_reference_p_holm``
    Holm-adjusted over every such curve of ``intervals`` (pass the whole report's curves: that is the
    family whose verdicts are read together), and the verdict (``better``, ``worse`` or
    ``indistinguishable`` at ``level``) before (``unadjusted``: the percentile interval excludes 0)
    and after (``holm``) the adjustment."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), not {level}")
    tested = intervals[(intervals["reference"] != "") & (intervals["score"] != intervals["reference"])].copy()
    tested["vs_reference_p_holm"] = holm(tested["vs_reference_p"].to_numpy(dtype=float))
    low, high = tested["vs_reference_low"], tested["vs_reference_high"]
    tested["unadjusted"] = [
        _verdict(d, bool(lo > 0 or hi < 0)) for d, lo, hi in zip(tested["vs_reference"], low, high, strict=True)
    ]
    tested["holm"] = [
        _verdict(d, bool(p < level)) for d, p in zip(tested["vs_reference"], tested["vs_reference_p_holm"], strict=True)
    ]
    return tested[list(AGAINST_REFERENCE_COLUMNS)].reset_index(drop=True)


def verdicts(intervals: pd.DataFrame, sure: float = 0.95, level: float = 0.05) -> pd.DataFrame:
    """One row per (model, task) of :func:`curve_intervals`: which scores' areas beat the reference
    (``better``), which the data cannot tell from it (``indistinguishable``) and which do worse
    (``worse``), each decided by the Holm-adjusted bootstrap p-value at ``level`` over every curve of
    ``intervals`` (:func:`against_reference`); ``unadjusted_differs`` names the curves whose verdict
    from their own 95% interval alone would differ (``ahon_ln: better unadjusted, p = 0.04, Holm
    0.10``); and ``best``: the score that ranks first in at least ``sure`` of the resamples, or the
    contenders with their ``p_best`` when none does. The three lists are empty where the (model,
    task) has no reference curve."""
    tests = against_reference(intervals, level)
    rows = []
    for (model, task), unit in intervals.groupby(["model", "task"], sort=True):
        mine = tests[(tests["model"] == model) & (tests["task"] == task)]
        top = unit.sort_values("p_best", ascending=False, kind="stable")
        if top["p_best"].iloc[0] >= sure:
            best = str(top["score"].iloc[0])
        else:
            contenders = top[top["p_best"] >= 1 - sure]
            shares = zip(contenders["score"], contenders["p_best"], strict=True)
            best = ("undecided: " + ", ".join(f"{score} {share:.2f}" for score, share in shares)).rstrip(": ")
        differs = mine[mine["unadjusted"] != mine["holm"]]
        rows.append(
            {
                "model": model,
                "task": task,
                "reference": str(unit["reference"].iloc[0]),
                "better": ", ".join(mine.loc[mine["holm"] == "better", "score"]),
                "indistinguishable": ", ".join(mine.loc[mine["holm"] == "indistinguishable", "score"]),
                "worse": ", ".join(mine.loc[mine["holm"] == "worse", "score"]),
                "unadjusted_differs": "; ".join(
                    f"{r.score}: {r.unadjusted} unadjusted, p = {r.vs_reference_p:.3f}, "
                    f"Holm {r.vs_reference_p_holm:.2f}"
                    for r in differs.itertuples()
                ),
                "best": best,
            }
        )
    columns = ["model", "task", "reference", "better", "indistinguishable", "worse", "unadjusted_differs", "best"]
    return pd.DataFrame(rows, columns=columns)
