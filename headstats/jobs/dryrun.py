"""The measurements of ``headstats run --dry-run``: what a study's units would run, and for about how long.

:mod:`headstats.studies.dryrun` loops over a study's units; this module counts and times one unit.
For every model and stage: the sequences or questions, the passes still to run
(finished collection samples and sweep points are skipped, as a real run skips them), the batched
forward passes and tokens they need, and an estimated time.

The counts need the model's tokenizer and shapes, not its weights: a model is built from its
configuration on the meta device (:func:`headstats.io.models.load_skeleton`). The time comes from one
of two sources:

- by default, recorded speeds (:class:`PassTimer`): the FLOPs of the unit's model body over its
  padded, length-sorted batches (:meth:`~headstats.engine.speed.InferenceCost.pass_flops`) at the
  GFLOP/s the closest recorded pass of that work reached (:mod:`headstats.io.speeds`: what runs here
  measured, else the committed calibration table), so no model loads and no pass runs;
- with ``--probe``, a probe: the model is loaded and a few of the stage's own sequences (a seeded
  sample) run through headstats' attention on the current device, in length-sorted batches as a real
  pass runs them. The speed is counted in computed tokens, padding included
  (:func:`~headstats.engine.batching.padded_tokens`), because a pass of long-tailed lengths (PIQA's
  solutions) computes many more tokens than it holds, and the probe's few sequences are padded
  differently from the whole task's.

Either way the estimate is the computed tokens still to run over that speed. Zeroed passes cost the
same as the baseline pass to within a few percent (``benchmarks/bench_intervene.py``), so every pass of
a sweep is costed alike, as a whole-sequence pass.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from headstats.engine.batching import padded_tokens
from headstats.io import store
from headstats.io.machine import usable_cores
from headstats.io.speeds import Found, Speed, lookup, machine_kind
from headstats.options import narrow
from headstats.specs import CollectSpec, LoadOptions, SweepSpec

logger = logging.getLogger("headstats")


# How many units a run's opening line names before it says "and N more".
HEADLINE_UNITS = 8


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
    seconds: float | None = None  # the time left from a recorded rate, where no probe measures it (stage time)
    speed_from: str | None = None  # where tokens_per_s comes from, when not from a probe (a recorded speed)

    def with_speed_from(self, source: str | None) -> WorkUnit:
        return replace(self, speed_from=source)

    @property
    def forwards_left(self) -> int:
        """Batched forward passes still to run."""
        if not self.passes_left or self.sequences is None:
            return 0
        return math.ceil(self.sequences / self.batch_size) * self.passes_left - self.saved // self.batch_size

    @property
    def untimed(self) -> bool:
        """Work left with neither a probe nor a recorded rate to time it (est. time -)."""
        return bool(self.passes_left) and self.seconds is None and not self.tokens_per_s

    @property
    def seconds_left(self) -> float:
        if self.seconds is not None:
            return self.seconds
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
    probe_sequences: int  # items each unit's probe ran (0: timed from recorded speeds, nothing ran)
    note: str = SWEEP_NOTE
    refused: list[str] = field(default_factory=list)  # work a real run here leaves for another machine, why
    absent: list[str] = field(default_factory=list)  # model folders not written yet (a chain still training)
    missing: list[str] = field(default_factory=list)  # models not found on this machine, each with why
    # (1-minute load average, cores) when the dry run began: other work then shares the probe's cores
    load_at_start: tuple[float, int] | None = None
    writes: tuple[str, ...] = ()  # the folders a real run writes, each with what goes there

    @property
    def sources(self) -> list[str]:
        """Where the units' speeds come from, each once, in the order of the units: a unit's ``speed``
        column is its letter here."""
        return list(dict.fromkeys(u.speed_from for u in self.units if u.speed_from))

    def _speed_key(self, unit: WorkUnit) -> str:
        if unit.speed_from:
            return self._speed_key_of(self.sources.index(unit.speed_from))
        return "probe" if unit.tokens_per_s else "-"

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
                "speed": self._speed_key(u),
                "est. time": "-" if u.untimed else _duration(u.seconds_left),
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

    @property
    def untimed(self) -> int:
        """Units with work left that nothing timed (-): the estimate leaves them out."""
        return sum(u.untimed for u in self.units)

    def _estimate_text(self) -> str:
        if not self.untimed:
            return f"estimated {_duration(self.seconds)}"
        return (
            f"estimated {_duration(self.seconds)} plus {self.untimed} unit(s) with work left and no rate to time "
            "them (est. time -)"
        )

    def _speed_text(self) -> str:
        if self.probe_sequences:
            return f"measured on {self.probe_sequences} items per unit in length-sorted batches"
        if not self.sources:  # no unit with a pass left: no speed was looked up
            return "from recorded speeds, no model loaded"
        return "from recorded speeds, no model loaded; speed: " + "; ".join(
            f"{self._speed_key_of(i)} = {source}" for i, source in enumerate(self.sources)
        )

    @staticmethod
    def _speed_key_of(i: int) -> str:
        return "abcdefghijklmnopqrstuvwxyz"[i % 26]

    def _writes_text(self) -> str:
        if not self.writes:
            return ""
        return "\nA real run writes: " + "; ".join(self.writes) + "."

    def summary(self) -> str:
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            body = self.table().to_string(index=False) if self.units else "(nothing to run)"
        return (
            f"{body}\n\nin all: {self.forwards:,} batched forward passes still to run, {self._estimate_text()} "
            f"on {self.device} (tok/s: tokens computed per second, padding included, {self._speed_text()}; "
            "padding: the share of a pass's computed tokens that are padding; model loading and the report not "
            f"included). Nothing was written.{self._writes_text()}"
            f"{self._busy_text()}\n{self.note}{self._refused_text()}{self._absent_text()}{self._missing_text()}"
        )

    def headline(self) -> str:
        """One line for the start of a real run: what it runs, where it writes, and for about how long."""
        passes = sum(u.passes_left for u in self.units)
        left = [u for u in self.units if u.passes_left]
        where = f"; it writes {'; '.join(self.writes)}" if self.writes else ""
        source = ", ".join(dict.fromkeys(u.speed_from or "a probe" for u in left if not u.untimed)) or "no speed"
        named = left if len(left) <= HEADLINE_UNITS else left[: HEADLINE_UNITS - 1]
        units = "; ".join(f"{u.model} {u.stage} {u.what}" for u in named)
        more = f"; and {len(left) - len(named)} more" if len(named) < len(left) else ""
        return (
            f"{len(left)} unit(s) with work left ({units}{more}: {passes} pass(es), {self.forwards:,} batched "
            f"forward passes) on {self.device}{where}; {self._estimate_text()} (model loading and the report not "
            f"included; speeds from {source})"
        )

    def _absent_text(self) -> str:
        if not self.absent:
            return ""
        lines = "\n".join(f"- {name}" for name in self.absent)
        return (
            f"\n\nNot counted above: {len(self.absent)} model folder(s) not written yet (a fine-tuning chain still "
            f"training?); a real run stops at the first of them:\n{lines}"
        )

    def _missing_text(self) -> str:
        if not self.missing:
            return ""
        lines = "\n".join(f"- {why}" for why in self.missing)
        return (
            f"\n\nNot counted above: {len(self.missing)} model(s) not found on this machine (a real run here stops "
            f"at the first of them; download them, or choose others with --models):\n{lines}"
        )

    def _busy_text(self) -> str:
        """Why the times may be long: the probe ran while other work shared the CPU's cores."""
        if not self.probe_sequences or self.load_at_start is None or not self.device.startswith("cpu"):
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


