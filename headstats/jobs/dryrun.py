"""``headstats run --dry-run``: what an analysis would run, and for about how long, before it runs.

For every model and stage of an analysis file: the sequences or questions, the passes still to run
(finished collection samples and sweep points are skipped, as a real run skips them), the batched
forward passes and tokens they need, and an estimated time. The estimate is measured, not guessed:
each model is loaded and a few of the stage's own sequences (a seeded sample) run through
headstats' attention on the current device, in length-sorted batches as a real pass runs them. The
speed is counted in computed tokens, padding included (:func:`~headstats.engine.batching.padded_tokens`),
because a pass of long-tailed lengths (PIQA's solutions) computes many more tokens than it holds,
and the probe's few sequences are padded differently from the whole task's; the estimate is the
computed tokens still to run over that speed. Zeroed passes cost the same as the baseline pass to
within a few percent (``benchmarks/bench_intervene.py``), so every pass of a sweep is costed alike,
as a whole-sequence pass (the baseline's shared-prefix reuse is not counted).
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from headstats.engine.batching import padded_tokens
from headstats.io import store
from headstats.io.machine import usable_cores
from headstats.jobs.analysis import AnalysisSpec, merged_load
from headstats.jobs.confirm import ConfirmPlan, left_here, path_run, selected, slow_bf16_warning
from headstats.jobs.frontier import Frontier, model_root, planned_points, task_options
from headstats.options import narrow
from headstats.specs import CollectSpec, CompareSpec, LoadOptions, RunSpec, SweepSpec

logger = logging.getLogger("headstats")


@dataclass(frozen=True)
class WorkUnit:
    """One dataset (collection) or task (sweep) of one model, as a dry run sees it."""

    model: str
    stage: str  # collect or ablate
    what: str  # dataset or task
    items: int  # documents (collect) or questions (ablate)
    # The next four are measured on the loaded model; None when nothing is left to run, so the
    # model was not loaded.
    sequences: int | None  # token sequences of one pass (collect: those not yet scored)
    tokens: int | None  # tokens of one pass (collect: of the sequences not yet scored)
    computed: int | None  # tokens one pass computes, padding included, in its length-sorted batches
    passes_left: int  # passes still to run (collect: 1 or 0; ablate: baseline/calibration + points)
    passes_total: int
    batch_size: int
    tokens_per_s: float | None  # computed tokens per second, measured on a probe of this unit's own sequences
    reused: int = 0  # planned points that reuse the baseline's answers (no pass: they zero nothing)
    saved: int = 0  # sequences of the passes left already finished in saved batches (a stopped pass)

    @property
    def forwards_left(self) -> int:
        """Batched forward passes still to run."""
        if not self.passes_left or self.sequences is None:
            return 0
        return math.ceil(self.sequences / self.batch_size) * self.passes_left - self.saved // self.batch_size

    @property
    def seconds_left(self) -> float:
        if not self.passes_left or self.computed is None or not self.tokens_per_s:
            return 0.0
        # A stopped pass's saved batches are taken as their share of its sequences (batches are
        # length-sorted, so this is approximate in tokens).
        passes = self.passes_left - (self.saved / self.sequences if self.sequences else 0.0)
        return self.computed * passes / self.tokens_per_s


SWEEP_NOTE = (
    "passes of a sweep: the baseline (it also records the calibration scores) and each planned point that "
    "runs; reuse: the planned points that provably zero nothing (every p = 0 point, and targets whose "
    "threshold equals p = 0's, as a score tied within layers) and take the baseline's answers, so scores x "
    "targets = passes - 1 + reuse; saved seq: sequences of the passes left that a stopped pass already "
    "finished and saved (it resumes from them). A model whose units have no pass left is not loaded "
    "(-: not measured)."
)
FRONTIER_NOTE = (
    "passes of a frontier: per task, the unpruned baseline's evaluation and one per (score, share, unit) point without "
    "its record, each costed at the unpruned model's measured speed (a pruned model computes a little less, so "
    "this is an upper estimate; the calibration means and the speed timings of each point are not counted); "
    "saved seq: sequences of the evaluations left that a stopped run already finished and saved. A model with "
    "no point left is not loaded (-: not measured)."
)


@dataclass
class DryRun:
    units: list[WorkUnit]
    device: str
    probe_sequences: int
    note: str = SWEEP_NOTE
    refused: list[str] = field(default_factory=list)  # work a real run here leaves for another machine, why
    absent: list[str] = field(default_factory=list)  # model folders not written yet (a chain still training)
    # (1-minute load average, cores) when the dry run began: other work then shares the probe's cores
    load_at_start: tuple[float, int] | None = None

    def table(self) -> pd.DataFrame:
        rows = [
            {
                "model": u.model,
                "stage": u.stage,
                "what": u.what,
                "items": u.items,
                "sequences": "-" if u.sequences is None else u.sequences,
                "tokens/pass": "-" if u.tokens is None else u.tokens,
                "padding": f"{1 - u.tokens / u.computed:.0%}" if u.computed and u.tokens is not None else "-",
                "passes left": f"{u.passes_left}/{u.passes_total}",
                "reuse": u.reused if u.stage == "ablate" else "-",
                "saved seq": u.saved if u.stage in ("ablate", "prune") else "-",
                "forwards left": u.forwards_left,
                "tok/s": "-" if u.tokens_per_s is None else round(u.tokens_per_s),
                "est. time": _duration(u.seconds_left),
            }
            for u in self.units
        ]
        return pd.DataFrame(rows)

    @property
    def seconds(self) -> float:
        return sum(u.seconds_left for u in self.units)

    @property
    def forwards(self) -> int:
        return sum(u.forwards_left for u in self.units)

    def summary(self) -> str:
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            body = self.table().to_string(index=False) if self.units else "(nothing to run)"
        return (
            f"{body}\n\nin all: {self.forwards:,} batched forward passes still to run, estimated "
            f"{_duration(self.seconds)} on {self.device} (tok/s: tokens computed per second, padding included, "
            f"measured on {self.probe_sequences} items per unit in length-sorted batches; padding: the share of a "
            "pass's computed tokens that are padding; model loading and the report not included). Nothing was written."
            f"{self._busy_text()}\n{self.note}{self._refused_text()}{self._absent_text()}"
        )

    def _absent_text(self) -> str:
        if not self.absent:
            return ""
        lines = "\n".join(f"- {name}" for name in self.absent)
        return (
            f"\n\nNot counted above: {len(self.absent)} model folder(s) not written yet (a fine-tuning chain still "
            f"training?); a real run stops at the first of them:\n{lines}"
        )

    def _busy_text(self) -> str:
        """Why the times may be long: the probe ran while other work shared the CPU's cores."""
        if self.load_at_start is None or not self.device.startswith("cpu"):
            return ""
        average, cores = self.load_at_start
        slower = (cores + average) / cores  # the probe's threads got about cores / (cores + load) of the CPU
        if slower < BUSY_SLOWDOWN:
            return ""
        return (
            f"\nThis machine was busy in the minute before the dry run began (load average {average:.1f} on "
            f"{cores} cores): if that work went on, it shared the probe's cores, and the times above may be up to "
            f"about {slower:.1f} times what the same run takes alone. Rerun the dry run when the machine is idle "
            "for a closer estimate."
        )

    def _refused_text(self) -> str:
        if not self.refused:
            return ""
        lines = "\n".join(f"- {why}" for why in self.refused)
        return f"\n\nNot counted above, as a real run here leaves them for another machine:\n{lines}"


