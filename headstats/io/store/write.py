"""Writing the results layout: every file whole or not at all, with its provenance.

Every file is written under a hidden ``.*.tmp`` name beside it and renamed into place
(:func:`write_atomic`), so a reader (or a resumed run) never sees half a file and a failed write
leaves the old file as it was. Data files carry Parquet page checksums, so a flipped byte is found
on read instead of returning wrong numbers. Provenance travels twice: in each data file's key-value
metadata and as ``_provenance.json``, written together with the first finished data file (a run that
fails before finishing any leaves nothing that could block the corrected command).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata as _metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from headstats.io.assets import portable_record
from headstats.io.store.layout import (
    CALIBRATION_FILE,
    DONE_FILE,
    PROVENANCE_FILE,
    PROVENANCE_KEY,
    SCHEMA_VERSION,
    WRITE_OPTIONS,
    StoreError,
    jsonable,
)

PROVENANCE_PACKAGES = ("headstats", "torch", "transformers", "pyarrow", "pandas", "numpy", "datasets")


def make_writable_folder(path: Path) -> None:
    """Create ``path`` (and its parents) and write and remove a test file in it: OSError when either fails."""
    path.mkdir(parents=True, exist_ok=True)
    test = path / f".write-test-{uuid.uuid4().hex}.tmp"
    test.write_bytes(b"")
    test.unlink()


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
        make_writable_folder(path)
    except OSError as err:
        raise StoreError(
            f"output directory {str(root)!r} is not writable ({err.strerror or err}); choose another --out"
        ) from err
    return path


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


def code_commit() -> dict[str, object]:
    """The git commit of the headstats code that runs (``commit``, 40 hex digits) and whether the
    package's tracked files differ from it (``modified``); ``{"commit": ""}`` outside a git checkout."""
    import subprocess

    package = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=package, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        modified = bool(git("status", "--porcelain", "--untracked-files=no", "--", "."))
    except (OSError, subprocess.CalledProcessError):
        return {"commit": ""}
    return {"commit": commit, "modified": modified}


def make_provenance(settings: Mapping[str, object] | None = None, **fields: object) -> dict[str, object]:
    """Provenance common to every table: schema version, package versions, date, plus ``fields``.

    ``settings`` are what ``check_resume`` compares when a run adds to the partition later:
    everything that changes the numbers (model weights and data by content hash included)."""
    prov: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
    }
    prov.update(fields)
    if settings is not None:
        prov["settings"] = jsonable(settings)
    # A record names no folder of this machine outside the cache and home (docs/guides/safe-outputs.md).
    out = portable_record(prov)
    assert isinstance(out, dict)
    return out


def temporary_name(path: Path, suffix: str = "") -> Path:
    """A hidden, unique ``.*.tmp`` name beside ``path``: what the writer lock clears after a killed run."""
    return path.parent / f".{path.name}{suffix}.{uuid.uuid4().hex}.tmp"


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Make ``path`` by calling ``write`` on a hidden temporary file beside it, then renaming it into
    place: a reader sees the old file or the new one, never half of one, and when ``write`` fails
    the old file stays as it was (the temporary is removed and the error propagates)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def with_provenance(schema: pa.Schema, provenance: Mapping[str, object] | None) -> pa.Schema:
    """``schema`` with ``provenance`` in its key-value metadata (unchanged when there is none)."""
    if provenance is None:
        return schema
    meta = dict(schema.metadata or {})
    meta[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True).encode()
    return schema.with_metadata(meta)


def write_parquet_atomic(table: pa.Table, path: Path, provenance: Mapping[str, object] | None = None) -> Path:
    """Write ``table`` to ``path`` with page checksums and ``provenance`` in its metadata, atomically."""
    table = table.replace_schema_metadata(with_provenance(table.schema, provenance).metadata)
    return write_atomic(path, lambda tmp: pq.write_table(table, tmp, **WRITE_OPTIONS))


