"""The frontier kind: a file with ``[prune]`` (``analyses/prune_embedded.toml``,
``prune_certify.toml``; :mod:`headstats.jobs.frontier`).

Its stages: collect (the calibration means that rank the heads), ablate (each (score, share, unit)
point pruned, evaluated on the held-out tasks and timed against the unpruned model), time (every
finished point timed again on this machine, its answers kept) and report. Its units: per model the
frontier points left to evaluate (:func:`~headstats.jobs.frontier.planned_points`; a point answers
every task at once, so the dry run times each task on its own row), and per model the points the
time stage would time again (those finished, and those this run's ablate stage finishes first),
costed at the last ended round's rate (no model is loaded for them).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from headstats.io import store
from headstats.jobs.analysis import given_load
from headstats.jobs.dryrun import FRONTIER_NOTE, WorkUnit
from headstats.jobs.dryrun_units import PassTimer, measure_task
from headstats.jobs.frontier_plan import (
    Frontier,
    check_recorded_settings,
    chosen_models,
    kernel_conflict,
    load_frontier,
    model_root,
    planned_points,
    retime_left,
    task_options,
)
from headstats.options import narrow
from headstats.specs import LoadOptions, RunSpec
from headstats.studies.registry import Session, Study, StudyKind, Unit, not_found_here, register_kind

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
    check_recorded_settings(frontier, chosen_models(frontier, run))  # a file edited since its points ran
    for name in chosen_models(frontier, run):
        missing = not_found_here(name)
        if missing:
            units.append(Unit(name, "ablate", "-", "frontier points", None, None, load_options, missing=missing))
            continue
        points = model_root(frontier, name) / "points"
        left = [stem for stem in planned if not (points / f"{stem}.json").is_file()]
        if {"collect", "ablate"} & set(run.stages):
            counted = tuple(
                WorkUnit(name, "ablate", task, 0, None, None, None, 0, len(planned), spec.batch_size, None)
                for task in spec.tasks
            )
            work = (frontier, left, "ablate" not in run.stages)
            what = ", ".join(spec.tasks)
            unit = Unit(name, "ablate", what, "frontier points", len(left), len(planned), load_options, work, counted)
            why = refused_here(frontier, name, load_options) if left and "ablate" in run.stages else None
            units.append(replace(unit, refused=why))
        if "time" in run.stages:
            units.append(time_unit(frontier, name, len(left) if "ablate" in run.stages else 0))
    return units


def refused_here(frontier: Frontier, name: str, load: LoadOptions) -> str | None:
    """Why this machine may not evaluate the points ``name`` has left in a reduced-precision ``dtype``
    (:func:`~headstats.jobs.frontier.kernel_conflict`, from the results folder alone), on the device
    it would load on (``--device``, else a GPU where there is one); None when it may."""
    from headstats.io.machine import REDUCED_PRECISION

    if str(load.dtype) not in REDUCED_PRECISION:
        return None  # fp32 rounds alike everywhere; an unnamed dtype is checked once the model is loaded
    from headstats.io.models import default_device, machine_info

    here = machine_info(load.device or default_device())
    return kernel_conflict(frontier, name, here, str(load.dtype))


def time_unit(frontier: Frontier, name: str, ablated: int) -> Unit:
    """The time stage of one model: the finished points, and the ``ablated`` points this run's ablate
    stage finishes before it. Its ``left`` is never 0, as the stage always runs: with none left, its
    run ends the round, or says why there is nothing to time."""
    left, finished, seconds = retime_left(frontier, name)
    left, finished = left + ablated, finished + ablated
    estimate = None if seconds is None else left * seconds
    counted = WorkUnit(
        name, "time", "finished points", finished, None, None, None, left, finished, 1, None, seconds=estimate
    )
    work = (frontier, [], False)
    return Unit(name, "time", "finished points", "timings", left or None, finished, None, work, counted=counted)


def measure(unit: Unit, model, tokenizer, probe: int, rng, timer: PassTimer | None = None) -> list[WorkUnit]:
    """Each task's evaluation timed through the unpruned model, one row per task; every point left
    costs one evaluation of every task."""
    from headstats.io.tasks import load_task

    frontier, left, _ = unit.work
    spec = frontier.prune
    points = model_root(frontier, unit.model) / "points"
    rows = []
    for task in spec.tasks:
        selected = load_task(task, **task_options(spec))
        saved = sum(store.partial_sequences(store.partial_file(points, f"{stem}-{task}.parquet")) for stem in left)
        measured = measure_task(model, tokenizer, selected, spec.batch_size, probe, rng, timer=timer)
        rows.append(replace(measured, what=task, passes_left=len(left), passes_total=unit.total or 0, saved=saved))
    return rows


def run(unit: Unit, session: Session) -> None:
    """A model's points (after its calibration means; only those with ``--stages collect``), or its
    finished points timed again."""
    from headstats.jobs.frontier import retime_model, run_frontier

    planned, _, calibrate_only = unit.work
    frontier = with_run(planned, session.run, progress=session.progress)
    if unit.stage == "time":
        logger.info("%s: every finished point timed again", retime_model(frontier, unit.model))
        return
    seconds = run_frontier(frontier, [unit.model], calibrate_only=calibrate_only)
    logger.info("%s: frontier run of %s took %.1f min", frontier.results, unit.model, seconds / 60)


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
