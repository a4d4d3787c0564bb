"""What a run covers and can show (pandas in, pandas out): per task and model, the questions, what one
question is worth, the baseline against chance and the smallest detectable drop; per dataset and
model, the sequences scored and their clusters; the sweep points planned and finished; the passes'
run times; and the points computed on another path than their sweep's.

- :func:`what_it_can_show`: the table of the report's first section;
- :func:`fewest_questions_to_certify`: the questions below which "within 1 point" cannot be
  certified at all (docs/statistics.md#certified);
- :func:`score_samples`, :func:`completeness`, :func:`run_times`, :func:`mixed_paths`: the
  appendix's tables of samples, completeness, time and computation paths.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headstats.io.machine import describe_machine
from headstats.stats.paired import minimum_detectable_drop, questions_to_certify
from headstats.stats.summary import BASELINE, chance_percent
from headstats.stats.tables import cluster_codes, cluster_column

CONFIDENCE = 0.95  # one-sided, as the certification of "within 1 point" (headstats.stats.summary)
POWER = 0.80


def fewest_questions_to_certify(drop: float = 1.0, confidence: float = CONFIDENCE) -> int:
    """The fewest questions with which "within ``drop`` points" can be certified at all (no changed
    answer): :func:`headstats.stats.paired.questions_to_certify` with its defaults, as a count."""
    return int(questions_to_certify(drop=drop, confidence=confidence))


def other_metric(metric: str) -> str:
    """The accuracy a report does not read: ``correct_norm`` beside ``correct``, and the reverse."""
    return "correct_norm" if metric == "correct" else "correct"


def what_it_can_show(interventions: pd.DataFrame, points: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per (task, model) of the baselines in ``points``: questions, points per question,
    baseline with its 95% interval, chance (from the questions in ``interventions``), whether the
    interval includes chance, and the minimum detectable drop; and ``baseline_<other>``, the baseline
    under the accuracy the report does not read (``correct_norm``, lm-eval's acc_norm, for a report
    of ``metric`` = ``correct``), where some task has it, so that a baseline can be set beside
    published numbers of either kind."""
    rows = interventions
    other = other_metric(metric)
    out = []
    for (task, model), base in points[points["score"] == BASELINE].groupby(["task", "model"], sort=True):
        b = base.iloc[0]
        n = int(b["n_questions"])
        asked = rows[(rows["task"] == task) & (rows["model"] == model) & (rows["score"] == BASELINE)]
        chance = chance_percent(asked)
        at_chance = bool(np.isfinite(chance) and b["acc_low"] <= chance <= b["acc_high"])
        out.append(
            {
                "task": task,
                "model": model,
                "n_questions": n,
                # the resampling unit of the intervals (MMLU: subjects sharing a few-shot prefix)
                "cluster": b.get("cluster", "question_id"),
                "n_clusters": int(b.get("n_clusters", n)),
                "points_per_question": 100.0 / n,
                "baseline": float(b["accuracy"]),
                "baseline_low": float(b["acc_low"]),
                "baseline_high": float(b["acc_high"]),
                "chance": chance,
                "at_chance": at_chance,
                "min_detectable_drop": 100.0 * minimum_detectable_drop(n, power=POWER),
                "can_certify_1pt": n >= fewest_questions_to_certify(),
                f"baseline_{other}": _mean_percent(asked, other),
            }
        )
    table = pd.DataFrame(out)
    column = f"baseline_{other}"
    return table.drop(columns=column) if len(table) and table[column].isna().all() else table


def _mean_percent(rows: pd.DataFrame, column: str) -> float:
    """100 x the mean of a boolean accuracy column over its non-missing rows (NaN when none)."""
    if column not in rows.columns:
        return math.nan
    values = pd.to_numeric(rows[column].astype("Float64"), errors="coerce").dropna()
    return 100.0 * float(values.mean()) if len(values) else math.nan


