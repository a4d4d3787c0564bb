"""Statistics on score tables far larger than a pandas frame holds comfortably.

A study-sized table (14 models x 27M rows x 21 columns) is tens of GB as a pandas frame. The
functions here never build that frame: :func:`open_scores` opens the hive-partitioned Parquet table
as a ``pyarrow.dataset``, every read prunes partitions (``model=``, ``dataset=``) and reads only the
columns one statistic needs, one score column of one model at a time, straight into a preallocated
numpy array. The names say so (``..._from_dataset``): these readers take a results folder or a
``pyarrow.dataset``, where :mod:`~headstats.stats.distances` and :mod:`~headstats.stats.overlap` take a
pandas frame; the arithmetic (W1 kernels, threshold rule) is shared with them.

**Wasserstein-1 between models** (:func:`distance_matrices_from_dataset`), per score id, overall and per
relative-depth bin (the bins of :func:`headstats.stats.tables.depth_bin`):

- ``exact``: each model's column is sorted once per score (per depth bin, then the bins merged,
  which is cheaper than a second sort), and W1 of every pair is read off the two sorted arrays by
  :func:`headstats.stats.w1.wasserstein1_sorted` (O(n + m), exact, equal to
  ``scipy.stats.wasserstein_distance`` on the same rows to float64 round-off).
- ``summary``: when all models' sorted columns would not fit in ``memory_gb``, each chunk of at
  most ``chunk_rows`` rows (about one Parquet part) is sorted and cut into ``summary_size``
  equal-count quantile blocks, each kept as (mean, count); a model's summary is the union of its
  chunks' blocks, and W1 is computed exactly between the two weighted summaries. Replacing a block
  by its mean moves each of its values by ``|x - mean|``, so ``W1(sample, summary) <=
  mean |x - block mean|``, which is computed exactly on the way; by the triangle inequality the
  result is within ``error_bound`` (the two models' bounds added) of the exact W1, and the table says
  so. Memory is O(chunk_rows + models x chunks x summary_size), independent of the table size.

The in-memory :func:`headstats.stats.distances.model_distance` gives every *sequence* the same
weight; within one model every sequence has the same number of rows, so that is the plain row
distribution used here: the two agree whenever no score value is missing (rows with a missing value
are dropped here; the in-memory version also re-weights the rest of that sequence). Intervals,
permutation tests and noise floors need the sequence blocks and stay in the in-memory module, which
can be run on a subset read with :func:`headstats.io.store.read_scores` and a filter.

**Overlap of two scores** (:func:`score_overlap_from_dataset`): the same rows, thresholds and columns as
:func:`headstats.stats.overlap.score_overlap`, reading only the two score columns plus ``layer`` and
``head`` of one (model, dataset) at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from tqdm.auto import tqdm

from headstats.engine.scores import get_score
from headstats.engine.scores import score_ids as registered_score_ids
from headstats.io import store
from headstats.stats.overlap import overlap_row
from headstats.stats.tables import ALL_DEPTHS, depth_bin, depth_labels
from headstats.stats.thresholds import thresholds_from_values
from headstats.stats.w1 import wasserstein1, wasserstein1_sorted

Method = Literal["auto", "exact", "summary"]

# --- reading ---------------------------------------------------------------------------------------


def open_scores(root: str | os.PathLike) -> pads.Dataset:
    """The score tables under ``root`` as one lazy ``pyarrow.dataset`` (nothing is read yet), from the
    store, which owns the layout: ``model`` and ``dataset`` are string partition fields (filters prune
    whole directories), page checksums are verified as data is read."""
    return store.open_dataset(root, "scores")


def _as_dataset(source: str | os.PathLike | pads.Dataset) -> pads.Dataset:
    return source if isinstance(source, pads.Dataset) else open_scores(source)


def inventory(source: str | os.PathLike | pads.Dataset) -> pd.DataFrame:
    """Rows and files per (model, dataset), from the Parquet footers alone (no data is read)."""
    dataset = _as_dataset(source)
    counts: dict[tuple[str, str], list[int]] = {}
    for fragment in dataset.get_fragments():
        keys = pads.get_partition_keys(fragment.partition_expression)
        if "model" not in keys or "dataset" not in keys:
            raise store.StoreError(
                f"{fragment.path} is not under model=<name>/dataset=<name>/: not a headstats score table"
            )
        entry = counts.setdefault((str(keys["model"]), str(keys["dataset"])), [0, 0])
        entry[0] += fragment.metadata.num_rows
        entry[1] += 1
    rows = [{"model": m, "dataset": d, "rows": r, "files": f} for (m, d), (r, f) in sorted(counts.items())]
    return pd.DataFrame(rows, columns=["model", "dataset", "rows", "files"])


def _filter(model: str, datasets: Sequence[str]) -> pc.Expression:
    return (pc.field("model") == model) & pc.field("dataset").isin(list(datasets))


def _iter_batches(
    dataset: pads.Dataset, model: str, datasets: Sequence[str], columns: Sequence[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    try:
        yield from dataset.to_batches(columns=list(columns), filter=_filter(model, datasets), batch_size=batch_rows)
    except (pa.ArrowInvalid, OSError) as err:
        raise store.StoreError(f"corrupt score table for model {model!r}: {err}") from err


def _numpy(column: pa.Array, dtype: type) -> np.ndarray:
    if column.null_count:
        column = column.fill_null(np.nan if np.issubdtype(dtype, np.floating) else 0)
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def read_columns(
    source: str | os.PathLike | pads.Dataset,
    model: str,
    columns: Sequence[str],
    datasets: Sequence[str] | None = None,
    *,
    rows: int | None = None,
) -> dict[str, np.ndarray]:
    """``columns`` of one model (in ``datasets``, default all of its datasets) as numpy arrays.

    The arrays are allocated once at their final size (``rows``, or counted from the footers) and
    filled batch by batch, so the peak is the arrays themselves plus one batch. Score columns come
    back as float32 with NaN where a value is missing; key columns in their stored dtype.
    """
    dataset = _as_dataset(source)
    inv = inventory(dataset) if rows is None or datasets is None else None
    if datasets is None:
        assert inv is not None
        datasets = sorted(inv.loc[inv["model"] == model, "dataset"])
        if not datasets:
            raise ValueError(f"model {model!r} is not in the score table; it holds: {', '.join(_models(inv))}")
    if rows is None:
        assert inv is not None
        rows = int(inv.loc[(inv["model"] == model) & inv["dataset"].isin(datasets), "rows"].sum())
    schema = dataset.schema
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise ValueError(f"the score table has no column(s) {', '.join(missing)}; it has {', '.join(schema.names)}")
    dtypes = {c: np.float32 if c in registered_score_ids() else schema.field(c).type.to_pandas_dtype() for c in columns}
    out = {c: np.empty(rows, dtype=dtypes[c]) for c in columns}
    filled = 0
    for batch in _iter_batches(dataset, model, datasets, columns, 1 << 20):
        n = batch.num_rows
        if filled + n > rows:
            raise store.StoreError(f"model {model!r}: the table changed while it was read; read it again")
        for i, c in enumerate(columns):
            out[c][filled : filled + n] = _numpy(batch.column(i), dtypes[c])
        filled += n
    if filled != rows:
        raise store.StoreError(f"model {model!r}: expected {rows} rows from the Parquet footers, read {filled}")
    return out


def _models(inv: pd.DataFrame) -> list[str]:
    return sorted(inv["model"].unique())


# --- per-model summaries of one score ------------------------------------------------------------


@dataclass
class _Exact:
    """A model's values of one score, sorted, overall and per depth bin."""

    sorted: dict[str, np.ndarray]

    def n(self, depth: str) -> int:
        return len(self.sorted[depth])