@dataclass(frozen=True)
class PassTimer:
    """How a dry run times a model's passes without running them: the model's cost per token from its
    shapes (:func:`headstats.io.models.load_skeleton`, no weights) and the recorded speed of the closest
    pass (:func:`headstats.io.speeds.lookup`) on the machine it would run on."""

    cost: object  # headstats.engine.speed.InferenceCost
    wanted: Speed  # this machine, device, dtype and model; work and kernel set per pass
    table: list[Speed] | None = None  # the calibration table and the cache (None: read them)
    cache: list[Speed] | None = None

    @classmethod
    def for_skeleton(cls, skeleton, name: str) -> PassTimer:
        """The timer of ``skeleton`` (a model built on the meta device, named ``name``) on the device it
        would run on; or of a loaded model on its own device."""
        from headstats.engine.speed import inference_cost
        from headstats.io.models import is_skeleton, machine_info
        from headstats.io.speeds import read_cache, read_table

        loaded = not is_skeleton(skeleton)
        device = str(next(skeleton.parameters()).device if loaded else getattr(skeleton, "headstats_device", "cpu"))
        machine = machine_info(device)
        dtype = str(skeleton.dtype).removeprefix("torch.")
        wanted = Speed(machine_kind(machine), device.split(":")[0], dtype, "", "", name, 0.0)
        return cls(inference_cost(skeleton), wanted, read_table(), read_cache())

    def say(self, what: str, work: str, kernel: str, lengths: Sequence[int], batch_size: int, passes: int) -> str:
        """A run's first line: ``what`` it computes, ``passes`` over sequences of ``lengths``, and for
        about how long at the recorded speed (model loading not included)."""
        speed, source = self.tokens_per_s(work, kernel, lengths, batch_size)
        if not speed:
            return f"{what}; no recorded speed to estimate its time"
        seconds = padded_tokens(lengths, batch_size) * passes / speed
        return f"{what}; estimated {_duration(seconds)} (speed from {source})"

    def rate(self, work: str, kernel: str) -> Found | None:
        return lookup(replace(self.wanted, work=work, kernel=kernel), table=self.table, cache=self.cache)

    def tokens_per_s(self, work: str, kernel: str, lengths: Sequence[int], batch_size: int) -> tuple[float, str]:
        """(computed tokens per second, where the speed comes from) of a pass over sequences of
        ``lengths``; (0, "") when no speed is recorded for this device."""
        found = self.rate(work, kernel)
        flops = self.cost.pass_flops(lengths, batch_size)
        if found is None or not flops:
            return 0.0, ""
        return padded_tokens(lengths, batch_size) / (flops / (found.gflops * 1e9)), found.source


