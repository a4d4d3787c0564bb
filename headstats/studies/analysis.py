"""The analysis kind: a file without a kind's table (``analyses/embedded.toml``, ``study.toml``, the
fine-tuning analyses ``finetuning*.toml``; :mod:`headstats.jobs.analysis`).

Its units: per selected model, one collection per ``[collect]`` dataset (stage collect; sequences,
planned by :func:`~headstats.jobs.collect.plan_collection` once the model loads) and one zeroing sweep
per ``[[ablate]]`` task (stage ablate; passes, planned by :func:`~headstats.jobs.sweep_plan.plan_sweep`
from the results folder alone). A model folder not written yet (a fine-tuning chain still training,
as in ``finetuning_confirm.toml``, whose ``[design]`` is checked on load) is an absent unit. The report
is rebuilt from the Parquet results alone (:mod:`headstats.report`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

from headstats.io import store
from headstats.jobs.analysis import AnalysisSpec, load_analysis, merged_load, planned_points
from headstats.jobs.dryrun import SWEEP_NOTE, WorkUnit
from headstats.jobs.dryrun_units import PassTimer, count_sweep, measure_collection, measure_sweep
from headstats.options import narrow
from headstats.specs import Resources, RunSpec, SweepSpec
from headstats.studies.registry import Session, Study, StudyKind, Unit, not_found_here, register_kind

logger = logging.getLogger("headstats")


def load(path: Path) -> Study:
    return Study("analysis", Path(path), load_analysis(path))


def analysis_units(spec: AnalysisSpec, run: RunSpec, *, label: str = "", bf16_said: bool = False) -> list[Unit]:
    """The units of ``run``'s stages for the models it selects of ``spec``."""
    load_options = merged_load(spec, run)
    units: list[Unit] = []
    for name in spec.selected_models(run.all_models, run.only_models):
        local = Path(name).expanduser()
        if local.is_absolute() and not local.exists():  # a Hub id is never absolute
            units.append(Unit(name, "collect", "-", "sequences", None, None, load_options, label=label, absent=True))
            continue
        missing = not_found_here(name)
        if missing:
            units.append(
                Unit(name, "collect", "-", "sequences", None, None, load_options, label=label, missing=missing)
            )
            continue
        if "collect" in run.stages:
            for d in spec.collect_datasets:
                work = (spec, d)
                units.append(
                    Unit(
                        name,
                        "collect",
                        d,
                        "sequences",
                        None,
                        None,
                        load_options,
                        work,
                        label=label,
                        bf16_said=bf16_said,
                    )
                )
        if "ablate" in run.stages:
            for ablation in spec.ablate:
                # Counted from the results folder alone; files from before the whole-sequence record
                # count as left here, and the loaded model decides them.
                counts = count_sweep(spec.results, name, ablation, load_options)
                units.append(
                    Unit(
                        name,
                        "ablate",
                        counts.plan.task_name,
                        "sweep passes",
                        counts.passes_left,
                        counts.passes_total,
                        load_options,
                        (spec, ablation),
                        counts.unit(name, None),
                        label=label,
                        bf16_said=bf16_said,
                    )
                )
    return units


def plan(study: Study, run: RunSpec) -> list[Unit]:
    return analysis_units(study.spec, run)


def measure(unit: Unit, model, tokenizer, probe: int, rng, timer: PassTimer | None = None) -> WorkUnit:
    """A unit's work is (its file, the dataset or the ``[[ablate]]`` section)."""
    spec, what = unit.work
    if unit.stage == "collect":
        return measure_collection(spec.results, spec.collect, unit.model, model, tokenizer, what, probe, rng, timer)
    return measure_sweep(spec.results, unit.model, model, tokenizer, what, probe, rng, timer)


def run_unit(unit: Unit, session: Session) -> None:
    """One collection (a dataset's texts, resuming by sample id) or one zeroing sweep (its points,
    resuming finished ones) of one model; the model stays loaded for the next unit of the same."""
    from headstats.jobs.collect import collect_scores
    from headstats.jobs.sweep import run_sweep

    spec, what = unit.work
    model, tokenizer = session.model(unit)
    if unit.stage == "collect":
        collect = replace(spec.collect, progress=session.progress)
        result = collect_scores(model, tokenizer, what, spec.results, spec=collect)
        logger.info("%s[%s] %s: %d sequences (%d new)", unit.label, unit.model, what, result.n_samples, result.n_new)
        return
    logger.info("%s[%s] ablation sweep on %s: %s", unit.label, unit.model, what.task, ", ".join(what.scores or ()))
    sweep = replace(narrow(what, SweepSpec), progress=session.progress)
    run_sweep(model, str(what.task), tokenizer=tokenizer, out=spec.results, spec=sweep)


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
    from headstats.studies.runner import run_loaded

    analysis = analysis if isinstance(analysis, AnalysisSpec) else load_analysis(analysis)
    run = RunSpec.from_kwargs(options, base=run)
    grid = "launcher" if resources is not None and resources.launcher is not None else None
    study = Study("analysis", analysis.path, analysis)
    return run_loaded(study, run, resources=resources, grid=grid, progress=progress)


def report_analysis(analysis: AnalysisSpec, run: RunSpec, *, progress: bool = True) -> Path:
    """Rebuild the report of ``analysis`` from its results, naming the sweep points the file plans
    for the models ``run`` may select that are not finished yet; returns index.html."""
    from headstats.report.writer import build_report  # matplotlib: not for a run's other stages or its dry run

    logger.info("building the report into %s", analysis.report)
    options = analysis.report_options
    spec = replace(options, title=analysis.description or analysis.name, progress=progress and options.progress)
    models = analysis.selected_models(run.all_models)
    planned = planned_points(analysis, models, merged_load(analysis, run)) if analysis.ablate else None
    return build_report(analysis.results, analysis.report, spec=spec, planned=planned, analysis=analysis.path)


def begin(study: Study, run: RunSpec) -> None:
    store.ensure_writable(study.spec.results)


def check(study: Study, run: RunSpec, grid: str | None) -> None:
    from headstats.options import SpecError

    if run.only_paths:
        raise SpecError(
            "paths",
            f"chooses among a confirmation file's computation paths; {study.path} has none (no [confirm] section)",
            label="--paths",
        )


ANALYSIS = register_kind(
    StudyKind(
        name="analysis",
        section=None,
        description="collect score tables, run zeroing sweeps, report (analyses/embedded.toml)",
        stages=("collect", "ablate", "report"),
        load=load,
        plan=plan,
        measure=measure,
        run=run_unit,
        report=lambda study, run, *, progress=True: report_analysis(study.spec, run, progress=progress),
        note=SWEEP_NOTE,
        check=check,
        begin=begin,
        grid=True,
        example="analyses/embedded.toml",
    )
)

__all__ = ["ANALYSIS", "analysis_units", "report_analysis", "run_analysis", "run_unit"]