def score_samples(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, model) of the score tables ``scores``: sequences scored and the clusters they come
    from (:func:`headstats.stats.tables.cluster_column`: a task's ``subject`` or source
    ``document`` when the table carries it; else each sequence is its own)."""
    out = []
    for (dataset, model), rows in scores.groupby(["dataset", "model"], sort=True):
        sequences = int(rows["sample_id"].nunique())
        unit = cluster_column(rows)
        out.append(
            {
                "dataset": dataset,
                "model": model,
                "sequences": sequences,
                "cluster": "sequence" if unit == "sample_id" else unit,
                "n_clusters": len(np.unique(cluster_codes(rows, unit))),
                "layers": int(rows["layer"].nunique()),
                "heads": int(rows["head"].nunique()),
            }
        )
    return pd.DataFrame(out)


def _point_keys(frame: pd.DataFrame) -> pd.Series:
    return (
        frame["model"].astype(str)
        + "|"
        + frame["task"].astype(str)
        + "|"
        + frame["score"].astype(str)
        + "|"
        + (pd.to_numeric(frame["target"]).round(6).astype(str))
    )


def completeness(planned: pd.DataFrame | None, passes: pd.DataFrame) -> pd.DataFrame | None:
    """Per planned (model, task): sweep points planned and finished, the scores with points missing
    (``awft (4/7)``), and ``done`` / ``partial`` / ``not started``; None without a plan."""
    if planned is None or planned.empty:
        return None
    finished = set(_point_keys(passes)) if not passes.empty else set()
    plan = planned.assign(done=_point_keys(planned).isin(finished))
    out = []
    for (model, task), unit in plan.groupby(["model", "task"], sort=False):
        missing = [
            f"{score} ({int(rows['done'].sum())}/{len(rows)})"
            for score, rows in unit.groupby("score", sort=False)
            if not rows["done"].all()
        ]
        n_done = int(unit["done"].sum())
        status = "done" if n_done == len(unit) else ("not started" if n_done == 0 else "partial")
        out.append(
            {
                "model": model,
                "task": task,
                "points_planned": len(unit),
                "points_finished": n_done,
                "status": status,
                "missing": ", ".join(missing),
            }
        )
    return pd.DataFrame(out)


def _reused_baseline(passes: pd.DataFrame) -> pd.Series:
    """Points that copied the baseline's answers: their file records pass times, with none."""
    return passes["timed"] & passes["seconds"].isna()


def run_times(passes: pd.DataFrame) -> pd.DataFrame | None:
    """Per (model, task, machine, dtype): passes run and their total and mean wall time, their CPU
    time (all threads; wall time well above CPU time / threads means the run was paused or starved),
    points that reused the baseline's answers, points written before timings were recorded, and
    ``part_timed`` passes resumed from batches saved before times were kept (their hours leave those
    batches out). A sweep resumed on another machine, or in another dtype, gives one row per machine
    and dtype (a pass counts under the machine that finished it)."""
    if passes.empty:
        return None
    passes = passes.assign(
        machine=passes["machine"].map(describe_machine), dtype=passes["dtype"].fillna("?").astype(str)
    )
    out = []
    for (model, task, machine, dtype), unit in passes.groupby(["model", "task", "machine", "dtype"], sort=True):
        ran = unit["seconds"].dropna()
        finished = unit["finished"].dropna().astype(str)
        out.append(
            {
                "model": model,
                "task": task,
                "passes_timed": len(ran),
                "hours": float(ran.sum()) / 3600.0,
                "cpu_hours": float(unit["cpu_seconds"].sum()) / 3600.0,
                "min_per_pass": float(ran.mean()) / 60.0 if len(ran) else float("nan"),
                "reused_baseline": int(_reused_baseline(unit).sum()),
                "untimed": int((~unit["timed"]).sum()),
                "part_timed": int((unit["untimed_batches"] > 0).sum()),
                "last_finished": finished.max() if len(finished) else "",
                "dtype": dtype,
                "machine": machine,
            }
        )
    return pd.DataFrame(out)


def mixed_paths(passes: pd.DataFrame) -> pd.DataFrame | None:
    """Per (model, task) whose points were not all computed the way one sweep computes them now (one
    attention kernel, whole sequences): points in all, points of another kernel than the baseline's,
    and passes that predate the record. A point that copied the baseline's answers (it provably
    zeroes nothing, and its file records no pass time) is on the baseline's path whatever its record
    says, and the baseline is the reference itself: neither counts as unrecorded. None when every
    sweep is on one path."""
    if passes.empty:
        return None
    out = []
    for (model, task), unit in passes.groupby(["model", "task"], sort=True):
        base = unit[unit["score"] == BASELINE]["materialise"]
        kernel = base.iloc[0] if len(base) else None
        ran = (unit["score"] != BASELINE) & ~_reused_baseline(unit)
        unrecorded = int((ran & (unit["materialise"].isna() | unit["whole_sequences"].isna())).sum())
        other = int((unit["materialise"].notna() & (unit["materialise"] != kernel)).sum()) if kernel is not None else 0
        if unrecorded or other:
            out.append(
                {"model": model, "task": task, "points": len(unit), "other_kernel": other, "unrecorded": unrecorded}
            )
    return pd.DataFrame(out) if out else None
