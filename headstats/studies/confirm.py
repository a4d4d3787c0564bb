"""The confirmation kind: a file with ``[confirm]`` and ``[[claims]]`` (``analyses/confirm.toml``;
:mod:`headstats.jobs.confirm`).

Its units: per (computation path, model) the path's sweep (stage ablate), planned as an analysis
sweep under the path's dtype and run as one (:func:`headstats.studies.analysis.run_unit`); those a
run on this machine leaves for another (:func:`~headstats.jobs.confirm.left_here`) are refused
units, named with the reason (and by the dry run with their passes left), and on a CPU without bf16
units the bf16 paths it runs come after the fp32 ones. Before the first sweep the file's decision
keys are recorded (:func:`~headstats.jobs.confirm.register`). The report is the claims' verdicts
(:mod:`headstats.report.confirm`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from headstats.io import store
from headstats.jobs.confirm import (
    ConfirmPlan,
    PathsLeftError,
    check_run,
    left_here,
    load_confirmation,
    path_run,
    register,
    selected,
    slow_bf16_warning,
)
from headstats.jobs.dryrun import SWEEP_NOTE
from headstats.options import SpecError
from headstats.specs import RunSpec
from headstats.studies.analysis import analysis_units, run_unit
from headstats.studies.analysis import measure as measure_analysis
from headstats.studies.registry import Session, Study, StudyKind, Unit, register_kind

logger = logging.getLogger("headstats")


def load(path: Path) -> Study:
    return Study("confirmation", Path(path), load_confirmation(path))


def plan(study: Study, run: RunSpec) -> list[Unit]:
    """Every chosen (path, model) sweep, named with its path; those left for another machine refused.
    When bf16 paths run here on a CPU without bf16 units (``--paths`` named them, or this kind of CPU
    began them), they come after the fp32 ones."""
    from dataclasses import replace

    confirmation: ConfirmPlan = study.spec
    if "ablate" not in run.stages:
        return []
    refused = left_here(confirmation, run)
    chosen = selected(confirmation, run)
    runs = [path for path, spec in chosen if (path.name, spec.models[0]) not in refused]
    warning = slow_bf16_warning(runs, run.device)
    if warning:
        logger.warning(warning)
        chosen = sorted(chosen, key=lambda pair: pair[0].dtype == "bfloat16")
    units: list[Unit] = []
    for path, spec in chosen:
        model = spec.models[0]  # one model per (path, model) analysis
        planned = analysis_units(spec, path_run(run), label=f"[{path.name}] ", bf16_said=bool(warning))
        if (path.name, model) in refused:
            planned = [replace(u, refused=refused[path.name, model]) for u in planned]
        units += [replace(u, what=f"{u.what} [{path.name}]") for u in planned]
    return units


def begin(study: Study, run: RunSpec) -> None:
    store.ensure_writable(study.spec.results)
    register(study.spec)


def run_path(unit: Unit, session: Session) -> str | None:
    """A path's sweep; one the sweep finds begun on other bf16 kernels is left for another machine."""
    from headstats.jobs.checkpoint import MixedKernelsError

    try:
        run_unit(unit, session)
    except MixedKernelsError as err:
        return str(err)
    return None


def paths_left(lines: list[str]) -> PathsLeftError:
    return PathsLeftError(
        f"{len(lines)} path and model pair(s) not run on this machine, every other one ran:\n" + "\n".join(lines)
    )


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


def report(study: Study, run: RunSpec, *, progress: bool = True) -> Path:
    """The confirmation's report from its results alone."""
    from headstats.report.confirm import write_confirmation  # matplotlib: not for the other stages or a dry run

    return write_confirmation(study.spec, progress=progress)


CONFIRMATION = register_kind(
    StudyKind(
        name="confirmation",
        section="confirm",
        description="pre-registered claims on held-out questions, over computation paths (analyses/confirm.toml)",
        stages=("ablate", "report"),
        load=load,
        plan=plan,
        measure=measure_analysis,
        run=run_path,
        report=report,
        note=SWEEP_NOTE,
        check=check,
        begin=begin,
        left=paths_left,
        example="analyses/confirm.toml",
    )
)

__all__ = ["CONFIRMATION", "run_confirmation"]
