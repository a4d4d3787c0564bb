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
from headstats.io.store import claim, claim_holder, partial_file, write_json_atomic, write_parquet_atomic
from headstats.jobs.checkpoint import MixedKernelsError, PassCheckpoint
from headstats.jobs.frontier_plan import (  # noqa: F401  (the plan's names, where callers have found them)
    ADDED_SETTINGS,
    DECISION,
    PLACEMENT,
    TIMED,
    Frontier,
    changed_settings,
    check_recorded_settings,
    check_run_record,
    chosen_models,
    kernel_conflict,
    load_frontier,
    model_root,
    other_settings,
    planned_points,
    point_name,
    pruned_points,
    read_record,
    recorded_settings,
    retime_left,
    run_settings,
    task_options,
)
from headstats.jobs.prune import head_means, kv_group_size, select_heads, spec_calibration
from headstats.jobs.timing import paired_rounds
from headstats.options import narrow
from headstats.specs import FrontierSpec, LoadOptions

logger = logging.getLogger("headstats")

ANSWER_COLUMNS = ["task", "question_id", "correct", "gold_loglik", "pred"]


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
