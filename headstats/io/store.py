"""The results layout of SPEC §6, and its only owner: writing, finding, reading, resume checks.

Layout. Score tables live in ``ROOT/model=<slug>/dataset=<name>/part-*.parquet``; intervention
results in ``ROOT/model=<slug>/task=<name>/*.parquet`` (one file per sweep point, named by
:func:`point_file_name`). :data:`PARTITION_KEYS` is the one table of partition keys every reader
uses (the report, the large-table readers, ``read_scores``).

Writing. Every data file is complete on its own: written under a hidden ``.*.tmp`` name with
Parquet page checksums and renamed into place, so a reader (or a resumed run) never sees half a
file, and a flipped byte is found on read instead of returning wrong numbers. Provenance travels
twice: in each file's key-value metadata and as ``_provenance.json``, which is written together
with the first finished data file (a run that fails before finishing any leaves nothing that could
block the corrected command).

One writer per partition. :func:`writer_lock` takes an OS lock (``flock``) on ``_writer.lock`` in
the partition for the whole run; a second process writing the same partition stops with a message
naming the first. Under the lock, temporary files of killed runs are removed.

Resuming. :func:`check_resume` compares the settings a run would write with the ``settings`` record
of the partition's provenance (the model's weights and a user file's content included, by hash), and
refuses to add to a partition that holds data of another run. Readers never return a
(sample_id, layer, head) row twice.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import logging
import os
import platform
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path
from typing import Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from headstats.engine.scores import score_ids as registered_score_ids
from headstats.names import check_name

log = logging.getLogger("headstats")

SCHEMA_VERSION = "1"
PROVENANCE_KEY = b"headstats.provenance"
PROVENANCE_FILE = "_provenance.json"
CALIBRATION_FILE = "_calibration.json"
DONE_FILE = "_SUCCESS"
LOCK_FILE = "_writer.lock"
BASELINE_FILE = "baseline.parquet"

# -- the layout's vocabulary --------------------------------------------------------------------------

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


PROVENANCE_PACKAGES = ("headstats", "torch", "transformers", "pyarrow", "pandas", "numpy", "datasets")


def package_versions(dists: Sequence[str] = PROVENANCE_PACKAGES, missing: str | None = None) -> dict[str, str]:
    """Python's version and each of ``dists``' installed version; a distribution that is not installed
    is left out, or recorded as ``missing`` when given."""
    versions = {"python": platform.python_version()}
    for dist in dists:
        try:
            versions[dist] = _metadata.version(dist)
        except _metadata.PackageNotFoundError:
            if missing is not None:
                versions[dist] = missing
    return versions


def make_provenance(settings: Mapping[str, object] | None = None, **fields: object) -> dict[str, object]:
    """Provenance common to every table: schema version, package versions, date, plus ``fields``.

    ``settings`` are what :func:`check_resume` compares when a run adds to the partition later:
    everything that changes the numbers (model weights and data by content hash included)."""
    prov: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
    }
    prov.update(fields)
    if settings is not None:
        prov["settings"] = _jsonable(settings)
    return prov


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def partition_dir(root: str | os.PathLike, **partitions: str) -> Path:
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


def point_file_name(score: str, target: float) -> str:
    """The file of one sweep point in an intervention partition (the baseline's for ``score='baseline'``)."""
    check_name(score, "score id")
    return BASELINE_FILE if score == "baseline" else f"point-{score}-{target:.6g}.parquet"


# -- checks before any work ---------------------------------------------------------------------------


def ensure_writable(root: str | os.PathLike, *, create: bool = True) -> Path:
    """Check that ``root`` can be written, before any model work.

    ``create=False`` creates nothing: it checks that the nearest existing folder above ``root`` is a
    writable directory (so a command refused later, e.g. for an unknown model, leaves no empty
    folder behind). ``create=True`` also makes ``root`` and writes a test file there."""
    path = Path(root).expanduser()
    if not create:
        probe = path.absolute()
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            raise StoreError(
                f"output directory {str(root)!r} is not writable: {str(probe)!r} is a file; choose another --out"
            )
        if not os.access(probe, os.W_OK | os.X_OK):
            raise StoreError(f"output directory {str(root)!r} is not writable ({str(probe)!r}); choose another --out")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        test = path / f".write-test-{uuid.uuid4().hex}.tmp"
        test.write_bytes(b"")
        test.unlink()
    except OSError as err:
        raise StoreError(
            f"output directory {str(root)!r} is not writable ({err.strerror or err}); choose another --out"
        ) from err
    return path


# -- writing ----------------------------------------------------------------------------------------------


def _with_provenance(schema: pa.Schema, provenance: Mapping[str, object] | None) -> pa.Schema:
    if provenance is None:
        return schema
    meta = dict(schema.metadata or {})
    meta[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True).encode()
    return schema.with_metadata(meta)


def _temporary(path: Path) -> Path:
    return path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"


def write_parquet_atomic(table: pa.Table, path: Path, provenance: Mapping[str, object] | None = None) -> Path:
    """Write ``table`` to ``path`` (with page checksums) via a temporary file and an atomic rename."""
    table = table.replace_schema_metadata(_with_provenance(table.schema, provenance).metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        pq.write_table(table, tmp, **WRITE_OPTIONS)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_bytes_atomic(data: bytes, path: Path) -> Path:
    """Write ``data`` to ``path`` via a hidden temporary file and an atomic rename (a reader sees the
    old file or the new one, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_text_atomic(text: str, path: Path) -> Path:
    return write_bytes_atomic(text.encode(), path)


def write_json_atomic(data: object, path: Path) -> None:
    write_text_atomic(json.dumps(data, indent=2, sort_keys=True, default=str), path)


def write_provenance(partition: Path, provenance: Mapping[str, object]) -> None:
    """The partition's sidecar record; call it with (right after) the first finished data file."""
    write_json_atomic(provenance, partition / PROVENANCE_FILE)


def mark_done(partition: Path, **info: object) -> None:
    write_json_atomic({**info, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}, partition / DONE_FILE)


def _timestamp() -> str:
    """UTC time to the nanosecond: part names sort in the order they were written."""
    ns = time.time_ns()
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(ns // 10**9)) + f"{ns % 10**9:09d}"


class PartWriter:
    """Streams Arrow tables into numbered part files of a score partition.

    A part is written under a hidden ``.part-*.tmp`` name and renamed into place when it holds
    ``rows_per_part`` rows or has been open ``seconds``; the partition's ``_provenance.json`` is
    written with the first part this writer finishes, replacing an earlier run's record: a run that
    adds rows (a larger ``limit``) is what the partition now holds. Use it under :func:`writer_lock`."""

    def __init__(self, partition: Path, schema: pa.Schema, provenance: dict, rows_per_part: int, seconds: float):
        self.partition = partition
        self.provenance = provenance
        self.schema = _with_provenance(schema, provenance)
        self.rows_per_part = rows_per_part
        self.seconds = seconds
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._rows = 0
        self._opened = 0.0
        self._recorded = False

    def write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._tmp = self.partition / f".part-{uuid.uuid4().hex}.parquet.tmp"
            self._writer = pq.ParquetWriter(self._tmp, self.schema, **WRITE_OPTIONS)
            self._rows, self._opened = 0, time.monotonic()
        self._writer.write_table(table.select(self.schema.names).cast(self.schema))
        self._rows += table.num_rows
        if self._rows >= self.rows_per_part or time.monotonic() - self._opened >= self.seconds:
            self.close()

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        assert self._tmp is not None
        final = self.partition / f"part-{_timestamp()}-{uuid.uuid4().hex[:8]}.parquet"
        os.replace(self._tmp, final)
        self._writer, self._tmp = None, None
        if not self._recorded:
            write_provenance(self.partition, self.provenance)
            self._recorded = True

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tmp is not None and self._tmp.exists():
            self._tmp.unlink()
        self._writer, self._tmp = None, None


def write_point(
    partition: Path, name: str, table: pa.Table, provenance: Mapping[str, object], sidecar: Mapping[str, object]
) -> Path:
    """One finished file of an intervention partition (``provenance`` in its metadata), and the
    partition's ``sidecar`` record with the first one."""
    path = write_parquet_atomic(table, partition / name, provenance)
    if not (partition / PROVENANCE_FILE).is_file():
        write_provenance(partition, sidecar)
    return path


# -- one writer per partition -------------------------------------------------------------------------


def clean_temporaries(partition: Path) -> list[Path]:
    """Remove the hidden ``.*.tmp`` files killed runs left behind (only safe under the writer lock)."""
    removed = []
    for tmp in partition.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    if removed:
        log.info("removed %d unfinished temporary file(s) of an earlier run from %s", len(removed), partition)
    return removed


@contextlib.contextmanager
def writer_lock(partition: Path) -> Iterator[Path]:
    """Hold the partition's writer lock for the ``with`` block (creating the partition).

    A second writer stops at once with :class:`PartitionBusy`, naming the holder. The lock is an
    ``flock`` on ``_writer.lock``, released by the OS if the process dies; the file is removed on a
    clean exit (after a kill it stays, unlocked and harmless). Stale temporary files of killed runs
    are removed once the lock is held."""
    partition.mkdir(parents=True, exist_ok=True)
    path = partition / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise PartitionBusy(
                f"{partition} is being written by another headstats run ({holder}); wait for it to finish, "
                "or use another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a lock file a finishing writer has just removed
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        since = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {since}".encode(), 0)
        clean_temporaries(partition)
        if not has_data(partition):  # records of a run that finished nothing describe no data
            for record in (PROVENANCE_FILE, DONE_FILE):
                with contextlib.suppress(FileNotFoundError):
                    (partition / record).unlink()
        yield partition
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
        for folder in (partition, partition.parent):  # a run that wrote nothing leaves no empty folders
            with contextlib.suppress(OSError):
                folder.rmdir()


# -- reading ----------------------------------------------------------------------------------------------


def damaged(path: Path, err: BaseException) -> StoreError:
    reason = " ".join(str(err).split())  # one line
    return StoreError(
        f"{path} is damaged ({reason}); delete that file and re-run the command that wrote it to recompute its rows"
    )


def read_table(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet file, page checksums verified; a damaged file is a :class:`StoreError` naming it."""
    try:
        return pq.read_table(path, columns=list(columns) if columns else None, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as err:
        raise damaged(path, err) from err


def is_finished_file(path: Path) -> bool:
    """Whether ``path`` is a whole data file (footer readable, rows present): a truncated or damaged
    file does not count as finished, so a resumed run computes it again."""
    if not path.is_file():
        return False
    try:
        return pq.read_metadata(path).num_rows > 0
    except (pa.ArrowException, OSError):
        log.warning("%s is damaged or truncated; it will be computed again", path)
        return False


def read_json(path: Path, fix: str) -> object:
    """A JSON sidecar; broken JSON is a :class:`StoreError` naming the file and saying what to do."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoreError(f"{path} is damaged (not valid JSON: {err}); {fix}") from err


def read_provenance(partition: Path) -> dict[str, object] | None:
    sidecar = partition / PROVENANCE_FILE
    if sidecar.is_file():
        prov = read_json(
            sidecar, "delete it and re-run: the same record is kept in every data file of that folder, and headstats "
            "writes it again",
        )  # fmt: skip
        if not isinstance(prov, dict):
            raise StoreError(f"{sidecar} is damaged (not a JSON object); delete it and re-run")
        return prov
    for part in data_files(partition):
        prov = file_provenance(part)
        if prov is not None:
            return prov
    return None


def file_provenance(path: Path) -> dict[str, object] | None:
    """The provenance record in one Parquet file's metadata (a sweep point's includes the point, its
    wall time and when it finished), or None when it has none."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError) as err:
        raise damaged(path, err) from err
    return json.loads(meta[PROVENANCE_KEY]) if PROVENANCE_KEY in meta else None


def data_files(partition: Path) -> list[Path]:
    """The finished Parquet files of one partition (hidden temporaries excluded)."""
    return sorted(p for p in partition.glob("*.parquet") if not p.name.startswith((".", "_")))


part_files = data_files


def has_data(partition: Path) -> bool:
    return partition.is_dir() and bool(data_files(partition))


def stored_sample_ids(partition: Path) -> set[int]:
    """Sample ids of the rows a score partition holds (checksums verified)."""
    ids: set[int] = set()
    for part in data_files(partition):
        ids.update(read_table(part, ["sample_id"]).column("sample_id").unique().to_pylist())
    return ids


def read_calibration(partition: Path) -> dict | None:
    path = partition / CALIBRATION_FILE
    if not path.is_file():
        return None
    data = read_json(path, "delete it; the next run calibrates again")
    if not isinstance(data, dict) or not isinstance(data.get("thresholds"), dict):
        raise StoreError(f"{path} is damaged (no thresholds record); delete it; the next run calibrates again")
    return data


def write_calibration(partition: Path, data: Mapping[str, object]) -> None:
    write_json_atomic(data, partition / CALIBRATION_FILE)


# -- resume checks ------------------------------------------------------------------------------------------


def check_resume(partition: Path, settings: Mapping[str, object], *, what: str = "results") -> None:
    """Refuse to add to ``partition`` when the data it holds were made with other ``settings``.

    Compares every key of ``settings`` with the ``settings`` record of the partition's provenance
    (call it again with more keys once they are known, e.g. the weights' hash after loading). A
    partition without data files is accepted whatever its records say: a failed first run must not
    block the corrected command."""
    if not has_data(partition):
        return
    prov = read_provenance(partition)
    stored = prov.get("settings") if prov is not None else None
    if not isinstance(stored, dict):
        raise StoreError(
            f"{str(partition)!r} holds {what} without a headstats settings record (written by another tool or an "
            "older headstats); use a new --out, or delete that directory to start over"
        )
    now = _jsonable(dict(settings))
    assert isinstance(now, dict)
    changed = [k for k in now if stored.get(k) != now[k]]
    if changed:
        detail = "; ".join(f"{k}: {stored.get(k)!r} there, {now[k]!r} now" for k in changed)
        raise StoreError(
            f"{str(partition)!r} holds {what} of a different run, with other settings ({detail}); adding to it would "
            "mix two runs: use another --out, or delete that directory to start over"
        )


# -- finding tables -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """One table: a ``model=<slug>/dataset=<name>/`` or ``model=<slug>/task=<name>/`` directory."""

    path: Path
    kind: Kind
    model: str
    name: str  # the dataset (scores) or the task (interventions)
    provenance: dict | None = field(default=None, compare=False, hash=False)


def partition_of(directory: Path) -> tuple[Kind, str, str] | None:
    """(kind, model, name) of a partition directory, or None when it is not one."""
    key, sep, name = directory.name.partition("=")
    model_key, model_sep, model = directory.parent.name.partition("=")
    if not (sep and model_sep and model_key == MODEL_KEY and key in KIND_OF_KEY):
        return None
    return KIND_OF_KEY[key], model, name


def find_partitions(
    root: str | os.PathLike, kind: Kind | None = None, *, provenance: bool = True
) -> tuple[list[Partition], list[Path]]:
    """Every table under ``root`` (at any depth, or ``root`` itself), and the Parquet files outside
    the layout (returned, not read). Two tables of one (kind, model, name) are an error."""
    path = Path(root)
    if not path.is_dir():
        raise StoreError(f"results directory {str(path)!r} does not exist or is not a directory")
    found: dict[Path, Partition] = {}
    stray: list[Path] = []
    for file in sorted(path.rglob("*.parquet")):
        rel = file.relative_to(path).parts
        if any(part.startswith((".", "_")) for part in rel):
            continue  # temporaries of an unfinished write, and folders such as _grid
        where = partition_of(file.parent)
        if where is None:
            stray.append(file)
            continue
        if file.parent not in found and (kind is None or where[0] == kind):
            prov = read_provenance(file.parent) if provenance else None
            found[file.parent] = Partition(file.parent, *where, prov)
    parts = sorted(found.values(), key=lambda p: (p.kind, p.model, p.name, str(p.path)))
    seen: dict[tuple[str, str, str], Path] = {}
    for p in parts:
        key = (p.kind, p.model, p.name)
        if key in seen:
            raise StoreError(
                f"two {p.kind} tables for model {p.model!r} and {PARTITION_KEYS[p.kind]} {p.name!r}: {seen[key]} and "
                f"{p.path}; read one results directory at a time"
            )
        seen[key] = p.path
    return parts, stray


def table_partitions(root: str | os.PathLike, kind: Kind) -> list[Partition]:
    """The partitions of ``kind`` a reader of ``root`` reads: ``root`` itself when it is one, else
    every one under it (see :func:`find_partitions`)."""
    path = Path(root)
    own = partition_of(path.absolute())
    if own is not None:
        return [Partition(path, *own)] if own[0] == kind else []
    return find_partitions(path, kind, provenance=False)[0] if path.is_dir() else []


def check_schema_versions(root: str | os.PathLike) -> set[str]:
    """Schema versions of all partitions under ``root``; mixed versions are an error."""
    versions = set()
    for sidecar in Path(root).rglob(PROVENANCE_FILE):
        record = read_json(sidecar, "delete it and re-run")
        versions.add(str(record.get("schema_version", "?")) if isinstance(record, dict) else "?")
    if len(versions) > 1:
        raise StoreError(
            f"{root}: tables of different schema versions ({', '.join(sorted(versions))}) cannot be read together; "
            "re-run the older ones or read the directories separately"
        )
    return versions


def duplicate_samples(files: Sequence[Path]) -> dict[Path, list[int]]:
    """Per file, the sample ids an earlier file of the same partition already holds (two runs that
    wrote one partition without the lock, e.g. with an older headstats): read once, from the first."""
    if len(files) < 2:
        return {}
    seen: set[int] = set()
    shadowed: dict[Path, list[int]] = {}
    for f in files:  # part names start with their write time: earlier first
        ids = set(read_table(f, ["sample_id"]).column("sample_id").unique().to_pylist())
        again = ids & seen
        if again:
            shadowed[f] = sorted(again)
        seen |= ids
    return shadowed


def _read_partition(part: Partition, columns: Sequence[str] | None, filter: object | None) -> pa.Table | None:
    files = data_files(part.path)
    if not files:
        return None
    try:
        schema = pa.unify_schemas([pq.read_schema(f) for f in files]).remove_metadata()
    except (pa.ArrowException, OSError) as err:
        raise _damage_in(files, err) from err
    base = part.path.parent.parent
    key = PARTITION_KEYS[part.kind]
    full = pa.unify_schemas([schema, partitioning(part.kind).schema])
    wanted = None if columns is None else [c for c in columns if c in full.names]
    shadowed = duplicate_samples(files) if part.kind == "scores" and "sample_id" in schema.names else {}
    if shadowed:
        log.warning(
            "%s holds %d sample(s) twice (two writers without a lock); each is read once",
            part.path, len({i for ids in shadowed.values() for i in ids}),
        )  # fmt: skip
    groups: list[tuple[list[Path], object | None]] = [([f for f in files if f not in shadowed], filter)]
    for f, ids in shadowed.items():
        keep = ~pc.field("sample_id").isin(pa.array(ids, pa.int64()))
        groups.append(([f], keep if filter is None else filter & keep))  # type: ignore[operator]
    tables = []
    for group, expr in groups:
        if not group:
            continue
        dataset = pads.dataset(
            [str(f) for f in group], schema=full, format=READ_FORMAT, partitioning=partitioning(part.kind),
            partition_base_dir=str(base),
        )  # fmt: skip
        try:
            tables.append(dataset.to_table(columns=wanted, filter=expr))
        except (pa.ArrowException, OSError) as err:
            raise _damage_in(group, err) from err
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    # The partition's own values, also when ``root`` is the partition itself.
    for col, value in ((MODEL_KEY, part.model), (key, part.name)):
        if col in table.column_names:
            table = table.set_column(table.column_names.index(col), col, pa.array([value] * len(table), pa.string()))
    return table


def _damage_in(files: Sequence[Path], err: BaseException) -> StoreError:
    for f in files:
        try:
            pq.read_table(f, page_checksum_verification=True)
        except (pa.ArrowException, OSError) as file_err:
            return damaged(f, file_err)
    return StoreError(f"cannot read the tables in {files[0].parent}: {err}")


def _read(root: str | os.PathLike, kind: Kind, columns: Sequence[str] | None, filter: object | None) -> pd.DataFrame:
    path = Path(root)
    if not path.exists():
        raise StoreError(f"{kind} directory {str(path)!r} does not exist")
    check_schema_versions(path)
    partitions = table_partitions(path, kind)
    what = "score" if kind == "scores" else "intervention"
    if not partitions:
        raise StoreError(f"no {what} tables under {str(path)!r}: run `headstats collect` / `headstats ablate` first")
    tables = [t for t in (_read_partition(p, columns, filter) for p in partitions) if t is not None]
    if not tables:
        raise StoreError(f"no {what} tables under {str(path)!r}: run `headstats collect` / `headstats ablate` first")
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as err:
        raise StoreError(f"the {what} tables under {str(path)!r} cannot be read together: {err}") from err
    frame = table.to_pandas()
    for col in (MODEL_KEY, *PARTITION_KEYS.values()):
        if col in frame.columns:
            frame[col] = frame[col].astype(str)
    return frame


def open_dataset(root: str | os.PathLike, kind: Kind = "scores") -> pads.Dataset:
    """The tables of ``kind`` under ``root`` as one lazy ``pyarrow.dataset`` (nothing is read yet),
    for readers that stream more than fits in memory; :func:`read_scores` reads into pandas.

    Only the layout's data files are included (no temporaries, no tables of the other kind);
    ``model`` and ``dataset`` / ``task`` are string partition fields, so filters on them prune whole
    directories; the schema is the union of every footer's (a model collected with fewer score ids
    reads as missing values); page checksums are verified as data is read. A score partition that
    holds a sample twice is refused (:func:`read_scores` reads each once)."""
    path = Path(root)
    what = "score" if kind == "scores" else "intervention"
    if not path.is_dir():
        raise StoreError(f"{what} directory {str(path)!r} does not exist")
    check_schema_versions(path)
    partitions = table_partitions(path, kind)
    files = [f for p in partitions for f in data_files(p.path)]
    if not files:
        raise StoreError(f"no {what} tables under {str(path)!r}: run `headstats collect` / `headstats ablate` first")
    if kind == "scores":
        for p in partitions:
            if duplicate_samples(data_files(p.path)):
                raise StoreError(
                    f"{p.path} holds some samples twice (two runs wrote it without a lock); read it with "
                    "headstats.read_scores, which reads each once, or collect it again into a new --out"
                )
    try:
        footers = [pq.read_schema(f) for f in files]
    except (pa.ArrowException, OSError) as err:
        raise _damage_in(files, err) from err
    schema = pa.unify_schemas([*footers, partitioning(kind).schema]).remove_metadata()
    bases = {p.path.parent.parent for p in partitions}
    base = Path(os.path.commonpath([str(b.absolute()) for b in bases]))
    return pads.dataset(
        [str(f.absolute()) for f in files], schema=schema, format=READ_FORMAT, partitioning=partitioning(kind),
        partition_base_dir=str(base),
    )  # fmt: skip


def read_scores(
    root: str | os.PathLike, columns: Sequence[str] | None = None, filter: object | None = None
) -> pd.DataFrame:
    """All score tables under ``root`` as one DataFrame, with ``model`` and ``dataset`` columns.

    ``columns`` and ``filter`` (a ``pyarrow.dataset`` expression, e.g.
    ``pyarrow.dataset.field("layer") < 4``) are pushed down to Parquet. Page checksums are
    verified (a damaged file is an error naming it), and a (sample_id, layer, head) row stored
    twice in one table is returned once.
    """
    return _read(root, "scores", columns, filter)


def read_interventions(
    root: str | os.PathLike, columns: Sequence[str] | None = None, filter: object | None = None
) -> pd.DataFrame:
    """All intervention results under ``root`` (per-question rows, SPEC §6) as one DataFrame."""
    return _read(root, "interventions", columns, filter)


def scan_provenance(root: str | os.PathLike) -> list[dict[str, object]]:
    """The provenance record of every partition under ``root`` (with its relative path)."""
    records = []
    for sidecar in sorted(Path(root).rglob(PROVENANCE_FILE)):
        prov = read_json(sidecar, "delete it and re-run")
        if isinstance(prov, dict):
            prov["partition"] = str(sidecar.parent.relative_to(root))
            records.append(prov)
    return records
