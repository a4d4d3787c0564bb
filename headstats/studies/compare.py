"""The comparison kind: a file with ``[compare]`` (``analyses/compare_embedded.toml``;
:mod:`headstats.jobs.compare`), the same as ``headstats compare`` with the file's options.

Its stages: collect (every model on every dataset, and the reference once more under the other
prompt format, the margin's yardstick) and report (the statistics of :mod:`headstats.stats.compare`
and the answer-first report, from the score tables and their records alone: it loads no model and
writes nothing under the results folder; a missing table is refused with the command that collects
it). Its units: one collection per (model, dataset), a model's together
(:func:`~headstats.jobs.compare.plan_units`), counted by :func:`~headstats.jobs.collect.plan_collection`
once the model loads. Before the first, every model is found and no two share a table name
(:func:`~headstats.jobs.compare.check_models`); after each, the fine-tuning chain its model belongs
to is recorded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from headstats.jobs.compare import (
    COMPARED,
    FORMAT_CHANGE,
    auto_format_change,
    check_models,
    collect_unit,
    load_comparison,
    plan_units,
    read_comparison,
    results_root,
)
from headstats.jobs.compare_identity import split_dtype
from headstats.jobs.dryrun import WorkUnit
from headstats.jobs.dryrun_units import PassTimer, measure_collection
from headstats.jobs.finetune.records import record_chains
from headstats.options import narrow
from headstats.specs import AnalysisHeader, CollectSpec, CompareSpec, LoadOptions, RunSpec
from headstats.studies.registry import Session, Study, StudyKind, Unit, not_found_here, register_kind

logger = logging.getLogger("headstats")

COMPARE_NOTE = (
    "passes of a comparison: one collection pass per (model, dataset) and one more per dataset for the reference "
    "under the other prompt format (the margin's yardstick); the statistics and the report are not counted."
)


@dataclass(frozen=True)
class LoadedComparison:
    """A checked comparison file: its options, header and folders."""

    spec: CompareSpec
    header: AnalysisHeader
    results: Path
    report: Path


def load(path: Path) -> Study:

    spec, header, report = load_comparison(path)
    return Study("comparison", Path(path), LoadedComparison(spec, header, Path(spec.scores_dir), report))


def with_run(spec: CompareSpec, run: RunSpec) -> CompareSpec:
    """The file's options with the loading options ``run`` sets (dtype, device)."""
    overrides = {k: getattr(run, k) for k in ("dtype", "device") if getattr(run, k) is not None}
    return replace(spec, **overrides)


def plan(study: Study, run: RunSpec) -> list[Unit]:
    """The comparison's collections as :func:`headstats.jobs.compare.plan_units` plans them (every
    model and replicate on every dataset, the reference under the format change too)."""
    if "collect" not in run.stages:
        return []
    spec = with_run(study.spec.spec, run)
    load_options = narrow(spec, LoadOptions)
    units, missing_models = [], set()
    for planned in plan_units(spec):
        name = planned.model
        base, dtype = split_dtype(name)
        missing = not_found_here(base)
        if missing:
            if name not in missing_models:
                missing_models.add(name)
                units.append(Unit(name, "collect", "-", "sequences", None, None, load_options, missing=missing))
            continue
        load_with = replace(load_options, dtype=dtype) if dtype else load_options
        folder = planned.root.name
        what = planned.dataset if folder == COMPARED else f"{planned.dataset} ({folder})"
        work = (spec, planned)
        units.append(Unit(name, "collect", what, "sequences", None, None, load_with, work, loads=base))
    return units


def measure(unit: Unit, model, tokenizer, probe: int, rng, timer: PassTimer | None = None) -> WorkUnit:
    spec, planned = unit.work
    if split_dtype(unit.model)[1]:  # its own tables: the name (and so the slug) says the dtype
        model.headstats_name = unit.model
    collect = narrow(spec, CollectSpec)
    if planned.root.name == FORMAT_CHANGE:
        collect = replace(collect, prompt_format=auto_format_change(spec, tokenizer))
    return measure_collection(planned.root, collect, unit.model, model, tokenizer, planned.dataset, probe, rng, timer)


def begin(study: Study, run: RunSpec) -> None:
    check_models(with_run(study.spec.spec, run))


def run(unit: Unit, session: Session) -> None:
    """One collection, then the fine-tuning chain its model belongs to recorded."""
    from headstats.io.model_paths import resolve_model_path

    spec, planned = unit.work
    model, tokenizer = session.model(unit)
    collect_unit(spec, planned, model, tokenizer)
    record_chains([str(resolve_model_path(unit.loads or unit.model))], results_root(spec))


def report(study: Study, run: RunSpec, *, progress: bool = True) -> Path:
    """The report from the committed tables alone (:func:`~headstats.jobs.compare.read_comparison`)."""
    from headstats.report.compare import write_comparison

    loaded: LoadedComparison = study.spec
    spec = replace(with_run(loaded.spec, run), out=str(loaded.report))  # as headstats compare --out records it
    result = read_comparison(spec, collect_with=f"headstats run {study.path} --stages collect")
    logger.info("statistics %.0f s", result.timings["statistics_s"])
    title = loaded.header.description or None
    return write_comparison(result, loaded.report, analysis=str(study.path), title=title)


COMPARISON = register_kind(
    StudyKind(
        name="comparison",
        section="compare",
        description="models against a reference on the same texts, answer first (analyses/compare_embedded.toml)",
        stages=("collect", "report"),
        load=load,
        plan=plan,
        measure=measure,
        run=run,
        report=report,
        note=COMPARE_NOTE,
        begin=begin,
        example="analyses/compare_embedded.toml",
    )
)

__all__ = ["COMPARISON", "LoadedComparison"]
