"""``headstats ablate``: accuracy of a task under head zeroing, for a grid of (score, target) points.

One sweep = the baseline (the un-intervened model) plus one *point* per (score, target fraction p):
calibrate the score's threshold for p, zero heads under that threshold (:func:`ablate_heads`),
evaluate every question. Each point is one Parquet file of per-question rows (SPEC §6) under
``OUT/model=<slug>/task=<task>/``, written atomically, so a sweep resumes point by point: a finished
point is skipped, an interrupted one left nothing behind.

The baseline runs through headstats' attention too (with nothing zeroed), so a point whose
threshold zeroes no head reproduces the baseline exactly and paired differences measure only
the intervention.

Calibration (``calibration=``):

- ``"eval"`` (the study's choice): the scores the un-intervened model gives the very sequences the
  evaluator feeds it, recorded during the baseline pass;
- a directory of score tables (``headstats collect`` output): this model's rows, pooled;
- any other name: a collection source, scored on the fly (``calibration_limit`` sequences).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
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
from headstats.engine.zeroing import ablate_heads, model_shape
from headstats.io import store
from headstats.jobs.grid import add_launcher_arguments
from headstats.stats.summary import BASELINE, summarize_curves, summarize_interventions
from headstats.stats.thresholds import QUANTILE_METHOD, _check_fractions, pooled_scores, thresholds_for_fractions

DEFAULT_SCORES = ("ahon_ln", "awft", "random")
DEFAULT_TARGETS = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30)
CALIBRATION_FILE = "_calibration.json"
DEFAULT_CALIBRATION_LIMIT = 256

# Per-question columns of an intervention file, in order (model and task are partition columns).
ROW_COLUMNS = (
    "subject", "question_id", "score", "target", "threshold", "correct", "correct_norm", "gold_loglik", "pred",
    "n_choices", "n_zeroed", "n_heads",
)  # fmt: skip


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
        return "baseline.parquet" if self.is_baseline else f"point-{self.score}-{self.target:.6g}.parquet"

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

    @property
    def points(self) -> list[Point]:
        return [Point(BASELINE, 0.0)] + [Point(s, t) for s in self.scores for t in self.targets]

    @property
    def dynamic_scores(self) -> tuple[str, ...]:
        return tuple(s for s in self.scores if not S.get_score(s).is_random)

    def pending(self) -> list[Point]:
        return [p for p in self.points if not (self.partition / p.file_name).is_file()]


# -- validation ------------------------------------------------------------------------------------


def _parse_list(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(v).strip() for v in items if str(v).strip()]


def check_scores(scores: str | Sequence[str]) -> tuple[str, ...]:
    ids = _parse_list(scores, "scores")
    if not ids:
        raise ValueError("no score ids given: choose from " + ", ".join(S.SCORES))
    for sid in ids:
        if sid == BASELINE:
            raise ValueError("'baseline' is always run; list only score ids in --scores")
        S.get_score(sid)
    return tuple(dict.fromkeys(ids))


def check_targets(targets: str | Sequence[float]) -> tuple[float, ...]:
    if isinstance(targets, str):
        raw: list[object] = []
        for item in _parse_list(targets, "targets"):
            try:
                raw.append(float(item))
            except ValueError:
                raise ValueError(f"target {item!r} is not a number: give fractions such as 0,0.05,0.1") from None
    else:
        raw = list(targets)
    if not raw:
        raise ValueError("no targets given: give fractions of heads to zero, e.g. 0,0.05,0.1")
    fractions = tuple(dict.fromkeys(float(p) for p in _check_fractions(raw)))
    names: dict[str, float] = {}
    for p in fractions:
        other = names.setdefault(Point("score", p).file_name, p)
        if other != p:
            raise ValueError(f"targets {other!r} and {p!r} are too close to tell apart (6 significant digits)")
    return fractions


def check_out_writable(out: Path) -> None:
    """Fail early if ``out`` cannot be created or written, without creating anything."""
    path = out.expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise store.StoreError(
            f"output directory {str(out)!r} cannot be created: {str(probe)!r} is a file; choose another --out"
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise store.StoreError(f"output directory {str(out)!r} is not writable ({str(probe)!r}); choose another --out")


def _device_kind(device: str | torch.device | None) -> str:
    """The device type a model will be loaded on; an unusable device fails here, before any work."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}: give cpu, cuda, cuda:1, mps, ...") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for, but no CUDA device is available here; use --device cpu")
    return kind


