"""``headstats ablate``: accuracy of a task under head zeroing, for a grid of (score, target) points.

One sweep = the baseline (the un-intervened model) plus one *point* per (score, target fraction p):
calibrate the score's threshold for p, zero heads under that threshold (:func:`ablate_heads`),
evaluate every question. Each point is one Parquet file of per-question rows (SPEC §6) under
``OUT/model=<slug>/task=<task>/``, written atomically, so a sweep resumes point by point: a finished
point is skipped, an interrupted one left nothing behind. Points run coarse to fine in their targets
(:func:`coarse_to_fine`), every score at each level, so a stopped sweep has every curve on a
coarser grid. Each point file records its pass's wall and CPU time, when it finished, and the
machine it ran on.

The baseline runs through headstats' attention too (with nothing zeroed), and every pass of a sweep
over the task (baseline, calibration on the evaluation prompts, points) runs whole sequences (no
shared-prefix reuse) through one attention kernel (:attr:`SweepPlan.materialise`); each point file
records both, and a point computed otherwise is computed again. So a point whose threshold zeroes
no head reproduces the baseline bit for bit, in bf16 too, and paired differences measure only the
intervention. A point that provably zeroes nothing (p = 0, or a threshold tied with the p = 0 one;
:meth:`SweepPlan.reuses_baseline`) reuses the baseline's answers when its thresholds came from
passes of this sweep's path (``_calibration.json`` records it).

Calibration (``calibration=``):

- ``"eval"`` (the study's choice): the scores the un-intervened model gives the very sequences the
  evaluator feeds it, recorded during the baseline pass;
- a directory of score tables (``headstats collect`` output): this model's rows, pooled;
- any other name: a collection source, scored on the fly (``calibration_limit`` sequences).
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from headstats.io import store
from headstats.options import check_device, split_kwargs
from headstats.specs import LoadOptions, SweepSpec
from headstats.stats.summary import BASELINE
from headstats.stats.thresholds import QUANTILE_METHOD, pooled_scores, thresholds_for_fractions

CALIBRATION_FILE = store.CALIBRATION_FILE
logger = logging.getLogger("headstats")

# Per-question columns of an intervention file, in order (model and task are partition columns).
ROW_COLUMNS = (
    "subject", "question_id", "score", "target", "threshold", "correct", "correct_norm", "gold_loglik", "pred",
    "n_choices", "n_zeroed", "n_heads",
)  # fmt: skip
# Added after ROW_COLUMNS where the task has it: the question's source document (its cluster).
DOCUMENT = "document"


@dataclass(frozen=True)
class Point:
    """One run of the task: the baseline, or a score at a target fraction."""

    score: str
    target: float

    @property
    def is_baseline(self) -> bool:
        return self.score == BASELINE

    @property
    def file_name(self) -> str:
        return store.point_file_name(self.score, self.target)

    def __str__(self) -> str:
        return BASELINE if self.is_baseline else f"{self.score} @ p={self.target:g}"


@dataclass
class SweepPlan:
    """Everything a sweep needs, validated before any model is loaded."""

    model_name: str
    task_name: str
    task: object
    scores: tuple[str, ...]
    targets: tuple[float, ...]
    out: Path
    partition: Path
    run_key: dict[str, object]
    calibration: str
    calibration_limit: int
    data_dir: str | None
    table_thresholds: dict[str, np.ndarray] | None  # from a score-table directory, already computed
    # Whether no two of the task's planned sequences share a prefix (:func:`prefix_free`), set by
    # whoever holds the tokenizer; asked only about files that predate the whole-sequence record.
    prefix_free: Callable[[], bool] | None = None
    attention_kernel: str = "auto"  # SweepSpec.attention_kernel

    @property
    def points(self) -> list[Point]:
        """The baseline, then every score at each target in :func:`coarse_to_fine` order, so a run
        stopped part-way has every score's curve on a coarser grid rather than some curves whole and
        others missing."""
        return [Point(BASELINE, 0.0)] + [Point(s, t) for t in coarse_to_fine(self.targets) for s in self.scores]

    @property
    def dynamic_scores(self) -> tuple[str, ...]:
        return tuple(s for s in self.scores if not S.get_score(s).is_random)

    @functools.cached_property
    def materialise(self) -> bool:
        """Whether every pass of this sweep runs the explicit attention kernel (probabilities
        materialised). A score that reads the probabilities needs that kernel for its calibration
        and its points; the baseline and the other scores' points then run it too, so that a point
        differs from the baseline only by the heads it zeroes. In a bf16 body, fused SDPA against the
        explicit kernel alone moves 1.3-1.7% of ARC-Easy answers (``benchmarks/bench_paths.py``).
        The scores already calibrated in the partition count too, so that sweeps of other score lists
        into one partition share its baseline's kernel. A pinned ``attention_kernel`` (explicit or
        fused) decides instead, so that sweeps of different scores run one path."""
        if self.attention_kernel != "auto":
            return self.attention_kernel == "explicit"
        return S.reads_weights([*self.dynamic_scores, *saved_thresholds(self)])

    def _legacy_path_is_whole(self) -> bool:
        return self.prefix_free is not None and self.prefix_free()

    def is_done(self, point: Point) -> bool:
        """Whether ``point`` has a whole file (a truncated or damaged one does not count) computed the
        way this sweep computes every pass: with its attention kernel and on whole sequences (a file
        computed otherwise is computed again). A file of a run that predates the whole-sequence
        record tried prefix reuse, which equals whole passes when no two of the task's sequences
        share a prefix (:attr:`prefix_free`; False when not known)."""
        path = self.partition / point.file_name
        if not store.is_finished_file(path):
            return False
        info = (store.file_provenance(path) or {}).get("point")
        info = info if isinstance(info, dict) else {}
        if self.recorded_materialise(point, info) != self.materialise:
            return False
        copied = not point.is_baseline and info.get("seconds") is None
        if copied and not self.reuses_baseline(point, saved_thresholds(self).get(point.score)):
            return False  # a copy of the baseline's answers that nothing here proves right: run it
        whole = info.get("whole_sequences")
        return bool(whole) if whole is not None else self._legacy_path_is_whole()

    def recorded_materialise(self, point: Point, info: dict) -> bool:
        """The kernel a point file (its ``point`` record) was computed with. Files written before the
        kernel was recorded (2026-12-01) followed the pass's own scores: the explicit kernel for a
        score that reads the probabilities, fused SDPA otherwise; the baseline (and p = 0 points
        copied from it), when eval calibration wrote it, the scores it calibrated."""
        if info.get("materialise") is not None:
            return bool(info["materialise"])
        if point.is_baseline or (point.target == 0.0 and info.get("seconds") is None):
            return self.calibration == "eval" and S.reads_weights(saved_thresholds(self))
        return S.reads_weights([point.score])

    def calibrated_on_this_path(self) -> bool:
        """Whether the partition's calibration scores came from passes like this sweep's (its kernel,
        whole sequences). A calibration written before the path was recorded (2026-12-01) counts
        when the kernel of the scores it calibrated matches and whole passes equal prefix reuse
        (:attr:`prefix_free`). True before any calibration: this sweep's will be on its path."""
        data = store.read_calibration(self.partition)
        if not data or data.get("run_key") != self.run_key:
            return True  # not calibrated yet: this sweep calibrates on its own path
        if "path" in data:  # null: thresholds of several paths
            return data["path"] == {"materialise": self.materialise, "whole_sequences": True}
        return S.reads_weights(saved_thresholds(self)) == self.materialise and self._legacy_path_is_whole()

    def reuses_baseline(self, point: Point, thresholds: dict[float, float] | None) -> bool:
        """Whether ``point`` provably zeroes nothing, so that its answers are the baseline's and no
        pass runs. Random zeroing at p = 0 never fires (u < 0). A dynamic score calibrated on the
        evaluation prompts, on this sweep's path, gets the pooled minimum (maximum for "above"
        scores) as its p = 0 threshold, which no head of those same prompts crosses strictly, and
        with nothing zeroed every layer sees what the baseline saw (same sequences, same batches,
        same kernel). So does any target whose threshold equals the p = 0 one: a score tied at its
        extreme over more than p of the rows (Gemma-3's ``avvn_ln`` is 1 for every head, its layers
        having one KV head each). A held-out calibration set, or one from another path, gives no
        such guarantee, so those points are run. ``thresholds``: the score's calibrated thresholds
        by target (None when not calibrated yet)."""
        if point.is_baseline:
            return False
        if S.get_score(point.score).is_random:
            return point.target == 0.0
        if self.calibration != "eval" or not self.calibrated_on_this_path():
            return False
        if point.target == 0.0:
            return True
        return thresholds is not None and 0.0 in thresholds and thresholds[0.0] == thresholds.get(point.target)

    def pending(self) -> list[Point]:
        """Points still to compute (see :meth:`is_done`)."""
        return [p for p in self.points if not self.is_done(p)]


