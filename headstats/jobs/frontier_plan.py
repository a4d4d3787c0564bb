"""A frontier file's plan, read without loading a model or importing torch: the file checked
(:func:`load_frontier`), the models a run chooses, each model's points and what of them its results
folder holds (:func:`planned_points`, :func:`retime_left`), and the settings its points were run with
(checked against the file: :func:`check_recorded_settings`). :mod:`headstats.jobs.frontier` runs the
points; a dry run and the reports read this module alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from headstats.io.assets import portable_record
from headstats.io.identity import model_slug
from headstats.io.store import StoreError, partial_file, read_json, write_json_atomic
from headstats.jobs.analysis import read_analysis_file, section_table
from headstats.options import SpecError, narrow
from headstats.specs import FrontierSpec, LoadOptions, ModelsSection, PruneSpec, RunSpec, Sampling

PLACEMENT = ("device", "device_map")  # loading options left out of a frontier folder's settings
# Options a frontier gained after runs were recorded whose value in those runs is not their default:
# a run.json without the key ran with this value (without any other key, with its default).
ADDED_SETTINGS = {"prune": {"timing": "medians"}}
DECISION = ("max_drop",)  # how the report reads the points, not what they are: left out of the settings
# Where and how long paired timing measures: every speed row names its setting, and the time stage
# (retime_model) measures finished points again at the file's current settings, so changing them (a
# 4,096-token cache added) keeps a run's folder; left out of the settings as well.
TIMED = ("prefill_lengths", "decode_contexts", "time_cap", "time_target", "time_clock")


@dataclass(frozen=True)
class Frontier:
    """A checked frontier file: the analysis header (name, description, results, report), ``[models]``
    (:class:`ModelsSection`: names, optional, load options) and ``[prune]`` (:class:`FrontierSpec`)."""

    path: Path
    name: str
    description: str
    results: Path
    report: Path
    models: ModelsSection
    prune: FrontierSpec

    def model_names(self, all_models: bool = False) -> list[str]:
        return list(self.models.names) + (list(self.models.optional) if all_models else [])


def load_frontier(path: str | Path) -> Frontier:
    """Read and check a frontier file; every error names the file, section and key."""
    path = Path(path)
    raw, header = read_analysis_file(
        path, ("models", "prune"), what="frontier file", example="analyses/prune_embedded.toml"
    )
    name, results, report = header.folders(path)
    models = ModelsSection.from_toml(section_table(raw, "models", path), f"{path}: [models]")
    prune = FrontierSpec.from_toml(section_table(raw, "prune", path), f"{path}: [prune]")
    return Frontier(path, name, header.description, results, report, models, prune)


def chosen_models(frontier: Frontier, run: RunSpec) -> list[str]:
    """The models ``run`` asks of ``frontier``: its ``--models`` (each one the file lists), else the
    file's models (and optional ones with ``--all-models``). ``--paths``, a confirmation's, is refused."""
    if run.only_paths:
        raise SpecError(
            "paths",
            f"chooses among a confirmation file's computation paths; {frontier.path} is a frontier file (it has none)",
            label="--paths",
        )
    if not run.only_models:
        return frontier.model_names(run.all_models)
    known = frontier.model_names(all_models=True)
    unknown = [m for m in run.only_models if m not in known]
    if unknown:
        raise SpecError(
            "models",
            f"{', '.join(unknown)} is not in {frontier.path} (it has {', '.join(known)}); add it to its [models] "
            "names or optional",
            label="--models",
        )
    return list(run.only_models)


def read_record(path: Path) -> dict:
    """A frontier record (``run.json``, a point's ``.json``, ``retime.json``), checked: damaged JSON or
    anything but an object is refused with one line naming the file."""
    fix = "delete it (and its point's .parquet) and run the frontier again to remake it"
    data = read_json(path, fix)
    if not isinstance(data, dict):
        raise StoreError(f"{path} is damaged (a JSON object expected, not {type(data).__name__}); {fix}")
    return data


def point_name(score: str, share: float, unit: str = "head") -> str:
    return f"{score}-{share:.3f}" if unit == "head" else f"{score}-{unit}-{share:.3f}"


def model_root(frontier: Frontier, model: str) -> Path:
    """The results folder of one model of ``frontier`` (its run record, means and ``points/``)."""
    return frontier.results / f"model={model_slug(model)}"


def pruned_points(spec: FrontierSpec) -> list[tuple[str, float, str]]:
    """(score, share, unit) of every pruned point in the order they run: share by share across units
    and scores, so that an interrupted run has every score at its lower shares."""
    shares = sorted(s for s in spec.shares if s > 0)
    return [(sid, share, unit) for share in shares for unit in spec.units for sid in spec.scores]


def planned_points(spec: FrontierSpec) -> list[str]:
    """The file stems of a frontier's points in the order they run: the unpruned baseline first."""
    return ["baseline", *(point_name(sid, share, unit) for sid, share, unit in pruned_points(spec))]


def run_settings(prune: FrontierSpec, load: LoadOptions) -> dict:
    """What a frontier run's numbers depend on, as ``run.json`` records it: the ``[prune]`` settings
    and how models load, without where they run, how the report decides, or where paired timing measures."""
    # Where the model runs is not part of what the run is: the same folder is timed again on a GPU.
    settings = {
        "prune": {k: v for k, v in prune.settings().items() if k not in DECISION + TIMED},
        "load": {k: v for k, v in load.settings().items() if k not in PLACEMENT},
    }
    record = portable_record(json.loads(json.dumps(settings)))
    assert isinstance(record, dict)
    return record


def recorded_settings(frontier: Frontier, root: Path) -> dict | None:
    """The settings ``root/run.json`` records, read as the current version names them: a setting the
    record lacks was, when it was written, what the defaults give (or, for one whose earlier behaviour
    is not its default, :data:`ADDED_SETTINGS`), as in :mod:`headstats.jobs.resume`; None before any run."""
    record = root / "run.json"
    if not record.is_file():
        return None
    settings = run_settings(frontier.prune, narrow(frontier.models, LoadOptions))
    saved = portable_record(read_record(record).get("settings", {}))  # a path recorded by an earlier version
    assert isinstance(saved, dict)
    defaults = run_settings(FrontierSpec(), LoadOptions())
    # An option that is no longer recorded (e.g. the runtime-only Hub token) and was unset then
    # leaves the settings the same.
    return {
        part: {
            k: v
            for k, v in {**defaults.get(part, {}), **ADDED_SETTINGS.get(part, {}), **values}.items()
            if (k in settings.get(part, {}) or v is not None) and k not in PLACEMENT + DECISION + TIMED
        }
        if isinstance(values, dict)
        else values
        for part, values in saved.items()
    }


def changed_settings(frontier: Frontier, root: Path) -> list[str]:
    """The settings ``frontier`` (the file as it is now, with the run's loading options) asks otherwise
    than the points in ``root`` were run with, each named ``prune.limit: 4 there, 6 now``; empty when
    none or before any run."""
    saved = recorded_settings(frontier, root)
    if saved is None:
        return []
    settings = run_settings(frontier.prune, narrow(frontier.models, LoadOptions))
    changed = []
    for part in sorted(set(settings) | set(saved)):
        then, now = saved.get(part) or {}, settings.get(part) or {}
        for key in sorted(set(then) | set(now)):
            if then.get(key) != now.get(key):
                changed.append(f"{part}.{key}: {json.dumps(then.get(key))} there, {json.dumps(now.get(key))} now")
    return changed


def other_settings(frontier: Frontier, root: Path) -> SpecError | None:
    """The error for a model folder whose points were run with other settings than ``frontier`` asks
    (:func:`changed_settings`), naming each; None when they agree. A file edited after its points ran
    is never half-followed: its points are neither reported as the new settings' nor mixed with them."""
    changed = changed_settings(frontier, root)
    if not changed:
        return None
    first = changed[0].split(":")[0].split(".")[-1]
    return SpecError(
        first,
        f"{root} holds frontier points run with other settings ({'; '.join(changed)}): restore those settings in "
        f"{frontier.path}, or give it another results folder (results = ...) to run its points under the new ones",
        label="",
    )


def check_run_record(frontier: Frontier, root: Path, machine: dict) -> dict:
    """The settings of ``frontier``'s run in ``root`` (what changes its numbers), checked against
    ``root/run.json`` when there is one (another run's folder is refused, naming the settings that
    differ: :func:`other_settings`), else recorded there."""
    settings = run_settings(frontier.prune, narrow(frontier.models, LoadOptions))
    if (root / "run.json").is_file():
        error = other_settings(frontier, root)
        if error is not None:
            raise error
        return settings
    write_json_atomic({"settings": settings, "machine": machine}, root / "run.json")
    return settings


def check_recorded_settings(frontier: Frontier, names: list[str] | None = None) -> None:
    """Refuse, before any unit runs or a report is built, a results folder whose points were run with
    other settings than ``frontier`` asks (``names``: the models to check; default every model folder
    under its results)."""
    roots = (
        [model_root(frontier, name) for name in names]
        if names is not None
        else sorted(frontier.results.glob("model=*"))
    )
    for root in roots:
        error = other_settings(frontier, root)
        if error is not None:
            raise error


def kernel_conflict(frontier: Frontier, name: str, here: object, dtype: str) -> str | None:
    """Why machine ``here`` may not evaluate the points of model ``name`` that are left, from its
    results folder alone: a finished point, or a left point's saved batches, computed in reduced
    precision by kernels that round otherwise (:func:`headstats.io.machine.mixed_kernels`). Every point
    is compared with the baseline answer for answer, so one model's points are computed alike (on one
    bf16 model, 3 of 300 answers moved between an AMX and an AVX512-BF16 CPU). None when it may run."""
    from headstats.io.machine import mixed_kernels
    from headstats.jobs.checkpoint import saved_machines

    root = model_root(frontier, name)
    points = root / "points"
    run_machine = read_record(root / "run.json").get("machine") if (root / "run.json").is_file() else None
    earlier: list[tuple[str, object]] = []
    left = []
    for stem in planned_points(frontier.prune):
        path = points / f"{stem}.json"
        if path.is_file():  # a point written before points recorded their machine ran on the run's
            earlier.append((f"its point {stem}", read_record(path).get("machine", run_machine)))
        else:
            left.append(stem)
    if not left:
        return None
    for stem in left:
        for task in frontier.prune.tasks:
            partial = partial_file(points, f"{stem}-{task}.parquet")
            earlier += [(f"{partial.name}'s saved batches", m) for m in saved_machines(partial)]
    remedy = (
        "Run this model's frontier on a machine like that one, set the file's `results` to a new folder "
        "to evaluate it whole here, or time its finished points here with `--stages time`."
    )
    return mixed_kernels(earlier, here, dtype, root, remedy)


def retime_left(frontier: Frontier, name: str) -> tuple[int, int, float | None]:
    """What ``--stages time`` would do for one model, without loading it: (finished points it would time
    now, finished points, seconds per point in the last round that ended, or None before any). A
    round that stopped resumes (points it timed are not counted) when rerun on the same machine;
    another machine starts a new round and times every finished point."""
    points = model_root(frontier, name) / "points"
    finished = [p for p in (points / f"{s}.json" for s in planned_points(frontier.prune)) if p.is_file()]
    rounds = model_root(frontier, name) / "retime.json"
    current = read_record(rounds) if rounds.is_file() else {}
    stamps = [read_record(p).get("timed", {}).get("round") for p in finished]
    if current and not current.get("ended"):
        return sum(stamp != current["round"] for stamp in stamps), len(finished), None
    seconds = None
    if current.get("ended") and current["round"] in stamps:
        seconds = (current["ended"] - current["round"]) / stamps.count(current["round"])
    return len(finished), len(finished), seconds


def task_options(spec: PruneSpec | FrontierSpec) -> dict:
    """How a prune's certification and a frontier draw a task's questions: the keyword arguments of
    :func:`headstats.io.tasks.load_task`, the spec's :class:`~headstats.specs.Sampling` (which selects
    them) among them."""
    return {"sampling": narrow(spec, Sampling), "seed": spec.seed, "data_dir": spec.data_dir}


__all__ = [
    "ADDED_SETTINGS",
    "DECISION",
    "PLACEMENT",
    "TIMED",
    "Frontier",
    "changed_settings",
    "check_recorded_settings",
    "check_run_record",
    "chosen_models",
    "kernel_conflict",
    "load_frontier",
    "model_root",
    "other_settings",
    "planned_points",
    "point_name",
    "pruned_points",
    "read_record",
    "recorded_settings",
    "retime_left",
    "run_settings",
    "task_options",
]
