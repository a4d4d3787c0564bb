"""Summaries of intervention results: one row per sweep point, one row per accuracy curve (SPEC §3).

Input: per-question rows as :func:`headstats.read_interventions` returns them (columns ``model,
task, subject, question_id, score, target, threshold, correct, n_zeroed, n_heads, ...``; the
baseline has ``score == "baseline"``). Accuracies and differences are reported in percentage
points, realised fractions in % of heads.

Per point (:func:`summarize_interventions`): accuracy with a Wilson 95% interval, and the paired
difference to the baseline *on the same questions*: exact McNemar p-value and a percentile
bootstrap interval (resampling questions).

Per curve (:func:`summarize_curves`), the curve being a score's points as (realised %, accuracy %),
with the baseline as its point at 0% when it has none there (zeroing nothing is the baseline model):

- ``within_1pt`` / ``crosses``: the study's number, the realised % of the last crossing of
  ``baseline - 1`` (:func:`headstats.stats.curves.within_one_point`; 0 and ``crosses=False`` when the
  curve never drops that far inside the swept range, so 0 then means "not measured", not "nothing");
- ``norm_auc``: the study's ranking area, trapezoid area over the curve's own x-range;
- ``grid_auc``: mean accuracy over a fixed grid [0, ``grid_upper``] of realised %, where
  ``grid_upper`` is the largest realised % that every curve of the same model and task reaches, so
  the areas of one model's curves are comparable (the sound default for ranking scores);
- ``within_1pt_certified``: the statistically honest counterpart of the study's number: the largest
  realised % x such that every point of the curve with realised % <= x has the lower end of its 95%
  paired bootstrap interval of (accuracy - baseline) above -1 point, i.e. at each of them the data
  show, at one-sided level 2.5%, that the drop is smaller than 1 point. Points at 0% pass trivially.
  Small question sets certify little; that is the honest answer, not a defect.
  ``certified_open`` is True when every point passed, so the true value may lie beyond the sweep;
- ``within_1pt_not_excluded``: the other end of the bracket: the largest realised % x such that no
  point with realised % <= x has a drop *significantly larger* than 1 point (upper end of its interval
  below -1). Where the two numbers differ, the data cannot tell whether the model stays within 1
  point there; more questions narrow the bracket.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headstats.stats import curves as C
from headstats.stats.paired import mcnemar_exact, paired_bootstrap, wilson_interval

BASELINE = "baseline"
GROUP = ("model", "task")
QUESTION = ("subject", "question_id")

POINT_COLUMNS = (
    "model", "task", "score", "target", "threshold", "realised_pct", "n_questions", "accuracy", "acc_low",
    "acc_high", "n_paired", "diff", "diff_low", "diff_high", "only_baseline", "only_intervened", "mcnemar_p",
)  # fmt: skip
CURVE_COLUMNS = (
    "model", "task", "score", "n_points", "baseline", "max_realised_pct", "within_1pt", "crosses", "norm_auc",
    "grid_auc", "grid_upper", "within_1pt_certified", "certified_open", "within_1pt_not_excluded",
)  # fmt: skip


def _prepare(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise ValueError(
            "no intervention rows to summarise: run `headstats ablate` and read them with read_interventions"
        )
    required = {"score", "target", "question_id", "n_zeroed", "n_heads", metric}
    missing = sorted(required - set(df.columns))
    if missing:
        raise ValueError(f"intervention rows lack the column(s) {', '.join(missing)} (SPEC §6 layout expected)")
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


def summarize_interventions(
    df: pd.DataFrame,
    *,
    metric: str = "correct",
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per (model, task, score, target), baseline included (score ``"baseline"``, target 0).

    Columns: ``threshold``, ``realised_pct`` (mean over questions of n_zeroed / n_heads, in %),
    ``n_questions``, ``accuracy`` with its Wilson interval ``acc_low, acc_high`` (points, using
    ``metric``: ``correct`` or ``correct_norm``), and against the baseline on the questions both
    answered (``n_paired``): ``diff`` (accuracy minus baseline, points) with the bootstrap interval
    ``diff_low, diff_high``, the discordant counts ``only_baseline`` / ``only_intervened`` and the
    exact McNemar ``mcnemar_p``. Pairing columns are NaN for the baseline row and when a model/task
    has no baseline.
    """
    frame = _prepare(df, metric)
    rows = []
    for (model, task), group in frame.groupby(list(GROUP), sort=True):
        base = group[group["score"] == BASELINE]
        base_ok = base.set_index(list(QUESTION))["_ok"] if len(base) else None
        for (score, target), point in group.groupby(["score", "target"], sort=True):
            n = len(point)
            k = int(point["_ok"].sum())
            low, high = wilson_interval(k, n, confidence)
            row = {
                "model": model, "task": task, "score": score, "target": float(target),
                "threshold": float(point["threshold"].iloc[0]) if score != BASELINE else math.nan,
                "realised_pct": 100.0 * float((point["n_zeroed"] / point["n_heads"]).mean()),
                "n_questions": n, "accuracy": 100.0 * k / n, "acc_low": 100.0 * low, "acc_high": 100.0 * high,
                "n_paired": 0, "diff": math.nan, "diff_low": math.nan, "diff_high": math.nan,
                "only_baseline": math.nan, "only_intervened": math.nan, "mcnemar_p": math.nan,
            }  # fmt: skip
            if score != BASELINE and base_ok is not None:
                joined = point.set_index(list(QUESTION))["_ok"].to_frame("b").join(base_ok.rename("a"), how="inner")
                if len(joined):
                    a, b = joined["a"].to_numpy(), joined["b"].to_numpy()
                    test = mcnemar_exact(a, b)
                    boot = paired_bootstrap(a, b, n_resamples=n_resamples, confidence=confidence, seed=seed)
                    row.update(
                        n_paired=len(joined), diff=100.0 * boot.estimate, diff_low=100.0 * boot.low,
                        diff_high=100.0 * boot.high, only_baseline=test.only_a, only_intervened=test.only_b,
                        mcnemar_p=test.pvalue,
                    )  # fmt: skip
            rows.append(row)
    out = pd.DataFrame(rows, columns=list(POINT_COLUMNS))
    # Baseline first within each model/task, then scores by name and targets ascending.
    out["_order"] = (out["score"] != BASELINE).astype(int)
    out = out.sort_values([*GROUP, "_order", "score", "target"], kind="stable").drop(columns="_order")
    return out.reset_index(drop=True)