@dataclass
class _Summary:
    """Equal-count quantile blocks of a model's values: (mean, count) per block, plus the exact
    total of ``|x - block mean|`` (what bounds the summary's W1 error)."""

    means: dict[str, list[np.ndarray]]
    counts: dict[str, list[np.ndarray]]
    deviation: dict[str, float]

    def n(self, depth: str) -> int:
        return int(sum(c.sum() for c in self.counts[depth]))


def _bins(layers: np.ndarray, n_layers: int, depth_bins: int) -> list[tuple[str, np.ndarray]]:
    if not depth_bins:
        return []
    binned = depth_bin(layers, n_layers, depth_bins)
    return [(label, binned == i) for i, label in enumerate(depth_labels(depth_bins))]


def _exact_model(values: np.ndarray, layers: np.ndarray | None, n_layers: int, depth_bins: int) -> _Exact:
    keep = np.isfinite(values)
    if not keep.all():
        values = values[keep]
        layers = layers[keep] if layers is not None else None
    if not depth_bins:
        return _Exact({ALL_DEPTHS: np.sort(values)})
    assert layers is not None
    per_bin = {label: np.sort(values[mask]) for label, mask in _bins(layers, n_layers, depth_bins)}
    # The bins are sorted runs: a stable (merging) sort of their concatenation is far cheaper
    # than sorting the values again.
    merged = np.sort(np.concatenate(list(per_bin.values())), kind="stable")
    return _Exact({ALL_DEPTHS: merged, **per_bin})


