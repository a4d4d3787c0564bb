"""``headstats run FILE``: the file's kind looked up once, then the same steps for every kind.

Load (every key checked), check the run against the kind (its own refusals, a launcher, its
stages), then either the dry run (:func:`headstats.studies.dryrun.dry_run_units` over the kind's
planned units) or the kind's stages, resuming finished work, and the report last, rebuilt from the
results alone. Work a run here leaves for another machine is named after the report is written.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from headstats.jobs.dryrun import DryRun
from headstats.specs import CompareSpec, Resources, RunSpec
from headstats.studies.registry import STUDY_KINDS, Study, checked_run, kind_of

logger = logging.getLogger("headstats")


def plan_study(study: Study, run: RunSpec | None = None, **options: object):
    """The units ``run`` (or its fields by name) would compute for ``study``."""
    kind = STUDY_KINDS.get(study.kind)
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
    from headstats.studies.dryrun import dry_run_units

    kind = STUDY_KINDS.get(study.kind)
    run = checked_run(kind, study, run, grid)
    if run.dry_run:
        return dry_run_units(kind, kind.plan(study, run), probe_sequences=probe_sequences)
    started = time.monotonic()
    left = kind.run(study, run, resources=resources, progress=progress)
    index = kind.report(study, run, progress=progress) if "report" in run.stages else None
    logger.info("done in %.0f s", time.monotonic() - started)
    if left is not None:
        raise left
    return index


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
    from headstats.jobs.compare import run_comparison
    from headstats.report.compare import write_comparison

    spec = CompareSpec.from_kwargs({**options, "models": tuple(models), "out": os.fspath(out)}, base=spec)
    result = run_comparison(spec)
    logger.info("collection %.0f s, statistics %.0f s", result.timings["collect_s"], result.timings["statistics_s"])
    return write_comparison(result, Path(out), analysis=None if analysis is None else os.fspath(analysis), title=title)


__all__ = ["compare", "plan_study", "run_loaded", "run_study"]