def saved_thresholds(plan: SweepPlan) -> dict[str, dict[float, float]]:
    """The partition's calibrated thresholds per score and target (``_calibration.json``), when they
    were calibrated for this run; empty otherwise."""
    data = store.read_calibration(plan.partition)
    if data is None or data.get("run_key") != plan.run_key:
        return {}
    return {sid: {float(t): float(v) for t, v in by_t.items()} for sid, by_t in data["thresholds"].items()}


def prefix_free(sequences: Sequence) -> bool:
    """Whether no two of the evaluator's planned ``sequences`` share a prefix that prefix reuse would
    run once (:func:`headstats.engine.prefix.shared_prefix_groups`): then a pass that tried reuse
    ran whole sequences anyway."""
    from headstats.engine.prefix import shared_prefix_groups

    groups, _ = shared_prefix_groups([s.input_ids for s in sequences], keep=[s.n_read for s in sequences])
    return not groups


# -- validation ------------------------------------------------------------------------------------


def coarse_to_fine(targets: Sequence[float]) -> list[float]:
    """``targets`` sorted, then reordered by bisection of their index range: both ends first, then
    the middle, then the middles of each half, and so on (0, .05, ..., .3 -> 0, .3, .15, .05, .2,
    .1, .25). Each prefix of the order is a grid spanning the whole range."""
    values = sorted(targets)
    if len(values) <= 2:
        return values
    order = [0, len(values) - 1]
    spans = [(0, len(values) - 1)]
    while spans:
        wider = []
        for lo, hi in spans:
            if hi - lo >= 2:
                mid = (lo + hi) // 2
                order.append(mid)
                wider += [(lo, mid), (mid, hi)]
        spans = wider
    return [values[i] for i in order]


