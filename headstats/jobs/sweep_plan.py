"""A sweep's plan: its points, its resume key and what its results folder already holds.

One sweep is the baseline (the un-intervened model) plus one *point* per (score, target fraction p),
each one Parquet file under ``OUT/model=<slug>/task=<task>/`` (docs/design.md#table-layout). :func:`plan_sweep` checks
every input (task, options, output folder, calibration data) before any model loads and returns a
:class:`SweepPlan`, which says which points are done: a point counts when its whole file was computed
on the path this sweep runs (one attention kernel, :attr:`SweepPlan.materialise`, on whole
sequences). :mod:`headstats.jobs.sweep` runs the points still to do.

Calibration (``calibration=``):

- ``"eval"`` (the study's choice): the scores the un-intervened model gives the very sequences the
  evaluator feeds it, recorded during the baseline pass;
- a directory of score tables (``headstats collect`` output): this model's rows, pooled;
- any other name: a collection source, scored on the fly (``calibration_limit`` sequences).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from headstats.engine import scores as S
from headstats.io import store
from headstats.jobs.resume import changed_entries, check_key, settings_key
from headstats.options import check_device, narrow, split_kwargs
from headstats.specs import Calibration as CalibrationOptions
from headstats.specs import LoadOptions, Sampling, SweepSpec
from headstats.stats.summary import BASELINE
from headstats.stats.thresholds import pooled_scores, thresholds_for_fractions

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Options that name a sweep's points rather than how each is computed: one file per (score, target).
SWEEP_AXES = ("scores", "targets")


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


def sweep_points(spec: SweepSpec) -> list[Point]:
    """The baseline, then every score at each target in :func:`coarse_to_fine` order, so a run
    stopped part-way has every score's curve on a coarser grid rather than some curves whole and
    others missing."""
    scores = tuple(dict.fromkeys(spec.scores or ()))
    return [Point(BASELINE, 0.0)] + [Point(s, t) for t in coarse_to_fine(check_targets(spec.targets)) for s in scores]


# -- calibration and the resume key ------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """Where a sweep's thresholds come from, known before any model loads."""

    source: str  # as the resume key records it: eval, score tables by content hash, or a dataset
    limit: int | None = None  # sequences of a calibration dataset; None when no dataset is scored
    thresholds: dict[str, np.ndarray] | None = None  # from score tables, already computed

    @property
    def is_tables(self) -> bool:
        return self.source.startswith("score tables")


def plan_calibration(spec: SweepSpec, slug: str) -> Calibration:
    """The calibration of ``spec``'s dynamic scores for the model whose results slug is ``slug``."""
    dynamic = [s for s in dict.fromkeys(spec.scores or ()) if not S.get_score(s).is_random]
    calibration = str(spec.calibration)
    if not dynamic:
        return Calibration("none (random scores only)")
    if calibration == "eval":
        return Calibration("eval")
    if Path(calibration).expanduser().is_dir():
        # Identified by content, not by folder: a changed folder is another calibration.
        table = calibration_table(Path(calibration).expanduser(), slug, dynamic)
        fractions = check_targets(spec.targets)
        thresholds = {sid: thresholds_for_fractions(table, sid, fractions) for sid in dynamic}
        return Calibration(f"score tables (sha256:{table_hash(table)})", thresholds=thresholds)
    options = narrow(spec, CalibrationOptions)
    source = options.source(spec.data_dir)  # raises for an unknown name or bad file
    limit = options.calibration_limit
    return Calibration(f"dataset: {source.name} (first {limit} sequences)", limit=limit)


def sweep_key(
    spec: SweepSpec, *, model: str, task: str, dtype: str, device: str, calibration: Calibration
) -> dict[str, object]:
    """What decides the points' numbers besides the weights (checked once they load): the sweep's
    settings (its axes, scores and targets, left out), the model, task, dtype and device kind, and
    the calibration as resolved. A setting that cannot act is recorded as None: the sample method
    without a limit, the seed of an exclusion without one, the calibration limit without a dataset."""
    return settings_key(
        spec,
        SWEEP_AXES,
        model=model,
        task=task,
        dtype=dtype,
        device=device,
        calibration=calibration.source,
        calibration_limit=calibration.limit,
        sample=spec.sample if spec.limit is not None else None,
        exclude_seed=spec.exclude_seed if spec.exclude_limit is not None else None,
    )


