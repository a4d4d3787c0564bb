"""Parquet layout of SPEC §6: schemas, atomic part files, provenance, reading back into pandas.

Score tables live in ``ROOT/model=<slug>/dataset=<name>/part-*.parquet``; intervention results in
``ROOT/model=<slug>/task=<name>/*.parquet``. Every part file is complete on its own: it is written
to a hidden temporary name and renamed into place, so a reader (or a resumed run) never sees half
a file. Provenance travels twice: in each file's key-value metadata and as ``_provenance.json`` in
the partition directory.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import uuid
from collections.abc import Mapping, Sequence
from importlib import metadata as _metadata
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from headstats.engine.scores import score_ids as registered_score_ids

SCHEMA_VERSION = "1"
PROVENANCE_KEY = b"headstats.provenance"
PROVENANCE_FILE = "_provenance.json"
DONE_FILE = "_SUCCESS"

SCORE_KEY_TYPES: dict[str, pa.DataType] = {
    "sample_id": pa.int64(),
    "layer": pa.int16(),
    "head": pa.int16(),
    "kv_head": pa.int16(),
    "n_tokens": pa.int32(),
}


class StoreError(ValueError):
    """A results directory is missing, empty, corrupt or inconsistent."""


def score_schema(score_ids: Sequence[str] | None = None) -> pa.Schema:
    score_ids = registered_score_ids() if score_ids is None else score_ids
    fields = [pa.field(name, dtype) for name, dtype in SCORE_KEY_TYPES.items()]
    fields += [pa.field(sid, pa.float32()) for sid in score_ids]
    return pa.schema(fields)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("headstats", "torch", "transformers", "pyarrow", "pandas", "numpy", "datasets"):
        with contextlib.suppress(_metadata.PackageNotFoundError):
            versions[dist] = _metadata.version(dist)
    return versions


def make_provenance(**fields: object) -> dict[str, object]:
    """Provenance common to every table: schema version, package versions, date, plus ``fields``."""
    prov: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
    }
    prov.update(fields)
    return prov


def partition_dir(root: str | os.PathLike, **partitions: str) -> Path:
    path = Path(root)
    for key, value in partitions.items():
        if not value or "/" in value or value.startswith("."):
            raise StoreError(f"invalid partition value {key}={value!r}")
        path = path / f"{key}={value}"
    return path


def ensure_writable(root: str | os.PathLike) -> Path:
    """Create ``root`` if needed and check a file can be written there (before any model work)."""
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise StoreError(
            f"output directory {str(path)!r} is not writable ({err.strerror or err}); choose another --out"
        ) from err
    return path


def write_parquet_atomic(table: pa.Table, path: Path, provenance: Mapping[str, object] | None = None) -> Path:
    """Write ``table`` to ``path`` via a temporary file and an atomic rename."""
    if provenance is not None:
        meta = dict(table.schema.metadata or {})
        meta[PROVENANCE_KEY] = json.dumps(provenance, sort_keys=True).encode()
        table = table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_json_atomic(data: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def read_provenance(partition: Path) -> dict[str, object] | None:
    sidecar = partition / PROVENANCE_FILE
    if sidecar.is_file():
        return json.loads(sidecar.read_text())
    for part in sorted(partition.glob("*.parquet")):
        meta = pq.read_schema(part).metadata or {}
        if PROVENANCE_KEY in meta:
            return json.loads(meta[PROVENANCE_KEY])
    return None


def part_files(partition: Path) -> list[Path]:
    return sorted(p for p in partition.glob("*.parquet") if not p.name.startswith("."))


# The partition key that tells a score table from intervention results in a shared results directory.
KIND_KEYS = {"score": "dataset", "intervention": "task"}


def _dataset(root: str | os.PathLike, what: str) -> pads.Dataset:
    path = Path(root)
    if not path.exists():
        raise StoreError(f"{what} directory {str(path)!r} does not exist")
    key = KIND_KEYS[what] + "="
    files = [
        p
        for p in path.rglob("*.parquet")
        if not p.name.startswith(".") and any(part.startswith(key) for part in p.resolve().parts[:-1])
    ]
    if not files:
        raise StoreError(f"no {what} tables under {str(path)!r}: run `headstats collect` / `headstats ablate` first")
    try:
        return pads.dataset(
            [str(f) for f in sorted(files)],
            format="parquet",
            partitioning=pads.partitioning(flavor="hive"),
            partition_base_dir=str(path),
        )
    except (pa.ArrowInvalid, OSError) as err:
        raise StoreError(f"cannot read the {what} tables under {str(path)!r}: {err}") from err


def check_schema_versions(root: str | os.PathLike) -> set[str]:
    """Schema versions of all partitions under ``root``; mixed versions are an error."""
    versions = set()
    for sidecar in Path(root).rglob(PROVENANCE_FILE):
        versions.add(str(json.loads(sidecar.read_text()).get("schema_version", "?")))
    if len(versions) > 1:
        raise StoreError(
            f"{root}: tables of different schema versions ({', '.join(sorted(versions))}) cannot be read together; "
            "re-run the older ones or read the directories separately"
        )
    return versions


def _read(root: str | os.PathLike, what: str, columns: Sequence[str] | None, filter: object | None) -> pd.DataFrame:
    check_schema_versions(root)
    dataset = _dataset(root, what)
    try:
        table = dataset.to_table(columns=list(columns) if columns else None, filter=filter)
    except (pa.ArrowInvalid, OSError) as err:
        raise StoreError(f"corrupt {what} table under {root}: {err}") from err
    frame = table.to_pandas()
    for col in ("model", "dataset", "task"):
        if col in frame.columns:
            frame[col] = frame[col].astype(str)
    return frame


def read_scores(
    root: str | os.PathLike, columns: Sequence[str] | None = None, filter: object | None = None
) -> pd.DataFrame:
    """All score tables under ``root`` as one DataFrame, with ``model`` and ``dataset`` columns.

    ``columns`` and ``filter`` (a ``pyarrow.dataset`` expression, e.g.
    ``pyarrow.dataset.field("layer") < 4``) are pushed down to Parquet.
    """
    return _read(root, "score", columns, filter)


def read_interventions(
    root: str | os.PathLike, columns: Sequence[str] | None = None, filter: object | None = None
) -> pd.DataFrame:
    """All intervention results under ``root`` (per-question rows, SPEC §6) as one DataFrame."""
    return _read(root, "intervention", columns, filter)


def scan_provenance(root: str | os.PathLike) -> list[dict[str, object]]:
    """The provenance record of every partition under ``root`` (with its relative path)."""
    records = []
    for sidecar in sorted(Path(root).rglob(PROVENANCE_FILE)):
        prov = json.loads(sidecar.read_text())
        prov["partition"] = str(sidecar.parent.relative_to(root))
        records.append(prov)
    return records