def check_targets(targets: Sequence[float]) -> tuple[float, ...]:
    """Checked targets (:class:`SweepSpec`), once each, whose point files can be told apart."""
    fractions = tuple(dict.fromkeys(float(p) for p in targets))
    names: dict[str, float] = {}
    for p in fractions:
        other = names.setdefault(Point("score", p).file_name, p)
        if other != p:
            raise ValueError(f"targets {other!r} and {p!r} are too close to tell apart (6 significant digits)")
    return fractions


def plan_sweep(
    model: str | PreTrainedModel,
    task: str,
    *,
    out: str | os.PathLike,
    spec: SweepSpec | None = None,
    load: LoadOptions | None = None,
    **options: object,
) -> SweepPlan:
    """Validate a sweep's inputs (task, options, output, calibration data) without a model.

    The options are :class:`~headstats.specs.SweepSpec`'s and, for a model given by name,
    :class:`~headstats.specs.LoadOptions`' (``spec`` / ``load``, or their fields by name)."""
    from headstats.io.models import model_identity, model_slug, resolve_dtype, resolve_model_path
    from headstats.io.tasks import load_task

    load_kw, sweep_kw = split_kwargs(options, LoadOptions, SweepSpec)
    spec, load = SweepSpec.from_kwargs(sweep_kw, base=spec), LoadOptions.from_kwargs(load_kw, base=load)
    limit, limit_per_subject, data_dir = spec.limit, spec.limit_per_subject, spec.data_dir
    calibration = spec.calibration
    score_ids = tuple(dict.fromkeys(spec.scores or ()))  # checked by SweepSpec
    fractions = check_targets(spec.targets)
    subject_list = list(spec.subjects) if spec.subjects else None
    task_obj = load_task(
        task,
        subjects=subject_list,
        limit=limit,
        limit_per_subject=limit_per_subject,
        data_dir=data_dir,
        sample=spec.sample,
        seed=spec.seed,
        exclude_limit=spec.exclude_limit,
        exclude_seed=spec.exclude_seed,
    )  # raises for an unknown task and for an empty selection
    task = task_obj.name
    if len(task_obj) == 0:
        raise ValueError(
            f"task {task!r} has no questions for this selection (subjects={subject_list}, limit={limit}, "
            f"limit_per_subject={limit_per_subject}); widen it"
        )
    out_path = Path(out)
    store.ensure_writable(out_path, create=False)  # creates nothing

    if isinstance(model, str):
        resolve_model_path(model)  # a missing model fails here, before any work
        name = model
        device_kind = check_device(load.device)
        dtype_name = str(resolve_dtype(load.dtype, torch.device(device_kind))).removeprefix("torch.")
    else:
        ident = model_identity(model)
        name = ident["model"]
        param = next(model.parameters())
        dtype_name, device_kind = str(param.dtype).removeprefix("torch."), param.device.type
    slug = model_slug(name)
    partition = store.partition_dir(out_path, model=slug, task=task)

    dynamic = [s for s in score_ids if not S.get_score(s).is_random]
    cal_limit = spec.calibration_limit
    table_thresholds = None
    calibration_hash = None
    if not dynamic:
        calibration_source = "none (random scores only)"
    elif calibration == "eval":
        calibration_source = "eval"
    elif Path(calibration).expanduser().is_dir():
        # Identified by content, not by folder: a changed folder is another calibration.
        table = _calibration_table(Path(calibration).expanduser(), slug, dynamic)
        calibration_hash = table_hash(table)
        calibration_source = f"score tables (sha256:{calibration_hash})"
        table_thresholds = {sid: thresholds_for_fractions(table, sid, fractions) for sid in dynamic}
    else:
        from headstats.io.tasks import collection_source

        source = collection_source(calibration, data_dir=data_dir)  # raises for an unknown name or bad file
        calibration_source = f"dataset: {source.name} (first {cal_limit} sequences)"

    # What decides the points' numbers: a resumed sweep must match it (the weights are checked on load).
    run_key = dict(
        model=name,
        task=task,
        subjects=subject_list,
        limit=limit,
        sample=spec.sample if limit is not None else None,
        limit_per_subject=limit_per_subject,
        data_dir=data_dir,
        prompt_format=spec.prompt_format,
        seed=spec.seed,
        calibration=calibration_source,
        dtype=dtype_name,
        device=device_kind,
    )
    # Recorded only when set, so that runs made before these options existed (which behaved as
    # "auto" and excluded nothing) resume under the same key.
    if spec.attention_kernel != "auto":
        run_key["attention_kernel"] = spec.attention_kernel
    if spec.exclude_limit is not None:
        run_key["exclude"] = {"limit": spec.exclude_limit, "seed": spec.exclude_seed, "sample": "random"}
    _check_resume(partition, run_key, calibration)
    return SweepPlan(
        name,
        task,
        task_obj,
        score_ids,
        fractions,
        out_path,
        partition,
        run_key,
        calibration,
        cal_limit,
        data_dir,
        table_thresholds,
        attention_kernel=spec.attention_kernel,
    )


