"""``headstats run``: every stage of an analysis or confirmation file, the report last.

A file's models run their collection and sweeps (:mod:`headstats.jobs.analysis`,
:mod:`headstats.jobs.confirm`), resuming finished work; the report is then rebuilt from the Parquet
results alone (:mod:`headstats.report`). What to run is one :class:`~headstats.specs.RunSpec`:
the stages, the models, the loading options that override the file's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path

from headstats.io import store
from headstats.jobs.analysis import AnalysisSpec, load_analysis, merged_load, needs_model, planned_points, run_models
from headstats.jobs.confirm import ConfirmPlan, PathsLeftError, check_run, run_paths
from headstats.jobs.dryrun import DryRun
from headstats.report.confirm import write_confirmation
from headstats.report.writer import build_report
from headstats.specs import AnalysisHeader, CompareSpec, Resources, RunSpec

logger = logging.getLogger("headstats")


def run_analysis(
    analysis: AnalysisSpec | str | os.PathLike,
    run: RunSpec | None = None,
    *,
    resources: Resources | None = None,
    progress: bool = True,
    **options: object,
) -> Path | None:
    """Run the stages of ``run`` (a :class:`RunSpec`, or its fields by name: ``stages``,
    ``all_models``, ``only_models``, ``dtype``, ``device``, ...) for ``analysis`` (a loaded file or
    its path) in order, resuming finished work; returns the report's index.html when the report
    stage ran. With ``resources`` (a launcher; see :mod:`headstats.jobs.grid`) each model's
    collection and sweeps run as one grid job, and the report is built here once all have finished."""
    analysis = analysis if isinstance(analysis, AnalysisSpec) else load_analysis(analysis)
    run = RunSpec.from_kwargs(options, base=run)
    store.ensure_writable(analysis.results)
    started = time.monotonic()
    if needs_model(analysis, run):
        run_models(analysis, run, resources=resources, progress=progress)
    index = report_analysis(analysis, run, progress=progress) if "report" in run.stages else None
    logger.info("done in %.0f s", time.monotonic() - started)
    return index


def report_analysis(analysis: AnalysisSpec, run: RunSpec, *, progress: bool = True) -> Path:
    """Rebuild the report of ``analysis`` from its results, naming the sweep points the file plans
    for the models ``run`` may select that are not finished yet; returns index.html."""
    logger.info("building the report into %s", analysis.report)
    options = analysis.report_options
    spec = replace(options, title=analysis.description or analysis.name, progress=progress and options.progress)
    models = analysis.selected_models(run.all_models)
    planned = planned_points(analysis, models, merged_load(analysis, run)) if analysis.ablate else None
    return build_report(analysis.results, analysis.report, spec=spec, planned=planned, analysis=analysis.path)


def run_confirmation(
    plan: ConfirmPlan, run: RunSpec | None = None, *, progress: bool = True, **options: object
) -> Path | None:
    """Run every path's sweeps of ``plan`` (resuming finished points), then write the verdicts to
    ``plan.report``; returns the report's index.html when the report stage ran. ``run`` (or its
    fields by name) gives the stages (ablate, report) and may set the device; each path sets its own
    dtype."""
    run = RunSpec.from_kwargs(options, base=run)
    check_run(plan, run)
    left: PathsLeftError | None = None
    if "ablate" in run.stages:
        try:
            run_paths(plan, run, progress=progress)
        except PathsLeftError as err:
            left = err  # what this machine ran still reaches the report; the error then names what it left
    index = write_confirmation(plan, progress=progress) if "report" in run.stages else None
    if left is not None:
        raise left
    return index


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


def _comparison_file(path: str | os.PathLike, run: RunSpec) -> tuple[CompareSpec, AnalysisHeader, Path]:
    from headstats.jobs.compare import load_comparison

    spec, header, report = load_comparison(path)
    overrides = {k: getattr(run, k) for k in ("dtype", "device") if getattr(run, k) is not None}
    return replace(spec, **overrides), header, report


def run_comparison_file(path: str | os.PathLike, run: RunSpec | None = None, **options: object) -> Path:
    """``headstats run`` of a comparison file (a ``[compare]`` table): the comparison, its report in the
    file's report folder. ``run`` may override the loading options (dtype, device)."""
    run = RunSpec.from_kwargs(options, base=run)
    if run.dry_run:
        raise ValueError(f"a dry run of {path} is dry_run_comparison_file's: run_comparison_file runs it")
    spec, header, report = _comparison_file(path, run)
    return compare(spec.models, out=report, spec=spec, analysis=path, title=header.description or None)


def dry_run_comparison_file(path: str | os.PathLike, run: RunSpec | None = None, **options: object) -> DryRun:
    """``headstats run --dry-run`` of a comparison file: every collection it would run, and for about
    how long (:func:`headstats.jobs.dryrun.dry_run_comparison`); writes nothing."""
    from headstats.jobs.dryrun import dry_run_comparison

    spec, _, _ = _comparison_file(path, RunSpec.from_kwargs(options, base=run))
    return dry_run_comparison(spec)


__all__ = [
    "compare",
    "dry_run_comparison_file",
    "report_analysis",
    "run_analysis",
    "run_comparison_file",
    "run_confirmation",
]