# a probe that shared its cores this much (expected time over the time alone) says so
BUSY_SLOWDOWN = 1.25


def machine_load() -> tuple[float, int] | None:
    """(1-minute load average, cores this process may use), or None where the system keeps no load average.
    In a container the load average may be the host's: the note it gives says "may"."""
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return average, usable_cores()


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _measure_questions(
    questions: Sequence, planned: Sequence, run: Callable[[Sequence], object], batch_size: int, n_probe: int, rng
) -> tuple[int, int, int, float]:
    """(sequences, tokens, computed tokens, tokens/s) of one pass over ``questions`` (``planned``: their
    evaluator sequences), the speed measured by ``run`` on ``n_probe`` seeded questions of them."""
    picked = set(rng.sample(range(len(questions)), min(n_probe, len(questions))))
    lengths = [len(s.input_ids) for s in planned]
    probe_lengths = [n for s, n in zip(planned, lengths, strict=True) if s.question in picked]
    speed = _probe([questions[i] for i in sorted(picked)], run, padded_tokens(probe_lengths, batch_size))
    return len(planned), sum(lengths), padded_tokens(lengths, batch_size), speed


def _probe(sample: Sequence, run: Callable[[Sequence], object], tokens: int) -> float:
    """Tokens per second of ``run(sample)`` (``tokens`` computed in all), after an untimed warm-up on
    one item."""
    run(sample[:1])
    start = time.perf_counter()
    run(sample)
    seconds = max(time.perf_counter() - start, 1e-9)
    logger.debug(
        "probe: %d items, %d computed tokens in %.1f s (%.0f tok/s)", len(sample), tokens, seconds, tokens / seconds
    )
    return tokens / seconds


