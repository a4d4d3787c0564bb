"""The results layout of docs/design.md#table-layout: where each table and record lives, and what its files hold.

Score tables live in ``ROOT/model=<slug>/dataset=<name>/part-*.parquet``; intervention results in
``ROOT/model=<slug>/task=<name>/*.parquet`` (one file per sweep point, named by
:func:`point_file_name`). :data:`PARTITION_KEYS` is the one table of partition keys every reader uses.
Beside the data files a partition holds its records (``_provenance.json``, ``_calibration.json``,
``_SUCCESS``) and, while a run writes it, the writer's lock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.dataset as pads

from headstats.engine.scores import score_ids as registered_score_ids
from headstats.names import check_name

SCHEMA_VERSION = "1"
PROVENANCE_KEY = b"headstats.provenance"
PROVENANCE_FILE = "_provenance.json"
CALIBRATION_FILE = "_calibration.json"
DONE_FILE = "_SUCCESS"
LOCK_FILE = "_writer.lock"
HOLDER_FILE = "_writer.holder"  # who holds the lock, for the message a second writer gets
BASELINE_FILE = "baseline.parquet"
PARTIAL_PREFIX = "_partial-"  # the finished batches of a pass whose file is not written yet
# Beside a fine-tuning seed's tables (RESULTS/seed-N/): copies of its chain's JSON records (metrics.json with
# its learning, recipe.json) and its training log, so that its report is rebuilt with no chain present.
CHAIN_RECORDS = "_chain"
# Under a study's results folder: the keys that decide its verdicts, as its first unit found them (a
# pre-registration record; headstats.jobs.registration compares the file with it).
REGISTRATION_FILE = "_registration.json"

Kind = Literal["scores", "interventions"]
MODEL_KEY = "model"
# The partition key under ``model=<slug>/`` that tells a score table from intervention results.
PARTITION_KEYS: dict[str, str] = {"scores": "dataset", "interventions": "task"}
KIND_OF_KEY: dict[str, Kind] = {key: kind for kind, key in PARTITION_KEYS.items()}  # type: ignore[misc]

SCORE_KEY_TYPES: dict[str, pa.DataType] = {
    "sample_id": pa.int64(),
    "layer": pa.int16(),
    "head": pa.int16(),
    "kv_head": pa.int16(),
    "n_tokens": pa.int32(),
}
# The question a score row was measured on, for tables collected from a task's prompts: the same
# key as intervention rows, so ``scores.merge(interventions, on=["subject", "question_id"])`` joins.
QUESTION_KEY_TYPES: dict[str, pa.DataType] = {"subject": pa.string(), "question_id": pa.int64()}
ROW_KEY = ("sample_id", "layer", "head")  # one row per (sequence, layer, head) in a score table

# Parquet options of every data file headstats writes, and the read format that verifies them.
WRITE_OPTIONS: dict[str, object] = {"compression": "zstd", "write_page_checksum": True}
READ_FORMAT = pads.ParquetFileFormat(
    default_fragment_scan_options=pads.ParquetFragmentScanOptions(page_checksum_verification=True)
)


class StoreError(ValueError):
    """A results directory is missing, empty, corrupt or inconsistent."""


class PartitionBusy(StoreError):
    """Another process holds a partition's writer lock."""


@dataclass(frozen=True)
class Partition:
    """One table: a ``model=<slug>/dataset=<name>/`` or ``model=<slug>/task=<name>/`` directory."""

    path: Path
    kind: Kind
    model: str
    name: str  # the dataset (scores) or the task (interventions)
    provenance: dict | None = field(default=None, compare=False, hash=False)


def partitioning(kind: Kind) -> pads.Partitioning:
    """The hive partitioning of a results root holding tables of ``kind`` (string partition fields)."""
    fields = [(MODEL_KEY, pa.string()), (PARTITION_KEYS[kind], pa.string())]
    return pads.partitioning(pa.schema(fields), flavor="hive")


def score_schema(
    score_ids: Sequence[str] | None = None, *, question_keys: bool = False, documents: bool = False
) -> pa.Schema:
    """The columns of a score file: keys, one float32 per score id, then the task question's keys
    when scored from a task's questions, and their source ``document`` where the task has one."""
    score_ids = registered_score_ids() if score_ids is None else score_ids
    fields = [pa.field(name, dtype) for name, dtype in SCORE_KEY_TYPES.items()]
    fields += [pa.field(sid, pa.float32()) for sid in score_ids]
    if question_keys:
        fields += [pa.field(name, dtype) for name, dtype in QUESTION_KEY_TYPES.items()]
    if documents:
        fields.append(pa.field("document", pa.string()))
    return pa.schema(fields)


def partition_dir(root: str | os.PathLike, **partitions: str) -> Path:
    """``ROOT/key=value/...`` for each of ``partitions`` in order; a value that is not a safe path
    name is a :class:`StoreError`."""
    path = Path(root)
    for key, value in partitions.items():
        try:
            check_name(value, f"{key} name")
        except ValueError as err:
            raise StoreError(str(err)) from None
        path = path / f"{key}={value}"
    return path


def table_dir(root: str | os.PathLike, kind: Kind, model: str, name: str) -> Path:
    """``ROOT/model=<model>/dataset=<name>`` (scores) or ``ROOT/model=<model>/task=<name>`` (interventions)."""
    return partition_dir(root, **{MODEL_KEY: model, PARTITION_KEYS[kind]: name})


def partition_of(directory: Path) -> tuple[Kind, str, str] | None:
    """(kind, model, name) of a partition directory, or None when it is not one."""
    key, sep, name = directory.name.partition("=")
    model_key, model_sep, model = directory.parent.name.partition("=")
    if not (sep and model_sep and model_key == MODEL_KEY and key in KIND_OF_KEY):
        return None
    return KIND_OF_KEY[key], model, name


def point_file_name(score: str, target: float) -> str:
    """The file of one sweep point in an intervention partition (the baseline's for ``score='baseline'``)."""
    check_name(score, "score id")
    return BASELINE_FILE if score == "baseline" else f"point-{score}-{target:.6g}.parquet"


def partial_file(partition: Path, name: str) -> Path:
    """Where an unfinished pass that will write the data file ``name`` keeps its finished batches: a
    hidden record beside it (never read as data), removed once ``name`` is written."""
    return partition / f"{PARTIAL_PREFIX}{Path(name).stem}.npz"


def adaptive_folder(results: str | os.PathLike, model: str, task: str) -> Path:
    """Where a per-prompt skipping study keeps one model's rows on one task (headstats.jobs.adaptive)."""
    check_name(model, "model name")
    check_name(task, "task name")
    return Path(results) / model / task


def adaptive_chunk(folder: Path, start: int) -> Path:
    """The file of the items ``start``, ``start + 1``, ... of a per-prompt skipping study's folder."""
    return folder / f"items-{start:06d}.csv"


def data_files(partition: Path) -> list[Path]:
    """The finished Parquet files of one partition (hidden temporaries and records excluded)."""
    return sorted(p for p in partition.glob("*.parquet") if not p.name.startswith((".", "_")))


def has_data(partition: Path) -> bool:
    """Whether ``partition`` holds at least one finished data file."""
    return partition.is_dir() and bool(data_files(partition))


def jsonable(value: object) -> object:
    """``value`` as it reads back from a JSON record (keys sorted, other objects as strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))
