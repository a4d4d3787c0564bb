"""Synthetic score tables in the layout of docs/design.md#table-layout, for testing and benchmarking analysis at scale.

Collecting a 50M-row table from real models takes GPU-hours; code that analyses such tables needs
them to show it stays within time and memory. :func:`write_synthetic_scores` writes a table with
every column and dtype of a real collection (hive partitions ``model=<name>/dataset=<name>/``,
``_provenance.json``, ``_SUCCESS``), one Parquet part at a time, so no more than one part
(``rows_per_part`` rows) is ever in memory.

The numbers are not real scores, but they have the structure the statistics look at:

- every head has a fixed "sink strength" (higher in some layers than others), so a head's scores
  are correlated across sequences, and the raw scores of one row are correlated with each other
  the way the study found: a head that puts much weight on the first token (high ``awft``) has a
  small output norm (low ``ahon``), low entropy and a small first-token value vector;
- every registered score gets a column (the registry is the one list of scores): the built-in raw
  scores have the recipes below, a raw score registered in user code gets a generic positive score
  with a per-head effect, and every normalised score is derived from the raw ones by its own
  registered :class:`headstats.engine.scores.Ratio` (``Ratio.apply``, the engine's rule), so it is
  consistent with them by construction;
- models differ in shape (layers x heads, hence in row counts) and in distribution (sink strength,
  its depth profile, overall norm scale), so distances between models are not trivial. The default
  set includes a "fine-tuned" copy of one model that differs only slightly, as the study found.

Every part is drawn from its own generator seeded by (seed, model name, dataset name, part index):
a table is the same whatever order or process writes it, and an interrupted run can simply be
re-run.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from tqdm.auto import tqdm

from headstats.engine.scores import SCORES
from headstats.engine.scores import score_ids as registered_score_ids
from headstats.io import store

GENERATOR_VERSION = "1"


@dataclass(frozen=True)
class SyntheticModel:
    """Shape and distribution parameters of one synthetic model.

    ``sink`` raises the share of heads that act as attention sinks (more inactive heads),
    ``depth_tilt`` makes that share grow (> 0) or shrink (< 0) from the first to the last layer,
    and ``scale`` shifts every norm score by a factor ``exp(scale)``.
    """

    name: str
    n_layers: int = 16
    n_heads: int = 16
    n_kv_heads: int = 4
    sink: float = 0.0
    depth_tilt: float = 0.0
    scale: float = 0.0

    def __post_init__(self) -> None:
        if self.n_layers < 1 or self.n_heads < 1 or self.n_kv_heads < 1:
            raise ValueError(f"{self.name}: layers, heads and KV heads must be at least 1")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads")
        store.partition_dir(".", model=self.name)  # a valid partition value, or a clear error now

    @property
    def heads(self) -> int:
        """Rows per sequence: one per (layer, head)."""
        return self.n_layers * self.n_heads


DEFAULT_MODELS: tuple[SyntheticModel, ...] = (
    SyntheticModel("synth-a", 16, 32, 8),
    SyntheticModel("synth-a-ft", 16, 32, 8, sink=0.05, scale=0.02),  # a light fine-tune of synth-a
    SyntheticModel("synth-b", 24, 16, 4, sink=0.5, depth_tilt=1.0, scale=0.3),
    SyntheticModel("synth-c", 28, 28, 4, sink=1.0, depth_tilt=-0.5, scale=0.5),
    SyntheticModel("synth-d", 30, 9, 3, sink=-0.5, depth_tilt=2.0, scale=-0.3),
)


def synthetic_models(n: int) -> list[SyntheticModel]:
    """``n`` models: the defaults first, then more with shapes and parameters cycled from them."""
    if n < 1:
        raise ValueError(f"need at least one model, not {n}")
    out = list(DEFAULT_MODELS[:n])
    for i in range(len(out), n):
        base = DEFAULT_MODELS[i % len(DEFAULT_MODELS)]
        k = i // len(DEFAULT_MODELS)
        out.append(
            SyntheticModel(
                f"synth-{i}",
                base.n_layers,
                base.n_heads,
                base.n_kv_heads,
                sink=base.sink + 0.25 * k,
                depth_tilt=base.depth_tilt - 0.5 * k,
                scale=base.scale + 0.1 * k,
            )
        )
    return out


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def _head_effects(model: SyntheticModel, seed: int) -> dict[str, np.ndarray]:
    """Per-head constants of a model, (L, H) each: what makes a head the head it is."""
    rng = np.random.default_rng([seed, _stable_hash(model.name), 0])
    shape = (model.n_layers, model.n_heads)
    depth = np.linspace(0.0, 1.0, model.n_layers, dtype=np.float32)[:, None] if model.n_layers > 1 else np.zeros((1, 1))
    sink_logit = -1.5 + model.sink + model.depth_tilt * (depth - 0.5) + 1.2 * rng.standard_normal(shape)
    return {
        "sink_logit": sink_logit.astype(np.float32),
        "log_value": (model.scale + 0.3 * rng.standard_normal(shape)).astype(np.float32),
        "log_gain": (0.5 * rng.standard_normal(shape)).astype(np.float32),
    }


def synthetic_part(
    model: SyntheticModel, dataset: str, sample_ids: np.ndarray, *, seed: int = 0, part: int = 0
) -> pa.Table:
    """The rows of ``sample_ids`` (one block of sequences) as an Arrow table with the score schema."""
    effects = _head_effects(model, seed)
    rng = np.random.default_rng([seed, _stable_hash(model.name), _stable_hash(dataset), part + 1])
    n_seq = len(sample_ids)
    shape = (n_seq, model.n_layers, model.n_heads)

    def noise(scale: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)

    # A dataset shifts every model a little the same way, as a change of text would.
    text_shift = np.float32(0.2 * ((_stable_hash(dataset) % 1000) / 1000 - 0.5))
    n_tokens = rng.integers(16, 2049, n_seq, dtype=np.int32)
    log_n = np.log(n_tokens.astype(np.float32))[:, None, None]
    awft = 1.0 / (1.0 + np.exp(-(effects["sink_logit"] + text_shift + noise(0.6))))
    entropy = (1.0 - awft) * log_n / (1.0 + np.exp(-(0.5 + noise(0.5))))
    log_value = effects["log_value"]
    ftvvn = np.exp(log_value - 1.0 - 0.8 * awft + noise(0.2))
    avvn = np.exp(log_value + noise(0.1))
    ahon = np.exp(log_value - 1.5 * awft + noise(0.25))
    lthon = ahon * np.exp(noise(0.35))
    fhon = ahon * np.exp(effects["log_gain"] + noise(0.1))
    # Recipes for the built-in raw scores; any other registered raw score gets a generic one.
    recipes = {"awft": awft, "entropy": entropy, "ftvvn": ftvvn, "avvn": avvn, "lthon": lthon, "ahon": ahon}
    recipes["fhon"] = fhon
    raw = {}
    for sid, score in SCORES.items():
        if score.ratio is None and not score.is_random:
            raw[sid] = recipes[sid] if sid in recipes else np.exp(log_value + noise(0.3))
    raw = {k: v.astype(np.float32, copy=False) for k, v in raw.items()}
    scores = dict(raw)
    # (n_seq, layers, heads): heads on the last axis, as Ratio.apply expects (a layer mean is over heads).
    as_tensors = {k: torch.from_numpy(v) for k, v in raw.items()}
    for sid, score in SCORES.items():
        if score.ratio is not None:
            scores[sid] = score.ratio.apply(as_tensors).numpy()
    for sid, score in SCORES.items():
        if score.is_random:
            scores[sid] = rng.random(shape, dtype=np.float32)

    per_seq = model.heads
    heads = np.arange(model.n_heads, dtype=np.int16)
    columns: dict[str, np.ndarray] = {
        "sample_id": np.repeat(np.asarray(sample_ids, dtype=np.int64), per_seq),
        "layer": np.tile(np.repeat(np.arange(model.n_layers, dtype=np.int16), model.n_heads), n_seq),
        "head": np.tile(heads, n_seq * model.n_layers),
        "kv_head": np.tile(heads // (model.n_heads // model.n_kv_heads), n_seq * model.n_layers).astype(np.int16),
        "n_tokens": np.repeat(n_tokens, per_seq),
    }
    for sid in registered_score_ids():
        columns[sid] = scores[sid].reshape(-1).astype(np.float32, copy=False)
    return pa.table(columns, schema=store.score_schema(registered_score_ids()))


def _settings(model: SyntheticModel, dataset: str, n_sequences: int, rows_per_part: int, seed: int) -> dict:
    return {
        "generator_version": GENERATOR_VERSION,
        "model": asdict(model),
        "dataset": dataset,
        "n_sequences": n_sequences,
        "rows_per_part": rows_per_part,
        "seed": seed,
    }


def write_synthetic_scores(
    root: str | os.PathLike,
    models: int | Sequence[SyntheticModel] = 5,
    datasets: Sequence[str] = ("synthetic",),
    *,
    rows: int | None = None,
    n_sequences: int | None = None,
    rows_per_part: int = 1_000_000,
    seed: int = 0,
    progress: bool = True,
) -> pd.DataFrame:
    """Write a synthetic score table under ``root``; returns one row per partition written.

    Give either ``rows`` (the approximate total over all models and datasets; every model scores
    the same number of sequences, so models with more heads get more rows) or ``n_sequences``
    (sequences per model and dataset). Parts hold whole sequences, about ``rows_per_part`` rows
    each. A partition already written with the same settings is kept (so a benchmark can reuse its
    table); one written with other settings is an error, since mixing them would corrupt it.
    """
    model_list = synthetic_models(models) if isinstance(models, int) else list(models)
    datasets = list(dict.fromkeys(datasets))
    n_sequences = _sequences_per_table(model_list, datasets, rows, n_sequences, rows_per_part)
    out = store.ensure_writable(root)

    plan = []
    for model in model_list:
        per_part = max(1, rows_per_part // model.heads)
        for dataset in datasets:
            plan.append((model, dataset, per_part, math.ceil(n_sequences / per_part)))
    bar = tqdm(total=sum(p[3] for p in plan), desc="synthetic parts", unit="part", disable=not progress)
    written = []
    for model, dataset, per_part, n_parts in plan:
        partition = store.partition_dir(out, model=model.name, dataset=dataset)
        settings = _settings(model, dataset, n_sequences, rows_per_part, seed)
        done = _reusable(partition, settings)
        if not done:
            _write_partition(partition, model, settings, per_part, bar)
        else:
            bar.update(n_parts)
        written.append(
            {
                "model": model.name,
                "dataset": dataset,
                "rows": n_sequences * model.heads,
                "parts": n_parts,
                "reused": done,
                "path": str(partition),
            }
        )
    bar.close()
    return pd.DataFrame(written)


def _sequences_per_table(
    model_list: list[SyntheticModel],
    datasets: list[str],
    rows: int | None,
    n_sequences: int | None,
    rows_per_part: int,
) -> int:
    """Sequences per (model, dataset) table, from ``rows`` or ``n_sequences``; bad input refused."""
    if not model_list:
        raise ValueError("no models given")
    names = [m.name for m in model_list]
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be distinct, got {names}")
    if not datasets:
        raise ValueError("no datasets given")
    for name in datasets:
        store.partition_dir(".", dataset=name)
    if (rows is None) == (n_sequences is None):
        raise ValueError("give exactly one of rows= (total rows) or n_sequences= (sequences per model and dataset)")
    if rows is not None:
        if rows < 1:
            raise ValueError(f"rows must be at least 1, not {rows}")
        n_sequences = max(1, math.ceil(rows / (len(datasets) * sum(m.heads for m in model_list))))
    assert n_sequences is not None
    if n_sequences < 1:
        raise ValueError(f"n_sequences must be at least 1, not {n_sequences}")
    if rows_per_part < 1:
        raise ValueError(f"rows_per_part must be at least 1, not {rows_per_part}")
    return n_sequences


def _reusable(partition: Path, settings: dict) -> bool:
    """Whether ``partition`` already holds a finished table with ``settings`` (one with other
    settings, or non-synthetic files, is an error: mixing them would corrupt it)."""
    previous = store.read_provenance(partition) if partition.is_dir() else None
    if previous is not None and previous.get("synthetic") != settings:
        raise store.StoreError(
            f"{partition} already holds a table with other settings; write to a new directory or delete it"
        )
    if previous is None and partition.is_dir() and store.data_files(partition):
        raise store.StoreError(f"{partition} already holds Parquet files that are not synthetic; use another root")
    return (partition / store.DONE_FILE).is_file() and previous is not None


def _write_partition(partition: Path, model: SyntheticModel, settings: dict, per_part: int, bar) -> None:
    """One (model, dataset) table of :func:`_settings`, ``per_part`` sequences a part: its
    provenance, its parts and its completion marker."""
    dataset, n_sequences, seed = settings["dataset"], settings["n_sequences"], settings["seed"]
    provenance = store.make_provenance(
        kind="scores",
        model=model.name,
        model_path="",
        revision=f"synthetic-v{GENERATOR_VERSION}",
        architecture="synthetic",
        model_type="synthetic",
        dataset=dataset,
        dataset_source="synthetic",
        dtype="float32",
        device="none",
        prompt_format="none",
        max_length=None,
        score_ids=list(registered_score_ids()),
        seed=seed,
        synthetic=settings,
    )
    store.write_json_atomic(provenance, partition / store.PROVENANCE_FILE)
    for part in range(math.ceil(n_sequences / per_part)):
        ids = np.arange(part * per_part, min(n_sequences, (part + 1) * per_part), dtype=np.int64)
        table = synthetic_part(model, dataset, ids, seed=seed, part=part)
        store.write_parquet_atomic(table, partition / f"part-{part:05d}.parquet", provenance)
        bar.update()
    store.write_json_atomic({"n_samples": n_sequences, "synthetic": True}, partition / store.DONE_FILE)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m headstats.testing.synthetic OUT --rows N``: write a synthetic table from the shell."""
    import argparse

    parser = argparse.ArgumentParser(description=write_synthetic_scores.__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=None, help="approximate total rows (e.g. 50000000)")
    parser.add_argument("--n-sequences", type=int, default=None, help="sequences per model and dataset")
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--datasets", default="synthetic", help="comma-separated dataset names")
    parser.add_argument("--rows-per-part", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rows is None and args.n_sequences is None:
        args.rows = 1_000_000
    summary = write_synthetic_scores(
        args.out,
        args.models,
        [d for d in args.datasets.split(",") if d],
        rows=args.rows,
        n_sequences=args.n_sequences,
        rows_per_part=args.rows_per_part,
        seed=args.seed,
    )
    print(summary.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
