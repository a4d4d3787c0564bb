"""The confirmation kind: a file with ``[confirm]`` and ``[[claims]]`` (``analyses/confirm.toml``;
:mod:`headstats.jobs.confirm`).

Its units: per (computation path, model) the path's sweep (stage ablate), planned as an analysis
sweep under the path's dtype; those a run on this machine leaves for another
(:func:`~headstats.jobs.confirm.left_here`) are refused units, named with their passes left and the
reason. The report is the claims' verdicts (:mod:`headstats.report.confirm`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from headstats.jobs.confirm import (
    ConfirmPlan,
    PathsLeftError,
    check_run,
    left_here,
    load_confirmation,
    path_run,
    run_paths,
    selected,
    slow_bf16_warning,
)
from headstats.jobs.dryrun import SWEEP_NOTE
from headstats.options import SpecError
from headstats.report.confirm import write_confirmation
from headstats.specs import RunSpec
from headstats.studies.analysis import analysis_units
from headstats.studies.analysis import measure as measure_analysis
from headstats.studies.registry import Study, StudyKind, Unit, register_kind

logger = logging.getLogger("headstats")


def load(path: Path) -> Study:
    return Study("confirmation", Path(path), load_confirmation(path))


def plan(study: Study, run: RunSpec) -> list[Unit]:
    """Every chosen (path, model) sweep, named with its path; those left for another machine refused."""
    from dataclasses import replace

    confirmation: ConfirmPlan = study.spec
    refused = left_here(confirmation, run)
    chosen = selected(confirmation, run)
    runs = [path for path, spec in chosen if (path.name, spec.models[0]) not in refused]
    warning = slow_bf16_warning(runs, run.device)
    if warning:
        logger.warning(warning)
    units: list[Unit] = []
    for path, spec in chosen:
        model = spec.models[0]  # one model per (path, model) analysis
        planned = analysis_units(spec, path_run(run), label=f"[{path.name}] ", bf16_said=bool(warning))
        if (path.name, model) in refused:
            passes = sum(u.left or 0 for u in planned)
            why = f"[{path.name}] {model}, {passes} passes left: {refused[path.name, model]}"
            planned = [replace(u, refused=why) for u in planned]
        units += [replace(u, what=f"{u.what} [{path.name}]") for u in planned]
    return units


def run(study: Study, run: RunSpec, *, resources=None, progress: bool = True) -> BaseException | None:
    if "ablate" not in run.stages:
        return None
    try:
        run_paths(study.spec, run, progress=progress)
    except PathsLeftError as err:
        return err  # what this machine ran still reaches the report; the error then names what it left
    return None


def check(study: Study, run: RunSpec, grid: str | None) -> None:
    check_run(study.spec, run)
    if grid:
        raise SpecError(
            "launcher",
            "a confirmation file runs its paths in this process, one after another; to spread them over "
            f"jobs, run headstats run {study.path} --paths PATH --models MODEL --stages ablate in each, then "
            "--stages report once",
            label=grid,
        )


def run_confirmation(
    plan: ConfirmPlan, run: RunSpec | None = None, *, progress: bool = True, **options: object
) -> Path | None:
    """Run every path's sweeps of ``plan`` (resuming finished points), then write the verdicts to
    ``plan.report``; returns the report's index.html when the report stage ran. ``run`` (or its
    fields by name) gives the stages (ablate, report) and may set the device; each path sets its own
    dtype."""
    from headstats.studies.runner import run_loaded

    return run_loaded(Study("confirmation", plan.path, plan), RunSpec.from_kwargs(options, base=run), progress=progress)


CONFIRMATION = register_kind(
    StudyKind(
        name="confirmation",
        section="confirm",
        description="pre-registered claims on held-out questions, over computation paths (analyses/confirm.toml)",
        stages=("ablate", "report"),
        load=load,
        plan=plan,
        measure=measure_analysis,
        run=run,
        report=lambda study, run, *, progress=True: write_confirmation(study.spec, progress=progress),
        note=SWEEP_NOTE,
        check=check,
        example="analyses/confirm.toml",
    )
)

__all__ = ["CONFIRMATION", "run_confirmation"]
