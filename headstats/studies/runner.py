"""``headstats run FILE``: the file's kind looked up once, then the same steps for every kind.

Load (every key checked), check the run against the kind (its own refusals, a launcher, its
stages), plan the units, then either the dry run (:func:`headstats.studies.dryrun.dry_run_units`)
or one loop over them (:func:`run_units`): a unit with nothing left is skipped, one a run here
leaves for another machine is named, and the kind runs each other one, resuming what of it is
done; the report comes last, rebuilt from the results alone. Units left for another machine are
named once the report is written. With a launcher, each model's units run as one grid job
(:func:`run_model_units`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path

from headstats.jobs.dryrun import DryRun
from headstats.specs import CompareSpec, Resources, RunSpec
from headstats.studies.registry import STUDY_KINDS, Session, Study, StudyKind, Unit, checked_run, kind_of

logger = logging.getLogger("headstats")


def plan_study(study: Study, run: RunSpec | None = None, **options: object):
    """The units ``run`` (or its fields by name) would compute for ``study``."""
    kind = STUDY_KINDS[study.kind]
    run = checked_run(kind, study, RunSpec.from_kwargs(options, base=run))
    return kind.plan(study, run)


def run_loaded(
    study: Study,
    run: RunSpec,
    *,
    resources: Resources | None = None,
    grid: str | None = None,
    progress: bool = True,
    probe_sequences: int = 8,
) -> Path | DryRun | None:
    """Run ``study`` as ``run`` asks: with ``run.dry_run`` its :class:`DryRun` (nothing written), else
    its stages and the report's index.html when the report stage ran. ``grid``: the flag that set a
    launcher in ``resources``, or None."""
    from headstats.studies.dryrun import dry_run_units, written_folders

    kind = STUDY_KINDS[study.kind]
    run = checked_run(kind, study, run, grid)
    units = kind.plan(study, run)
    if run.dry_run:
        return dry_run_units(
            kind,
            units,
            probe_sequences=probe_sequences,
            measure=run.probe,
            writes=written_folders(study, tuple(run.stages)),
        )
    announce_run(kind, study, run, units)
    started = time.monotonic()
    if kind.grid and resources is not None and resources.launcher is not None:
        left = run_grid_jobs(kind, study, run, units, resources, progress=progress)
    else:
        left = run_units(kind, study, run, units, progress=progress)
    index = kind.report(study, run, progress=progress) if "report" in run.stages else None
    logger.info("done in %.0f s", time.monotonic() - started)
    if left:
        raise kind.left(left)
    return index


def announce_run(kind: StudyKind, study: Study, run: RunSpec, units: list[Unit]) -> None:
    """Say, before any work, what the run will compute, where it writes and for about how long (the dry
    run's estimate from recorded speeds: no model is loaded for it)."""
    from headstats.studies.dryrun import dry_run_units, written_folders

    if all(u.done or u.refused is not None for u in units):
        report = f"; the report goes to {study.report}" if "report" in run.stages else ""
        logger.info("running %s: nothing left to compute%s", study.path, report)
        return
    try:
        estimate = dry_run_units(kind, units, writes=written_folders(study, tuple(run.stages)), quiet=True)
    except (OSError, ValueError, RuntimeError, KeyError) as err:  # the run itself says what is wrong
        logger.info("running %s (no estimate: %s)", study.path, err)
        return
    if not any(u.passes_left for u in estimate.units):  # every unit's tables are on disk already
        report = f"; the report goes to {study.report}" if "report" in run.stages else ""
        logger.info("running %s: nothing left to compute%s", study.path, report)
        return
    logger.info("running %s: %s", study.path, estimate.headline())


def stop_if_missing(unit: Unit) -> None:
    """Stop the run at a unit whose model cannot be found here, with the error its load would raise."""
    from headstats.io.model_paths import ModelNotFoundError
    from headstats.studies.registry import not_found_here

    why = unit.missing or (not_found_here(unit.loads or unit.model) if unit.absent else None)
    if why:
        raise ModelNotFoundError(why)


def run_units(kind: StudyKind, study: Study, run: RunSpec, units: list[Unit], *, progress: bool = True) -> list[str]:
    """Run ``units`` (planned by ``kind`` for ``run``) one after another: those with nothing left
    are skipped, those refused here are named and left, the kind runs each other one. Returns the
    lines naming the units left for another machine."""
    left = list(dict.fromkeys(f"{u.label}{u.model}: {u.refused}" for u in units if u.refused is not None))
    for line in left:
        logger.warning("left for another machine: %s", line)
    if units:
        kind.begin(study, run)
    session = Session(run, progress=progress)
    try:
        for step, unit in enumerate(units, 1):
            if unit.refused is not None:
                continue
            stop_if_missing(unit)
            if unit.done:
                logger.info("unit %d of %d: %s: done", step, len(units), unit.describe())
                continue
            logger.info("unit %d of %d: %s", step, len(units), unit.describe())
            why = kind.run(unit, session)
            if why is not None:
                logger.error("%s%s left for another machine: %s", unit.label, unit.model, why)
                left.append(f"{unit.label}{unit.model}: {why}")
    finally:
        session.close()
    return left


def run_model_units(study: str, model: str, run: RunSpec, progress: bool = False) -> list[str]:
    """One grid job: the units of ``model`` of the study file at ``study``, as :func:`run_units` runs
    them; returns the lines naming the units left for another machine."""
    kind = kind_of(study)
    loaded = kind.load(Path(study))
    run = replace(run, only_models=(model,))
    return run_units(kind, loaded, run, kind.plan(loaded, run), progress=progress)


def run_grid_jobs(
    kind: StudyKind, study: Study, run: RunSpec, units: list[Unit], resources: Resources, *, progress: bool = True
) -> list[str]:
    """Each model with units left as one grid job (:func:`run_model_units`) under ``resources``' launcher
    (:mod:`headstats.jobs.grid`); the job writes only its model's folder of the results."""
    from headstats.io import store
    from headstats.io.identity import model_slug
    from headstats.jobs.grid import FunctionJob, run_grid

    for unit in units:
        stop_if_missing(unit)
    models = list(dict.fromkeys(u.model for u in units if not u.done and u.refused is None))
    if not models:
        return []
    kind.begin(study, run)
    jobs = [
        FunctionJob(
            f"{study.spec.name} {name}",
            run_model_units,
            {"study": str(study.path), "model": name, "run": run, "progress": False},
            output_paths=(str(store.partition_dir(study.results, model=model_slug(name))),),
        )
        for name in models
    ]
    if resources.folder is None:
        resources = replace(resources, folder=str(study.results / "_grid"))
    logger.info(run_grid(jobs, resources, progress=progress).summary())
    return []


def run_study(
    path: str | os.PathLike,
    run: RunSpec | None = None,
    *,
    resources: Resources | None = None,
    grid: str | None = None,
    progress: bool = True,
    **options: object,
) -> Path | DryRun | None:
    """Load the study file at ``path`` through its kind and run it as ``run`` (a :class:`RunSpec`, or
    its fields by name: ``stages``, ``only_models``, ``dry_run``, ...) asks (:func:`run_loaded`)."""
    study = kind_of(path).load(Path(path))
    run = RunSpec.from_kwargs({"analysis": os.fspath(path), **options}, base=run)
    return run_loaded(study, run, resources=resources, grid=grid, progress=progress)


def compare_with_answer(
    models: list[str] | tuple[str, ...],
    *,
    out: str | os.PathLike,
    spec: CompareSpec | None = None,
    analysis: str | os.PathLike | None = None,
    title: str | None = None,
    **options: object,
) -> tuple[Path, str]:
    """:func:`compare`, returning also its answer: each compared model's sentence of the abstract as
    plain text (what ``headstats compare`` prints before the report's path)."""
    from headstats.jobs.compare import run_comparison
    from headstats.report.compare import answer_text, write_comparison

    spec = CompareSpec.from_kwargs({**options, "models": tuple(models), "out": os.fspath(out)}, base=spec)
    result = run_comparison(spec)
    logger.info("collection %.0f s, statistics %.0f s", result.timings["collect_s"], result.timings["statistics_s"])
    index = write_comparison(result, Path(out), analysis=None if analysis is None else os.fspath(analysis), title=title)
    return index, answer_text(result)


def compare(
    models: list[str] | tuple[str, ...],
    *,
    out: str | os.PathLike,
    spec: CompareSpec | None = None,
    analysis: str | os.PathLike | None = None,
    title: str | None = None,
    **options: object,
) -> Path:
    """Compare ``models[0]`` (the reference) with every other model of ``models`` on the same texts and
    write an answer-first report to ``out``; returns ``out/index.html``. The options are
    :class:`~headstats.specs.CompareSpec`'s (``spec``, or its fields by name: ``datasets``, ``limit``,
    ``margin``, ``scores``, ``dtype``, ...); the score tables go to ``results`` (default
    ``out/results``), and a rerun collects only what is missing (:mod:`headstats.jobs.compare`)."""
    return compare_with_answer(models, out=out, spec=spec, analysis=analysis, title=title, **options)[0]


__all__ = ["compare", "compare_with_answer", "plan_study", "run_loaded", "run_model_units", "run_study", "run_units"]