def _quantile_blocks(values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, float]:
    x = np.sort(values).astype(np.float64)
    k = min(size, len(x))
    starts = (np.arange(k, dtype=np.int64) * len(x)) // k
    counts = np.diff(np.append(starts, len(x)))
    means = np.add.reduceat(x, starts) / counts
    deviation = float(np.abs(x - np.repeat(means, counts)).sum())
    return means, counts, deviation


def _summary_model(
    dataset: pads.Dataset,
    model: str,
    datasets: Sequence[str],
    score_id: str,
    n_layers: int,
    depth_bins: int,
    summary_size: int,
    chunk_rows: int,
) -> _Summary:
    labels = depth_labels(depth_bins) if depth_bins else [ALL_DEPTHS]
    means: dict[str, list[np.ndarray]] = {label: [] for label in labels}
    counts: dict[str, list[np.ndarray]] = {label: [] for label in labels}
    deviation = dict.fromkeys(labels, 0.0)
    columns = [score_id, "layer"] if depth_bins else [score_id]

    def flush(parts: list[pa.RecordBatch]) -> None:
        values = np.concatenate([_numpy(p.column(0), np.float32) for p in parts])
        layers = np.concatenate([_numpy(p.column(1), np.int16) for p in parts]) if depth_bins else None
        keep = np.isfinite(values)
        groups = _bins(layers, n_layers, depth_bins) if layers is not None else [(ALL_DEPTHS, None)]
        for label, mask in groups:
            selected = values[keep if mask is None else keep & mask]
            if len(selected):
                m, c, d = _quantile_blocks(selected, summary_size)
                means[label].append(m)
                counts[label].append(c)
                deviation[label] += d

    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in _iter_batches(dataset, model, datasets, columns, min(chunk_rows, 1 << 20)):
        pending.append(batch)
        held += batch.num_rows
        if held >= chunk_rows:
            flush(pending)
            pending, held = [], 0
    if pending:
        flush(pending)
    if depth_bins:  # the union of the bins' blocks summarises the whole column
        means[ALL_DEPTHS] = [m for label in labels for m in means[label]]
        counts[ALL_DEPTHS] = [c for label in labels for c in counts[label]]
        deviation[ALL_DEPTHS] = sum(deviation[label] for label in labels)
    return _Summary(means, counts, deviation)