def _measure_questions(
    questions: Sequence,
    planned: Sequence,
    run: Callable[[Sequence], object],
    batch_size: int,
    n_probe: int,
    rng,
    timer: tuple[PassTimer, str, str] | None = None,
) -> tuple[int, int, int, float, str | None]:
    """(sequences, tokens, computed tokens, tokens/s, speed source) of one pass over ``questions``
    (``planned``: their evaluator sequences): the speed measured by ``run`` on ``n_probe`` seeded questions
    of them, or with ``timer`` (a :class:`PassTimer`, the work and the kernel) the recorded one."""
    lengths = [len(s.input_ids) for s in planned]
    if timer is not None:
        speed, source = timer[0].tokens_per_s(timer[1], timer[2], lengths, batch_size)
        return len(planned), sum(lengths), padded_tokens(lengths, batch_size), speed, source or None
    picked = set(rng.sample(range(len(questions)), min(n_probe, len(questions))))
    probe_lengths = [n for s, n in zip(planned, lengths, strict=True) if s.question in picked]
    speed = _probe([questions[i] for i in sorted(picked)], run, padded_tokens(probe_lengths, batch_size))
    return len(planned), sum(lengths), padded_tokens(lengths, batch_size), speed, None


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


def announce(label: str, name: str, step: int, steps: int, stage: str, what: str, n_probe: int) -> None:
    """The progress line of one unit of a dry run: most of its time goes to the probe's passes."""
    logger.info(
        "%s[%s] %d/%d %s %s: preparing its sequences, timing %d of them", label, name, step, steps, stage, what, n_probe
    )


def measure_task(
    model,
    tokenizer,
    selected,
    batch_size: int,
    n_probe: int,
    rng: random.Random,
    prompt_format: str = "tokenizer",
    timer: PassTimer | None = None,
) -> WorkUnit:
    """One task's sequences and tokens in ``prompt_format``, with the speed of plain whole-sequence
    passes over a probe of its questions (as the frontier evaluates them), or with ``timer`` the
    recorded speed of such passes (fused attention)."""
    from headstats.jobs.evaluate import model_sequences, question_logliks

    questions = selected.questions

    def evaluate(batch: Sequence) -> None:
        question_logliks(
            model,
            tokenizer,
            batch,
            batch_size=batch_size,
            prompt_format=prompt_format,
            progress=False,
            share_prefix=False,
        )

    planned = model_sequences(model, tokenizer, questions, prompt_format)
    timed = None if timer is None else (timer, "evaluate", "fused")
    sequences, tokens, computed, speed, source = _measure_questions(
        questions, planned, evaluate, batch_size, n_probe, rng, timed
    )
    return WorkUnit(
        "", "ablate", selected.name, len(questions), sequences, tokens, computed, 0, 0, batch_size, speed
    ).with_speed_from(source)


