"""Summaries of intervention results: one row per sweep point, one row per accuracy curve
(docs/statistics.md#within-one-point).

Input: per-question rows as :func:`headstats.read_interventions` returns them (columns ``model,
task, subject, question_id, score, target, threshold, correct, n_zeroed, n_heads, ...``; the
baseline has ``score == "baseline"``). Accuracies and differences are reported in percentage
points, realised fractions in % of heads.

Per point (:func:`summarize_interventions`): accuracy with a Wilson 95% interval, and the paired
comparison with the baseline *on the same questions*:

- ``diff`` with a percentile bootstrap interval ``diff_low, diff_high`` that resamples *clusters*
  of questions (``cluster`` names the unit: ``subject`` where the task has subjects, whose questions
  share a few-shot prefix; ``document`` where its questions come from source documents, as
  HellaSwag's contexts from videos and articles; otherwise the question; ``n_clusters`` counts them);
- ``drop_lower, drop_upper``: one-sided 95% bounds of the drop (baseline - intervened) from Tango's
  score interval on the discordant pairs (:func:`headstats.stats.paired.drop_bound`), honest when
  few or no answers changed, taken at the effective number of questions n / ``design_effect``
  (1 where every question is its own cluster; above 1 where answers change together within
  clusters); ``certified`` when ``drop_upper <= 1`` point;
- the exact McNemar ``mcnemar_p`` (on clustered tasks its exact randomisation form, flipping whole
  clusters) and ``mcnemar_p_holm``, Holm-adjusted over every point of the returned table.

Per curve (:func:`summarize_curves`), the curve being a score's points as (realised %, accuracy %),
with the baseline as its point at 0% when it has none there (zeroing nothing is the baseline model):

- ``within_1pt`` under ``reading`` (:func:`headstats.stats.curves.within_one_point`): ``"first"``
  (default) the x of the first drop to ``baseline - 1``, with ``non_monotone`` when the curve later
  climbs back above the line and ``censored`` (value = the largest realised % tested, a lower bound)
  when it never drops; ``"study"`` the study's last crossing, 0 when none (only for reproducing
  the paper). ``crosses`` says whether the curve meets the line at all;
- ``norm_auc``: the study's ranking area, trapezoid area over the curve's own x-range;
- ``grid_auc``: mean accuracy over a fixed grid [0, ``grid_upper``] of realised %, where
  ``grid_upper`` is the largest realised % that every curve of the same model and task reaches, so
  the areas of one model's curves are comparable (the sound default for ranking scores);
- ``within_1pt_certified``: the largest realised % x such that every point with realised % <= x
  has ``drop_upper <= 1`` (the data show, at one-sided level 5%, that the drop is below 1 point);
  points at 0% pass trivially. Small question sets certify nothing; that is the honest answer.
  ``certified_open`` is True when every point passed, so the true value may lie beyond the sweep;
- ``within_1pt_certified_fw``: the same, with every point's bound taken at the one-sided level
  ``0.05 / family_size`` (Bonferroni over the table's curves that zeroed a head): a "best" or "at
  most" read off the table (the largest certified share of several curves) picks one curve of the
  family, and only the adjusted values hold for all of them at once with 95% confidence. Within one
  curve the points are tested in order of realised % and the reading stops at the first failure (a
  fixed-sequence procedure), which needs no adjustment over the points;
- ``within_1pt_not_excluded``: the other end of the bracket: the largest realised % x such that no
  point with realised % <= x has ``drop_lower > 1`` (a drop shown to exceed 1 point);
- ``n_questions`` (paired questions) and ``mdd_80``: the smallest drop (points) a one-sided 5% test
  detects with 80% power for that n (on a clustered task, n over the points' mean design effect),
  at the curve's mean share of changed answers (:func:`headstats.stats.paired.minimum_detectable_drop`);
- ``zeroes_none``: the curve has points above target 0 and none of them zeroed a head (a score tied
  at its extreme, such as value norms in a model with one KV head per layer, or thresholds that
  select nothing here). Such a curve measures nothing, not a robust model: its readings
  (``within_1pt``, areas, certified values) are NaN, it is left out of the common range of
  ``grid_auc`` and out of rankings (:mod:`headstats.stats.ranking`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headstats.stats import curves as C
from headstats.stats.multiple import holm
from headstats.stats.paired import (
    design_effect,
    drop_bound_from_counts,
    mcnemar_exact,
    minimum_detectable_drop,
    paired_bootstrap,
    wilson_interval,
)

BASELINE = "baseline"
GROUP = ("model", "task")
QUESTION = ("subject", "question_id")
CERTIFY_CONFIDENCE = 0.95  # one-sided, for drop_lower / drop_upper

POINT_COLUMNS = (
    "model",
    "task",
    "score",
    "target",
    "threshold",
    "realised_pct",
    "n_questions",
    "accuracy",
    "acc_low",
    "acc_high",
    "n_paired",
    "diff",
    "diff_low",
    "diff_high",
    "cluster",
    "n_clusters",
    "only_baseline",
    "only_intervened",
    "design_effect",
    "drop_lower",
    "drop_upper",
    "certified",
    "mcnemar_p",
    "mcnemar_p_holm",
)
# A curve's columns computed from its per-question rows (meaningless for published aggregates).
CURVE_QUESTION_COLUMNS = (
    "within_1pt_certified",
    "certified_open",
    "within_1pt_not_excluded",
    "within_1pt_certified_fw",
    "certified_fw_open",
    "family_size",
    "n_questions",
    "mdd_80",
)
CURVE_COLUMNS = (
    "model",
    "task",
    "score",
    "n_points",
    "baseline",
    "max_realised_pct",
    "reading",
    "within_1pt",
    "crosses",
    "censored",
    "non_monotone",
    "norm_auc",
    "grid_auc",
    "grid_upper",
    *CURVE_QUESTION_COLUMNS,
    "zeroes_none",
)


def chance_percent(rows: pd.DataFrame) -> float:
    """The accuracy (%) of guessing uniformly among each question's choices (``n_choices``), averaged
    over the rows; NaN when the rows do not say how many choices there were."""
    if "n_choices" not in rows.columns:
        return math.nan
    choices = pd.to_numeric(rows["n_choices"], errors="coerce").to_numpy(dtype=float)
    choices = choices[np.isfinite(choices) & (choices > 0)]
    return 100.0 * float(np.mean(1.0 / choices)) if len(choices) else math.nan


def prepare_rows(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per-question intervention rows checked (the columns of docs/design.md#table-layout, 0/1
    ``metric``, no question twice in a point) and normalised (empty subjects as "", the baseline at
    target 0), with ``_ok`` the metric as booleans."""
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise ValueError(
            "no intervention rows to summarise: run `headstats ablate` and read them with read_interventions"
        )
    required = {"score", "target", "question_id", "n_zeroed", "n_heads", metric}
    missing = sorted(required - set(df.columns))
    if missing:
        raise ValueError(f"intervention rows lack the column(s) {', '.join(missing)} (see docs/design.md#table-layout)")
    frame = df.copy()
    for col in (*GROUP, "subject"):
        if col not in frame.columns:
            frame[col] = ""
        # Tasks without subjects store a null subject; "" keeps such questions pairable.
        frame[col] = frame[col].astype(object).where(frame[col].notna(), "").astype(str)
    if "threshold" not in frame.columns:
        frame["threshold"] = np.nan
    if frame[metric].isna().any():
        tasks = sorted(frame.loc[frame[metric].isna(), "task"].unique())
        raise ValueError(
            f"{metric!r} is not reported for task(s) {', '.join(tasks)}; summarise them with metric='correct'"
        )
    values = frame[metric].to_numpy(dtype=object)
    if not all(v in (0, 1) for v in values):
        raise ValueError(f"column {metric!r} must hold 0/1 per question")
    frame["_ok"] = values.astype(bool)
    frame.loc[frame["score"] == BASELINE, "target"] = 0.0
    dup = frame.duplicated([*GROUP, "score", "target", *QUESTION])
    if dup.any():
        first = frame.loc[dup].iloc[0]
        raise ValueError(
            f"question {first['subject']}/{first['question_id']} appears twice in point "
            f"{first['score']} @ {first['target']} of {first['model']}/{first['task']}: mixed runs? "
            "read one results directory per run"
        )
    return frame