def plan_sweep(
    model: str | PreTrainedModel,
    task: str,
    *,
    scores: str | Sequence[str] = DEFAULT_SCORES,
    targets: str | Sequence[float] = DEFAULT_TARGETS,
    out: str | os.PathLike,
    subjects: str | Sequence[str] | None = None,
    limit: int | None = None,
    limit_per_subject: int | None = None,
    data_dir: str | os.PathLike | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    prompt_format: str = "tokenizer",
    seed: int = 0,
    calibration: str = "eval",
    calibration_limit: int | None = None,
) -> SweepPlan:
    """Validate a sweep's inputs (task, scores, targets, output, calibration data) without a model."""
    from headstats.io.models import model_identity, model_slug, resolve_dtype, resolve_model_path
    from headstats.io.tasks import PROMPT_FORMATS, load_task

    score_ids = check_scores(scores)
    fractions = check_targets(targets)
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt format {prompt_format!r}: choose from {', '.join(PROMPT_FORMATS)}")
    subject_list = _parse_list(subjects, "subjects") or None
    task_obj = load_task(
        task, subjects=subject_list, limit=limit, limit_per_subject=limit_per_subject, data_dir=data_dir
    )  # raises for an unknown task and for an empty selection
    task = task_obj.name
    if len(task_obj) == 0:
        raise ValueError(
            f"task {task!r} has no questions for this selection (subjects={subject_list}, limit={limit}, "
            f"limit_per_subject={limit_per_subject}); widen it"
        )
    out_path = Path(out)
    check_out_writable(out_path)

    if isinstance(model, str):
        resolve_model_path(model)  # a missing model fails here, before any work
        name = model
        dtype_name = str(resolve_dtype(dtype, torch.device(_device_kind(device)))).removeprefix("torch.")
        device_kind = _device_kind(device)
    else:
        ident = model_identity(model)
        name = ident["model"]
        param = next(model.parameters())
        dtype_name, device_kind = str(param.dtype).removeprefix("torch."), param.device.type
    slug = model_slug(name)
    partition = store.partition_dir(out_path, model=slug, task=task)

    dynamic = [s for s in score_ids if not S.get_score(s).is_random]
    cal_limit = DEFAULT_CALIBRATION_LIMIT if calibration_limit is None else int(calibration_limit)
    if cal_limit < 1:
        raise ValueError(f"calibration_limit must be at least 1, not {cal_limit}")
    table_thresholds = None
    if not dynamic:
        calibration_source = "none (random scores only)"
    elif calibration == "eval":
        calibration_source = "eval"
    elif Path(calibration).expanduser().is_dir():
        calibration_source = f"score tables: {Path(calibration).expanduser().absolute()}"
        table = _calibration_table(Path(calibration).expanduser(), slug, dynamic)
        table_thresholds = {sid: thresholds_for_fractions(table, sid, fractions) for sid in dynamic}
    else:
        from headstats.io.tasks import collection_source

        source = collection_source(calibration, data_dir=data_dir)  # raises for an unknown name or bad file
        calibration_source = f"dataset: {source.name} (first {cal_limit} sequences)"

    run_key = {
        "model": name, "task": task, "subjects": subject_list, "limit": limit,
        "limit_per_subject": limit_per_subject, "data_dir": None if data_dir is None else str(data_dir),
        "prompt_format": prompt_format, "seed": int(seed), "calibration": calibration_source,
        "dtype": dtype_name, "device": device_kind,
    }  # fmt: skip
    _check_resume(partition, run_key)
    return SweepPlan(
        name, task, task_obj, score_ids, fractions, out_path, partition, run_key, calibration, cal_limit,
        None if data_dir is None else str(data_dir), table_thresholds,
    )  # fmt: skip


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


def _check_resume(partition: Path, run_key: dict[str, object]) -> None:
    prov = store.read_provenance(partition) if partition.is_dir() else None
    if prov is None:
        return
    before = prov.get("run_key")
    if not isinstance(before, dict):
        raise store.StoreError(
            f"{str(partition)!r} holds results without a headstats run record; use a new --out or remove that directory"
        )
    changed = [k for k in run_key if before.get(k) != run_key[k]]
    if changed:
        details = "; ".join(f"{k}: {before.get(k)!r} there, {run_key[k]!r} now" for k in changed)
        raise store.StoreError(
            f"{str(partition)!r} holds points of a different run ({details}); resuming would mix them: "
            "use a new --out or remove that directory"
        )


def _check_same_weights(partition: Path, revision: str) -> None:
    """A resumed sweep must run the weights its finished points ran (known only once loaded)."""
    prov = store.read_provenance(partition) if partition.is_dir() else None
    if prov is not None and prov.get("revision") and revision and prov["revision"] != revision:
        raise store.StoreError(
            f"{str(partition)!r} holds points of model weights {prov['revision']}, and the model loaded now is "
            f"{revision}; resuming would mix them: use a new --out or remove that directory"
        )