def measure_collection(
    results: str | os.PathLike,
    collect: CollectSpec,
    name: str,
    model,
    tokenizer,
    dataset: str,
    n_probe: int,
    rng: random.Random,
    timer: PassTimer | None = None,
) -> WorkUnit:
    """A collection counted from its own plan (:func:`~headstats.jobs.collect.plan_collection`: the
    sequences, score ids and truncation the run will use) and timed on a sample of its sequences, or
    with ``timer`` at the recorded speed of collections (``model`` may then be a skeleton)."""
    from headstats.engine import scores as S
    from headstats.engine.scoring import score_sequences
    from headstats.jobs.collect import plan_collection

    run = plan_collection(model, tokenizer, dataset, results, collect)
    seqs = dict(run.sequences(tokenizer))
    done = store.stored_sample_ids(run.partition)
    left = [s for k, s in seqs.items() if k not in done]
    source = None
    if timer is not None:
        kernel = "explicit" if S.reads_weights(run.ids) else "fused"
        speed, source = timer.tokens_per_s("collect", kernel, list(map(len, left or seqs.values())), collect.batch_size)
    else:
        sample = rng.sample(list(seqs.values()), min(n_probe, len(seqs)))

        def score(batch: Sequence) -> None:
            score_sequences(
                model, batch, batch_size=collect.batch_size, scores=run.ids, padding_side=collect.padding_side
            )

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
    ).with_speed_from(source or None)


@dataclass(frozen=True)
class SweepCounts:
    """The passes of one sweep, counted from its plan and its results folder."""

    plan: object  # headstats.jobs.sweep_plan.SweepPlan
    sweep: SweepSpec
    passes_left: int
    passes_total: int
    reused: int
    planned: list | None  # the evaluator's sequences of the loaded model; None when not loaded
    saved: int = 0  # sequences finished in the saved batches of stopped passes

    def unit(self, name: str, measured: tuple[int, int, int, float, str | None] | None) -> WorkUnit:
        """``measured``: (sequences, tokens, computed tokens, tokens/s, speed source), or None when not
        loaded."""
        sequences, tokens, computed, speed, source = measured or (None, None, None, None, None)
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
            speed_from=source,
        )


def count_sweep(
    results: str | os.PathLike, name: str, ablation, load: LoadOptions | None, model=None, tokenizer=None
) -> SweepCounts:
    """Passes left and planned of one sweep, for the loaded ``model`` or, unloaded, for ``name``. With
    the model, its evaluator sequences decide whether files written before the whole-sequence record
    count as done; without it they count as left (so a zero without the model is a zero with it)."""
    import functools

    from headstats.io.models import is_skeleton
    from headstats.jobs.evaluate import model_sequences
    from headstats.jobs.sweep_plan import Point, plan_sweep, prefix_free, saved_thresholds
    from headstats.stats.summary import BASELINE

    sweep = narrow(ablation, SweepSpec)
    if model is not None and is_skeleton(model):  # planned by name, as the skeleton's model would load
        load = LoadOptions(dtype=str(model.dtype).removeprefix("torch."), device=model.headstats_device)
    by_name = model is None or is_skeleton(model)
    plan = plan_sweep(name if by_name else model, str(ablation.task), out=results, spec=sweep, load=load)
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
    return SweepCounts(plan, sweep, len(left), 1 + len(ran), reused, planned, saved)


def measure_sweep(
    results: str | os.PathLike,
    name: str,
    model,
    tokenizer,
    ablation,
    n_probe: int,
    rng: random.Random,
    timer: PassTimer | None = None,
) -> WorkUnit:
    """One sweep counted with the loaded model (:func:`count_sweep`) and timed on a probe of its
    questions, or with ``timer`` at the recorded speed of evaluations on its kernel (``model`` may then
    be a skeleton)."""
    import torch

    from headstats.engine.probe import Probe
    from headstats.jobs.evaluate import question_logliks

    counts = count_sweep(results, name, ablation, None, model, tokenizer)
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

    timed = None if timer is None else (timer, "evaluate", "explicit" if plan.materialise else "fused")
    return counts.unit(name, _measure_questions(questions, planned, evaluate, sweep.batch_size, n_probe, rng, timed))


__all__ = [
    "DryRun",
    "PassTimer",
    "SweepCounts",
    "WorkUnit",
    "announce",
    "count_sweep",
    "machine_load",
    "measure_collection",
    "measure_sweep",
    "measure_task",
]