def default_key(key: dict[str, object]) -> dict[str, object]:
    """The key default options give on ``key``'s model, task, dtype, device and calibration: what a
    record that lacks an entry was computed with (:mod:`headstats.jobs.resume`)."""
    inputs = {name: str(key[name]) for name in ("model", "task", "dtype", "device")}
    defaults = sweep_key(default_options(), **inputs, calibration=Calibration(str(key["calibration"])))
    return defaults


@functools.cache
def default_options() -> SweepSpec:
    return SweepSpec()


def same_key(record: object, key: dict[str, object]) -> bool:
    """Whether a stored key (``_calibration.json``'s) is ``key``."""
    return isinstance(record, dict) and not changed_entries(record, key, default_key(key))


# -- planning ---------------------------------------------------------------------------------------


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
    from headstats.io.identity import model_slug, recorded_model

    load_kw, sweep_kw = split_kwargs(options, LoadOptions, SweepSpec)
    spec, load = SweepSpec.from_kwargs(sweep_kw, base=spec), LoadOptions.from_kwargs(load_kw, base=load)
    check_targets(spec.targets)
    task_obj = load_sweep_task(task, spec)
    store.ensure_writable(Path(out), create=False)  # creates nothing
    name, dtype, device = model_of(model, load)
    slug = model_slug(name)
    partition = store.partition_dir(Path(out), model=slug, task=task_obj.name)
    calibration = plan_calibration(spec, slug)
    key = sweep_key(
        spec, model=recorded_model(name), task=task_obj.name, dtype=dtype, device=device, calibration=calibration
    )
    check_sweep_key(partition, key, spec)
    return SweepPlan(spec, name, task_obj, partition, key, calibration)


def load_sweep_task(task: str, spec: SweepSpec):
    """The task's selected questions; raises for an unknown task and for an empty selection."""
    from headstats.io.tasks import load_task

    subjects = list(spec.subjects) if spec.subjects else None
    loaded = load_task(
        task,
        subjects=subjects,
        limit_per_subject=spec.limit_per_subject,
        data_dir=spec.data_dir,
        sampling=narrow(spec, Sampling),
        seed=spec.seed,
        exclude_limit=spec.exclude_limit,
        exclude_seed=spec.exclude_seed,
    )
    if len(loaded) == 0:
        raise ValueError(
            f"task {loaded.name!r} has no questions for this selection (subjects={subjects}, limit={spec.limit}, "
            f"limit_per_subject={spec.limit_per_subject}); widen it"
        )
    return loaded


def model_of(model: str | PreTrainedModel, load: LoadOptions) -> tuple[str, str, str]:
    """(name, dtype, device kind) of a loaded model, or of one given by name as ``load`` will load it
    (a missing model or an unusable device fails here, before any work)."""
    from headstats.io.dtypes import dtype_name
    from headstats.io.identity import model_identity, model_location
    from headstats.io.model_paths import resolve_model_path

    if isinstance(model, str):
        resolve_model_path(model)
        device = check_device(load.device)
        return model, dtype_name(load.dtype, device), device
    param = next(model.parameters())
    return (
        model_location(model) or model_identity(model)["model"],
        str(param.dtype).removeprefix("torch."),
        param.device.type,
    )