def _announce(label: str, name: str, step: int, steps: int, stage: str, what: str, n_probe: int) -> None:
    """The progress line of one unit of a dry run: most of its time goes to the probe's passes."""
    logger.info(
        "%s[%s] %d/%d %s %s: preparing its sequences, timing %d of them", label, name, step, steps, stage, what, n_probe
    )


def dry_run(
    analysis: AnalysisSpec,
    run: RunSpec | None = None,
    *,
    probe_sequences: int = 8,
    label: str = "",
    **options: object,
) -> DryRun:
    """Plan the stages of ``run`` (a :class:`RunSpec`, or its fields by name: ``stages``,
    ``only_models``, ``device``, ...) for ``analysis`` without writing anything, measuring each unit's
    throughput on ``probe_sequences`` of its own sequences. ``label`` leads each model's log lines
    (a confirmation's path)."""
    from headstats.io.models import load_model

    load_at_start = machine_load()  # before this run's own work adds to it
    run = RunSpec.from_kwargs(options, base=run)
    stages = run.stages
    load = merged_load(analysis, run)
    units: list[WorkUnit] = []
    absent: list[str] = []
    device = "?"
    for name in analysis.selected_models(run.all_models, run.only_models):
        local = Path(name).expanduser()
        if local.is_absolute() and not local.exists():  # a Hub id is never absolute
            logger.info("%s[%s] not written yet: not loaded", label, name)
            absent.append(name)
            continue
        if "ablate" in stages and not ("collect" in stages and analysis.collect_datasets):
            # Counted from the results folder alone: a model with nothing left is not loaded. Files
            # from before the whole-sequence record count as left here; the loaded model decides them.
            counted = [_ablate_counts(analysis, name, ablation, load) for ablation in analysis.ablate]
            if not any(c.passes_left for c in counted):
                logger.info("%s[%s] no pass left: not loaded", label, name)
                units += [c.unit(name, None) for c in counted]
                continue
        logger.info("%s[%s] loading (dry run)", label, name)
        model, tokenizer = load_model(name, **load.kwargs())
        device = str(next(model.parameters()).device)
        rng = random.Random(0)
        datasets = analysis.collect_datasets if "collect" in stages else []
        ablations = analysis.ablate if "ablate" in stages else []
        steps = len(datasets) + len(ablations)
        for step, dataset in enumerate(datasets, 1):
            _announce(label, name, step, steps, "collect", dataset, probe_sequences)
            units.append(_collect_unit(analysis, name, model, tokenizer, dataset, probe_sequences, rng))
        for step, ablation in enumerate(ablations, len(datasets) + 1):
            _announce(label, name, step, steps, "ablate", str(ablation.task), probe_sequences)
            units.append(_ablate_unit(analysis, name, model, tokenizer, ablation, probe_sequences, rng))
    return DryRun(units, device, probe_sequences, load_at_start=load_at_start, absent=absent)


