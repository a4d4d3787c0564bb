"""SQL over a results folder: a DuckDB connection with two views, ``scores`` and ``interventions``.

    con = headstats.connect("results/")
    con.sql("SELECT model, dataset, layer, avg(ahon_ln) FROM scores GROUP BY ALL ORDER BY layer").df()

The views read the Parquet files in place (nothing is copied). Which files make up which table, and
the ``model`` / ``dataset`` / ``task`` value of each, come from :mod:`headstats.io.store` (the one
owner of the layout), so the views hold exactly the rows of :func:`headstats.read_scores` and
:func:`headstats.read_interventions`: one row per (sample_id, layer, head) even where two writers
without a lock stored a sample twice. Unlike those readers, DuckDB does not verify Parquet page
checksums; read a table once with ``read_scores`` to check it. The views are built from the files
present when ``connect`` is called: call it again after a run adds files.
"""

from __future__ import annotations

import os
from pathlib import Path

from headstats.io import store

VIEWS: dict[store.Kind, str] = {"scores": "scores", "interventions": "interventions"}


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _files(paths: list[Path]) -> str:
    return "[" + ", ".join(_literal(str(p.absolute())) for p in paths) + "]"


def _partition_selects(partition: store.Partition) -> list[str]:
    """SELECTs of one table's rows, the partition keys as columns (a sample stored twice, once)."""
    files = store.data_files(partition.path)
    if not files:
        return []
    keys = f"{_literal(partition.model)} AS {store.MODEL_KEY}, {_literal(partition.name)} AS "
    keys += store.PARTITION_KEYS[partition.kind]
    shadowed = store.duplicate_samples(files) if partition.kind == "scores" else {}
    clean = [f for f in files if f not in shadowed]
    # union_by_name: files of one table written by different headstats versions may differ in columns.
    # The partition values come from the store, not from DuckDB's reading of the path.
    options = "union_by_name = true, hive_partitioning = false"
    selects = [f"SELECT *, {keys} FROM read_parquet({_files(clean)}, {options})"] if clean else []
    for file, ids in shadowed.items():
        drop = ", ".join(str(int(i)) for i in ids)
        selects.append(
            f"SELECT *, {keys} FROM read_parquet({_files([file])}, {options}) WHERE sample_id NOT IN ({drop})"
        )
    return selects


def view_sql(root: str | os.PathLike, kind: store.Kind) -> str:
    """The SELECT behind the ``scores`` or ``interventions`` view of ``root``."""
    path = Path(root)
    own = store.partition_of(path.absolute())
    if own is not None:
        partitions = [store.Partition(path, *own)] if own[0] == kind else []
    else:
        partitions, _ = store.find_partitions(path, kind, provenance=False)
    selects = [s for p in partitions for s in _partition_selects(p)]
    if not selects:  # an empty view with the key columns, so queries still run
        return f"SELECT NULL::VARCHAR AS {store.MODEL_KEY}, NULL::VARCHAR AS {store.PARTITION_KEYS[kind]} WHERE false"
    return "\nUNION ALL BY NAME\n".join(selects)


def connect(root: str | os.PathLike, database: str = ":memory:"):  # -> duckdb.DuckDBPyConnection
    """A DuckDB connection with views ``scores`` and ``interventions`` over the results folder ``root``
    (a folder written by ``headstats collect`` / ``headstats ablate``, or one table's partition).
    Needs the ``sql`` extra (``pip install 'headstats[sql]'``)."""
    try:
        import duckdb
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "headstats.connect needs DuckDB: pip install 'headstats[sql]'", name=err.name
        ) from err
    path = Path(root)
    if not path.is_dir():
        raise store.StoreError(f"results directory {str(path)!r} does not exist or is not a directory")
    store.check_schema_versions(path)
    con = duckdb.connect(database)
    for kind, view in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {view} AS {view_sql(path, kind)}")
    return con
