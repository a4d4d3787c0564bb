"""First section: what this run can show. Per task and model: how many questions, what one question
is worth, the baseline against chance, and the smallest drop the run could detect, so a reader
knows before any curve which differences are resolvable and which tasks the model cannot do."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headstats.io.machine import describe_machine
from headstats.report.sections.context import Context, Writer, fit_sentences
from headstats.stats.distances import cluster_codes, cluster_column
from headstats.stats.paired import minimum_detectable_drop, questions_to_certify
from headstats.stats.summary import BASELINE, chance_percent

CONFIDENCE = 0.95  # one-sided, as the certification of "within 1 point" (headstats.stats.summary)
POWER = 0.80


def _other_metric(metric: str) -> str:
    return "correct_norm" if metric == "correct" else "correct"


def what_it_can_show(context: Context) -> pd.DataFrame:
    """One row per (task, model): questions, points per question, baseline with its 95% interval,
    chance, whether the interval includes chance, and the minimum detectable drop; and
    ``baseline_<other>``, the baseline under the accuracy the report does not read (``correct_norm``,
    lm-eval's acc_norm, for a report of ``correct``), where some task has it, so that a baseline can
    be set beside published numbers of either kind."""
    rows, points = context.interventions, context.points
    other = _other_metric(context.options.metric)
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
                "can_certify_1pt": n >= questions_to_certify(drop=1.0, confidence=CONFIDENCE),
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


def score_samples(context: Context) -> pd.DataFrame:
    """One row per (dataset, model) of the score tables: sequences scored and the clusters they come
    from (:func:`headstats.stats.distances.cluster_column`: a task's ``subject`` or source
    ``document`` when the table carries it; else each sequence is its own)."""
    scores = context.scores
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


def completeness(context: Context) -> pd.DataFrame | None:
    """Per planned (model, task): sweep points planned and finished, the scores with points missing
    (``awft (4/7)``), and ``done`` / ``partial`` / ``not started``; None without a plan."""
    planned = context.planned
    if planned is None or planned.empty:
        return None
    finished = set(_point_keys(context.passes)) if not context.passes.empty else set()
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


def run_times(context: Context) -> pd.DataFrame | None:
    """Per (model, task, machine, dtype): passes run and their total and mean wall time, their CPU
    time (all threads; wall time well above CPU time / threads means the run was paused or starved),
    points that reused the baseline's answers, points written before timings were recorded, and
    ``part_timed`` passes resumed from batches saved before times were kept (their hours leave those
    batches out). A sweep resumed on another machine, or in another dtype, gives one row per machine
    and dtype (a pass counts under the machine that finished it)."""
    passes = context.passes
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


def mixed_paths(context: Context) -> pd.DataFrame | None:
    """Per (model, task) whose points were not all computed the way one sweep computes them now (one
    attention kernel, whole sequences): points in all, points of another kernel than the baseline's,
    and passes that predate the record. A point that copied the baseline's answers (it provably
    zeroes nothing, and its file records no pass time) is on the baseline's path whatever its record
    says, and the baseline is the reference itself: neither counts as unrecorded. None when every
    sweep is on one path."""
    passes = context.passes
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


def _completeness_and_time(writer: Writer, context: Context) -> str | None:
    """Completeness, run times and computation paths (for the appendix); returns what is missing
    when the run is partial."""
    partial = None
    table = completeness(context)
    if table is not None:
        planned, finished = int(table["points_planned"].sum()), int(table["points_finished"].sum())
        if finished < planned:
            partial = f"{finished} of the {planned} sweep points its analysis file plans are finished"
            writer.heading("Completeness", 3)
            writer.text(
                f"**This report is partial**: {finished} of the {planned} sweep points its analysis file plans are "
                "finished (the run resumes where it stopped). Tasks and models marked `not started` have no results "
                "here; a score with points missing has a curve that ends where the run stopped, so its "
                "within-1-point value, when censored, is a lower bound over a shorter range."
            )
        else:
            writer.heading("Completeness", 3)
            writer.text(f"Every one of the {planned} sweep points the analysis file plans is finished.")
        writer.table(table, "completeness")
    times = run_times(context)
    if times is not None:
        writer.heading("Run time", 3)
        writer.text(
            "Run time: the wall time of each sweep pass as its file records it (`passes_timed`; p = 0 points "
            "calibrated on the evaluation prompts reuse the baseline's answers and cost no pass), one row per "
            "machine and model dtype the passes ran on. `cpu_hours` is the process's CPU time over the same passes "
            "(all threads): wall time well above CPU time / threads means the run was paused or shared its cores. "
            "A pass resumed from saved batches counts the time of every session that ran it, except batches saved "
            "before times were kept (`part_timed` passes)."
        )
        writer.table(times, "run_times", floatfmt=".3g")
    mixed = mixed_paths(context)
    if mixed is not None:
        writer.heading("Computation paths", 3)
        writer.text(
            "Computation paths: a sweep runs every pass on whole sequences through one attention kernel, so that a "
            "point differs from its baseline only by the heads it zeroes. The points below ran otherwise "
            "(`other_kernel`: another kernel than the baseline's) or are passes that predate that record "
            "(`unrecorded`: a resumed sweep keeps such a file only when it can show its path, since a score that "
            "reads the attention probabilities ran the explicit kernel and a task none of whose sequences share a "
            "prefix ran whole; it computes the others again). In a bf16 body, the path alone moves 1-3% of answers "
            "with nothing zeroed (`benchmarks/bench_paths.py`); in fp32, none."
        )
        writer.table(mixed, "mixed_paths")
    return partial


CAN_SHOW_WORDS = 120  # the most words of this section's text: the rest is in the appendix


def _can_show_legend(context: Context, table: pd.DataFrame) -> str:
    need = int(questions_to_certify(drop=1.0, confidence=CONFIDENCE))
    other = f"baseline_{_other_metric(context.options.metric)}"
    return (
        "Per task and model: questions asked and the clusters they fall in (`cluster`, `n_clusters`: MMLU "
        "questions of one subject share a few-shot prefix, so intervals resample whole subjects), what one "
        "question is worth in accuracy points, the baseline accuracy with its 95% interval against chance (the "
        "mean of 1 / number of choices), and `min_detectable_drop`: the smallest drop in points that a paired "
        f"comparison on these questions detects with {POWER:.0%} power at one-sided level 5% even when every "
        "changed answer is a loss (answers that change both ways, or together within a cluster, need larger "
        "drops). Certifying 'within 1 point' "
        f"(one-sided {CONFIDENCE:.0%} score bound of the paired drop at most 1 point) needs at least {need} "
        "questions even when no answer changes (`can_certify_1pt`)."
        + (
            f" `{other}`: the baseline under the accuracy this report does not read (`correct_norm` is lm-eval's "
            "acc_norm, log-likelihoods divided by the answer's length in characters), to set beside published "
            f"numbers; every other reading here is of `{context.options.metric}`."
            if other in table.columns
            else ""
        )
    )


def _warnings(table: pd.DataFrame) -> list[str]:
    """One short sentence per kind of limit: tasks at chance, tasks too small to certify 1 point."""
    out = []
    chance = table[table["at_chance"]]
    for row in chance.itertuples(index=False):
        out.append(
            f"**`{row.task}` is at chance for `{row.model}`**: its baseline {row.baseline:.1f}% "
            f"[{row.baseline_low:.1f}, {row.baseline_high:.1f}] includes chance ({row.chance:.1f}%), so its curves "
            "cannot show which heads the task needs."
        )
    small = table[~table["at_chance"] & ~table["can_certify_1pt"]]
    if len(small):
        pairs = ", ".join(f"`{r.task}` ({r.model}, {r.min_detectable_drop:.1f})" for r in small.itertuples())
        need = int(questions_to_certify(drop=1.0, confidence=CONFIDENCE))
        out.append(
            f"Too few questions to certify 'within 1 point' (at least {need} needed); smallest "
            f"detectable drops in points: {pairs}. Their within-1-point values are readings of noisy curves."
        )
    return out


def what_this_run_can_show(writer: Writer, context: Context) -> None:
    writer.heading("What this run can show")
    methods = "#methods-and-caveats"
    with writer.appendix():
        if context.options.notes:
            writer.heading("Notes on this run", 3)
            writer.text(context.options.notes)
        if context.scores is not None:
            writer.heading("Score samples", 3)
            writer.text(
                "Score tables: sequences scored per dataset and model, and the clusters they come from. Distances and "
                "noise floors can only be as precise as the number of independent clusters allows: a few clusters "
                "sharing a prompt prefix are a small sample whatever the number of sequences."
            )
            writer.table(score_samples(context), "score_samples")
        partial = _completeness_and_time(writer, context)
    sentences = []
    if partial:
        sentences.append(f"**This report is partial**: {partial} ([what is missing]({methods})).")
    if context.points is None:
        sentences.append(
            "No intervention results: this run shows score distributions only, not what zeroing heads costs "
            f"([methods and caveats]({methods}))."
        )
        writer.text(fit_sentences(sentences, CAN_SHOW_WORDS))
        return
    table = what_it_can_show(context)
    legend = writer.note("Reading the table of what this run can show", _can_show_legend(context, table))
    sentences.append(
        "Per task and model: questions, the baseline with its 95% interval against chance, and the smallest drop "
        f"this run detects ([full legend](#{legend}); paths, dtypes and run notes: [methods and caveats]({methods}))."
    )
    writer.text(fit_sentences([*sentences, *_warnings(table)], CAN_SHOW_WORDS))
    writer.table(table, "what_this_run_can_show", floatfmt=".3g")