def dry_run_confirmation(plan: ConfirmPlan, run: RunSpec | None = None, *, probe_sequences: int = 8) -> DryRun:
    """:func:`dry_run` of every (path, model) analysis of a confirmation file, each unit named with
    its path; those a real run here leaves for another machine (:func:`~headstats.jobs.confirm.left_here`)
    are not loaded or counted, but named with their passes left and the reason."""
    from headstats.io.models import bf16_cost_said

    load_at_start = machine_load()  # before this run's own work adds to it
    units, device = [], "?"
    refused, left_out = left_here(plan, run), []
    chosen = selected(plan, run)
    runs = [path for path, spec in chosen if (path.name, spec.models[0]) not in refused]
    warning = slow_bf16_warning(runs, (run or RunSpec()).device)
    if warning:
        logger.warning(warning)
    for path, spec in chosen:
        each = path_run(run or RunSpec())
        model = spec.models[0]  # one model per (path, model) analysis
        if (path.name, model) in refused:
            load = merged_load(spec, each)
            passes = sum(_ablate_counts(spec, model, a, load).passes_left for a in spec.ablate)
            left_out.append(f"[{path.name}] {model}, {passes} passes left: {refused[path.name, model]}")
            continue
        with bf16_cost_said() if warning else nullcontext():  # the warning above says it for every path
            planned = dry_run(spec, each, probe_sequences=probe_sequences, label=f"[{path.name}] ")
        units += [replace(u, what=f"{u.what} [{path.name}]") for u in planned.units]
        device = planned.device if planned.device != "?" else device
    return DryRun(units, device, probe_sequences, refused=left_out, load_at_start=load_at_start)


def dry_run_frontier(frontier: Frontier, models: Sequence[str], *, probe_sequences: int = 8) -> DryRun:
    """Per model and task of a frontier file: its questions and sequences, the evaluations left (see
    :data:`FRONTIER_NOTE`) and their estimated time, measured on ``probe_sequences`` of the task's own
    questions through the unpruned model in the run's batches. Writes nothing."""
    from headstats.io.models import load_model
    from headstats.io.tasks import load_task

    load_at_start = machine_load()  # before this run's own work adds to it
    spec = frontier.prune
    units: list[WorkUnit] = []
    device = "?"
    for name in models:
        points = model_root(frontier, name) / "points"
        planned = planned_points(spec)
        left = [stem for stem in planned if not (points / f"{stem}.json").is_file()]
        total = len(planned)
        if not left:
            logger.info("[%s] no point left: not loaded", name)
            units += [
                WorkUnit(name, "prune", t, 0, None, None, None, 0, total, spec.batch_size, None) for t in spec.tasks
            ]
            continue
        logger.info("[%s] loading (dry run)", name)
        model, tokenizer = load_model(name, **narrow(frontier.models, LoadOptions).kwargs())
        device = str(next(model.parameters()).device)
        rng = random.Random(0)
        for step, task in enumerate(spec.tasks, 1):
            _announce("", name, step, len(spec.tasks), "prune", task, probe_sequences)
            selected = load_task(task, **task_options(spec))
            saved = sum(store.partial_sequences(store.partial_file(points, f"{stem}-{task}.parquet")) for stem in left)
            unit = _task_unit(model, tokenizer, selected, spec.batch_size, probe_sequences, rng)
            units.append(replace(unit, model=name, passes_left=len(left), passes_total=total, saved=saved))
    return DryRun(units, device, probe_sequences, FRONTIER_NOTE, load_at_start=load_at_start)


