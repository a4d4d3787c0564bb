"""Finding and reading the tables under a results root.

:func:`find_partitions` lists every table under a root (any depth) and the Parquet files outside the
layout; :func:`read_scores` and :func:`read_interventions` read them into pandas, and
:func:`open_dataset` opens them as one lazy ``pyarrow.dataset``. Page checksums are verified as data
is read, and a (sample_id, layer, head) row stored twice in one score table is returned once.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from headstats.io.store.layout import (
    MODEL_KEY,
    PARTITION_KEYS,
    PROVENANCE_KEY,
    READ_FORMAT,
    Kind,
    Partition,
    StoreError,
    data_files,
    partition_of,
    partitioning,
)
from headstats.io.store.read import check_schema_versions, damaged, read_provenance, read_table

log = logging.getLogger("headstats")


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


def footer_schema(files: Sequence[Path], kind: Kind) -> pa.Schema:
    """The union of ``files``' footers and the partition fields of ``kind`` (metadata dropped); a
    damaged footer is a :class:`StoreError` naming its file."""
    try:
        footers = [pq.read_schema(f) for f in files]
    except (pa.ArrowException, OSError) as err:
        raise damage_in(files, err) from err
    check_identity(files, footers)
    return pa.unify_schemas([*footers, partitioning(kind).schema]).remove_metadata()


def _settings_of(footer: pa.Schema) -> dict | None:
    meta = footer.metadata or {}
    try:
        record = json.loads(meta[PROVENANCE_KEY]) if PROVENANCE_KEY in meta else None
    except ValueError:
        return None
    settings = record.get("settings") if isinstance(record, dict) else None
    return settings if isinstance(settings, dict) else None


def check_identity(files: Sequence[Path], footers: Sequence[pa.Schema]) -> None:
    """Refuse a partition's data file whose recorded settings (model, weights' hash, dtype, questions,
    ...) differ from its folder's (``_provenance.json``, else its first file's): a file copied in from
    another results folder would be read as this one's. Keys only one of them records are not compared."""
    folder = files[0].parent if files else None
    if folder is None:
        return
    reference = read_provenance(folder)
    expected = reference.get("settings") if isinstance(reference, dict) else None
    if not isinstance(expected, dict):
        return
    for path, footer in zip(files, footers, strict=True):
        settings = _settings_of(footer)
        if settings is None:
            continue
        differ = [k for k in settings if k in expected and settings[k] != expected[k]]
        if differ:
            detail = "; ".join(f"{k}: {settings[k]!r} there, {expected[k]!r} in the folder" for k in differ[:3])
            raise StoreError(
                f"{path} records another run than its folder's ({detail}): it belongs to another results folder; "
                "move it back there"
            )


def damage_in(files: Sequence[Path], err: BaseException) -> StoreError:
    """The error for ``err`` raised while reading ``files`` together: the first damaged file, named."""
    for f in files:
        try:
            pq.read_table(f, page_checksum_verification=True)
        except (pa.ArrowException, OSError) as file_err:
            return damaged(f, file_err)
    return StoreError(f"cannot read the tables in {files[0].parent}: {err}")


def read_once(
    part: Partition, files: list[Path], schema: pa.Schema, filter: object | None
) -> list[tuple[list[Path], object | None]]:
    """Groups of ``files`` with the filter each is read under, so that a sample an earlier file of a
    score partition already holds is left out of the later ones."""
    shadowed = duplicate_samples(files) if part.kind == "scores" and "sample_id" in schema.names else {}
    if shadowed:
        twice = len({i for ids in shadowed.values() for i in ids})
        log.warning("%s holds %d sample(s) twice (two writers without a lock); each is read once", part.path, twice)
    groups: list[tuple[list[Path], object | None]] = [([f for f in files if f not in shadowed], filter)]
    for f, ids in shadowed.items():
        keep = ~pc.field("sample_id").isin(pa.array(ids, pa.int64()))
        groups.append(([f], keep if filter is None else filter & keep))  # type: ignore[operator]
    return [(group, expr) for group, expr in groups if group]


