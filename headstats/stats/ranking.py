"""Which score function finds inactive heads best? Ranks and their agreement across models.

Input: per-curve summaries, one row per (model, score) of one task, as
:func:`headstats.summarize_curves` returns them (columns ``model, task, score,
within_1pt, crosses, norm_auc, grid_auc, ...``), whether the curves come from headstats' own
intervention results or from the study's published points (:func:`headstats.report.paper.paper_points`).

- ``norm_auc`` (the study's ranking): trapezoid area under accuracy vs realised % divided by the
  curve's own x-range. Reproduced for the paper's figures.
- ``grid_auc`` (the sound default): mean accuracy over the same realised-% range for every curve of
  a model.

A curve that zeroed no head (``zeroes_none``: a score tied at its extreme) measures nothing and has
no rank (NA), and is left out of the agreement between models.

Ranks follow the study: 1 = largest area; a missing or NaN area ranks last (the study set NaN areas
to 0, which is below every real accuracy area, so the order is the same); ties keep the canonical
score order of :func:`headstats.engine.scores.score_ids` (the order the study's notebook iterated in).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _st

from headstats.engine.scores import score_ids as registered_score_ids
from headstats.stats import RANK_METRICS
from headstats.stats import curves as C
from headstats.stats import summary as S
from headstats.stats.multiple import holm

NO_HEAD_ZEROED = "no head zeroed"


def _one_task(curves: pd.DataFrame, needed: Sequence[str]) -> pd.DataFrame:
    if not isinstance(curves, pd.DataFrame) or curves.empty:
        raise ValueError("no curve summaries: summarise intervention results with headstats.summarize_curves")
    missing = [c for c in ("model", "score", *needed) if c not in curves.columns]
    if missing:
        raise ValueError(f"curve summaries lack the column(s) {', '.join(missing)} (summarize_curves layout expected)")
    if "task" in curves.columns and curves["task"].nunique() > 1:
        tasks = ", ".join(sorted(map(str, curves["task"].unique())))
        raise ValueError(
            f"curve summaries of several tasks ({tasks}): rank one task at a time, e.g. curves[curves.task == 'mmlu']"
        )
    if curves.duplicated(["model", "score"]).any():
        raise ValueError("curve summaries hold a (model, score) pair twice: mixed runs?")
    return curves


def _score_order(scores: Sequence[str]) -> list[str]:
    canonical = {sid: i for i, sid in enumerate(registered_score_ids())}
    return sorted(dict.fromkeys(scores), key=lambda s: (canonical.get(s, len(canonical)), s))


def _model_order(curves: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(curves["model"].astype(str)))


def metric_table(curves: pd.DataFrame, column: str) -> pd.DataFrame:
    """models x scores table of one summary column (models in order of appearance, scores canonical)."""
    curves = _one_task(curves, [column])
    table = curves.pivot(index="model", columns="score", values=column)
    return table.reindex(index=_model_order(curves), columns=_score_order(table.columns))


def _check_metric(by: str) -> None:
    if by not in RANK_METRICS:
        raise ValueError(f"rank by one of {', '.join(RANK_METRICS)}, not {by!r}")


def _ranks_of(values: pd.Series) -> pd.Series:
    """1 = largest; NaN last; ties in canonical order (a stable sort of the canonical order)."""
    order = _score_order(values.index.tolist())
    keyed = values.reindex(order).fillna(-np.inf).astype(float)
    ranked = keyed.sort_values(ascending=False, kind="stable").index
    return pd.Series(np.arange(1, len(ranked) + 1), index=ranked).reindex(order)


def rank_scores(curves: pd.DataFrame, by: str = "norm_auc") -> pd.DataFrame:
    """models x scores table of ranks (1 = best curve of that model by ``by``)."""
    _check_metric(by)
    values = metric_table(curves, by)
    ranks = pd.DataFrame(index=values.index, columns=values.columns, dtype="Int64")
    for model in values.index:
        present = values.loc[model, _score_order(_present(curves, model))]
        # A plain array: pandas cannot set a one-column Int64 row from a Series ("setting an array
        # element with a sequence", issue 14: a sweep with a single score).
        ranks.loc[model, present.index] = _ranks_of(present).reindex(present.index).to_numpy("int64")
    return ranks


def rank_correlation(curves: pd.DataFrame, by: str = "norm_auc") -> pd.DataFrame:
    """Spearman correlation between every two models' orderings of the score functions (over the
    scores both have), as the study's Figure 5 (pandas' Spearman there: tied areas share their
    average rank). NaN areas rank last, as in :func:`rank_scores`."""
    _check_metric(by)
    values = metric_table(curves, by)
    models = list(values.index)
    present = np.array([[s in _present(curves, m) for s in values.columns] for m in models])
    areas = values.to_numpy(dtype=float)
    areas = np.where(np.isnan(areas), -np.inf, areas)
    out = np.full((len(models), len(models)), np.nan)
    for i in range(len(models)):
        for j in range(i, len(models)):
            both = present[i] & present[j]
            if both.sum() < 2:
                continue
            ra, rb = areas[i, both], areas[j, both]
            if np.ptp(_st.rankdata(ra)) > 0 and np.ptp(_st.rankdata(rb)) > 0:
                out[i, j] = out[j, i] = _st.spearmanr(ra, rb).statistic
    return pd.DataFrame(out, index=models, columns=models)


def _present(curves: pd.DataFrame, model: str) -> set[str]:
    """The scores of ``model`` with a curve that measured something (see ``zeroes_none``)."""
    mine = curves[curves["model"] == model]
    return set(mine.loc[~_flags(mine, "zeroes_none"), "score"])


def _flags(curves: pd.DataFrame, column: str) -> pd.Series:
    if column not in curves.columns:
        return pd.Series(False, index=curves.index)
    return curves[column].fillna(False).astype(bool)


def top_k(
    curves: pd.DataFrame, k: int = 5, by: str = "norm_auc", *, exclude: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Each model's ``k`` best score functions by :func:`rank_scores`, best first, leaving out the
    scores ``exclude`` names (e.g. ``random``, the yardstick a figure draws beside the best)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    ranks = rank_scores(curves, by)
    out = {}
    for model in ranks.index:
        r = ranks.loc[model].dropna().astype(int).sort_values(kind="stable")
        out[model] = [s for s in r.index if s not in exclude][:k]
    return out


def top_k_iou(curves: pd.DataFrame, k: int = 5, by: str = "norm_auc") -> pd.DataFrame:
    """IoU of every two models' top-``k`` sets of score functions (the study's Figure 6)."""
    tops = {m: set(v) for m, v in top_k(curves, k, by).items()}
    models = list(tops)
    out = pd.DataFrame(np.nan, index=models, columns=models)
    for a in models:
        for b in models:
            union = tops[a] | tops[b]
            out.loc[a, b] = len(tops[a] & tops[b]) / len(union) if union else np.nan
    return out


def within_one_point_table(curves: pd.DataFrame) -> pd.DataFrame:
    """models x scores table of the "within 1 point" number (% of heads zeroed), under the reading
    the curves were summarised with (a censored value is a lower bound: see
    :func:`within_one_point_labels`)."""
    return metric_table(curves, "within_1pt")


def within_one_point_labels(curves: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    """:func:`within_one_point_table` as text: ``≥ 26.50`` for a censored curve (it never dropped a
    point within the tested range), a trailing ``*`` for a non-monotone one (it dropped below the
    line and climbed back), ``no head zeroed`` for a curve that zeroed nothing."""
    values = within_one_point_table(curves)
    censored = _flag_table(curves, "censored", values)
    wobbly = _flag_table(curves, "non_monotone", values)
    silent = _flag_table(curves, "zeroes_none", values)
    out = pd.DataFrame("", index=values.index, columns=values.columns)
    for m in values.index:
        for s in values.columns:
            v = values.loc[m, s]
            if silent.loc[m, s]:
                out.loc[m, s] = NO_HEAD_ZEROED
                continue
            if pd.isna(v):
                continue
            text = f"{float(v):.{digits}f}"
            out.loc[m, s] = ("≥ " if censored.loc[m, s] else "") + text + ("*" if wobbly.loc[m, s] else "")
    return out


def _flag_table(curves: pd.DataFrame, column: str, like: pd.DataFrame) -> pd.DataFrame:
    if column not in curves.columns:
        return pd.DataFrame(False, index=like.index, columns=like.columns)
    flags = curves.assign(**{column: _flags(curves, column)})
    table = flags.pivot(index="model", columns="score", values=column)
    return table.reindex(index=like.index, columns=like.columns).fillna(False).astype(bool)


def _best(values: pd.Series, censored: pd.Series) -> str:
    """The score with the largest value; a censored value is a lower bound, so among equal values it
    wins; remaining ties go to the canonical order."""
    order = _score_order(values.index.tolist())
    key = sorted(order, key=lambda s: (-float(values[s]), not bool(censored[s]), order.index(s)))
    return key[0]


def compare_with_reference(curves: pd.DataFrame, reference: str = "awft") -> pd.DataFrame:
    """The study's Table 2 for any set of curves: per model, the reference score's within-1-point
    value, the best value of every *other* curve (``random`` included: the study's notebook set
    apart only ``Dormant`` = awft), which curve that was, and which curve is best overall; then an
    ``Average`` row (means over models). Ties go to the first score in canonical order, as the
    notebook's strict ``>`` over its fixed iteration order did.

    Censored curves (``censored`` column, the default ``first`` reading) never dropped a point in the
    tested range: their value is a lower bound, ordered as such (it is never 0, and among equal
    values it wins). ``{reference}_censored`` and ``best_other_censored`` say which values are lower
    bounds, and so is an average over any of them (its flag in the ``Average`` row); ``order_note``
    says so in words.

    Where the curves carry certified values (:func:`headstats.summarize_curves` of per-question
    results), ``{reference}_certified`` and ``best_other_certified`` (the largest of the other
    curves: a best of several) stand beside their family-wise values (``*_certified_fw``: each curve
    at one-sided 0.05 / ``family_size``), which are the ones a "best other" statement may quote.
    """
    table = within_one_point_table(curves)
    if reference not in table.columns:
        raise ValueError(f"no {reference!r} curves to compare with; the curves have {', '.join(table.columns)}")
    flags = _flag_table(curves, "censored", table)
    rows = []
    for model in table.index:
        values = table.loc[model].dropna().astype(float)
        if reference not in values.index:
            raise ValueError(f"model {model!r} has no {reference!r} curve")
        censored = flags.loc[model, values.index]
        others = values.drop(reference)
        if others.empty:
            raise ValueError(f"model {model!r} has no curve besides {reference!r} to compare with")
        best_other = _best(others, censored.drop(reference))
        rows.append(
            {
                "model": model,
                reference: values[reference],
                "best_other": others[best_other],
                "best_other_score": best_other,
                "best_overall_score": _best(values, censored),
                f"{reference}_censored": bool(censored[reference]),
                "best_other_censored": bool(censored[best_other]),
            }
        )
    out = pd.DataFrame(rows)
    certified = [c for c in ("within_1pt_certified", "within_1pt_certified_fw") if c in curves.columns]
    for column in certified:
        values = metric_table(curves, column)
        suffix = column.removeprefix("within_1pt_")
        out[f"{reference}_{suffix}"] = [values.loc[m, reference] for m in out["model"]]
        out[f"best_other_{suffix}"] = [values.loc[m].drop(reference).max() for m in out["model"]]
    average = {
        "model": "Average",
        reference: out[reference].mean(),
        "best_other": out["best_other"].mean(),
        f"{reference}_censored": bool(out[f"{reference}_censored"].any()),
        "best_other_censored": bool(out["best_other_censored"].any()),
        **{c: out[c].mean() for c in out.columns if "_certified" in c},
    }
    out = pd.concat([out, pd.DataFrame([average])], ignore_index=True)
    out["order_note"] = np.where(
        out[f"{reference}_censored"] | out["best_other_censored"],
        "censored values are lower bounds (the curve never dropped a point in the tested range)",
        "",
    )
    return out


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
    intervention rows ``df`` (:func:`headstats.read_interventions`): the curve's area ``by`` (the
    value :func:`headstats.summarize_curves` gives) with a percentile interval, its rank (1 =
    largest area, as :func:`rank_scores`) with an interval, ``p_best`` (the share of resamples in
    which it ranks first), ``vs_reference``, its area minus ``reference``'s (``random``: does the
    score find heads better than chance?) with an interval, and ``first_drop``, the realised % at
    the curve's first drop of ``drop`` points below its baseline (the ``first`` reading), with an
    interval ``first_low``, ``first_high``. A resample in which the curve never drops is censored
    at its largest realised %; where an interval end falls on such a resample it is a lower bound
    (``first_low_open``, ``first_high_open``: read ``≥``). On a curve that runs flat near the line
    the first-drop interval is wide: that is how far the reading can be trusted. The first drop is
    not a smooth statistic (it jumps where a point grazes the line); the coverage of its percentile
    interval is checked by simulation (``tests/test_claims.py``).

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
    range) ranks last there, as in :func:`rank_scores`.
    """
    _check_metric(by)
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
    scores = _score_order([s for s in by_score if s not in silent])
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
    """:func:`_ranks_of` for every row of a (resamples x scores) array whose columns are in
    canonical order: 1 = largest, NaN last, ties in column order."""
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
