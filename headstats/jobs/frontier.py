"""The pruning frontier: each model pruned at each share by each score, with its held-out accuracy
and its speed against the unpruned model (``headstats frontier analyses/prune_embedded.toml``).

Per model, in ``RESULTS/model=<slug>/``:

- ``calibration.json`` and ``means.parquet``: the calibration set's identity and every score's mean
  per (layer, head) on it (the selection of :mod:`headstats.jobs.prune`);
- ``points/baseline.parquet``: the unpruned model's answers to the tasks' questions (a seeded sample
  of ``limit`` per task), and ``points/baseline.json``: the unpruned model timed against an identical
  copy of itself, the speed measurement's own noise;
- ``points/<score>-<share>.parquet`` / ``.json``: the pruned model's answers, and its speed, KV cache,
  parameter count and arithmetic roof (:mod:`headstats.engine.speed`) next to the unpruned model's,
  measured in this process: with ``timing = "paired"`` a speed-up with its 95% interval per timed
  setting (:func:`paired_speed`: a long prefill, decoding after a long KV cache) beside its ceiling
  and the KV-cache bytes it saves; with ``"medians"`` short side-by-side medians;
  ``<score>-kv-group-<share>`` for a point that removes whole KV groups (``units = ["head",
  "kv-group"]``; the default ``["head"]`` removes query heads);
- ``retime.json``: the last round of :func:`retime_model` (stage ``time``), which times the finished
  points again on another machine and keeps their answers.

Every point is written atomically when finished; a re-run skips finished points. ``run.json`` holds
the settings and the machine; a folder written with other settings is refused.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from headstats.engine.prune import count_parameters, prune_heads
from headstats.engine.speed import (
    Setting,
    inference_cost,
    phase_timer,
    random_prompts,
    setting_ceiling,
    time_inference,
)
from headstats.io.assets import portable_record
from headstats.io.store import (
    StoreError,
    claim,
    claim_holder,
    partial_file,
    read_json,
    write_json_atomic,
    write_parquet_atomic,
)
from headstats.jobs.analysis import read_analysis_file, section_table
from headstats.jobs.checkpoint import MixedKernelsError, PassCheckpoint
from headstats.jobs.prune import head_means, kv_group_size, select_heads, spec_calibration, task_options
from headstats.jobs.timing import paired_rounds
from headstats.options import SpecError, narrow
from headstats.specs import FrontierSpec, LoadOptions, ModelsSection, RunSpec

logger = logging.getLogger("headstats")

ANSWER_COLUMNS = ["task", "question_id", "correct", "gold_loglik", "pred"]
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
    from headstats.io.identity import model_slug

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


def _answers(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[ANSWER_COLUMNS].reset_index(drop=True)


def _evaluate_all(
    model, tokenizer, questions: dict, spec: FrontierSpec, points: Path, key: dict, machine: dict
) -> tuple[pd.DataFrame, list[PassCheckpoint]]:
    """Every task's answers, each pass resuming from the batches a stopped run saved under ``key``
    (the run's settings, the point and its removed heads); the checkpoints go once the point is written."""
    from headstats.jobs.evaluate import evaluate

    frames, checkpoints = [], []
    for task, q in questions.items():
        checkpoint = PassCheckpoint(
            partial_file(points, f"{key['point']}-{task}.parquet"), {**key, "task": task}, machine=machine
        )
        frame = evaluate(
            model,
            tokenizer,
            q,
            batch_size=spec.batch_size,
            prompt_format=spec.prompt_format,
            progress=spec.progress,
            share_prefix=False,
            checkpoint=checkpoint,
        )
        frames.append(_answers(frame))
        checkpoints.append(checkpoint)
    return pd.concat(frames, ignore_index=True), checkpoints


def timed_settings(spec: FrontierSpec) -> list[Setting]:
    """The workloads paired timing measures: each prefill length and each decode context, per batch."""
    return [
        *(
            Setting("prefill", batch, length, spec.new_tokens)
            for batch in spec.speed_batches
            for length in spec.prefill_lengths
        ),
        *(
            Setting("decode", batch, context, spec.new_tokens)
            for batch in spec.speed_batches
            for context in spec.decode_contexts
        ),
    ]


def paired_speed(spec: FrontierSpec, models: dict) -> list[dict]:
    """The candidate's (``pruned``) speed-up over ``unpruned`` at every timed setting, from paired,
    interleaved rounds (:func:`headstats.jobs.timing.paired_rounds`): at most ``time_cap`` seconds of
    rounds per setting, fewer once the interval's half-width reaches ``time_target``, each run counted by
    ``time_clock`` (:func:`headstats.engine.speed.phase_timer`). One row per setting,
    with the machine's 1-minute load average before and after its rounds (the load of a shared machine)."""
    rows = []
    for setting in timed_settings(spec):
        ids = random_prompts(models["unpruned"], setting, spec.seed)
        runs = {name: phase_timer(model, setting, ids, spec.time_clock) for name, model in models.items()}
        load = os.getloadavg()[0]
        rounds = paired_rounds(runs, "unpruned", target=spec.time_target, max_seconds=spec.time_cap)
        rows.extend(
            rounds.rows(
                load_before=load,
                load_after=os.getloadavg()[0],
                setting=setting.name,
                phase=setting.phase,
                batch=setting.batch,
                context=setting.context,
                new_tokens=setting.new_tokens,
                tokens=setting.tokens,
                clock=spec.time_clock,
                relocated=True,  # phase_timer moves the weights to fresh memory before every run
            )
        )
        del runs
    return rows


def _speed(spec: FrontierSpec, models: dict) -> list[dict]:
    if spec.timing == "paired":
        before, after = inference_cost(models["unpruned"]), inference_cost(models["pruned"])
        names = {s.name: s for s in timed_settings(spec)}
        return [{**row, **setting_ceiling(before, after, names[row["setting"]])} for row in paired_speed(spec, models)]
    rows = []
    for batch in spec.speed_batches:
        rows.extend(
            time_inference(
                models,
                batch=batch,
                prompt_length=spec.prompt_length,
                new_tokens=spec.new_tokens,
                repeats=spec.repeats,
                seed=spec.seed,
            )
        )
    return rows


def _roof(before, after, spec: FrontierSpec) -> dict:
    """Shares of the unpruned model's per-token cost that the removed heads carried."""
    context = spec.prompt_length + spec.new_tokens // 2
    out = {
        "prefill_flops_removed": 1 - after.prefill_flops(spec.prompt_length) / before.prefill_flops(spec.prompt_length),
        "decode_flops_removed": 1 - after.flops(context) / before.flops(context),
        "kv_bytes_removed": 1 - after.kv_bytes(context) / before.kv_bytes(context),
        # Per token of context and sequence; sliding-window layers hold at most their window.
        "kv_bytes_saved_per_token": before.kv_bytes(1) - after.kv_bytes(1),
    }
    for batch in spec.speed_batches:
        out[f"decode_bytes_removed_b{batch}"] = 1 - after.decode_bytes(context, batch) / before.decode_bytes(
            context, batch
        )
    return out


def run_model(frontier: Frontier, name: str, *, calibrate_only: bool = False) -> Path:
    """Every point of one model (finished points are skipped). Returns the model's results folder."""
    from headstats.io.models import load_model, machine_info
    from headstats.io.tasks import load_task

    spec = frontier.prune
    root = model_root(frontier, name)
    model, tokenizer = load_model(name, **narrow(frontier.models, LoadOptions).kwargs())
    weights = next(model.parameters())
    machine = machine_info(weights.device)
    settings = check_run_record(frontier, root, machine)
    if not calibrate_only:
        why = kernel_conflict(frontier, name, machine, str(weights.dtype).removeprefix("torch."))
        if why is not None:
            raise MixedKernelsError(why)
    points = root / "points"
    means_path = root / "means.parquet"
    if means_path.is_file():
        means = pd.read_parquet(means_path)
    else:
        calibration = spec_calibration(spec, tokenizer, name)
        parts = [
            head_means(model, calibration, sid, batch_size=spec.batch_size, seed=spec.seed).assign(score=sid)
            for sid in spec.scores
        ]
        means = pd.concat(parts, ignore_index=True)
        write_json_atomic(calibration.identity, root / "calibration.json")
        write_parquet_atomic(pa.Table.from_pandas(means, preserve_index=False), means_path)
    if calibrate_only:
        return root
    questions = {t: load_task(t, **task_options(spec)) for t in spec.tasks}
    held: dict[str, str] = {}
    for stem, point in [("baseline", None), *((point_name(*p), p) for p in pruned_points(spec))]:
        with claim(points, stem) as mine:
            if not mine:
                held[stem] = claim_holder(points, stem)
                logger.warning(
                    "%s %s: another run (%s) is evaluating it; going on to the next point", name, stem, held[stem]
                )
            elif not (points / f"{stem}.json").is_file():  # not finished, nor finished by another run meanwhile
                _run_point(model, tokenizer, questions, spec, points, stem, point, means, settings, machine)
    if held:
        raise PointsHeldError(points_held(root, held))
    return root


class PointsHeldError(RuntimeError):
    """Another run of the same frontier was evaluating points this run left to it; every other point ran."""


def points_held(root: Path, held: dict[str, str]) -> str:
    """What a run says when another run held some of its points (``held``: point -> its holder): which
    run, which points, and what to do."""
    holders = "; ".join(dict.fromkeys(held.values()))
    return (
        f"{root}: another headstats run ({holders}) is evaluating {len(held)} of its points "
        f"({', '.join(held)}); this run evaluated the others and left those to it. Wait for that run to finish "
        "(its report then holds every point), or give this file another results folder to run its points apart"
    )


def _run_point(model, tokenizer, questions, spec: FrontierSpec, points: Path, stem, point, means, settings, machine):
    """Evaluate and time one point, ``point`` its (score, share, unit) or None for the baseline (the
    unpruned model, timed against an identical copy), and write its answers and record."""
    params = count_parameters(model)
    if point is None:
        pruned, key = copy.deepcopy(model), {"settings": settings, "point": stem}
        record = {"params": params}
    else:
        sid, share, unit = point
        heads = select_heads(means[means["score"] == sid], sid, share, unit=unit, group_size=kv_group_size(model))
        pruned, key = copy.deepcopy(model), {"settings": settings, "point": stem, "heads": [list(h) for h in heads]}
        prune_heads(pruned, heads)
        record = {
            "score": sid,
            "share": share,
            "unit": unit,
            "removed_heads": [list(h) for h in heads],
            "n_removed": len(heads),
            "params_before": params,
            "params_after": count_parameters(pruned),
            "roof": _roof(inference_cost(model), inference_cost(pruned), spec),
        }
    start = time.time()
    subject = model if point is None else pruned
    answers, checkpoints = _evaluate_all(subject, tokenizer, questions, spec, points, key, machine)
    seconds = time.time() - start
    record.update(speed=_speed(spec, {"unpruned": model, "pruned": pruned}), eval_seconds=seconds, machine=machine)
    write_parquet_atomic(pa.Table.from_pandas(answers, preserve_index=False), points / f"{stem}.parquet")
    write_json_atomic(record, points / f"{stem}.json")
    for checkpoint in checkpoints:
        checkpoint.discard()
    removed = f"{record['n_removed']} heads removed, " if point is not None else ""
    logger.info("%s %s: %s%.0f s evaluation", points.parent.name, stem, removed, seconds)


def retime_model(frontier: Frontier, name: str) -> Path:
    """Time every finished point of one model again on this machine: speed only (the answers, the
    removed heads and the roof stay), for a quiet machine or a GPU after a run on a loaded one. The
    points are timed back to back, each against the unpruned model in alternating turns as in the run,
    so the unpruned rate across them shows how steady the machine was. A point's earlier timing moves
    to its ``earlier_speed`` list with the machine it was measured on. A round is recorded in
    ``retime.json``: a stopped one resumes on the same machine (points it timed are skipped); a
    finished one, or another machine, starts a new round."""
    from headstats.io.models import load_model, machine_info

    spec = frontier.prune
    root = model_root(frontier, name)
    points = root / "points"
    if not (points / "baseline.json").is_file():
        raise ValueError(f"{name} has no finished points under {points} to time again: run the frontier first")
    model, _ = load_model(name, **narrow(frontier.models, LoadOptions).kwargs())
    machine = machine_info(next(model.parameters()).device)
    check_run_record(frontier, root, machine)
    run_machine = read_record(root / "run.json")["machine"]
    rounds = root / "retime.json"
    current = read_record(rounds) if rounds.is_file() else {}
    if current.get("ended") or current.get("machine") != machine:
        current = {"round": time.time(), "machine": machine}
        write_json_atomic(current, rounds)
    for stem in planned_points(spec):
        path = points / f"{stem}.json"
        if not path.is_file():
            continue
        record = read_record(path)
        timed = record.get("timed", {"machine": record.get("machine", run_machine)})
        if timed.get("round") == current["round"]:
            continue
        pruned = copy.deepcopy(model)  # the baseline's: an identical copy, the measurement's noise
        if record.get("removed_heads"):
            prune_heads(pruned, [tuple(h) for h in record["removed_heads"]])
        speed = _speed(spec, {"unpruned": model, "pruned": pruned})
        record["earlier_speed"] = [*record.get("earlier_speed", []), {"speed": record["speed"], **timed}]
        record.update(speed=speed, timed={"round": current["round"], "machine": machine})
        write_json_atomic(record, path)
        logger.info("%s %s: timed again", name, stem)
        del pruned
    write_json_atomic({**current, "ended": time.time()}, rounds)
    return root


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


def run_frontier(frontier: Frontier, models: list[str] | None = None, *, calibrate_only: bool = False) -> float:
    """Run every model of ``frontier`` (or ``models``); returns the wall seconds this call took."""
    start = time.time()
    names = models or frontier.model_names()
    for name in names:
        run_model(frontier, name, calibrate_only=calibrate_only)
    elapsed = time.time() - start
    log = frontier.results / "runs.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps({"models": names, "seconds": elapsed, "ended": time.time()}) + "\n")
    return elapsed