def read_partition(part: Partition, columns: Sequence[str] | None, filter: object | None) -> pa.Table | None:
    """One table's rows (``columns`` and ``filter`` pushed down), each sample once, with its
    ``model`` and ``dataset`` / ``task`` columns; None when it holds no data file."""
    files = data_files(part.path)
    if not files:
        return None
    schema = footer_schema(files, part.kind)
    wanted = None if columns is None else [c for c in columns if c in schema.names]
    tables = []
    for group, expr in read_once(part, files, schema, filter):
        dataset = pads.dataset(
            [str(f) for f in group],
            schema=schema,
            format=READ_FORMAT,
            partitioning=partitioning(part.kind),
            partition_base_dir=str(part.path.parent.parent),
        )
        try:
            tables.append(dataset.to_table(columns=wanted, filter=expr))
        except (pa.ArrowException, OSError) as err:
            raise damage_in(group, err) from err
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    # The partition's own values, also when ``root`` is the partition itself.
    for col, value in ((MODEL_KEY, part.model), (PARTITION_KEYS[part.kind], part.name)):
        if col in table.column_names:
            table = table.set_column(table.column_names.index(col), col, pa.array([value] * len(table), pa.string()))
    return table


def noun(kind: Kind) -> str:
    """``kind`` as a reader's messages name it: "score" or "intervention" (tables)."""
    return "score" if kind == "scores" else "intervention"


def no_tables(kind: Kind, path: Path) -> StoreError:
    """The error for a root that holds no table of ``kind``, with the commands that make them."""
    return StoreError(f"no {noun(kind)} tables under {str(path)!r}: run `headstats collect` / `headstats ablate` first")


def read_kind(
    root: str | os.PathLike, kind: Kind, columns: Sequence[str] | None, filter: object | None
) -> pd.DataFrame:
    """Every table of ``kind`` under ``root`` as one DataFrame (see :func:`read_scores`)."""
    path = Path(root)
    if not path.exists():
        raise StoreError(f"{kind} directory {str(path)!r} does not exist")
    check_schema_versions(path)
    partitions = table_partitions(path, kind)
    tables = [t for t in (read_partition(p, columns, filter) for p in partitions) if t is not None]
    if not tables:
        raise no_tables(kind, path)
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as err:
        raise StoreError(f"the {noun(kind)} tables under {str(path)!r} cannot be read together: {err}") from err
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
    if not path.is_dir():
        raise StoreError(f"{noun(kind)} directory {str(path)!r} does not exist")
    check_schema_versions(path)
    partitions = table_partitions(path, kind)
    files = [f for p in partitions for f in data_files(p.path)]
    if not files:
        raise no_tables(kind, path)
    for p in partitions if kind == "scores" else ():
        if duplicate_samples(data_files(p.path)):
            raise StoreError(
                f"{p.path} holds some samples twice (two runs wrote it without a lock); read it with "
                "headstats.read_scores, which reads each once, or collect it again into a new --out"
            )
    base = os.path.commonpath([str(p.path.parent.parent.absolute()) for p in partitions])
    return pads.dataset(
        [str(f.absolute()) for f in files],
        schema=footer_schema(files, kind),
        format=READ_FORMAT,
        partitioning=partitioning(kind),
        partition_base_dir=base,
    )


def read_scores(
    root: str | os.PathLike, columns: Sequence[str] | None = None, filter: object | None = None
) -> pd.DataFrame:
    """All score tables under ``root`` as one DataFrame, with ``model`` and ``dataset`` columns.

    ``columns`` and ``filter`` (a ``pyarrow.dataset`` expression, e.g.
    ``pyarrow.dataset.field("layer") < 4``) are pushed down to Parquet. Page checksums are
    verified (a damaged file is an error naming it), and a (sample_id, layer, head) row stored
    twice in one table is returned once.
    """
    return read_kind(root, "scores", columns, filter)


def read_interventions(
    root: str | os.PathLike, columns: Sequence[str] | None = None, filter: object | None = None
) -> pd.DataFrame:
    """All intervention results under ``root`` (per-question rows, docs/design.md#table-layout) as one DataFrame."""
    return read_kind(root, "interventions", columns, filter)