def check_sweep_key(partition: Path, key: dict[str, object], spec: SweepSpec) -> None:
    """The settings known before a model loads; the weights' hash is checked once it has loaded. A
    partition calibrated on score tables whose content has changed since is refused with its own
    message: its points would mix thresholds of two tables."""
    source = str(key["calibration"])
    if source.startswith("score tables (sha256:") and store.has_data(partition):
        stored = ((store.read_provenance(partition) or {}).get("settings") or {}).get("calibration")
        if isinstance(stored, str) and stored.startswith("score tables") and stored != source:
            raise store.StoreError(
                f"the score tables of --calibration {spec.calibration!r} changed since the points in "
                f"{str(partition)!r} were computed ({stored} there, {source} now): new points would mix thresholds "
                "of two tables; restore those tables, use another --out, or delete that folder to run the sweep "
                "again on the new ones"
            )
    check_key(partition, key, default_key(key), what="sweep points", unknown=("revision",))


def calibration_table(root: Path, slug: str, score_ids: Sequence[str]) -> pd.DataFrame:
    """This model's rows of the score tables under ``root`` (one dataset), every score present."""
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


# -- what the results folder holds ----------------------------------------------------------------


@dataclass
class SweepPlan:
    """Everything a sweep needs, validated before any model is loaded."""

    spec: SweepSpec
    model_name: str
    task: object
    partition: Path
    run_key: dict[str, object]
    calibration_plan: Calibration
    # Whether no two of the task's planned sequences share a prefix (:func:`prefix_free`), set by
    # whoever holds the tokenizer; asked only about files whose records lack their path.
    prefix_free: Callable[[], bool] | None = None

    @property
    def task_name(self) -> str:
        return self.task.name

    @property
    def scores(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.spec.scores or ()))

    @property
    def targets(self) -> tuple[float, ...]:
        return check_targets(self.spec.targets)

    @property
    def calibration(self) -> str:
        return str(self.spec.calibration)

    def calibration_sequences(self, tokenizer, prompt_format) -> list[list[int]]:
        """The token sequences a calibration dataset gives this sweep's thresholds (its run scores them):
        the first ``calibration_limit``, whole (:meth:`headstats.specs.Calibration.sequences`)."""
        _, pairs = narrow(self.spec, CalibrationOptions).sequences(
            tokenizer, prompt_format=prompt_format, model_name=self.model_name, data_dir=self.spec.data_dir
        )
        return [ids for _, ids in pairs]

    @property
    def points(self) -> list[Point]:
        return sweep_points(self.spec)

    @property
    def dynamic_scores(self) -> tuple[str, ...]:
        return tuple(s for s in self.scores if not S.get_score(s).is_random)

    @functools.cached_property
    def materialise(self) -> bool:
        """Whether every pass of this sweep runs the explicit attention kernel (probabilities
        materialised). A score that reads the probabilities needs that kernel for its calibration
        and its points; the baseline and the other scores' points then run it too, so that a point
        differs from the baseline only by the heads it zeroes (in a bf16 body the kernel alone moves
        answers, ``benchmarks/bench_paths.py``). The scores already calibrated in the partition count
        too, so that sweeps of other score lists into one partition share its baseline's kernel. A
        pinned ``attention_kernel`` (explicit or fused) decides instead, so that sweeps of different
        scores run one path."""
        if self.spec.attention_kernel != "auto":
            return self.spec.attention_kernel == "explicit"
        return S.reads_weights([*self.dynamic_scores, *saved_thresholds(self)])

    def is_done(self, point: Point) -> bool:
        """Whether ``point`` has a whole file (a truncated or damaged one does not count) computed the
        way this sweep computes every pass: with its attention kernel and on whole sequences (a file
        computed otherwise is computed again). A copy of the baseline's answers counts only where
        :meth:`reuses_baseline` proves it right."""
        path = self.partition / point.file_name
        if not store.is_finished_file(path):
            return False
        info = (store.file_provenance(path) or {}).get("point")
        info = info if isinstance(info, dict) else {}
        if recorded_path(self, point, info) != (self.materialise, True):
            return False
        copied = not point.is_baseline and info.get("seconds") is None
        return not copied or self.reuses_baseline(point, saved_thresholds(self).get(point.score))

    def calibrated_on_this_path(self) -> bool:
        """Whether the partition's calibration scores came from passes like this sweep's (its kernel,
        whole sequences). True before any calibration: this sweep's will be on its path."""
        data = store.read_calibration(self.partition)
        if not data or not same_key(data.get("run_key"), self.run_key):
            return True  # not calibrated yet: this sweep calibrates on its own path
        return recorded_calibration_path(self, data) == (self.materialise, True)

    def reuses_baseline(self, point: Point, thresholds: dict[float, float] | None) -> bool:
        """Whether ``point`` provably zeroes nothing, so that its answers are the baseline's and no
        pass runs. Random zeroing at p = 0 never fires (u < 0). A dynamic score calibrated on the
        evaluation prompts, on this sweep's path, gets the pooled minimum (maximum for "above"
        scores) as its p = 0 threshold, which no head of those same prompts crosses strictly, and
        with nothing zeroed every layer sees what the baseline saw (same sequences, same batches,
        same kernel). So does any target whose threshold equals the p = 0 one: a score tied at its
        extreme over more than p of the rows (a layer with one KV head makes ``avvn_ln`` 1 for every
        head). A held-out calibration set, or one from another path, gives no such guarantee, so
        those points are run. ``thresholds``: the score's calibrated thresholds by target (None
        when not calibrated yet)."""
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


