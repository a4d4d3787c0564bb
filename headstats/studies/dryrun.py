"""``headstats run --dry-run``: one loop over a study's units, the same for every kind.

The kind plans its units (:class:`~headstats.studies.registry.Unit`) from the results folder alone.
A model whose units are all done, or need no model, is not read: its rows are the counts. Otherwise
its configuration and tokenizer are read from its files, without torch or transformers
(:func:`headstats.io.model_files.read_model_files`; where the files do not describe it fully, its
tokenizer and shapes come from transformers instead, :func:`headstats.io.models.load_skeleton`: no
weights either way), and the kind counts each of its units and times it at the recorded speed of the
closest pass (:class:`~headstats.jobs.dryrun_units.PassTimer`); with ``measure`` the model loads once
instead and each unit is timed on a probe of its own sequences (:mod:`headstats.jobs.dryrun_units`).
Either way the estimate is the work left over a rate, and the summary says how each model was read.
A unit whose model folder is not written yet, or which a run here leaves for another machine, is
named below the table instead. Nothing is written.
"""

from __future__ import annotations

import logging
import random
from contextlib import nullcontext
from dataclasses import replace
from itertools import groupby

from headstats.jobs.dryrun import DryRun, WorkUnit, machine_load
from headstats.jobs.dryrun_units import PassTimer, announce
from headstats.specs import RunSpec
from headstats.studies.registry import Study, StudyKind, Unit

logger = logging.getLogger("headstats")


def _rows(unit: Unit, measured: WorkUnit | list[WorkUnit] | None) -> list[WorkUnit]:
    """The unit's rows: one, or one per task of a unit that spans several (each naming its task)."""
    rows = measured if measured is not None else unit.counted
    if rows is None:  # counted only once its model is loaded, and it was not
        rows = WorkUnit(unit.model, unit.stage, unit.what, 0, None, None, None, 0, 0, 0, None)
    if isinstance(rows, WorkUnit):
        return [replace(rows, model=unit.model, stage=unit.stage, what=unit.what)]
    return [replace(row, model=unit.model, stage=unit.stage) for row in rows]


def _refused(label: str, name: str, units: list[Unit]) -> str:
    """A (label, model) a run here leaves for another machine: its work left and the reason."""
    left = sum(u.left or 0 for u in units)
    noun = units[0].computes.split()[-1]  # "passes", "points"
    if left == 1:
        noun = noun.removesuffix("es") if noun.endswith("sses") else noun.removesuffix("s")
    return f"{label}{name}, {left} {noun} left: {units[0].refused}"


