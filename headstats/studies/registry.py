"""The registry of study kinds: what a study file is, and the five things each kind does with one.

A study file (``analyses/*.toml``) names its kind by the one table that only that kind has
(``[compare]``, ``[confirm]``, ``[prune]``); a file with none of them is an analysis. Each kind
registers one :class:`StudyKind`: ``load(path) -> Study`` (every key checked before any work),
``plan(study, run) -> list[Unit]`` (what the run computes, from the one planner of that work),
``measure(unit, model, tokenizer, probe, rng, timer=None)`` (a unit counted and timed for the dry
run: at recorded speeds with a ``timer`` and the model as its files describe it, else on a few of its own
sequences), ``run(unit, session)`` (one unit, resuming what of it is done) and ``report(study, run)``
(rebuilt from the results alone). ``headstats run FILE`` looks the kind up once (:func:`kind_of`)
and every command after that is the same for every kind (:mod:`headstats.studies.runner`: one loop
over the planned units).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headstats.jobs.analysis import top_level_keys
from headstats.jobs.dryrun import WorkUnit
from headstats.registry import Registry
from headstats.specs import LoadOptions, RunSpec

logger = logging.getLogger("headstats")


@dataclass(frozen=True)
class Study:
    """A loaded study file: its kind's name, the file, and the kind's own checked spec."""

    kind: str
    path: Path
    spec: Any  # AnalysisSpec, ConfirmPlan, Frontier, or a comparison's LoadedComparison

    @property
    def results(self) -> Path:
        return Path(self.spec.results)

    @property
    def report(self) -> Path:
        return Path(self.spec.report)


@dataclass(frozen=True)
class Unit:
    """One piece of a study's work on one model, as its planner sees it before anything runs.

    ``computes`` names what is counted: "sequences" (a collection: one pass over a dataset's texts),
    "sweep passes" (a zeroing sweep: the baseline and each point that zeroes a head), "frontier
    points" (a pruned model evaluated per point), "timings" (finished points timed again). ``left``
    and ``total`` count them; ``left`` is None when only the loaded model or the run can tell (a
    collection's texts are token sequences; a frontier's time stage always runs: it ends its round,
    or says why there is nothing to time). ``counted`` is the dry run's row from the counts alone,
    or its rows when the unit spans several tasks (``None`` when the model must be loaded to count);
    ``load`` is how its model loads, None when the dry run needs none. ``work`` is the planner's own
    object, which the kind's ``measure`` and ``run`` read: a unit carries all its run needs."""

    model: str
    stage: str  # one of the --stages names: collect, ablate, time
    what: str  # the dataset, task or points
    computes: str
    left: int | None
    total: int | None
    load: LoadOptions | None
    work: Any = None
    counted: WorkUnit | tuple[WorkUnit, ...] | None = None
    label: str = ""  # leads the unit's log lines (a confirmation's path)
    absent: bool = False  # its model folder is not written yet (a fine-tuning chain still training)
    refused: str | None = None  # why a run on this machine leaves it for another (not run; named after the report)
    missing: str | None = None  # why its model cannot be found on this machine (a real run stops there)
    loads: str | None = None  # the name or folder its model loads from, when ``model`` names it otherwise
    bf16_said: bool = False  # its study has said what bf16 costs on this CPU (no warning when it loads)

    @property
    def done(self) -> bool:
        return self.left == 0

    def describe(self) -> str:
        """The unit in a log line: "collect smollm2-135m / wikipedia, 128 sequences left"."""
        left = "" if self.left is None else f", {self.left} {self.computes} left"
        return f"{self.label}{self.stage} {self.model} / {self.what}{left}"


# (unit, model (loaded, or read from its files), tokenizer, probe items, rng, timer=PassTimer or None) -> its rows
Measure = Callable[..., "WorkUnit | list[WorkUnit]"]


class Session:
    """What a kind's ``run`` gets beside its unit: the run's options, whether to show progress
    bars, and the model of the unit before, kept loaded while the next unit loads the same one
    (a model's collections and sweeps share one load)."""

    def __init__(self, run: RunSpec, *, progress: bool = True) -> None:
        self.run = run
        self.progress = progress
        self._loaded: tuple[tuple, Any, Any] | None = None

    def model(self, unit: Unit, name: str | None = None, load: LoadOptions | None = None) -> tuple[Any, Any]:
        """(model, tokenizer) of ``unit``: ``name`` (default: the unit's) loaded with ``load`` (default:
        the unit's), reused when the unit before loaded the same."""
        from headstats.io.models import bf16_cost_said, load_model

        name = name or unit.loads or unit.model
        load = load or unit.load or LoadOptions()
        key = (name, load, unit.model)
        if self._loaded is None or self._loaded[0] != key:
            self._loaded = None  # the previous model goes before the next loads
            logger.info("%s[%s] loading", unit.label, unit.model)
            with bf16_cost_said() if unit.bf16_said else nullcontext():
                model, tokenizer = load_model(name, **load.kwargs())
            self._loaded = (key, model, tokenizer)
        return self._loaded[1], self._loaded[2]

    def close(self) -> None:
        """Let the loaded model go (its memory freed with the last reference)."""
        self._loaded = None


def units_left(lines: list[str]) -> BaseException:
    """The error naming the units a run left for another machine, one line each."""
    return RuntimeError(f"{len(lines)} unit(s) not run on this machine, every other one ran:\n" + "\n".join(lines))


@dataclass(frozen=True)
class StudyKind:
    """One kind of study file and what ``headstats run`` does with it."""

    name: str
    section: str | None  # the top-level table that marks a file of this kind; None: the default kind
    description: str
    stages: tuple[str, ...]  # the --stages this kind has, in the order they run
    load: Callable[[Path], Study]
    plan: Callable[[Study, RunSpec], list[Unit]]
    measure: Measure
    # run(unit, session): one planned unit, resuming what of it is done; returns why it left the unit
    # for another machine when running finds that it must (named after the report), else None
    run: Callable[[Unit, Session], str | None]
    report: Callable[..., Path]  # report(study, run, *, progress): rebuilt from the results alone
    note: str = ""  # what the dry run's counts mean for this kind
    # check(study, run, grid): refuses what the kind would ignore; grid names a launcher flag given, or None
    check: Callable[[Study, RunSpec, str | None], None] = field(default=lambda study, run, grid: None)
    grid: bool = False  # whether its units may run as launcher jobs (--launcher), one job per model
    # begin(study, run): before the first unit runs, what spans every unit (a results folder made
    # writable, a pre-registered study's deciding keys recorded: headstats.jobs.registration)
    begin: Callable[[Study, RunSpec], None] = field(default=lambda study, run: None)
    left: Callable[[list[str]], BaseException] = units_left  # the error naming the units left, one line each
    takes: tuple[str, ...] = ()  # the RunSpec options only some kinds take (KIND_OPTIONS) that this one does
    example: str = ""  # a committed file of this kind

    @property
    def article(self) -> str:
        """The kind's name with its article: "an analysis", "a frontier"."""
        return f"{'an' if self.name[0] in 'aeiou' else 'a'} {self.name}"


def not_found_here(name: str) -> str | None:
    """Why the model ``name`` cannot be found on this machine (the error a load would raise), or None."""
    from headstats.io.model_paths import ModelNotFoundError, resolve_model_path

    try:
        resolve_model_path(name)
    except ModelNotFoundError as err:
        return str(err)
    return None


STUDY_KINDS: Registry[StudyKind] = Registry("study kind")
# RunSpec options that only the kinds naming them in ``takes`` read, and their flags.
KIND_OPTIONS = {"only_seeds": "--seeds", "results_dir": "--results"}


def register_kind(kind: StudyKind) -> StudyKind:
    """Add a study kind: files with its ``section`` table are then loaded, planned, run and
    reported through it. A kind is one module of :mod:`headstats.studies` that calls this (the package
    imports each of its modules: nothing lists the kinds)."""
    return STUDY_KINDS.register(kind.name, kind)


def kind_module(kind: StudyKind) -> str:
    """The module that defines ``kind`` (where its ``load`` is written)."""
    return kind.load.__module__


def kind_of(path: str | os.PathLike) -> StudyKind:
    """The kind of the study file at ``path``: the kind whose table it has, else the default one. A
    file with the tables of two kinds is refused, naming both."""
    keys = top_level_keys(Path(path))
    marked = [kind for _, kind in STUDY_KINDS.items() if kind.section is not None and kind.section in keys]
    if len(marked) > 1:
        tables = " and ".join(f"[{k.section}] ({k.name})" for k in marked)
        raise ValueError(f"{path} has the tables of two study kinds, {tables}: keep one, one kind per file")
    if marked:
        return marked[0]
    defaults = [kind for _, kind in STUDY_KINDS.items() if kind.section is None]
    return defaults[0]


def load_study(path: str | os.PathLike) -> Study:
    """Load and check the study file at ``path`` through its kind."""
    return kind_of(path).load(Path(path))


def checked_run(kind: StudyKind, study: Study, run: RunSpec, grid: str | None = None) -> RunSpec:
    """``run`` checked against ``study``: the kind's own checks first, then a launcher (``grid``: the
    flag that set one, or None) and its stages."""
    from headstats.options import SpecError

    for name, flag in KIND_OPTIONS.items():
        if getattr(run, name) is not None and name not in kind.takes:
            takers = [k.article for _, k in STUDY_KINDS.items() if name in k.takes]
            raise SpecError(
                name,
                f"{study.path.as_posix()} is {kind.article} file, which has no {flag} (only "
                f"{' or '.join(takers) or 'no'} file has): leave it out",
                label=flag,
            )
    kind.check(study, run, grid)
    if grid and not kind.grid:
        raise SpecError(
            "launcher",
            f"{kind.article} file runs in this process, one unit after another (launcher jobs run analysis files)",
            label=grid,
        )
    return check_stages(kind, study, run)


def check_stages(kind: StudyKind, study: Study, run: RunSpec) -> RunSpec:
    """``run`` with the stages this kind has: the default (every stage) runs those of the kind; a
    stage named that the kind lacks is refused, naming those it has."""
    from dataclasses import replace

    from headstats.options import SpecError
    from headstats.specs import STAGES

    if tuple(run.stages or ()) == STAGES:
        return replace(run, stages=tuple(s for s in kind.stages if s in STAGES))
    lacking = [s for s in run.stages or () if s not in kind.stages]
    if lacking:
        raise SpecError(
            "stages",
            f"{study.path.as_posix()} is {kind.article} file, which has no {', '.join(lacking)} stage "
            f"(its stages: {', '.join(kind.stages)})",
            label="--stages",
        )
    return run


__all__ = [
    "STUDY_KINDS",
    "Registry",
    "Session",
    "Study",
    "StudyKind",
    "Unit",
    "check_stages",
    "checked_run",
    "kind_of",
    "load_study",
    "not_found_here",
    "register_kind",
    "units_left",
]