def recorded_path(plan: SweepPlan, point: Point, info: dict) -> tuple[bool, bool]:
    """(explicit kernel, whole sequences) of a point file, from its ``point`` record. A record that
    lacks them comes from a run that chose the kernel by the pass's own scores (the explicit one
    for a score that reads the probabilities; the baseline, and p = 0 points copied from it, by the
    scores eval calibration recorded) and tried prefix reuse, which ran whole sequences where no two
    of the task's sequences share a prefix (:attr:`SweepPlan.prefix_free`; not whole when unknown)."""
    kernel, whole = info.get("materialise"), info.get("whole_sequences")
    if kernel is None:
        copied_baseline = point.is_baseline or (point.target == 0.0 and info.get("seconds") is None)
        scores = list(saved_thresholds(plan)) if copied_baseline else [point.score]
        kernel = S.reads_weights(scores) and (plan.calibration == "eval" or not copied_baseline)
    if whole is None:
        whole = plan.prefix_free is not None and plan.prefix_free()
    return bool(kernel), bool(whole)


def recorded_calibration_path(plan: SweepPlan, data: dict) -> tuple[bool, bool] | None:
    """(explicit kernel, whole sequences) of the passes ``_calibration.json``'s scores came from;
    None once thresholds of several paths mix. A record without its path reads as
    :func:`recorded_path` reads a point's: the kernel of the scores it calibrated, and prefix reuse."""
    if "path" in data:
        path = data["path"]
        return None if path is None else (bool(path["materialise"]), bool(path["whole_sequences"]))
    whole = plan.prefix_free is not None and plan.prefix_free()
    return S.reads_weights(saved_thresholds(plan)), whole


def saved_thresholds(plan: SweepPlan) -> dict[str, dict[float, float]]:
    """The partition's calibrated thresholds per score and target (``_calibration.json``), when they
    were calibrated for this run; empty otherwise."""
    data = store.read_calibration(plan.partition)
    if data is None or not same_key(data.get("run_key"), plan.run_key):
        return {}
    return {sid: {float(t): float(v) for t, v in by_t.items()} for sid, by_t in data["thresholds"].items()}


def prefix_free(sequences: Sequence) -> bool:
    """Whether no two of the evaluator's planned ``sequences`` share a prefix that prefix reuse would
    run once (:func:`headstats.engine.prefix_groups.shared_prefix_groups`): then a pass that tried reuse
    ran whole sequences anyway."""
    from headstats.engine.prefix_groups import shared_prefix_groups

    groups, _ = shared_prefix_groups([s.input_ids for s in sequences], keep=[s.n_read for s in sequences])
    return not groups


__all__ = [
    "SWEEP_AXES",
    "Calibration",
    "Point",
    "SweepPlan",
    "coarse_to_fine",
    "plan_calibration",
    "plan_sweep",
    "prefix_free",
    "saved_thresholds",
    "sweep_key",
    "sweep_points",
]