def _task_unit(model, tokenizer, selected, batch_size: int, n_probe: int, rng: random.Random) -> WorkUnit:
    """One task's sequences and tokens, with the speed of plain whole-sequence passes over a probe of
    its questions (as the frontier evaluates them)."""
    from headstats.jobs.evaluate import model_sequences, question_logliks

    questions = selected.questions

    def evaluate(batch: Sequence) -> None:
        question_logliks(model, tokenizer, batch, batch_size=batch_size, progress=False, share_prefix=False)

    planned = model_sequences(model, tokenizer, questions, "tokenizer")
    sequences, tokens, computed, speed = _measure_questions(questions, planned, evaluate, batch_size, n_probe, rng)
    return WorkUnit("", "prune", selected.name, len(questions), sequences, tokens, computed, 0, 0, batch_size, speed)


def _collect_unit(analysis, name: str, model, tokenizer, dataset: str, n_probe: int, rng: random.Random) -> WorkUnit:
    """A collection counted from its own plan (:func:`~headstats.jobs.collect.plan_collection`: the
    sequences, score ids and truncation the run will use) and timed on a sample of its sequences."""
    from headstats.engine.scoring import score_sequences
    from headstats.jobs.collect import plan_collection

    collect = analysis.collect
    run = plan_collection(model, tokenizer, dataset, analysis.results, collect)
    seqs = dict(run.sequences(tokenizer))
    done = store.stored_sample_ids(run.partition)
    left = [s for k, s in seqs.items() if k not in done]
    sample = rng.sample(list(seqs.values()), min(n_probe, len(seqs)))

    def score(batch: Sequence) -> None:
        score_sequences(model, batch, batch_size=collect.batch_size, scores=run.ids, padding_side=collect.padding_side)

    speed = _probe(sample, score, padded_tokens(list(map(len, sample)), collect.batch_size))
    return WorkUnit(
        name,
        "collect",
        run.source.name,
        len(seqs),
        len(left),
        sum(map(len, left)),
        padded_tokens(list(map(len, left)), collect.batch_size),
        int(bool(left)),
        1,
        collect.batch_size,
        speed,
    )


@dataclass(frozen=True)
class _AblateCounts:
    """The passes of one sweep, counted from its plan and its results folder."""

    plan: object  # headstats.jobs.sweep_plan.SweepPlan
    sweep: SweepSpec
    passes_left: int
    passes_total: int
    reused: int
    planned: list | None  # the evaluator's sequences of the loaded model; None when not loaded
    saved: int = 0  # sequences finished in the saved batches of stopped passes

    def unit(self, name: str, measured: tuple[int, int, int, float] | None) -> WorkUnit:
        """``measured``: (sequences, tokens, computed tokens, tokens/s), or None when not loaded."""
        sequences, tokens, computed, speed = measured or (None, None, None, None)
        return WorkUnit(
            name,
            "ablate",
            self.plan.task_name,
            len(self.plan.task.questions),
            sequences,
            tokens,
            computed,
            self.passes_left,
            self.passes_total,
            self.sweep.batch_size,
            speed,
            self.reused,
            self.saved,
        )


def _ablate_counts(
    analysis, name: str, ablation, load: LoadOptions | None, model=None, tokenizer=None
) -> _AblateCounts:
    """Passes left and planned of one sweep, for the loaded ``model`` or, unloaded, for ``name``. With
    the model, its evaluator sequences decide whether files written before the whole-sequence record
    count as done; without it they count as left (so a zero without the model is a zero with it)."""
    import functools

    from headstats.jobs.evaluate import model_sequences
    from headstats.jobs.sweep_plan import Point, plan_sweep, prefix_free, saved_thresholds
    from headstats.stats.summary import BASELINE

    sweep = narrow(ablation, SweepSpec)
    plan = plan_sweep(name if model is None else model, str(ablation.task), out=analysis.results, spec=sweep, load=load)
    planned = None
    if model is not None:
        planned = model_sequences(model, tokenizer, plan.task.questions, sweep.prompt_format)
        plan.prefix_free = functools.cache(lambda: prefix_free(planned))
    pending = plan.pending()
    saved = saved_thresholds(plan)

    def runs(point) -> bool:  # points that provably zero nothing reuse the baseline's answers
        return not point.is_baseline and not plan.reuses_baseline(point, saved.get(point.score))

    points_left = [p for p in pending if runs(p)]
    needs_calibration = any(
        t not in saved.get(sid, {})
        for sid in {p.score for p in points_left} & set(plan.dynamic_scores)
        for t in plan.targets
    )
    first_pass = any(p.is_baseline for p in pending) or needs_calibration  # the baseline records the scores
    ran = [p for p in plan.points if runs(p)]
    reused = len(plan.points) - 1 - len(ran)
    left = [*points_left, *([Point(BASELINE, 0.0)] if first_pass else [])]
    saved = sum(store.partial_sequences(store.partial_file(plan.partition, p.file_name)) for p in left)
    return _AblateCounts(plan, sweep, len(left), 1 + len(ran), reused, planned, saved)


