"""``headstats ablate``: accuracy of a task under head zeroing, for a grid of (score, target) points.

Runs what :func:`~headstats.jobs.sweep_plan.plan_sweep` left to do: for each pending point, calibrate
the score's threshold for p, zero heads under that threshold (:func:`ablate_heads`) and evaluate
every question. Each point is one Parquet file of per-question rows (docs/design.md#table-layout),
written atomically, so
a sweep resumes point by point: a finished point is skipped, an interrupted one left nothing behind.
Points run coarse to fine in their targets, every score at each level, so a stopped sweep has every
curve on a coarser grid. Each point file records its pass's wall and CPU time, when it finished, and
the machine it ran on; a pass resumed from saved batches (:mod:`headstats.jobs.checkpoint`) records
its time over every session and each machine that ran its batches.

A bf16 (or fp16) body computes different numbers on machines with different bf16 kernels (a CPU with
AVX512-BF16, one without bf16 units, a GPU): rounding to 8 bits after every product turns their
different summation orders into differences as large as bf16's own against fp32. A sweep in such a
dtype therefore refuses to resume a pass, or to run a zeroed pass against a baseline, computed by
other kernels (:class:`MixedKernelsError`): joined answer for answer, the two would count flips that
zeroing did not cause.

The baseline runs through headstats' attention too (with nothing zeroed), and every pass of a sweep
over the task (baseline, calibration on the evaluation prompts, points) runs whole sequences (no
shared-prefix reuse) through one attention kernel (:attr:`SweepPlan.materialise`); each point file
records both. So a point whose threshold zeroes no head reproduces the baseline bit for bit, in
bf16 too, and paired differences measure only the intervention. A point that provably zeroes
nothing (:meth:`SweepPlan.reuses_baseline`) takes the baseline's answers instead of a pass.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.probe import Probe
from headstats.engine.zeroing import ablate_heads, model_shape, warn_tied_scores
from headstats.io import speeds, store
from headstats.io.identity import model_slug
from headstats.jobs.checkpoint import MixedKernelsError, PassCheckpoint, Spent, advance_restored, sequences_digest
from headstats.jobs.evaluate import ANSWER_COLUMNS
from headstats.jobs.grid import FunctionJob, GridResult, run_grid
from headstats.jobs.resume import check_key, jsonable
from headstats.jobs.sweep_plan import (
    Point,
    SweepPlan,
    default_key,
    plan_sweep,
    prefix_free,
    saved_thresholds,
)
from headstats.options import split_kwargs
from headstats.specs import LoadOptions, Resources, SweepSpec
from headstats.stats.summary import BASELINE
from headstats.stats.thresholds import QUANTILE_METHOD, thresholds_for_fractions

logger = logging.getLogger("headstats")


# Per-question columns of an intervention file, in order (model and task are partition columns).
ROW_COLUMNS = ("subject", "question_id", "score", "target", "threshold", *ANSWER_COLUMNS, "n_heads")
# Added after ROW_COLUMNS where the task has it: the question's source document (its cluster).
DOCUMENT = "document"


def run_sweep(
    model: str | PreTrainedModel,
    task: str,
    *,
    out: str | os.PathLike,
    tokenizer: PreTrainedTokenizerBase | None = None,
    spec: SweepSpec | None = None,
    load: LoadOptions | None = None,
    **options: object,
) -> Path:
    """Run the baseline and every (score, target) point of a sweep; returns the results partition.

    ``model`` is a model name/path (loaded with ``load`` after every input has been validated) or a
    loaded model (then ``tokenizer`` is required). The options are :class:`~headstats.specs.SweepSpec`'s
    (``scores``, ``targets``, ``limit``, ``batch_size``, ``calibration``, ...; ``spec``, or its fields by
    name, as are ``dtype`` and ``device``). Finished points under ``out`` are kept and skipped, so
    calling again with more targets or scores only runs what is missing. Read the results with
    :func:`headstats.read_interventions` and summarise them with :func:`summarize_interventions`.
    """
    load_kw, sweep_kw = split_kwargs(options, LoadOptions, SweepSpec)
    spec, load = SweepSpec.from_kwargs(sweep_kw, base=spec), LoadOptions.from_kwargs(load_kw, base=load)
    if not isinstance(model, str) and tokenizer is None:
        raise ValueError("a loaded model needs its tokenizer: run_sweep(model, task, tokenizer=..., ...)")
    plan = plan_sweep(model, task, out=out, spec=spec, load=load)
    pending = plan.pending()
    if not pending:
        _say(spec.progress, f"all {len(plan.points)} points of this sweep are done in {plan.partition}")
        return plan.partition
    if isinstance(model, str):
        from headstats.io.models import load_model

        lm, tok = load_model(model, **load.kwargs())
    else:
        lm, tok = model, tokenizer
    assert tok is not None
    Runner(plan, lm, tok).run(pending)
    return plan.partition


def sweep_grid(
    models: Sequence[str],
    sweeps: Mapping[str, SweepSpec],
    out: str | os.PathLike,
    *,
    resources: Resources,
    load: LoadOptions,
) -> GridResult:
    """Run each task's sweep (``sweeps``: task -> its spec) with each model as jobs of a grid
    (:func:`headstats.jobs.grid.run_grid`), one job per (model, task): the points of one sweep share
    its baseline and calibration file. ``resources.folder`` defaults to ``out/_grid``."""
    if resources.folder is None:
        resources = replace(resources, folder=os.fspath(Path(out) / "_grid"))
    jobs = [
        FunctionJob(
            f"ablate {model} {task}",
            run_sweep,
            {"model": model, "task": task, "out": out, **spec.kwargs(), **load.kwargs(), "progress": False},
            output_paths=(str(store.partition_dir(out, model=model_slug(model), task=task)),),
        )
        for model in models
        for task, spec in sweeps.items()
    ]
    return run_grid(jobs, resources, progress=next(iter(sweeps.values())).progress)


def sweep_provenance(plan: SweepPlan, model: PreTrainedModel, num_layers: int, num_heads: int) -> dict:
    """The record every point file of ``plan`` carries: the run's key with the weights' hash (its
    ``settings``), the model's identity, every option as given and the machine."""
    from headstats.io.identity import model_from_table, model_identity
    from headstats.io.models import machine_info

    identity = model_identity(model) | model_from_table(model, plan.partition)
    param = next(model.parameters())
    settings = {**plan.run_key, "revision": identity["revision"]}
    facts = dict(
        kind="interventions",
        run_key=plan.run_key,
        options=jsonable(plan.spec.kwargs()),
        quantile_method=QUANTILE_METHOD,
        dtype=str(param.dtype).removeprefix("torch."),
        device=str(param.device),
        num_layers=num_layers,
        num_heads=num_heads,
        machine=machine_info(param.device),
    )
    return store.make_provenance(settings, **{**plan.run_key, **identity, **facts})