def dry_run_units(
    kind: StudyKind,
    units: list[Unit],
    *,
    probe_sequences: int = 8,
    measure: bool = False,
    writes: tuple[str, ...] = (),
    quiet: bool = False,
) -> DryRun:
    """The dry run of ``units`` (planned by ``kind``): each model's skeleton read at most once, and only
    when one of its units has work left that needs it, its units timed at recorded speeds; with
    ``measure``, each such model loaded once and its units timed on probes of ``probe_sequences`` items.
    ``writes``: the folders a real run writes, as the summary names them. ``quiet``: no log line per
    model (the estimate a real run gives at its start)."""
    say = logger.debug if quiet else logger.info

    load_at_start = machine_load()  # before this run's own work adds to it
    rows: list[WorkUnit] = []
    absent: list[str] = []
    refused: list[str] = []
    missing: list[str] = []
    read: dict[str, str] = {}
    device = "this machine (no model loaded)"
    for (label, name), group in groupby(units, key=lambda u: (u.label, u.model)):
        group = list(group)
        if any(u.absent for u in group):
            say("%s[%s] not written yet: not loaded", label, name)
            absent.append(name)
            continue
        why = next((u.missing for u in group if u.missing), None)
        if why:
            say("%s[%s] not found here: not counted", label, name)
            missing.append(why)
            continue
        if any(u.refused is not None for u in group):
            refused.append(_refused(label, name, [u for u in group if u.refused is not None]))
        live = [u for u in group if u.refused is None]
        if not live:
            continue
        needs = [u for u in live if u.load is not None and not u.done]
        if not needs:
            counted = "no pass left" if all(u.done for u in live) else "counted from records"
            say("%s[%s] %s: not loaded", label, name, counted)
            rows += [row for u in live for row in _rows(u, None)]
            continue
        if measure:
            say("%s[%s] loading (dry run)", label, name)
            model, tokenizer, device = _load_for_measuring(name, needs[0], bf16_said=any(u.bf16_said for u in live))
            timer = None
        else:
            say("%s[%s] reading its configuration and tokenizer (no weights)", label, name)
            model, tokenizer, read[name] = read_model(name, needs[0])
            timer = (
                PassTimer.for_files(model, name) if read[name] == FILES_READ else PassTimer.for_skeleton(model, name)
            )
            device = model.headstats_device
        rng = random.Random(0)
        for step, unit in enumerate(live, 1):
            if unit.load is None:  # needs no model (a recorded rate)
                rows += _rows(unit, None)
                continue
            if measure:
                announce(label, name, step, len(live), unit.stage, unit.what, probe_sequences)
            rows += _rows(unit, kind.measure(unit, model, tokenizer, probe_sequences, rng, timer=timer))
        del model
    return DryRun(
        rows,
        device,
        probe_sequences if measure else 0,
        note=kind.note,
        refused=refused,
        absent=absent,
        missing=missing,
        load_at_start=load_at_start,
        writes=writes,
        read=read,
    )


def _load_for_measuring(name: str, unit: Unit, *, bf16_said: bool) -> tuple[object, object, str]:
    """(model, tokenizer, device) of ``name`` loaded with its weights, as ``unit`` loads it, for
    ``--measure``; a bf16 cost the kind has said already is not warned about again."""
    from headstats.io.models import bf16_cost_said, load_model

    with bf16_cost_said() if bf16_said else nullcontext():
        model, tokenizer = load_model(unit.loads or name, **unit.load.kwargs())
    return model, tokenizer, str(next(model.parameters()).device)


FILES_READ = (
    "from their files, without torch or transformers (shapes from config.json, tokens counted by the tokenizers "
    "library from tokenizer.json)"
)


def read_model(name: str, unit: Unit) -> tuple[object, object, str]:
    """(model, tokenizer, how they were read) of ``name`` as ``unit`` loads it: from its files
    (:data:`FILES_READ`), or where they do not describe it fully, through transformers, saying why."""
    from headstats.io.model_files import NeedsTransformers, read_model_files

    try:
        return (*read_model_files(unit.loads or name, **unit.load.kwargs()), FILES_READ)
    except NeedsTransformers as why:
        from headstats.io.models import load_skeleton

        model, tokenizer = load_skeleton(unit.loads or name, **unit.load.kwargs())
        return model, tokenizer, f"with transformers, as {why} (its tokenizer, and its shapes on the meta device)"


def dry_run(study: Study, run: RunSpec | None = None, *, probe_sequences: int = 8, **options: object) -> DryRun:
    """What ``run`` (a :class:`RunSpec`, or its fields by name: ``measure=True`` to time on probes) would
    compute for ``study``, and for about how long, writing nothing."""
    from headstats.studies.registry import STUDY_KINDS, checked_run

    kind = STUDY_KINDS[study.kind]
    run = checked_run(kind, study, RunSpec.from_kwargs(options, base=run))
    return dry_run_units(
        kind,
        kind.plan(study, run),
        probe_sequences=probe_sequences,
        measure=run.probe,
        writes=written_folders(study, tuple(run.stages)),
    )


def written_folders(study: Study, stages: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The folders a run of ``study`` writes, each with what goes there: the report's only where the
    run's ``stages`` (None: all) include the report."""
    report = () if stages is not None and "report" not in stages else (f"{study.report} (the report)",)
    return (f"{study.results} (results: score tables, sweep points)", *report)


__all__ = ["dry_run", "dry_run_units", "written_folders"]
