"""The skipping kind: a file with ``[adaptive]`` (``analyses/adaptive_embedded.toml``;
:mod:`headstats.jobs.adaptive`).

Its stages: ablate (per model and task, the items measured with every selection at every share,
resuming at the last finished chunk) and report. Its units: one per model and task, counted in
items; the dry run times one item of each on the loaded model (no recorded speed covers this pass).
Before the first unit the file's [models] and [adaptive] are registered under its results, so a
file changed after its first item is refused (:mod:`headstats.jobs.registration`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from headstats.io import store
from headstats.jobs.adaptive_plan import AdaptiveStudy, finished_items, load_adaptive
from headstats.jobs.dryrun import WorkUnit
from headstats.jobs.dryrun_units import PassTimer
from headstats.jobs.registration import register
from headstats.options import SpecError, narrow
from headstats.specs import LoadOptions, RunSpec
from headstats.studies.registry import Session, Study, StudyKind, Unit, not_found_here, register_kind

logger = logging.getLogger("headstats")

NOTE = "ablate: items of a task left to measure, each with every selection at every share; timed on one item."


def load(path: Path) -> Study:
    return Study("skipping", Path(path), load_adaptive(path))


def chosen_models(study: AdaptiveStudy, run: RunSpec) -> list[str]:
    """``--models`` (each one the file lists), else the file's models (and its optional ones with ``--all-models``)."""
    known = study.model_names(all_models=True)
    if not run.only_models:
        return study.model_names(run.all_models)
    unknown = [m for m in run.only_models if m not in known]
    if unknown:
        raise SpecError(
            "models",
            f"{', '.join(unknown)} is not in {study.path} (it has {', '.join(known)}); add it to its [models] names",
            label="--models",
        )
    return list(run.only_models)


def plan(study: Study, run: RunSpec) -> list[Unit]:
    spec: AdaptiveStudy = study.spec
    load_options = narrow(spec.models, LoadOptions)
    units: list[Unit] = []
    if "ablate" not in run.stages:
        return units
    for name in chosen_models(spec, run):
        missing = not_found_here(name)
        for task, limit in zip(spec.adaptive.tasks, spec.adaptive.limits, strict=True):
            left = limit - finished_items(store.adaptive_folder(spec.results, name, task))
            counted = WorkUnit(name, "ablate", task, limit, None, None, None, int(left > 0), 1, 1, None)
            work = (spec, task, limit)
            units.append(Unit(name, "ablate", task, "items", left, limit, load_options, work, counted, missing=missing))
    return units


def measure(unit: Unit, model, tokenizer, probe: int, rng, timer: PassTimer | None = None) -> WorkUnit:
    """One item of the unit's task measured on the loaded model, its time times the items left; with a
    ``timer`` (no weights loaded) the unit stays untimed: no recorded speed covers this pass."""
    from headstats.engine.pruned_model import geometry  # torch: only once a model is loaded
    from headstats.jobs.adaptive import Design, calibration_means, item_rows, static_sets, task_items

    spec, task, limit = unit.work
    base = WorkUnit(unit.model, "ablate", task, limit, None, None, None, int(bool(unit.left)), 1, 1, None)
    if timer is not None or not unit.left:
        return base
    settings = spec.adaptive
    items, calibration = task_items(
        task,
        tokenizer,
        limit=limit,
        calibration_limit=min(2, settings.calibration_limit),
        seed=settings.seed,
        model_name=unit.model,
        prompt_tokens=settings.prompt_tokens,
        continuation_tokens=settings.continuation_tokens,
    )
    _, _, kv, _ = geometry(model)
    means = calibration_means(model, calibration, settings.score)
    design = Design(
        settings.score,
        settings.shares,
        settings.unit,
        settings.seed,
        static_sets(means, settings.shares, settings.score, settings.unit, kv),
    )
    start = time.perf_counter()
    item_rows(model, items[0], design)
    seconds = (time.perf_counter() - start) * unit.left
    return WorkUnit(unit.model, "ablate", task, limit, None, None, None, 1, 1, 1, None, seconds=seconds)


def begin(study: Study, run: RunSpec) -> None:
    """The file's deciding tables registered under its results before the first item (or checked)."""
    if "ablate" in run.stages:
        register(study.results, study.spec.registered, file=study.path.as_posix(), what="a skipping study's design")


def run(unit: Unit, session: Session) -> None:
    from headstats.jobs.adaptive import run_task  # torch: only when the study runs

    spec, task, limit = unit.work
    model, tokenizer = session.model(unit)
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        logger.info("%s / %s: %d of %d items (%.0f s)", unit.model, task, done, total, time.perf_counter() - started)

    run_task(model, tokenizer, unit.model, task, limit, spec.adaptive, spec.results, progress=progress)


def report(study: Study, run: RunSpec, *, progress: bool = True) -> Path:
    from headstats.report.adaptive import build_adaptive_report

    return build_adaptive_report(study.spec)


def check(study: Study, run: RunSpec, grid: str | None) -> None:
    chosen_models(study.spec, run)


SKIPPING = register_kind(
    StudyKind(
        name="skipping",
        section="adaptive",
        description="skip heads per prompt: four selections at every share against the full model "
        "(analyses/adaptive_embedded.toml)",
        stages=("ablate", "report"),
        load=load,
        plan=plan,
        measure=measure,
        run=run,
        report=report,
        note=NOTE,
        check=check,
        begin=begin,
        example="analyses/adaptive_embedded.toml",
    )
)

__all__ = ["SKIPPING"]