def write_json_atomic(data: object, path: Path) -> Path:
    """Write ``data`` as indented JSON (keys sorted, other objects as strings) to ``path``, atomically."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    return write_atomic(path, lambda tmp: tmp.write_text(text))


def write_csv_atomic(frame: pd.DataFrame, path: Path) -> Path:
    """Write ``frame`` as CSV (no index) to ``path``, atomically."""
    return write_atomic(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_arrays_atomic(arrays: Mapping[str, np.ndarray], path: Path) -> Path:
    """Write named numpy arrays to ``path`` as an uncompressed ``.npz`` (no pickled objects), atomically."""

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle: np.savez would append ".npz" to a path
            np.savez(handle, **arrays)

    return write_atomic(path, write)


def write_provenance(partition: Path, provenance: Mapping[str, object]) -> None:
    """The partition's sidecar record; call it with (right after) the first finished data file."""
    write_json_atomic(provenance, partition / PROVENANCE_FILE)


def write_calibration(partition: Path, data: Mapping[str, object]) -> None:
    """The partition's calibration record (the thresholds its sweep points use)."""
    write_json_atomic(data, partition / CALIBRATION_FILE)


def mark_done(partition: Path, **info: object) -> None:
    """Record that the run writing ``partition`` finished, with ``info``."""
    write_json_atomic({**info, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}, partition / DONE_FILE)


def write_point(
    partition: Path, name: str, table: pa.Table, provenance: Mapping[str, object], sidecar: Mapping[str, object]
) -> Path:
    """One finished file of an intervention partition (``provenance`` in its metadata), and the
    partition's ``sidecar`` record with the first one."""
    path = write_parquet_atomic(table, partition / name, provenance)
    if not (partition / PROVENANCE_FILE).is_file():
        write_provenance(partition, sidecar)
    return path


def part_name() -> str:
    """A new part file's name, starting with the UTC time to the nanosecond: parts sort in the order
    they were written."""
    ns = time.time_ns()
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(ns // 10**9)) + f"{ns % 10**9:09d}"
    return f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"


class PartWriter:
    """Streams Arrow tables into numbered part files of a score partition.

    A part is written under a hidden ``.part-*.tmp`` name and renamed into place when it holds
    ``rows_per_part`` rows or has been open ``seconds``; the partition's ``_provenance.json`` is
    written with the first part this writer finishes, replacing an earlier run's record: a run that
    adds rows (a larger ``limit``) is what the partition now holds. Use it under ``writer_lock``.

    Each :meth:`write` adds one row group, whole: an interrupt (``KeyboardInterrupt``, or SIGTERM
    raised as one) is raised between Python bytecodes, never inside the C++ write, so the open part
    always holds whole tables and :meth:`keep` can close it."""

    def __init__(self, partition: Path, schema: pa.Schema, provenance: dict, rows_per_part: int, seconds: float):
        self.partition = partition
        self.provenance = provenance
        self.schema = with_provenance(schema, provenance)
        self.rows_per_part = rows_per_part
        self.seconds = seconds
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._rows = 0
        self._opened = 0.0
        self._recorded = False
        self._broken = False
        self._closed = 0  # parts this writer finished

    def write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._tmp = temporary_name(self.partition / "part", ".parquet")
            self._writer = pq.ParquetWriter(self._tmp, self.schema, **WRITE_OPTIONS)
            self._rows, self._opened = 0, time.monotonic()
        table = table.select(self.schema.names).cast(self.schema)
        self._rows += table.num_rows
        try:
            self._writer.write_table(table)
        except Exception:  # the file may hold part of the table: keep() will not close it
            self._broken = True
            raise
        if self._rows >= self.rows_per_part or time.monotonic() - self._opened >= self.seconds:
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # a second call (after an interrupted one) does nothing
            assert self._tmp is not None
            if self._tmp.exists():  # else an interrupted call renamed it already
                os.replace(self._tmp, self.partition / part_name())
            self._closed += 1
            self._writer, self._tmp = None, None
        if self._closed and not self._recorded:
            write_provenance(self.partition, self.provenance)
            self._recorded = True

    def keep(self) -> None:
        """End a run that stops early: the open part is closed with the tables written so far (a
        resumed run scores only the rest), unless a failed write may have left part of a table in
        it; then it is dropped, as :meth:`abort` does."""
        if self._broken or not self._rows:  # not self._rows: a part opened, nothing written to it
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tmp is not None and self._tmp.exists():
            self._tmp.unlink()
        self._writer, self._tmp = None, None
