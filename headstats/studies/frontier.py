"""The frontier kind: a file with ``[prune]`` (``analyses/prune_embedded.toml``,
``prune_certify.toml``; :mod:`headstats.jobs.frontier`).

Its stages: collect (the calibration means that rank the heads), ablate (each (score, share, unit)
point pruned, evaluated on the held-out tasks and timed against the unpruned model), time (every
finished point timed again on this machine, its answers kept) and report. Its units: per model and
task the frontier points left to evaluate (:func:`~headstats.jobs.frontier.planned_points`), and per
model the finished points the time stage would time again, costed at the last ended round's rate
(no model is loaded for them).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from headstats.io import store
from headstats.jobs.analysis import given_load
from headstats.jobs.dryrun import FRONTIER_NOTE, WorkUnit, measure_task
from headstats.jobs.frontier import (
    Frontier,
    chosen_models,
    load_frontier,
    model_root,
    planned_points,
    retime_left,
    retime_model,
    run_frontier,
    task_options,
)
from headstats.options import narrow
from headstats.specs import LoadOptions, RunSpec
from headstats.studies.registry import Study, StudyKind, Unit, not_found_here, register_kind

logger = logging.getLogger("headstats")

TIME_NOTE = (
    "stage time: the finished points timed again on this machine (a stopped round resumes here), costed at the "
    "last ended round's seconds per point (-: no ended round to estimate from)."
)


def load(path: Path) -> Study:
    return Study("frontier", Path(path), load_frontier(path))


def with_run(frontier: Frontier, run: RunSpec, *, progress: bool = True) -> Frontier:
    """``frontier`` loaded as ``run`` asks (--dtype, --device, ...), with progress bars only if ``progress``."""
    frontier = replace(frontier, models=replace(frontier.models, **given_load(run)))
    return frontier if progress else replace(frontier, prune=replace(frontier.prune, progress=False))


def plan(study: Study, run: RunSpec) -> list[Unit]:
    frontier = with_run(study.spec, run)
    spec, load_options = frontier.prune, narrow(frontier.models, LoadOptions)
    planned = planned_points(spec)
    units: list[Unit] = []
    for name in chosen_models(frontier, run):
        missing = not_found_here(name)
        if missing:
            units.append(Unit(name, "ablate", "-", "frontier points", None, None, load_options, missing=missing))
            continue
        if {"collect", "ablate"} & set(run.stages):
            points = model_root(frontier, name) / "points"
            left = [stem for stem in planned if not (points / f"{stem}.json").is_file()]
            for task in spec.tasks:
                counted = WorkUnit(name, "ablate", task, 0, None, None, None, 0, len(planned), spec.batch_size, None)
                work = (frontier, task, left)
                units.append(
                    Unit(name, "ablate", task, "frontier points", len(left), len(planned), load_options, work, counted)
                )
        if "time" in run.stages:
            left, finished, seconds = retime_left(frontier, name)
            estimate = None if seconds is None else left * seconds
            counted = WorkUnit(
                name, "time", "finished points", finished, None, None, None, left, finished, 1, None, seconds=estimate
            )
            units.append(Unit(name, "time", "finished points", "timings", left, finished, None, counted=counted))
    return units


def measure(unit: Unit, model, tokenizer, probe: int, rng) -> WorkUnit:
    """A task's evaluation timed through the unpruned model; every point left costs one evaluation."""
    from headstats.io.tasks import load_task

    frontier, task, left = unit.work
    spec = frontier.prune
    points = model_root(frontier, unit.model) / "points"
    selected = load_task(task, **task_options(spec))
    saved = sum(store.partial_sequences(store.partial_file(points, f"{stem}-{task}.parquet")) for stem in left)
    measured = measure_task(model, tokenizer, selected, spec.batch_size, probe, rng)
    return replace(measured, passes_left=len(left), passes_total=unit.total or 0, saved=saved)


def run(study: Study, run: RunSpec, *, resources=None, progress: bool = True) -> None:
    frontier = with_run(study.spec, run, progress=progress)
    models = chosen_models(frontier, run)
    if {"collect", "ablate"} & set(run.stages):
        seconds = run_frontier(frontier, models, calibrate_only="ablate" not in run.stages)
        logger.info("%s: frontier run took %.1f min", frontier.results, seconds / 60)
    if "time" in run.stages:
        for name in models:
            logger.info("%s: every finished point timed again", retime_model(frontier, name))
    return None


def report(study: Study, run: RunSpec, *, progress: bool = True) -> Path:
    """The frontier's report: the paired-timing report for a file timed in paired rounds, else the
    report of per-point medians."""
    from headstats.report.frontier import build_frontier_report
    from headstats.report.frontier_paired import build_paired_report

    frontier = with_run(study.spec, run, progress=progress)
    build = build_paired_report if frontier.prune.timing == "paired" else build_frontier_report
    return build(frontier)


def check(study: Study, run: RunSpec, grid: str | None) -> None:
    chosen_models(study.spec, run)  # --paths and models outside the file are refused before any work


FRONTIER = register_kind(
    StudyKind(
        name="frontier",
        section="prune",
        description="prune heads at every share by every score: accuracy, speed, report (analyses/prune_embedded.toml)",
        stages=("collect", "ablate", "time", "report"),
        load=load,
        plan=plan,
        measure=measure,
        run=run,
        report=report,
        note=f"{FRONTIER_NOTE}\n{TIME_NOTE}",
        check=check,
        example="analyses/prune_embedded.toml",
    )
)

__all__ = ["FRONTIER"]