def _pair_distance(a: _Exact | _Summary, b: _Exact | _Summary, depth: str) -> tuple[float, float]:
    """(W1, error bound) of one pair at one depth; NaN when a side has no values there."""
    if a.n(depth) == 0 or b.n(depth) == 0:
        return float("nan"), float("nan")
    if isinstance(a, _Exact) and isinstance(b, _Exact):
        return wasserstein1_sorted(a.sorted[depth], b.sorted[depth]), 0.0
    assert isinstance(a, _Summary) and isinstance(b, _Summary)
    w1 = wasserstein1(
        np.concatenate(a.means[depth]),
        np.concatenate(b.means[depth]),
        np.concatenate(a.counts[depth]),
        np.concatenate(b.counts[depth]),
    )
    return w1, a.deviation[depth] / a.n(depth) + b.deviation[depth] / b.n(depth)


# --- the W1 matrix -------------------------------------------------------------------------------


def _select_models(inv: pd.DataFrame, models: Sequence[str] | None) -> list[str]:
    have = _models(inv)
    if models is None:
        return have
    models = list(dict.fromkeys(models))
    unknown = [m for m in models if m not in have]
    if unknown:
        raise ValueError(
            f"model(s) {', '.join(map(repr, unknown))} not in the score table; it holds: {', '.join(have)}"
        )
    return models


def _select_datasets(inv: pd.DataFrame, models: Sequence[str], datasets: Sequence[str] | None) -> list[str]:
    per_model = {m: set(inv.loc[inv["model"] == m, "dataset"]) for m in models}
    if datasets is None:
        shared = sorted(set.intersection(*per_model.values()))
        if not shared:
            detail = "; ".join(f"{m}: {', '.join(sorted(d))}" for m, d in per_model.items())
            raise ValueError(
                f"the models share no dataset ({detail}): distances compare models on the same texts. "
                "Collect them on one dataset, or pass models= a subset that shares one"
            )
        return shared
    datasets = list(dict.fromkeys(datasets))
    for m, have in per_model.items():
        lacking = [d for d in datasets if d not in have]
        if lacking:
            raise ValueError(f"model {m!r} has no dataset {', '.join(lacking)}; it has {', '.join(sorted(have))}")
    return datasets


def _select_scores(dataset: pads.Dataset, score_ids: Sequence[str] | None) -> list[str]:
    present = [s for s in registered_score_ids() if s in dataset.schema.names]
    if score_ids is None:
        if not present:
            raise ValueError("the score table has no score columns")
        return present
    wanted = [get_score(s).id for s in dict.fromkeys(score_ids)]
    missing = [s for s in wanted if s not in present]
    if missing:
        raise ValueError(f"the score table has no column for {', '.join(missing)}; it has {', '.join(present)}")
    return wanted


def _max_layer(dataset: pads.Dataset, model: str, datasets: Sequence[str]) -> int:
    top = -1
    for batch in _iter_batches(dataset, model, datasets, ["layer"], 1 << 20):
        if batch.num_rows:
            top = max(top, int(pc.max(batch.column(0)).as_py()))
    return top


def exact_memory_bytes(rows: Sequence[int], depth_bins: int) -> int:
    """What the exact method holds at its peak: every model's sorted column (twice with depth bins:
    the bins and their merge) plus one model's column being read and sorted."""
    per_row = 8 if depth_bins else 4
    return sum(rows) * per_row + (max(rows) if rows else 0) * 16