# -- running ----------------------------------------------------------------------------------------


def run_sweep(
    model: str | PreTrainedModel,
    task: str,
    *,
    scores: str | Sequence[str] = DEFAULT_SCORES,
    targets: str | Sequence[float] = DEFAULT_TARGETS,
    out: str | os.PathLike,
    tokenizer: PreTrainedTokenizerBase | None = None,
    subjects: str | Sequence[str] | None = None,
    limit: int | None = None,
    limit_per_subject: int | None = None,
    data_dir: str | os.PathLike | None = None,
    batch_size: int = 8,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    prompt_format: str = "tokenizer",
    seed: int = 0,
    calibration: str = "eval",
    calibration_limit: int | None = None,
    progress: bool = True,
) -> Path:
    """Run the baseline and every (score, target) point of a sweep; returns the results partition.

    ``model`` is a model name/path (loaded after every input has been validated) or a loaded model
    (then ``tokenizer`` is required). Finished points under ``out`` are kept and skipped, so
    calling again with more targets or scores only runs what is missing. Read the results with
    :func:`headstats.read_interventions` and summarise them with :func:`summarize_interventions`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if not isinstance(model, str) and tokenizer is None:
        raise ValueError("a loaded model needs its tokenizer: run_sweep(model, task, tokenizer=..., ...)")
    plan = plan_sweep(
        model, task, scores=scores, targets=targets, out=out, subjects=subjects, limit=limit,
        limit_per_subject=limit_per_subject, data_dir=data_dir, dtype=dtype, device=device,
        prompt_format=prompt_format, seed=seed, calibration=calibration, calibration_limit=calibration_limit,
    )  # fmt: skip
    pending = plan.pending()
    if not pending:
        _say(progress, f"all {len(plan.points)} points of this sweep are done in {plan.partition}")
        return plan.partition
    if isinstance(model, str):
        from headstats.io.models import load_model

        lm, tok = load_model(model, dtype=dtype, device=device)
    else:
        lm, tok = model, tokenizer
    assert tok is not None
    runner = _Runner(plan, lm, tok, batch_size=batch_size, prompt_format=prompt_format, seed=seed, progress=progress)
    runner.run(pending)
    return plan.partition


def _say(progress: bool, message: str) -> None:
    if progress:
        tqdm.write(f"headstats: {message}", file=sys.stderr)


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
        from headstats.io.models import model_identity

        self.plan = plan
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.prompt_format = prompt_format
        self.seed = seed
        self.progress = progress
        self.num_layers, self.num_heads = model_shape(model)
        param = next(model.parameters())
        _check_same_weights(plan.partition, model_identity(model)["revision"])
        self.provenance = store.make_provenance(
            kind="interventions", **model_identity(model), task=plan.task_name, run_key=plan.run_key,
            prompt_format=prompt_format, seed=seed, calibration=plan.run_key["calibration"],
            quantile_method=QUANTILE_METHOD, dtype=str(param.dtype).removeprefix("torch."), device=str(param.device),
            num_layers=self.num_layers, num_heads=self.num_heads, batch_size=batch_size,
        )  # fmt: skip

    # One evaluation of the task through ``probe`` (zeroing, or recording the baseline's scores).
    def _evaluate(self, probe: Probe) -> pd.DataFrame:
        from headstats.jobs.evaluate import evaluate

        return evaluate(
            self.model, self.tokenizer, self.plan.task, batch_size=self.batch_size,
            prompt_format=self.prompt_format, probe=probe, progress=self.progress,
        )  # fmt: skip

    def run(self, pending: list[Point]) -> None:
        thresholds = self._thresholds(pending)
        bar = tqdm(total=len(pending), desc="sweep points", unit="point", disable=not self.progress)
        for point in pending:
            bar.set_postfix_str(str(point))
            if point.is_baseline:
                if not (self.plan.partition / point.file_name).is_file():
                    self._write(point, math.nan, self._baseline_pass()[0])
            else:
                tau = thresholds[point.score][point.target]
                frame = self._zeroes_nothing(point)
                if frame is None:
                    with ablate_heads(self.model, score=point.score, threshold=tau, seed=self.seed) as ablation:
                        frame = self._evaluate(ablation.probe)
                self._write(point, tau, frame)
            bar.update(1)
        bar.close()

    def _zeroes_nothing(self, point: Point) -> pd.DataFrame | None:
        """The baseline's answers for a p = 0 point that provably zeroes nothing, saving a pass.

        Random zeroing at p = 0 never fires (u < 0). A dynamic score calibrated on the evaluation
        prompts gets the pooled minimum (maximum for "above" scores) as its p = 0 threshold, which no
        head of those same prompts crosses strictly, and with nothing zeroed every layer sees what the
        baseline saw. A held-out calibration set gives no such guarantee, so that point is run."""
        if point.target != 0.0:
            return None
        if not (S.get_score(point.score).is_random or self.plan.calibration == "eval"):
            return None
        path = self.plan.partition / Point(BASELINE, 0.0).file_name
        if not path.is_file():
            return None
        frame = pd.read_parquet(path)
        frame["n_zeroed"] = 0.0
        return frame

    def _baseline_pass(self, record_scores: Sequence[str] = ()) -> tuple[pd.DataFrame, Probe]:
        """The task on the un-intervened model, through headstats' attention with an all-False zero
        mask, recording ``record_scores`` (calibration) on the way."""
        heads = self.num_heads

        def never(layer: int, scores: dict[str, torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
            return torch.zeros(len(keys), heads, dtype=torch.bool)

        with Probe(self.model, record_scores, never, seed=self.seed, keep_history=True) as probe:
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
        saved = self._load_calibration()
        if all(all(t in saved.get(sid, {}) for t in plan.targets) for sid in needed):
            out.update({sid: saved[sid] for sid in needed})
            return out
        if plan.calibration == "eval":
            _say(self.progress, "calibrating on the evaluation prompts (baseline pass with scores recorded)")
            baseline_point = Point(BASELINE, 0.0)
            frame, probe = self._baseline_pass(needed)
            if not (plan.partition / baseline_point.file_name).is_file():
                self._write(baseline_point, math.nan, frame)
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

    def _load_calibration(self) -> dict[str, dict[float, float]]:
        import json

        path = self.plan.partition / CALIBRATION_FILE
        if not path.is_file():
            return {}
        data = json.loads(path.read_text())
        if data.get("run_key") != self.plan.run_key:
            return {}
        return {sid: {float(t): float(v) for t, v in by_t.items()} for sid, by_t in data["thresholds"].items()}

    def _save_calibration(self, thresholds: dict[str, dict[float, float]]) -> None:
        merged = self._load_calibration()
        for sid, by_t in thresholds.items():
            merged.setdefault(sid, {}).update(by_t)
        data = {
            "run_key": self.plan.run_key, "quantile_method": QUANTILE_METHOD,
            "thresholds": {sid: {repr(t): v for t, v in sorted(by_t.items())} for sid, by_t in merged.items()},
        }  # fmt: skip
        store.write_json_atomic(data, self.plan.partition / CALIBRATION_FILE)

    def _write(self, point: Point, threshold: float, frame: pd.DataFrame) -> None:
        rows = to_rows(frame, point, threshold, self.num_layers * self.num_heads)
        prov = dict(
            self.provenance,
            point={"score": point.score, "target": point.target, "threshold": threshold},
            evaluation=frame.attrs.get("headstats", {}),
        )
        store.write_parquet_atomic(
            pa.Table.from_pandas(rows, preserve_index=False), self.plan.partition / point.file_name, prov
        )
        if not (self.plan.partition / store.PROVENANCE_FILE).is_file():
            store.write_json_atomic(self.provenance, self.plan.partition / store.PROVENANCE_FILE)


def to_rows(frame: pd.DataFrame, point: Point, threshold: float, n_heads: int) -> pd.DataFrame:
    """The evaluator's per-question frame as intervention rows (SPEC §6, :data:`ROW_COLUMNS`).

    ``subject`` stays null for tasks without subjects, ``correct_norm`` null where the task does not
    report it; ``n_zeroed`` is float64 because a question scored in several sequences (one per
    choice) reports the mean count over them."""
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
    return rows[list(ROW_COLUMNS)].reset_index(drop=True)


# -- command line --------------------------------------------------------------------------------


def print_summary(
    root: str | os.PathLike, *, metric: str = "correct", model: str | None = None, task: str | None = None,
    file: object = None,
) -> None:  # fmt: skip
    """Print the per-point and per-curve summaries of the intervention results under ``root``
    (only ``model`` / ``task``, given as their partition values, if set)."""
    df = store.read_interventions(root)
    for col, value in (("model", model), ("task", task)):
        if value is not None and col in df.columns:
            df = df[df[col] == value]
    points = summarize_interventions(df, metric=metric)
    curves = summarize_curves(df, points)
    stream = file or sys.stdout
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 500):
        print(f"per point ({metric}; accuracy and differences in points, realised in % of heads):", file=stream)
        print(points.to_string(index=False, float_format=lambda v: f"{v:.4g}"), file=stream)
        if len(curves):
            print("\nper curve:", file=stream)
            print(curves.to_string(index=False, float_format=lambda v: f"{v:.4g}"), file=stream)


def add_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ablate",
        help="accuracy of a task while zeroing heads (baseline + score x target sweep), or --summary of results",
        description=(
            "Run the baseline once, calibrate each score's threshold for each target fraction, evaluate the task "
            "with heads zeroed at every (score, target) point, and write per-question rows to "
            "OUT/model=<slug>/task=<task>/ (one Parquet file per point; a re-run resumes). "
            "With --summary OUT, print the per-point and per-curve summaries of finished results instead."
        ),
    )
    p.add_argument("--model", help="embedded name (smollm2-135m, gemma3-270m), local directory or Hub id; "
                   "comma-separated for several")  # fmt: skip
    p.add_argument("--task", help="task name, e.g. mmlu; comma-separated for several")
    p.add_argument(
        "--scores", default=",".join(DEFAULT_SCORES), help="comma-separated score ids (default: %(default)s)"
    )
    p.add_argument(
        "--targets", default=",".join(f"{t:g}" for t in DEFAULT_TARGETS),
        help="comma-separated target fractions of heads to zero, in [0, 1] (default: %(default)s)",
    )  # fmt: skip
    p.add_argument("--out", help="results root; points land in OUT/model=<slug>/task=<task>/")
    p.add_argument("--subjects", help="comma-separated subjects (MMLU)")
    p.add_argument("--limit", type=int, help="first N questions of the task")
    p.add_argument("--limit-per-subject", type=int, help="first N test questions of each subject")
    p.add_argument("--data-dir", help="task data in the embedded datasets' layout instead of the embedded data")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dtype", help="float32, bfloat16, float16 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    p.add_argument(
        "--prompt-format", default="tokenizer", help="tokenizer, plain, bos, chat or paper (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random score's draws")
    p.add_argument(
        "--calibration", default="eval",
        help="'eval' (scores on the evaluation prompts, the study's choice), a score-table directory, or a "
        "collection dataset name (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--calibration-limit",
        type=int,
        help=f"sequences of a calibration dataset (default {DEFAULT_CALIBRATION_LIMIT})",
    )
    p.add_argument("--metric", default="correct", choices=("correct", "correct_norm"), help="accuracy in the summary")
    p.add_argument("--summary", metavar="OUT", help="print the summary of results under OUT and exit (no model run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_launcher_arguments(p)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.summary:
        print_summary(args.summary, metric=args.metric)
        return 0
    missing = [
        flag for flag, value in (("--model", args.model), ("--task", args.task), ("--out", args.out)) if not value
    ]
    if missing:
        raise ValueError(f"headstats ablate needs {', '.join(missing)} (or --summary OUT to read finished results)")
    models = [m for m in args.model.split(",") if m]
    tasks = [t for t in args.task.split(",") if t]
    options = dict(
        scores=args.scores, targets=args.targets, out=args.out, subjects=args.subjects, limit=args.limit,
        limit_per_subject=args.limit_per_subject, data_dir=args.data_dir, batch_size=args.batch_size,
        dtype=args.dtype, device=args.device, prompt_format=args.prompt_format, seed=args.seed,
        calibration=args.calibration, calibration_limit=args.calibration_limit,
    )  # fmt: skip
    if args.launcher is not None:
        from headstats.io.models import model_slug
        from headstats.jobs.grid import FunctionJob, launcher_options, run_grid

        grid = launcher_options(args)
        launcher = grid.pop("launcher")
        folder = grid.pop("folder") or Path(args.out) / "_grid"
        # One job per (model, task): the points of one sweep share its baseline and calibration file.
        jobs = [
            FunctionJob(
                f"ablate {model} {task}",
                run_sweep,
                {"model": model, "task": task, **options, "progress": False},
                output_paths=(str(store.partition_dir(args.out, model=model_slug(model), task=task)),),
            )
            for model in models
            for task in tasks
        ]
        result = run_grid(jobs, launcher, folder=folder, progress=not args.no_progress, **grid)
        print(result.summary())
        print_summary(args.out, metric=args.metric)
        return 0
    for model in models:
        for task in tasks:
            partition = run_sweep(model, task, **options, progress=not args.no_progress)
            model_part, task_part = (part.name.split("=", 1)[1] for part in (partition.parent, partition))
            print_summary(args.out, metric=args.metric, model=model_part, task=task_part)
    return 0