def _calibration_table(root: Path, slug: str, score_ids: Sequence[str]) -> pd.DataFrame:
    table = store.read_scores(root)
    if "model" in table.columns:
        models = sorted(table["model"].unique())
        if slug not in models:
            raise ValueError(
                f"the calibration tables under {str(root)!r} hold no rows of model {slug!r} (they have: "
                f"{', '.join(models)}); collect this model's scores first"
            )
        table = table[table["model"] == slug]
    if "dataset" in table.columns and table["dataset"].nunique() > 1:
        raise ValueError(
            f"the calibration tables under {str(root)!r} hold several datasets "
            f"({', '.join(sorted(table['dataset'].unique()))}) for this model; point --calibration at one of them"
        )
    for sid in score_ids:
        pooled_scores(table, sid)  # raises a clear error for a missing column
    return table


def table_hash(table: pd.DataFrame) -> str:
    """The content hash of a score table (rows in key order, columns by name): what a sweep's
    calibration thresholds depend on, whatever its part files or folder."""
    keys = [c for c in ("dataset", "sample_id", "layer", "head") if c in table.columns]
    ordered = table.sort_values(keys, kind="stable")[sorted(table.columns)].reset_index(drop=True)
    for col in ordered.columns:
        if isinstance(ordered[col].dtype, pd.CategoricalDtype):
            ordered[col] = ordered[col].astype(str)
    digest = hashlib.sha256(",".join(ordered.columns).encode())
    digest.update(pd.util.hash_pandas_object(ordered, index=False).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def _check_resume(partition: Path, run_key: dict[str, object], calibration: str = "eval") -> None:
    """The settings known before a model loads; the weights' hash is checked once it has loaded. A
    partition calibrated on score tables whose content has changed since is refused with its own
    message: its points would mix thresholds of two tables."""
    source = str(run_key.get("calibration", ""))
    if source.startswith("score tables (sha256:") and store.has_data(partition):
        stored = ((store.read_provenance(partition) or {}).get("settings") or {}).get("calibration")
        if isinstance(stored, str) and stored.startswith("score tables") and stored != source:
            raise store.StoreError(
                f"the score tables of --calibration {calibration!r} changed since the points in {str(partition)!r} "
                f"were computed ({stored} there, {source} now): new points would mix thresholds of two tables; "
                "restore those tables, use another --out, or delete that folder to run the sweep again on the new ones"
            )
    store.check_resume(partition, run_key, what="sweep points")


# -- running ----------------------------------------------------------------------------------------


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
    runner = _Runner(
        plan,
        lm,
        tok,
        batch_size=spec.batch_size,
        prompt_format=spec.prompt_format,
        seed=spec.seed,
        progress=spec.progress,
    )
    runner.run(pending)
    return plan.partition


def _say(progress: bool, message: str) -> None:
    if progress:
        logger.info(message)


class _Runner:
    def __init__(
        self,
        plan: SweepPlan,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        batch_size: int,
        prompt_format: str,
        seed: int,
        progress: bool,
    ) -> None:
        from headstats.io.models import machine_info, model_identity
        from headstats.jobs.evaluate import model_sequences

        self.plan = plan
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.prompt_format = prompt_format
        self.seed = seed
        self.progress = progress
        self.num_layers, self.num_heads = model_shape(model)
        # Every pass reads the same inputs: tokenised once (a tenth of a HellaSwag pass), on first use.
        self.sequences = functools.cache(lambda: model_sequences(model, tokenizer, plan.task.questions, prompt_format))
        plan.prefix_free = functools.cache(lambda: prefix_free(self.sequences()))
        warn_tied_scores(model, plan.dynamic_scores, plan.model_name)
        param = next(model.parameters())
        identity = model_identity(model)
        # The weights, by content hash: a checkpoint saved again in place is another run.
        self.settings = {**plan.run_key, "revision": identity["revision"]}
        store.check_resume(plan.partition, {"revision": identity["revision"]}, what="sweep points")
        self.provenance = store.make_provenance(
            self.settings, kind="interventions", **identity, task=plan.task_name, run_key=plan.run_key,
            prompt_format=prompt_format, seed=seed, calibration=plan.run_key["calibration"],
            quantile_method=QUANTILE_METHOD, dtype=str(param.dtype).removeprefix("torch."), device=str(param.device),
            num_layers=self.num_layers, num_heads=self.num_heads, batch_size=batch_size,
            machine=machine_info(param.device),
        )  # fmt: skip

    # One evaluation of the task through ``probe`` (zeroing, or recording the baseline's scores), on
    # whole sequences: zeroed passes must (dynamic and random zeroing decide heads per whole
    # sequence), so the baseline does too, and a point differs from it only by what it zeroes (in a
    # bf16 body, prefix reuse alone moved 5 of 114 MMLU answers against whole passes).
    def _evaluate(self, probe: Probe) -> pd.DataFrame:
        from headstats.jobs.evaluate import evaluate

        return evaluate(
            self.model, self.tokenizer, self.plan.task, batch_size=self.batch_size,
            prompt_format=self.prompt_format, probe=probe, progress=self.progress, share_prefix=False,
            sequences=self.sequences(),
        )  # fmt: skip

    def run(self, pending: list[Point]) -> None:
        with store.writer_lock(self.plan.partition):  # one writer per partition
            store.check_resume(self.plan.partition, self.settings, what="sweep points")
            self._run([p for p in pending if not self._finished(p)])

    def _finished(self, point: Point) -> bool:
        return self.plan.is_done(point)

    def _run(self, pending: list[Point]) -> None:
        thresholds = self._thresholds(pending)
        bar = tqdm(total=len(pending), desc="sweep points", unit="point", disable=not self.progress)
        for point in pending:
            bar.set_postfix_str(str(point))
            start = _Clock()
            if point.is_baseline:
                if not self._finished(point):
                    frame = self._baseline_pass()[0]
                    self._write(point, math.nan, frame, start)
            else:
                tau = thresholds[point.score][point.target]
                frame = self._baseline_answers(point, thresholds[point.score])
                if frame is not None:
                    self._write(point, tau, frame, None)  # no pass run: the baseline's answers
                else:
                    with ablate_heads(
                        self.model, score=point.score, threshold=tau, seed=self.seed, materialise=self.plan.materialise
                    ) as ablation:
                        frame = self._evaluate(ablation.probe)
                    self._write(point, tau, frame, start)
            bar.update(1)
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

    def _baseline_pass(self, record_scores: Sequence[str] = ()) -> tuple[pd.DataFrame, Probe]:
        """The task on the un-intervened model, through headstats' attention with an all-False zero
        mask, recording ``record_scores`` (calibration) on the way."""
        heads = self.num_heads

        def never(layer: int, scores: dict[str, torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
            return torch.zeros(len(keys), heads, dtype=torch.bool)

        with Probe(
            self.model, record_scores, never, seed=self.seed, keep_history=True, materialise=self.plan.materialise
        ) as probe:
            frame = self._evaluate(probe)
        return frame, probe

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
        if plan.table_thresholds is not None:
            for sid in needed:
                out[sid] = dict(zip(plan.targets, plan.table_thresholds[sid].tolist(), strict=True))
            self._save_calibration(out)
            return out
        saved = saved_thresholds(self.plan)
        if all(all(t in saved.get(sid, {}) for t in plan.targets) for sid in needed):
            out.update({sid: saved[sid] for sid in needed})
            return out
        if plan.calibration == "eval":
            _say(self.progress, "calibrating on the evaluation prompts (baseline pass with scores recorded)")
            baseline_point = Point(BASELINE, 0.0)
            start = _Clock()
            frame, probe = self._baseline_pass(needed)
            if not self._finished(baseline_point):
                self._write(baseline_point, math.nan, frame, start)
            records = probe.history
            table = pd.DataFrame(
                {sid: torch.cat([r.scores[sid].reshape(-1).cpu() for r in records]).numpy() for sid in needed}
            )
        else:
            table = self._dataset_table(needed)
        for sid in needed:
            out[sid] = dict(zip(plan.targets, thresholds_for_fractions(table, sid, plan.targets).tolist(), strict=True))
        self._save_calibration(out)
        return out

    def _dataset_table(self, score_ids: Sequence[str]) -> pd.DataFrame:
        from headstats.engine.scoring import score_sequences
        from headstats.io.tasks import collection_source

        source = collection_source(self.plan.calibration, data_dir=self.plan.data_dir)
        seqs = [
            ids for _, ids in source.iter_sequences(
                self.tokenizer, prompt_format=self.prompt_format, limit=self.plan.calibration_limit,
                model_name=self.plan.model_name,
            )
        ]  # fmt: skip
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
            "run_key": self.plan.run_key, "quantile_method": QUANTILE_METHOD, "path": path,
            "thresholds": {sid: {repr(t): v for t, v in sorted(by_t.items())} for sid, by_t in merged.items()},
        }  # fmt: skip
        store.write_calibration(self.plan.partition, data)

    def _write(self, point: Point, threshold: float, frame: pd.DataFrame, started: _Clock | None) -> None:
        """``started``: when the pass began (None when the point reuses the baseline's answers)."""
        rows = to_rows(frame, point, threshold, self.num_layers * self.num_heads)
        prov = dict(
            self.provenance,
            point={
                "score": point.score,
                "target": point.target,
                "threshold": threshold,
                "materialise": self.plan.materialise,
                "whole_sequences": True,
                "seconds": None if started is None else round(started.wall(), 2),
                "cpu_seconds": None if started is None else round(started.cpu(), 2),
                "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            },
            evaluation=frame.attrs.get("headstats", {}),
        )
        table = pa.Table.from_pandas(rows, preserve_index=False)
        store.write_point(self.plan.partition, point.file_name, table, prov, self.provenance)


class _Clock:
    """A pass's wall time and this process's CPU time (all threads) since it began. CPU time does not
    grow while the process is stopped (``kill -STOP``), so it tells a paused pass from a slow one."""

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def wall(self) -> float:
        return time.perf_counter() - self._wall

    def cpu(self) -> float:
        return time.process_time() - self._cpu


def to_rows(frame: pd.DataFrame, point: Point, threshold: float, n_heads: int) -> pd.DataFrame:
    """The evaluator's per-question frame as intervention rows (SPEC §6, :data:`ROW_COLUMNS`).

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