def distance_matrices_from_dataset(
    root: str | os.PathLike | pads.Dataset,
    models: Sequence[str] | None = None,
    score_ids: Sequence[str] | None = None,
    *,
    datasets: Sequence[str] | None = None,
    depth_bins: int = 5,
    method: Method = "auto",
    memory_gb: float = 2.0,
    summary_size: int = 4096,
    chunk_rows: int = 4_000_000,
    progress: bool = True,
) -> pd.DataFrame:
    """W1 between every pair of ``models`` for every score id, overall and per relative-depth bin.

    Reads the table under ``root`` one score column of one model at a time. ``datasets`` defaults to
    the datasets every model was scored on (their rows are pooled). ``method="auto"`` is exact when
    every model's sorted column fits in ``memory_gb`` (see :func:`exact_memory_bytes`), the quantile
    summary otherwise (see the module docstring). ``depth_bins=0`` computes the overall distance only.

    Returns one row per (score, depth, model pair) with ``w1``, ``method`` (``exact`` or
    ``summary``), ``error_bound`` (0 for exact; otherwise a guaranteed bound on ``|w1 - exact W1|``)
    and the row counts ``n_a``, ``n_b``. :func:`as_matrix` turns it into a models x models table.
    """
    dataset = _as_dataset(root)
    inv = inventory(dataset)
    model_list = _select_models(inv, models)
    if len(model_list) < 2:
        raise ValueError("a distance matrix needs at least two models")
    used = _select_datasets(inv, model_list, datasets)
    sids = _select_scores(dataset, score_ids)
    if depth_bins < 0:
        raise ValueError(f"depth_bins must be 0 (overall only) or more, not {depth_bins}")
    if method not in ("auto", "exact", "summary"):
        raise ValueError(f"method must be 'auto', 'exact' or 'summary', not {method!r}")
    if summary_size < 1 or chunk_rows < 1:
        raise ValueError("summary_size and chunk_rows must be at least 1")
    rows = {m: int(inv.loc[(inv["model"] == m) & inv["dataset"].isin(used), "rows"].sum()) for m in model_list}
    if method == "auto":
        fits = exact_memory_bytes(list(rows.values()), depth_bins) <= memory_gb * 2**30
        method = "exact" if fits else "summary"
    depths = [ALL_DEPTHS, *(depth_labels(depth_bins) if depth_bins else [])]
    n_layers = {m: _max_layer(dataset, m, used) + 1 for m in model_list} if depth_bins else dict.fromkeys(model_list, 1)

    out = []
    bar = tqdm(total=len(sids) * len(model_list), desc=f"W1 ({method})", unit="column", disable=not progress)
    for sid in sids:
        data: dict[str, _Exact | _Summary] = {}
        for m in model_list:
            if method == "exact":
                cols = read_columns(dataset, m, [sid, "layer"] if depth_bins else [sid], used, rows=rows[m])
                data[m] = _exact_model(cols[sid], cols.get("layer"), n_layers[m], depth_bins)
                del cols
            else:
                data[m] = _summary_model(dataset, m, used, sid, n_layers[m], depth_bins, summary_size, chunk_rows)
            if data[m].n(ALL_DEPTHS) == 0 and score_ids is not None:
                raise ValueError(f"model {m!r} has no values for {sid!r} in {', '.join(used)}: collect it first")
            bar.update()
        for a, b in combinations(model_list, 2):
            for depth in depths:
                w1, bound = _pair_distance(data[a], data[b], depth)
                out.append(
                    {
                        "score": sid,
                        "depth": depth,
                        "model_a": a,
                        "model_b": b,
                        "w1": w1,
                        "method": method,
                        "error_bound": bound,
                        "n_a": data[a].n(depth),
                        "n_b": data[b].n(depth),
                    }
                )
        del data
    bar.close()
    return pd.DataFrame(
        out, columns=["score", "depth", "model_a", "model_b", "w1", "method", "error_bound", "n_a", "n_b"]
    )


def as_matrix(table: pd.DataFrame, score: str, depth: str = ALL_DEPTHS) -> pd.DataFrame:
    """One (score, depth) of a :func:`distance_matrices_from_dataset` table as a symmetric models x models frame."""
    rows = table[(table["score"] == score) & (table["depth"] == depth)]
    if rows.empty:
        raise ValueError(
            f"no distances for score {score!r} at depth {depth!r}; the table has scores "
            f"{', '.join(table['score'].unique())} and depths {', '.join(table['depth'].unique())}"
        )
    models = list(dict.fromkeys([*rows["model_a"], *rows["model_b"]]))
    matrix = pd.DataFrame(0.0, index=models, columns=models)
    for a, b, w in zip(rows["model_a"], rows["model_b"], rows["w1"], strict=True):
        matrix.loc[a, b] = matrix.loc[b, a] = w
    return matrix