def _ablate_unit(analysis, name: str, model, tokenizer, ablation, n_probe: int, rng: random.Random) -> WorkUnit:
    import torch

    from headstats.engine.probe import Probe
    from headstats.jobs.evaluate import question_logliks

    counts = _ablate_counts(analysis, name, ablation, None, model, tokenizer)
    plan, sweep, planned = counts.plan, counts.sweep, counts.planned
    questions = plan.task.questions
    heads = model.config.get_text_config().num_attention_heads

    def never(layer: int, scores: dict, keys: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(keys), heads, dtype=torch.bool)

    def evaluate(batch: Sequence) -> None:  # as every pass of the sweep runs: whole sequences, its kernel
        with Probe(model, (), never, materialise=plan.materialise) as probe:
            question_logliks(
                model,
                tokenizer,
                batch,
                batch_size=sweep.batch_size,
                prompt_format=sweep.prompt_format,
                progress=False,
                share_prefix=False,
                probe=probe,
            )

    return counts.unit(name, _measure_questions(questions, planned, evaluate, sweep.batch_size, n_probe, rng))


__all__ = ["DryRun", "WorkUnit", "dry_run", "dry_run_confirmation", "dry_run_frontier"]


@dataclass(frozen=True)
class _Collection:
    """What :func:`_collect_unit` reads of an analysis: the collection's options and results folder."""

    collect: CollectSpec
    results: Path


def dry_run_comparison(spec: CompareSpec, *, probe_sequences: int = 8) -> DryRun:
    """Per collection of a comparison (:func:`~headstats.jobs.compare.plan_units`: every model, the
    replicates included, on every dataset, and the reference under the format change): its sequences,
    whether it is left to run, and its estimated time, measured on ``probe_sequences`` of its own
    sequences. Writes nothing; the statistics and the report are not counted."""
    from headstats.io.models import load_model
    from headstats.jobs.compare import auto_format_change, plan_units, split_dtype

    load_at_start = machine_load()
    collect, load = narrow(spec, CollectSpec), narrow(spec, LoadOptions)
    units: list[WorkUnit] = []
    device = "?"
    planned = plan_units(spec)
    models = list(dict.fromkeys(u.model for u in planned))
    rng = random.Random(0)
    for name in models:
        logger.info("[%s] loading (dry run)", name)
        base, dtype = split_dtype(name)
        model, tokenizer = load_model(base, **{**load.kwargs(), **({"dtype": dtype} if dtype else {})})
        if dtype:
            model.headstats_name = name
        device = str(next(model.parameters()).device)
        mine = [u for u in planned if u.model == name]
        for step, unit in enumerate(mine, 1):
            fmt = auto_format_change(spec, tokenizer) if unit.prompt_format == "auto" else unit.prompt_format
            _announce("", name, step, len(mine), "collect", f"{unit.dataset} ({fmt})", probe_sequences)
            options = _Collection(replace(collect, prompt_format=fmt), unit.root)
            done = _collect_unit(options, name, model, tokenizer, unit.dataset, probe_sequences, rng)
            units.append(replace(done, what=f"{done.what} ({fmt})"))
        del model
    note = "collections only: the statistics and the report run after them (minutes on a CPU)"
    return DryRun(units, device, probe_sequences, note, load_at_start=load_at_start)
