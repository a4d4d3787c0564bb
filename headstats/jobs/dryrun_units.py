"""One unit of ``headstats run --dry-run`` counted and timed: what it would run, and for about how long.

:mod:`headstats.studies.dryrun` loops over a study's units; this module counts and times one unit, and
:mod:`headstats.jobs.dryrun` holds what it reports.
For every model and stage: the sequences or questions, the passes still to run
(finished collection samples and sweep points are skipped, as a real run skips them), the batched
forward passes and tokens they need, and an estimated time.

The counts need the model's tokenizer and shapes, not its weights: they are read from its files
(:func:`headstats.io.model_files.read_model_files`: ``config.json``, and ``tokenizer.json`` through the
``tokenizers`` library, no torch or transformers), or where those do not describe it fully, built
from its configuration on the meta device (:func:`headstats.io.models.load_skeleton`). The planners
read either as they read a loaded model (:func:`not_loaded` tells them apart). The time comes from one
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
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headstats.engine import scores as S
from headstats.engine.cost import InferenceCost, padded_tokens
from headstats.io import store
from headstats.io.machine import cpu_record
from headstats.io.model_files import FileModel
from headstats.io.speeds import Found, Speed, lookup, machine_kind
from headstats.jobs.collect_plan import PlannedModel, plan_collection_for
from headstats.jobs.dryrun import WorkUnit, duration
from headstats.jobs.sequences import model_sequences
from headstats.options import narrow
from headstats.specs import CollectSpec, LoadOptions, SweepSpec

logger = logging.getLogger("headstats")


def not_loaded(model) -> bool:
    """Whether ``model`` only describes a model (read from its files, or its skeleton on the meta
    device): it records where it would run (``headstats_device``), and a unit is planned by its name."""
    return getattr(model, "headstats_device", None) is not None


def planned_model(model) -> PlannedModel:
    """What a collection's plan reads of ``model``: a :class:`~headstats.io.model_files.FileModel`, or a
    loaded model or its skeleton (through transformers)."""
    if not isinstance(model, FileModel):
        from headstats.jobs.collect import planned_model as of_loaded

        return of_loaded(model)
    return PlannedModel(
        model.recorded_name,
        model.revision,
        str(model.config.model_type),
        model.headstats_name,
        model.dtype,
        model.position_limit,
    )


@dataclass(frozen=True)
class PassTimer:
    """How a dry run times a model's passes without running them: the model's cost per token from its
    shapes (:func:`headstats.io.models.load_skeleton`, no weights) and the recorded speed of the closest
    pass (:func:`headstats.io.speeds.lookup`) on the machine it would run on."""

    cost: InferenceCost
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

    @classmethod
    def for_files(cls, model: FileModel, name: str) -> PassTimer:
        """The timer of a model read from its files (:func:`~headstats.io.model_files.read_model_files`)
        on the device it would run on: its cost from its configuration, a CPU's record without torch."""
        from headstats.io.speeds import read_cache, read_table

        device = model.headstats_device
        if device.split(":")[0] == "cpu":
            machine = {**cpu_record(), "device": device}
        else:  # the GPU's name is torch's to tell
            from headstats.io.models import machine_info

            machine = machine_info(device)
        wanted = Speed(machine_kind(machine), device.split(":")[0], model.dtype, "", "", name, 0.0)
        return cls(model.cost, wanted, read_table(), read_cache())

    def say(self, what: str, work: str, kernel: str, lengths: Sequence[int], batch_size: int, passes: int) -> str:
        """A run's first line: ``what`` it computes, ``passes`` over sequences of ``lengths``, and for
        about how long at the recorded speed (model loading not included)."""
        speed, source = self.tokens_per_s(work, kernel, lengths, batch_size)
        if not speed:
            return f"{what}; no recorded speed to estimate its time"
        seconds = padded_tokens(lengths, batch_size) * passes / speed
        return f"{what}; estimated {duration(seconds)} (speed from {source})"

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
    run: Callable[[Sequence], object] | None,
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
    questions = selected.questions

    def evaluate(batch: Sequence) -> None:
        from headstats.jobs.evaluate import question_logliks

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
    run = plan_collection_for(planned_model(model), tokenizer, dataset, results, collect)
    seqs = dict(run.sequences(tokenizer))
    done = store.stored_sample_ids(run.partition)
    left = [s for k, s in seqs.items() if k not in done]
    source = None
    if timer is not None:
        kernel = "explicit" if S.reads_weights(run.ids) else "fused"
        speed, source = timer.tokens_per_s("collect", kernel, list(map(len, left or seqs.values())), collect.batch_size)
    else:
        from headstats.engine.scoring import score_sequences

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

    from headstats.jobs.sweep_plan import Point, plan_sweep, prefix_free, saved_thresholds
    from headstats.stats.summary import BASELINE

    sweep = narrow(ablation, SweepSpec)
    unloaded = model is not None and not_loaded(model)
    if unloaded:  # planned by name, as the model would load
        load = LoadOptions(dtype=str(model.dtype).removeprefix("torch."), device=model.headstats_device)
    by_name = model is None or unloaded
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
    counts = count_sweep(results, name, ablation, None, model, tokenizer)
    plan, sweep, planned = counts.plan, counts.sweep, counts.planned
    questions = plan.task.questions
    if timer is not None:
        timed = (timer, "evaluate", "explicit" if plan.materialise else "fused")
        return counts.unit(name, _measure_questions(questions, planned, None, sweep.batch_size, n_probe, rng, timed))
    import torch

    from headstats.engine.probe import Probe
    from headstats.jobs.evaluate import question_logliks

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


__all__ = [
    "PassTimer",
    "SweepCounts",
    "announce",
    "count_sweep",
    "measure_collection",
    "measure_sweep",
    "measure_task",
    "not_loaded",
    "planned_model",
]