def question_clusters(frame: pd.DataFrame, cluster: str | None) -> tuple[str, np.ndarray]:
    """(name of the unit, label per row): ``cluster`` if given, else the subject where the task has
    one, else the source ``document`` where its questions have one (HellaSwag), else the question
    (a question without a subject or document is its own cluster)."""
    question = frame["subject"].astype(str) + "\x1f" + frame["question_id"].astype(str)
    if cluster is None:
        if (frame["subject"] != "").any():
            cluster = "subject"
        elif "document" in frame.columns and frame["document"].notna().any():
            cluster = "document"
        else:
            cluster = "question_id"
    if cluster == "question_id":
        return cluster, question.to_numpy()
    if cluster not in frame.columns:
        raise ValueError(
            f"cluster column {cluster!r} is not in the intervention rows; they have {', '.join(frame.columns)}"
        )
    value = frame[cluster].astype(object)
    empty = value.isna() | (value.astype(str) == "")
    return cluster, np.where(empty, "q:" + question, "c:" + value.astype(str)).astype(str)


def summarize_interventions(
    df: pd.DataFrame,
    *,
    metric: str = "correct",
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    cluster: str | None = None,
    drop: float = 1.0,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (model, task, score, target), baseline included (score ``"baseline"``, target 0).

    Columns: ``threshold``, ``realised_pct`` (mean over questions of n_zeroed / n_heads, in %),
    ``n_questions``, ``accuracy`` with its Wilson interval ``acc_low, acc_high`` (points, using
    ``metric``: ``correct`` or ``correct_norm``), and against the baseline on the questions both
    answered (``n_paired``): ``diff`` (accuracy minus baseline, points) with the cluster bootstrap
    interval ``diff_low, diff_high`` (``cluster``, ``n_clusters``: see the module docstring; a
    column name may be given), the discordant counts ``only_baseline`` / ``only_intervened``, the
    one-sided bounds ``drop_lower`` / ``drop_upper`` of the drop (points), ``certified``
    (``drop_upper <= drop``), the exact McNemar ``mcnemar_p`` and its Holm adjustment over the table
    ``mcnemar_p_holm``. Pairing columns are NaN for the baseline row and when a model/task has no
    baseline.
    """
    frame = prepare_rows(df, metric)
    rows = []
    for (model, task), group in frame.groupby(list(GROUP), sort=True):
        # The unit is chosen per task: MMLU has subjects, PIQA in the same table does not.
        unit, labels = question_clusters(group, cluster)
        group = group.assign(_cluster=labels)
        base = group[group["score"] == BASELINE]
        base_ok = base.set_index(list(QUESTION))["_ok"] if len(base) else None
        for (score, target), point in group.groupby(["score", "target"], sort=True):
            n = len(point)
            k = int(point["_ok"].sum())
            low, high = wilson_interval(k, n, confidence)
            row = {
                "model": model,
                "task": task,
                "score": score,
                "target": float(target),
                "threshold": float(point["threshold"].iloc[0]) if score != BASELINE else math.nan,
                "realised_pct": 100.0 * float((point["n_zeroed"] / point["n_heads"]).mean()),
                "n_questions": n,
                "accuracy": 100.0 * k / n,
                "acc_low": 100.0 * low,
                "acc_high": 100.0 * high,
                "n_paired": 0,
                "diff": math.nan,
                "diff_low": math.nan,
                "diff_high": math.nan,
                "cluster": unit,
                "n_clusters": int(point["_cluster"].nunique()),
                "only_baseline": math.nan,
                "only_intervened": math.nan,
                "design_effect": math.nan,
                "drop_lower": math.nan,
                "drop_upper": math.nan,
                "certified": False,
                "mcnemar_p": math.nan,
            }
            if score != BASELINE and base_ok is not None:
                row.update(_against_baseline(point, base_ok, unit, confidence, n_resamples, drop, seed))
            rows.append(row)
    out = pd.DataFrame(rows, columns=list(POINT_COLUMNS))
    out["mcnemar_p_holm"] = holm(out["mcnemar_p"].to_numpy(dtype=float))
    # Baseline first within each model/task, then scores by name and targets ascending.
    out["_order"] = (out["score"] != BASELINE).astype(int)
    out = out.sort_values([*GROUP, "_order", "score", "target"], kind="stable").drop(columns="_order")
    out.attrs["p_adjustment"] = f"mcnemar_p_holm: Holm over the {int(out['mcnemar_p'].notna().sum())} points"
    return out.reset_index(drop=True)


def _against_baseline(
    point: pd.DataFrame, base_ok: pd.Series, unit: str, confidence: float, n_resamples: int, drop: float, seed: int
) -> dict[str, object]:
    """One point's pairing columns of :func:`summarize_interventions`, on the questions it shares with
    the baseline (``base_ok``: the baseline's answers by question); none when it shares none."""
    here = point.set_index(list(QUESTION))[["_ok", "_cluster"]].rename(columns={"_ok": "b"})
    joined = here.join(base_ok.rename("a"), how="inner")
    if not len(joined):
        return {}
    a, b = joined["a"].to_numpy(), joined["b"].to_numpy()
    labels = None if unit == "question_id" else joined["_cluster"].to_numpy()
    test = mcnemar_exact(a, b, clusters=labels)
    boot = paired_bootstrap(a, b, n_resamples=n_resamples, confidence=confidence, seed=seed, clusters=labels)
    bound = drop_bound_from_counts(
        test.only_a, test.only_b, len(joined), CERTIFY_CONFIDENCE, design_effect(a, b, labels)
    )
    return {
        "n_paired": len(joined),
        "diff": 100.0 * boot.estimate,
        "diff_low": 100.0 * boot.low,
        "diff_high": 100.0 * boot.high,
        "n_clusters": int(joined["_cluster"].nunique()),
        "only_baseline": test.only_a,
        "only_intervened": test.only_b,
        "design_effect": bound.design_effect,
        "drop_lower": 100.0 * bound.lower,
        "drop_upper": 100.0 * bound.upper,
        "certified": bool(100.0 * bound.upper <= drop),
        "mcnemar_p": test.pvalue,
    }


def _curve_points(points: pd.DataFrame, baseline: float) -> pd.DataFrame:
    """A score's points sorted by realised %, with the baseline as the 0% point if none lies there."""
    curve = points.sort_values("realised_pct", kind="stable")
    if not (curve["realised_pct"] == 0).any():
        anchor = {"realised_pct": 0.0, "accuracy": baseline, "drop_lower": 0.0, "drop_upper": 0.0}
        curve = pd.concat([pd.DataFrame([anchor]), curve], ignore_index=True)
    return curve.reset_index(drop=True)


def zeroes_none(targets: np.ndarray, realised: np.ndarray) -> bool:
    """Whether a curve's points (``targets``, ``realised`` %) include some above target 0 and none
    of those zeroed a head."""
    tried = np.nan_to_num(np.asarray(targets, dtype=float)) > 0
    return bool(tried.any()) and bool((np.asarray(realised, dtype=float)[tried] == 0).all())


def _zeroes_none(curve: pd.DataFrame) -> bool:
    if "target" not in curve.columns:
        return False
    return zeroes_none(curve["target"].to_numpy(), curve["realised_pct"].to_numpy())


def _silent_curve(model: str, task: str, score: str, group: pd.DataFrame, baseline: float, reading: str) -> dict:
    """The summary row of a curve that zeroed no head: counts and flags, no readings."""
    mine = group[group["score"] == score]
    n = float(mine["n_paired"].max()) if "n_paired" in mine.columns else math.nan
    return {
        "model": model,
        "task": task,
        "score": score,
        "n_points": len(mine),
        "baseline": baseline,
        "max_realised_pct": 0.0,
        "reading": reading,
        "within_1pt": math.nan,
        "crosses": False,
        "censored": False,
        "non_monotone": False,
        "norm_auc": math.nan,
        "grid_auc": math.nan,
        "grid_upper": math.nan,
        "within_1pt_certified": math.nan,
        "certified_open": False,
        "within_1pt_not_excluded": math.nan,
        "within_1pt_certified_fw": math.nan,
        "certified_fw_open": False,
        "family_size": 0,
        "n_questions": n,
        "mdd_80": math.nan,
        "zeroes_none": True,
    }


def _honest_bracket(curve: pd.DataFrame, drop: float) -> tuple[float, bool, float]:
    """(certified, certified_open, not_excluded) as defined in the module docstring."""
    certified, certified_open = 0.0, True
    not_excluded = 0.0
    excluded = False
    for x, lower, upper in zip(curve["realised_pct"], curve["drop_lower"], curve["drop_upper"], strict=True):
        x = float(x)
        at_zero = x == 0.0  # zeroing nothing is the baseline itself
        passes = at_zero or (np.isfinite(upper) and upper <= drop)
        if certified_open:
            if passes:
                certified = x
            else:
                certified_open = False
        if not excluded:
            if not at_zero and np.isfinite(lower) and lower > drop:
                excluded = True
            else:
                not_excluded = x
    return certified, certified_open, not_excluded


def adjusted_drop_upper(points: pd.DataFrame, confidence: float) -> np.ndarray:
    """Each point's one-sided upper bound of the drop (points) at ``confidence``, from the discordant
    counts and design effect :func:`summarize_interventions` recorded (NaN where a point has none)."""
    out = np.full(len(points), math.nan)
    columns = ("only_baseline", "only_intervened", "n_paired", "design_effect")
    if not all(c in points.columns for c in columns):
        return out
    for i, (lost, gained, n, deff) in enumerate(points[list(columns)].itertuples(index=False)):
        if not (np.isfinite(lost) and np.isfinite(gained) and n > 0):
            continue
        deff = float(deff) if np.isfinite(deff) else 1.0
        out[i] = 100.0 * drop_bound_from_counts(int(lost), int(gained), int(n), confidence, deff).upper
    return out


def _detectable(curve: pd.DataFrame) -> tuple[float, float]:
    """(paired questions, minimum detectable drop in points) of one curve's measured points."""
    if "n_paired" not in curve.columns:
        return math.nan, math.nan
    measured = curve[curve["n_paired"].fillna(0) > 0]
    if measured.empty:
        return math.nan, math.nan
    n = int(measured["n_paired"].max())
    changed = (measured["only_baseline"] + measured["only_intervened"]) / measured["n_paired"]
    deff = float(measured["design_effect"].mean()) if "design_effect" in measured.columns else math.nan
    effective = n / deff if np.isfinite(deff) else n  # answers that change together count less
    return float(n), 100.0 * minimum_detectable_drop(max(effective, 1.0), float(changed.mean()))


def summarize_curves(
    df: pd.DataFrame,
    points: pd.DataFrame | None = None,
    *,
    drop: float = 1.0,
    grid_points: int = 61,
    reading: C.Reading = "first",
    family_size: int | None = None,
    **kwargs: object,
) -> pd.DataFrame:
    """One row per (model, task, score) curve; see the module docstring for every column.

    ``points`` is :func:`summarize_interventions`' output for ``df`` if already computed (it is
    recomputed otherwise, with ``kwargs`` passed on). ``drop`` is the tolerated drop in points.
    ``reading`` is ``"first"`` (default) or ``"study"`` (the study's last crossing, for ``headstats
    paper`` only); the ``reading`` column says which was used. ``family_size``: the number of curves
    a statement across curves picks from (default: the curves of this table that zeroed a head);
    ``within_1pt_certified_fw`` holds at one-sided level 0.05 / ``family_size`` per curve.
    """
    if reading not in C.READINGS:
        raise ValueError(f"reading must be one of {', '.join(C.READINGS)}, not {reading!r}")
    if family_size is not None and family_size < 1:
        raise ValueError(f"family_size must be at least 1 (the curves a statement picks from), not {family_size}")
    if points is None:
        points = summarize_interventions(df, drop=drop, **kwargs)  # type: ignore[arg-type]
    rows = []
    curve_points: dict[tuple[str, str, str], pd.DataFrame] = {}
    for (model, task), group in points.groupby(list(GROUP), sort=True):
        base = group[group["score"] == BASELINE]
        if base.empty:
            raise ValueError(f"no baseline rows for model {model!r}, task {task!r}: the curves need the baseline run")
        baseline = float(base["accuracy"].iloc[0])
        curves = {
            score: _curve_points(pts, baseline)
            for score, pts in group[group["score"] != BASELINE].groupby("score", sort=True)
        }
        if not curves:
            continue
        silent = {score for score, curve in curves.items() if _zeroes_none(curve)}
        measured = [c["realised_pct"].to_numpy() for s, c in curves.items() if s not in silent]
        upper = C.common_upper(measured) if measured else 0.0
        for score, curve in curves.items():
            if score in silent:
                rows.append(_silent_curve(model, task, score, group, baseline, reading))
                continue
            for col in ("drop_lower", "drop_upper"):
                if col not in curve.columns:
                    curve[col] = math.nan
            curve_points[(model, task, score)] = curve
            row = {"model": model, "task": task, "score": score, "n_points": len(group[group["score"] == score])}
            row.update(_curve_readings(curve, baseline, upper, drop=drop, grid_points=grid_points, reading=reading))
            rows.append(row)
    m = family_size if family_size is not None else len(curve_points)
    level = 1.0 - (1.0 - CERTIFY_CONFIDENCE) / max(m, 1)
    for row in rows:
        curve = curve_points.get((row["model"], row["task"], row["score"]))
        if curve is not None:
            row["family_size"] = m
            row.update(_family_wise(curve, level, drop))
    out = pd.DataFrame(rows, columns=list(CURVE_COLUMNS))
    out.attrs["family"] = f"within_1pt_certified_fw: one-sided level 0.05 / {m} per curve (Bonferroni over {m} curves)"
    return out


def _curve_readings(
    curve: pd.DataFrame, baseline: float, upper: float, *, drop: float, grid_points: int, reading: C.Reading
) -> dict[str, object]:
    """One measured curve's columns of :func:`summarize_curves` (``upper``: the model's common range)."""
    x, y = curve["realised_pct"].to_numpy(), curve["accuracy"].to_numpy()
    first = C.within_one_point(x, y, baseline, drop, reading="first")
    crossing = first if reading == "first" else C.within_one_point(x, y, baseline, drop, reading=reading)
    certified, certified_open, not_excluded = _honest_bracket(curve, drop)
    n_questions, mdd = _detectable(curve)
    return {
        "baseline": baseline,
        "max_realised_pct": float(x.max()),
        "reading": reading,
        "within_1pt": crossing.value,
        "crosses": crossing.crosses,
        "censored": crossing.censored,
        "non_monotone": first.non_monotone,
        "norm_auc": C.normalised_auc(x, y),
        "grid_auc": C.grid_auc(x, y, upper, grid_points) if upper > 0 else math.nan,
        "grid_upper": upper,
        "within_1pt_certified": certified,
        "certified_open": certified_open,
        "within_1pt_not_excluded": not_excluded,
        "n_questions": n_questions,
        "mdd_80": mdd,
        "zeroes_none": False,
    }


def _family_wise(curve: pd.DataFrame, level: float, drop: float) -> dict[str, object]:
    """The certified share with every point's bound at one-sided ``level`` (none without paired
    counts: published aggregates have nothing to certify, which is not 0)."""
    bounds = adjusted_drop_upper(curve, level)
    if np.isnan(bounds[curve["realised_pct"].to_numpy() > 0]).all():
        return {}
    adjusted = curve.assign(drop_upper=np.where(curve["realised_pct"] == 0, 0.0, bounds))
    certified, certified_open, _ = _honest_bracket(adjusted, drop)
    return {"within_1pt_certified_fw": certified, "certified_fw_open": certified_open}


HEADLINE_COLUMNS = (
    "scope",
    "family_size",
    "certified",
    "certified_curve",
    "certified_fw",
    "certified_fw_curve",
    "adjustment",
)


def _largest(curves: pd.DataFrame, column: str) -> tuple[float, str]:
    """The largest value of ``column`` and the curve(s) holding it (``model/task/score``; ties joined)."""
    values = curves[column].astype(float)
    if values.isna().all() or values.max() <= 0:
        return 0.0, ""
    best = values.max()
    at = curves.loc[values == best]
    names = [f"{m}/{t}/{s}" for m, t, s in zip(at["model"], at["task"], at["score"], strict=True)]
    return float(best), ", ".join(names)


def certified_headline(curves: pd.DataFrame) -> pd.DataFrame:
    """The statement "zeroing certified within 1 point reaches at most X% of heads", for all the curves of
    :func:`summarize_curves` and per model: the largest ``within_1pt_certified`` (unadjusted, the
    best of the family) beside the largest ``within_1pt_certified_fw`` (each curve at one-sided level
    0.05 / ``family_size``, Bonferroni over the family the best was picked from), with the curves
    that give them. Curves that zeroed no head are not in the family. 0 with no curve: nothing
    certified."""
    measured = curves[~curves["zeroes_none"].fillna(False).astype(bool)]
    if measured.empty:
        raise ValueError("no curve zeroed a head: there is no certified share to state")
    m = int(measured["family_size"].max())
    rows = []
    scopes = [("all curves", measured)] + [(f"model {k}", g) for k, g in measured.groupby("model", sort=True)]
    for scope, group in scopes:
        value, curve = _largest(group, "within_1pt_certified")
        adjusted, adjusted_curve = _largest(group, "within_1pt_certified_fw")
        rows.append(
            {
                "scope": scope,
                "family_size": m,
                "certified": value,
                "certified_curve": curve,
                "certified_fw": adjusted,
                "certified_fw_curve": adjusted_curve,
                "adjustment": f"Bonferroni over the {m} curves: one-sided level 0.05/{m} = {0.05 / m:.2g} per curve",
            }
        )
    return pd.DataFrame(rows, columns=list(HEADLINE_COLUMNS))