def _curve_points(points: pd.DataFrame, baseline: float) -> pd.DataFrame:
    """A score's points sorted by realised %, with the baseline as the 0% point if none lies there."""
    curve = points.sort_values("realised_pct", kind="stable")
    if not (curve["realised_pct"] == 0).any():
        anchor = {"realised_pct": 0.0, "accuracy": baseline, "diff_low": 0.0, "diff_high": 0.0}
        curve = pd.concat([pd.DataFrame([anchor]), curve], ignore_index=True)
    return curve.reset_index(drop=True)


def _honest_bracket(curve: pd.DataFrame, drop: float) -> tuple[float, bool, float]:
    """(certified, certified_open, not_excluded) as defined in the module docstring."""
    certified, certified_open = 0.0, True
    not_excluded = 0.0
    excluded = False
    for _, p in curve.iterrows():
        x = float(p["realised_pct"])
        at_zero = x == 0.0  # zeroing nothing is the baseline itself
        passes = at_zero or (np.isfinite(p["diff_low"]) and p["diff_low"] > -drop)
        if certified_open:
            if passes:
                certified = x
            else:
                certified_open = False
        if not excluded:
            significantly_worse = not at_zero and np.isfinite(p["diff_high"]) and p["diff_high"] < -drop
            if significantly_worse:
                excluded = True
            else:
                not_excluded = x
    return certified, certified_open, not_excluded


def summarize_curves(
    df: pd.DataFrame,
    points: pd.DataFrame | None = None,
    *,
    drop: float = 1.0,
    grid_points: int = 61,
    **kwargs: object,
) -> pd.DataFrame:
    """One row per (model, task, score) curve; see the module docstring for every column.

    ``points`` is :func:`summarize_interventions`' output for ``df`` if already computed (it is
    recomputed otherwise, with ``kwargs`` passed on). ``drop`` is the tolerated drop in points.
    """
    if points is None:
        points = summarize_interventions(df, **kwargs)  # type: ignore[arg-type]
    rows = []
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
        upper = C.common_upper([c["realised_pct"].to_numpy() for c in curves.values()])
        for score, curve in curves.items():
            x, y = curve["realised_pct"].to_numpy(), curve["accuracy"].to_numpy()
            crossing = C.within_one_point(x, y, baseline, drop)
            grid = C.grid_auc(x, y, upper, grid_points) if upper > 0 else math.nan
            certified, certified_open, not_excluded = _honest_bracket(curve, drop)
            row = {
                "model": model, "task": task, "score": score, "n_points": len(group[group["score"] == score]),
                "baseline": baseline, "max_realised_pct": float(x.max()), "within_1pt": crossing.value,
                "crosses": crossing.crosses, "norm_auc": C.normalised_auc(x, y), "grid_auc": grid, "grid_upper": upper,
                "within_1pt_certified": certified, "certified_open": certified_open,
                "within_1pt_not_excluded": not_excluded,
            }  # fmt: skip
            rows.append(row)
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))