# --- overlap of two scores -----------------------------------------------------------------------


def score_overlap_from_dataset(
    root: str | os.PathLike | pads.Dataset,
    score_a: str,
    score_b: str,
    rates: Sequence[float] = (0.05, 0.10, 0.20),
    *,
    models: Sequence[str] | None = None,
    datasets: Sequence[str] | None = None,
    usually: float = 0.5,
    progress: bool = True,
) -> pd.DataFrame:
    """Agreement of two scores at matched selection rates, per (model, dataset, rate).

    Same definitions and columns as :func:`headstats.stats.overlap.score_overlap` (IoU of the
    selected (sequence, layer, head) triples and of the usually-selected heads, and the shares each
    score misses), computed from the two score columns plus ``layer`` and ``head`` of one
    (model, dataset) at a time. Thresholds are exact quantiles of that (model, dataset)'s rows.
    """
    a_id, b_id = get_score(score_a).id, get_score(score_b).id
    if not 0 < usually <= 1:
        raise ValueError(f"usually must lie in (0, 1], not {usually}")
    rate_list = [float(r) for r in rates]
    for rate in rate_list:
        if not 0 <= rate <= 1:
            raise ValueError(f"selection rates are fractions in [0, 1], not {rate}")
    dataset = _as_dataset(root)
    inv = inventory(dataset)
    _select_scores(dataset, [a_id, b_id])
    model_list = _select_models(inv, models)
    jobs = []
    for m in model_list:
        have = sorted(inv.loc[inv["model"] == m, "dataset"])
        wanted = have if datasets is None else [d for d in datasets if d in have]
        jobs += [(m, d) for d in wanted]
    if not jobs:
        raise ValueError(f"none of the models has any of the datasets {', '.join(datasets or [])}")
    out = []
    for m, d in tqdm(jobs, desc=f"overlap {a_id} vs {b_id}", unit="table", disable=not progress):
        n = int(inv.loc[(inv["model"] == m) & (inv["dataset"] == d), "rows"].sum())
        cols = read_columns(dataset, m, [a_id, b_id, "layer", "head"], [d], rows=n)
        va, vb = cols[a_id], cols[b_id]  # float32: compared with float64 thresholds, as float64 values would be
        keep = ~(np.isnan(va) | np.isnan(vb))
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
            va, vb = cols[a_id], cols[b_id]
        if len(va) == 0:
            raise ValueError(f"model {m!r} has no values for {a_id} and {b_id} on {d!r}: collect them first")
        for sid, v in ((a_id, va), (b_id, vb)):
            if not np.isfinite(v).all():
                raise ValueError(f"the {sid!r} column of {m!r} on {d!r} holds infinite values; the table is corrupt")
        width = int(cols["head"].max()) + 1
        heads = cols["layer"].astype(np.int64) * width + cols["head"]
        n_heads = int(heads.max()) + 1
        per_head = np.maximum(np.bincount(heads, minlength=n_heads), 1)
        del cols
        # Quantiles on a float64 copy, one score at a time, exactly as the calibration computes them.
        ta = thresholds_from_values(va.astype(np.float64), a_id, rate_list)
        tb = thresholds_from_values(vb.astype(np.float64), b_id, rate_list)
        above_a, above_b = get_score(a_id).inactive_when == "above", get_score(b_id).inactive_when == "above"
        for rate, tau_a, tau_b in zip(rate_list, ta, tb, strict=True):
            tau_a, tau_b = np.float64(tau_a), np.float64(tau_b)  # a float64 scalar makes the comparison float64
            sa = va > tau_a if above_a else va < tau_a
            sb = vb > tau_b if above_b else vb < tau_b
            ua = np.bincount(heads[sa], minlength=n_heads) / per_head >= usually
            ub = np.bincount(heads[sb], minlength=n_heads) / per_head >= usually
            out.append(overlap_row(m, d, rate, a_id, b_id, sa, sb, ua, ub))
    return pd.DataFrame(out)