def kernel_conflict(
    plan: SweepPlan, point: Point, dtype: str, here: object, batches_from: Sequence[object]
) -> str | None:
    """Why a ``dtype`` pass of ``point`` may not run on machine ``here`` (a
    :func:`~headstats.io.models.machine_info` record): the machines that computed its saved batches
    (``batches_from``) or, for a zeroed point, its baseline round ``dtype`` products otherwise (module
    docstring); None when it may run."""
    from headstats.io.machine import mixed_kernels

    earlier = [(f"{store.partial_file(plan.partition, point.file_name).name}'s saved batches", m) for m in batches_from]
    baseline = plan.partition / Point(BASELINE, 0.0).file_name
    if not point.is_baseline and store.is_finished_file(baseline):
        earlier.append(("its baseline", (store.file_provenance(baseline) or {}).get("machine")))
    remedy = f"Run this sweep on a machine like that one, or move {plan.partition} away to run it whole here."
    return mixed_kernels(earlier, here, dtype, plan.partition, remedy)


def refused_here(plan: SweepPlan, dtype: str, here: object) -> str | None:
    """From the results folder alone (no model): why machine ``here`` may not run a pass that
    ``plan`` has left in ``dtype`` (:func:`kernel_conflict`, the first such pass in the order a sweep
    runs them), or None. A pass's saved batches count whatever their key, which only the loaded model
    can check: a record another run left counts here, where the sweep would run those batches again."""
    from headstats.jobs.checkpoint import saved_machines

    saved = saved_thresholds(plan)
    for point in plan.pending():
        if plan.reuses_baseline(point, saved.get(point.score)):
            continue  # no pass: the baseline's answers
        batches_from = saved_machines(store.partial_file(plan.partition, point.file_name))
        why = kernel_conflict(plan, point, dtype, here, batches_from)
        if why is not None:
            return why
    return None


def _say(progress: bool, message: str) -> None:
    if progress:
        logger.info(message)


