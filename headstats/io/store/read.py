"""Reading one partition's files and records, and the resume check built on them.

Every reader verifies what it reads: Parquet page checksums, JSON that parses; a damaged file is a
:class:`StoreError` that names it and says what to do. :func:`check_resume` compares the settings a
run would write with the ``settings`` record of the partition's provenance (the model's weights and a
user file's content included, by hash), and refuses to add to a partition that holds data of
another run.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from headstats.io.store.layout import (
    CALIBRATION_FILE,
    PROVENANCE_FILE,
    PROVENANCE_KEY,
    REGISTRATION_FILE,
    StoreError,
    data_files,
    has_data,
    jsonable,
)

log = logging.getLogger("headstats")


def damaged(path: Path, err: BaseException) -> StoreError:
    """The error for a damaged data file: what is wrong, and how to recompute its rows."""
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


# What np.load raises on a truncated or damaged .npz (a record that is only a cache: recomputed).
NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile)


def read_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays :func:`~headstats.io.store.write.write_arrays_atomic` wrote to ``path``; None when
    there is no such file, or when it is damaged (a warning says so: such records are caches that the
    caller recomputes)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except NPZ_ERRORS as err:
        log.warning("%s is damaged (%s); its contents will be computed again", path, " ".join(str(err).split()))
        return None


def partial_sequences(path: Path) -> int:
    """How many sequences the saved batches in ``path`` (:func:`~headstats.io.store.layout.partial_file`)
    finished; 0 when there is no such record or it is damaged."""
    if not path.is_file():
        return 0
    try:
        with np.load(path, allow_pickle=False) as data:
            return int(data["rows"].shape[0]) if "rows" in data.files else 0
    except NPZ_ERRORS:
        return 0


def read_adaptive_chunks(folder: Path) -> pd.DataFrame:
    """Every finished chunk of a per-prompt skipping study's folder (:func:`adaptive_chunk`), in order."""
    parts = sorted(Path(folder).glob("items-*.csv"))
    if not parts:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(p) for p in parts], ignore_index=True)


def read_json(path: Path, fix: str) -> object:
    """A JSON sidecar; broken JSON is a :class:`StoreError` naming the file and saying what to do."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoreError(f"{path} is damaged (not valid JSON: {err}); {fix}") from err


def read_json_object(path: Path, fix: str) -> dict:
    """A JSON record that must be an object (a chain's ``metrics.json``, a study's registration): broken
    JSON or any other value (a list, a number) is a :class:`StoreError` naming the file and saying what to do."""
    data = read_json(path, fix)
    if not isinstance(data, dict):
        raise StoreError(f"{path} is damaged (a JSON object expected, not {type(data).__name__}); {fix}")
    return data


def read_registration(results: Path) -> dict | None:
    """The registration recorded under a study's ``results`` folder (``_registration.json``: its
    ``keys`` and their ``sha256``), or None before any; a damaged one is named."""
    path = results / REGISTRATION_FILE
    if not path.is_file():
        return None
    data = read_json_object(path, "restore it from version control")
    if not isinstance(data.get("keys"), dict):
        raise StoreError(f"{path} holds no registration keys: restore it from version control")
    return data


def file_provenance(path: Path) -> dict[str, object] | None:
    """The provenance record in one Parquet file's metadata (a sweep point's includes the point, its
    wall time and when it finished), or None when it has none."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError) as err:
        raise damaged(path, err) from err
    return json.loads(meta[PROVENANCE_KEY]) if PROVENANCE_KEY in meta else None


def read_provenance(partition: Path) -> dict[str, object] | None:
    """The partition's provenance: its ``_provenance.json``, else the record in its first data file
    that has one, else None."""
    sidecar = partition / PROVENANCE_FILE
    if sidecar.is_file():
        fix = (
            "delete it and re-run: the same record is kept in every data file of that folder, and headstats "
            "writes it again"
        )
        prov = read_json(sidecar, fix)
        if not isinstance(prov, dict):
            raise StoreError(f"{sidecar} is damaged (not a JSON object); delete it and re-run")
        return prov
    for part in data_files(partition):
        prov = file_provenance(part)
        if prov is not None:
            return prov
    return None


def stored_sample_ids(partition: Path) -> set[int]:
    """Sample ids of the rows a score partition holds (checksums verified)."""
    ids: set[int] = set()
    for part in data_files(partition):
        ids.update(read_table(part, ["sample_id"]).column("sample_id").unique().to_pylist())
    return ids


def read_calibration(partition: Path) -> dict | None:
    """The partition's calibration record (thresholds per score), or None when it has none."""
    path = partition / CALIBRATION_FILE
    if not path.is_file():
        return None
    data = read_json(path, "delete it; the next run calibrates again")
    if not isinstance(data, dict) or not isinstance(data.get("thresholds"), dict):
        raise StoreError(f"{path} is damaged (no thresholds record); delete it; the next run calibrates again")
    return data


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
    now = jsonable(dict(settings))
    assert isinstance(now, dict)
    changed = [k for k in now if stored.get(k) != now[k]]
    if changed:
        detail = "; ".join(f"{k}: {stored.get(k)!r} there, {now[k]!r} now" for k in changed)
        raise StoreError(
            f"{str(partition)!r} holds {what} of a different run, with other settings ({detail}); adding to it would "
            "mix two runs: use another --out, or delete that directory to start over"
        )


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


def scan_provenance(root: str | os.PathLike) -> list[dict[str, object]]:
    """The provenance record of every partition under ``root`` (with its relative path)."""
    records = []
    for sidecar in sorted(Path(root).rglob(PROVENANCE_FILE)):
        prov = read_json(sidecar, "delete it and re-run")
        if isinstance(prov, dict):
            prov["partition"] = str(sidecar.parent.relative_to(root))
            records.append(prov)
    return records