class Runner:
    """Runs a plan's pending points with a loaded model and its tokenizer."""

    def __init__(self, plan: SweepPlan, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        from headstats.jobs.evaluate import model_sequences

        spec = plan.spec
        self.plan, self.model, self.tokenizer = plan, model, tokenizer
        self.batch_size, self.prompt_format, self.seed, self.progress = (
            spec.batch_size,
            spec.prompt_format,
            spec.seed,
            spec.progress,
        )
        self.num_layers, self.num_heads = model_shape(model)
        # Every pass reads the same inputs: tokenised once (a tenth of a HellaSwag pass), on first use.
        questions = plan.task.questions
        self.sequences = functools.cache(lambda: model_sequences(model, tokenizer, questions, spec.prompt_format))
        plan.prefix_free = functools.cache(lambda: prefix_free(self.sequences()))
        # What a pass's saved batches were computed from: hashed once, checked by every pass.
        self.inputs_digest = functools.cache(
            lambda: sequences_digest(
                [s.input_ids for s in self.sequences()], [questions[s.question].sample_key for s in self.sequences()]
            )
        )
        warn_tied_scores(model, plan.dynamic_scores, plan.model_name)
        self.provenance = sweep_provenance(plan, model, self.num_layers, self.num_heads)
        self.settings = self.provenance["settings"]
        self.check_settings()

    def check_settings(self) -> None:
        """The run's key with the weights' hash against the partition's: a checkpoint saved again in
        place is another run."""
        check_key(self.plan.partition, self.settings, default_key(self.plan.run_key), what="sweep points")

    # One evaluation of the task through ``probe`` (zeroing, or recording the baseline's scores), on
    # whole sequences: zeroed passes must (dynamic and random zeroing decide heads per whole
    # sequence), so the baseline does too, and a point differs from it only by what it zeroes (in a
    # bf16 body, prefix reuse alone moved 5 of 114 MMLU answers against whole passes).
    def _evaluate(self, probe: Probe, checkpoint: PassCheckpoint, point: Point) -> pd.DataFrame:
        from headstats.jobs.evaluate import evaluate

        return evaluate(
            self.model,
            self.tokenizer,
            self.plan.task,
            batch_size=self.batch_size,
            prompt_format=self.prompt_format,
            probe=probe,
            progress=self.progress,
            share_prefix=False,
            sequences=self.sequences(),
            checkpoint=checkpoint,
            desc=f"{self.plan.task.name} {point}",  # which pass, in a log of hours of them
        )

    def _checkpoint(self, point: Point, threshold: float, record_scores: Sequence[str] = ()) -> PassCheckpoint:
        """Where ``point``'s pass keeps its finished batches, keyed by all that their numbers depend on."""
        key = {
            "settings": self.settings,
            "point": point.file_name,
            "threshold": repr(float(threshold)),
            "record_scores": list(record_scores),
            "materialise": self.plan.materialise,
            "batch_size": self.batch_size,
            "sequences": self.inputs_digest(),
        }
        checkpoint = PassCheckpoint(
            store.partial_file(self.plan.partition, point.file_name), key, machine=self.provenance["machine"]
        )
        self._check_kernels(point, checkpoint)
        return checkpoint

    def _check_kernels(self, point: Point, checkpoint: PassCheckpoint) -> None:
        """Refuse a reduced-precision pass that would join batches or a baseline computed by other
        kernels (:class:`MixedKernelsError`)."""
        batches_from = [m.get("machine") for m in checkpoint.earlier.machines]
        why = kernel_conflict(self.plan, point, str(self.provenance["dtype"]), self.provenance["machine"], batches_from)
        if why is not None:
            raise MixedKernelsError(why)

    def run(self, pending: list[Point]) -> None:
        with store.writer_lock(self.plan.partition):  # one writer per partition
            self.check_settings()
            todo = [p for p in pending if not self._finished(p)]
            self._announce(todo)
            self._run(todo)

    def _announce(self, todo: list[Point]) -> None:
        """What the sweep will run, where it writes, and for about how long (recorded speeds)."""
        from headstats.jobs.dryrun_units import PassTimer

        saved = saved_thresholds(self.plan)
        passes = sum(1 for p in todo if p.is_baseline or not self.plan.reuses_baseline(p, saved.get(p.score)))
        if not passes or not self.progress:
            return
        lengths = [len(s.input_ids) for s in self.sequences()]
        kernel = "explicit" if self.plan.materialise else "fused"
        what = f"{self.plan.task_name}: {passes} pass(es) of {len(lengths)} sequences into {self.plan.partition}"
        timer = PassTimer.for_skeleton(self.model, self.plan.model_name)
        logger.info(timer.say(what, "evaluate", kernel, lengths, self.batch_size, passes))

    def _finished(self, point: Point) -> bool:
        return self.plan.is_done(point)

    def _run(self, pending: list[Point]) -> None:
        thresholds = self._thresholds(pending)
        bar = tqdm(total=len(pending), desc="sweep points", unit="point", disable=not self.progress)
        for point in pending:
            bar.set_postfix_str(str(point))
            ran = False  # a point that needs no pass of its own is left out of the bar's rate
            if point.is_baseline:
                if not self._finished(point):  # else the calibration pass wrote it
                    frame, _, checkpoint = self._baseline_pass()
                    self._write(point, math.nan, frame, checkpoint.spent())
                    checkpoint.discard()
                    ran = True
            else:
                tau = thresholds[point.score][point.target]
                frame = self._baseline_answers(point, thresholds[point.score])
                if frame is not None:
                    self._write(point, tau, frame, None)  # no pass run: the baseline's answers
                else:
                    checkpoint = self._checkpoint(point, tau)
                    with ablate_heads(
                        self.model, score=point.score, threshold=tau, seed=self.seed, materialise=self.plan.materialise
                    ) as ablation:
                        frame = self._evaluate(ablation.probe, checkpoint, point)
                    self._write(point, tau, frame, checkpoint.spent())
                    checkpoint.discard()
                    ran = True
            if ran:
                bar.update(1)
            else:
                advance_restored(bar, 1)
        bar.close()

    def _baseline_answers(self, point: Point, thresholds: dict[float, float]) -> pd.DataFrame | None:
        """The baseline's answers for a point that provably zeroes nothing
        (:meth:`SweepPlan.reuses_baseline`), saving a pass; None when the point must run."""
        if not self.plan.reuses_baseline(point, thresholds):
            return None
        baseline = Point(BASELINE, 0.0)
        if not self._finished(baseline):
            return None
        frame = store.read_table(self.plan.partition / baseline.file_name).to_pandas()
        frame["n_zeroed"] = 0.0
        return frame

    def _baseline_pass(self, record_scores: Sequence[str] = ()) -> tuple[pd.DataFrame, Probe, PassCheckpoint]:
        """The task on the un-intervened model, through headstats' attention with an all-False zero
        mask, recording ``record_scores`` (calibration) on the way; and its checkpoint, for the caller
        to discard once what it needed of the pass is saved."""
        heads = self.num_heads
        checkpoint = self._checkpoint(Point(BASELINE, 0.0), math.nan, record_scores)

        def never(layer: int, scores: dict[str, torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
            return torch.zeros(len(keys), heads, dtype=torch.bool)

        with Probe(
            self.model, record_scores, never, seed=self.seed, keep_history=True, materialise=self.plan.materialise
        ) as probe:
            frame = self._evaluate(probe, checkpoint, Point(BASELINE, 0.0))
        return frame, probe, checkpoint

    def _thresholds(self, pending: list[Point]) -> dict[str, dict[float, float]]:
        """Thresholds of every pending point: calibrated once, kept in ``_calibration.json``."""
        plan = self.plan
        out: dict[str, dict[float, float]] = {}
        for sid in plan.scores:
            if S.get_score(sid).is_random:
                out[sid] = {t: float(t) for t in plan.targets}
        needed = sorted({p.score for p in pending if not p.is_baseline and p.score in plan.dynamic_scores})
        if not needed:
            return out
        tables = plan.calibration_plan.thresholds
        if tables is not None:
            for sid in needed:
                out[sid] = dict(zip(plan.targets, tables[sid].tolist(), strict=True))
            self._save_calibration(out)
            return out
        saved = saved_thresholds(self.plan)
        if all(all(t in saved.get(sid, {}) for t in plan.targets) for sid in needed):
            out.update({sid: saved[sid] for sid in needed})
            return out
        if plan.calibration == "eval":
            _say(self.progress, "calibrating on the evaluation prompts (baseline pass with scores recorded)")
            baseline_point = Point(BASELINE, 0.0)
            frame, probe, checkpoint = self._baseline_pass(needed)
            if not self._finished(baseline_point):
                self._write(baseline_point, math.nan, frame, checkpoint.spent())
            records = probe.history
            table = pd.DataFrame(
                {sid: torch.cat([r.scores[sid].reshape(-1).cpu() for r in records]).numpy() for sid in needed}
            )
        else:
            table, checkpoint = self._dataset_table(needed), None
        for sid in needed:
            out[sid] = dict(zip(plan.targets, thresholds_for_fractions(table, sid, plan.targets).tolist(), strict=True))
        self._save_calibration(out)
        if checkpoint is not None:
            checkpoint.discard()  # the pass's answers and thresholds are both saved
        return out

    def _dataset_table(self, score_ids: Sequence[str]) -> pd.DataFrame:
        from headstats.engine.scoring import score_sequences

        seqs = self.plan.calibration_sequences(self.tokenizer, self.prompt_format)
        if not seqs:
            raise ValueError(f"calibration dataset {self.plan.calibration!r} yielded no sequences")
        _say(self.progress, f"calibrating on {len(seqs)} sequences of {self.plan.calibration!r}")
        return score_sequences(
            self.model, seqs, self.batch_size, scores=score_ids, seed=self.seed, progress=self.progress
        )

    def _save_calibration(self, thresholds: dict[str, dict[float, float]]) -> None:
        merged = saved_thresholds(self.plan)
        # The path of the passes the scores came from; null once thresholds of several paths mix.
        path: dict | None = {"materialise": self.plan.materialise, "whole_sequences": True}
        if merged and (store.read_calibration(self.plan.partition) or {}).get("path") != path:
            path = None
        for sid, by_t in thresholds.items():
            merged.setdefault(sid, {}).update(by_t)
        data = {
            "run_key": self.plan.run_key,
            "quantile_method": QUANTILE_METHOD,
            "path": path,
            "thresholds": {sid: {repr(t): v for t, v in sorted(by_t.items())} for sid, by_t in merged.items()},
        }
        store.write_calibration(self.plan.partition, data)

    def _write(self, point: Point, threshold: float, frame: pd.DataFrame, spent: Spent | None) -> None:
        """``spent``: what the pass cost, over every session that ran its batches (None when the point
        reuses the baseline's answers). ``machines`` lists each machine that ran batches and how many;
        ``untimed_batches``: batches restored from a record saved before times were kept, whose time
        the seconds leave out."""
        rows = to_rows(frame, point, threshold, self.num_layers * self.num_heads)
        prov = dict(
            self.provenance,
            point={
                "score": point.score,
                "target": point.target,
                "threshold": threshold,
                "materialise": self.plan.materialise,
                "whole_sequences": True,
                "seconds": None if spent is None else round(spent.seconds, 2),
                "cpu_seconds": None if spent is None else round(spent.cpu_seconds, 2),
                "machines": None if spent is None else spent.machines,
                "untimed_batches": None if spent is None else spent.untimed_batches,
                "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            },
            evaluation=frame.attrs.get("headstats", {}),
        )
        table = pa.Table.from_pandas(rows, preserve_index=False)
        store.write_point(self.plan.partition, point.file_name, table, prov, self.provenance)
        if spent is not None and len(spent.machines or []) == 1 and not spent.untimed_batches:
            lengths = [len(s.input_ids) for s in self.sequences()]
            kernel = "explicit" if self.plan.materialise else "fused"
            speeds.record_pass(
                self.model, self.plan.model_name, "evaluate", kernel, lengths, self.batch_size, spent.seconds
            )


def to_rows(frame: pd.DataFrame, point: Point, threshold: float, n_heads: int) -> pd.DataFrame:
    """The evaluator's per-question frame as intervention rows (docs/design.md#table-layout, :data:`ROW_COLUMNS`).

    ``subject`` stays null for tasks without subjects, ``correct_norm`` null where the task does not
    report it; ``n_zeroed`` is float64 because a question scored in several sequences (one per
    choice) reports the mean count over them. A task whose questions come from source documents
    (HellaSwag) adds ``document``."""
    missing = set(ROW_COLUMNS) - {"score", "target", "threshold", "n_heads"} - set(frame.columns)
    if missing:
        raise RuntimeError(f"the evaluator returned no {', '.join(sorted(missing))} column(s)")
    n = len(frame)
    rows = pd.DataFrame(
        {
            "subject": frame["subject"].astype(object).where(frame["subject"].notna(), None),
            "question_id": frame["question_id"].astype("int64"),
            "score": pd.Series([point.score] * n, dtype=object),
            "target": np.full(n, point.target, dtype="float64"),
            "threshold": np.full(n, threshold, dtype="float64"),
            "correct": frame["correct"].astype(bool),
            "correct_norm": frame["correct_norm"].astype("boolean"),
            "gold_loglik": frame["gold_loglik"].astype("float64"),
            "pred": frame["pred"].astype("int16"),
            "n_choices": frame["n_choices"].astype("int16"),
            "n_zeroed": frame["n_zeroed"].astype("float64"),
            "n_heads": np.full(n, n_heads, dtype="int32"),
        }
    )
    columns = list(ROW_COLUMNS)
    if DOCUMENT in frame.columns:
        rows[DOCUMENT] = frame[DOCUMENT].astype(object).to_numpy()
        columns.append(DOCUMENT)
    return rows[columns].reset_index(drop=True)
