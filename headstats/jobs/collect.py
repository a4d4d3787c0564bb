"""Collection: model x dataset -> a Parquet score table (SPEC §6), streamed and resumable.

Scores are written as they are computed, into part files of at most ``rows_per_part`` rows that
are closed at least every ``part_seconds``. A part is written under a hidden temporary name and
renamed when complete, so an interrupted run leaves only whole parts; a re-run with the same
settings reads the sample ids already stored and scores only the rest (no duplicates, nothing lost
beyond the part that was open). ``_SUCCESS`` marks a finished table. Writing, locking and the
resume check are :mod:`headstats.io.store`'s; this module decides what to score.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.scoring import iter_score_tables
from headstats.engine.zeroing import warn_tied_scores
from headstats.io import store
from headstats.io.assets import public_path
from headstats.io.models import model_identity, model_slug
from headstats.specs import CollectSpec

log = logging.getLogger("headstats")


@dataclass
class CollectResult:
    partition: Path
    n_samples: int
    n_new: int


def position_limit(model: PreTrainedModel) -> int | None:
    """The longest sequence a model with learned absolute positions can take (GPT-2's ``n_positions``);
    None for relative (rotary, ALiBi) positions, which have no hard limit."""
    config = model.config.get_text_config()
    limit = getattr(config, "n_positions", None)
    if limit is None:
        learned = any(
            isinstance(module, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in ("wpe", "embed_positions")
            for name, module in model.named_modules()
        )
        limit = getattr(config, "max_position_embeddings", None) if learned else None
    return int(limit) if limit else None


def _cap_max_length(model: PreTrainedModel, max_length: int | None) -> int | None:
    limit = position_limit(model)
    if limit is not None and (max_length is None or max_length > limit):
        log.warning(
            "max_length %s is longer than this model's %d learned positions: sequences are truncated to %d tokens",
            max_length, limit, limit,
        )  # fmt: skip
        return limit
    return max_length


def collect_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: str,
    out: str | os.PathLike,
    *,
    spec: CollectSpec | None = None,
    **options: object,
) -> CollectResult:
    """Score ``dataset`` with ``model`` into ``out/model=<slug>/dataset=<name>/``; resume if present.

    ``limit`` documents are a seeded random sample (``seed``; MMLU stratified by subject, every
    subject once from 57 on; a larger limit extends the same sample), or the first ones in file
    order with ``sample="first"``. Tables of a task's prompts carry ``subject`` and ``question_id``.
    The options are :class:`~headstats.specs.CollectSpec`'s (``spec``, or its fields by name).
    """
    from headstats.io.tasks import collection_source, resolve_format

    spec = CollectSpec.from_kwargs(options, base=spec)  # every option checked here, before any work
    limit, sample, max_length, prompt_format = spec.limit, spec.sample, spec.max_length, spec.prompt_format
    seed, data_dir, text_column, padding_side = spec.seed, spec.data_dir, spec.text_column, spec.padding_side
    progress = spec.progress
    ids = S.resolve(spec.scores)
    store.ensure_writable(out, create=False)
    source = collection_source(dataset, data_dir=data_dir, text_column=text_column)
    available = len(source)
    if available == 0:
        raise ValueError(f"dataset {dataset!r} has no documents to score")
    identity = model_identity(model)
    max_length = _cap_max_length(model, max_length)
    fmt = resolve_format(prompt_format, tokenizer, model_name=identity["model"], model_type=identity["model_type"])
    param = next(model.parameters())
    dtype_name = str(param.dtype).removeprefix("torch.")  # float32, as --dtype spells it
    has_questions = hasattr(source, "task")
    keys = list(source.keys()) if (limit is not None or has_questions) else None
    wanted = None if limit is None else set(source.select(limit, sample=sample, seed=seed, keys=keys))
    settings = {
        "model": identity["model"], "revision": identity["revision"], "dataset": source.name,
        "dataset_identity": source.identity, "dtype": dtype_name,
        "prompt_format": prompt_format, "max_length": max_length, "score_ids": list(ids), "seed": seed,
        "sample": sample,
    }  # fmt: skip
    provenance = store.make_provenance(
        settings,
        **fmt.provenance(),
        kind="scores",
        **identity,
        dataset=source.name,
        dataset_source=public_path(dataset),
        dataset_identity=settings["dataset_identity"],
        dtype=dtype_name,
        device=str(param.device),
        max_length=max_length,
        score_ids=list(ids),
        seed=seed,
        sample=sample,
        padding_side=padding_side,
        limit=limit,
        n_documents_available=available,
        bos_token=getattr(tokenizer, "bos_token", None),
        attn_implementation="headstats",
    )
    partition = store.table_dir(out, "scores", model_slug(identity["model"]), source.name)
    store.check_resume(partition, settings, what="scores")  # before anything is created
    warn_tied_scores(model, ids, identity["model"])
    questions = {k[0]: (k[1], k[2]) for k in keys} if has_questions and keys is not None else None
    documents = source.documents() if has_questions else {}
    schema = store.score_schema(ids, question_keys=questions is not None, documents=bool(documents))
    with store.writer_lock(partition):
        store.check_resume(partition, settings, what="scores")  # again, now that no one else writes
        done = store.stored_sample_ids(partition)
        todo_ids = wanted if wanted is not None else {k for k, *_ in keys} if keys is not None else None
        todo = available - len(done) if todo_ids is None else len(todo_ids - done)

        def pending() -> Iterator[tuple[int, list[int]]]:
            for sample_id, tokens in source.iter_sequences(
                tokenizer, prompt_format=prompt_format, max_length=max_length, model_name=identity["model"],
                ids=wanted,
            ):  # fmt: skip
                if sample_id not in done:
                    yield sample_id, tokens

        writer = store.PartWriter(partition, schema, provenance, spec.rows_per_part, spec.part_seconds)
        bar = tqdm(total=max(todo, 0), desc=f"{identity['model']} on {source.name}", unit="seq", disable=not progress)
        n_new = 0
        try:
            for table in iter_score_tables(
                model,
                pending(),
                batch_size=spec.batch_size,
                score_ids=ids,
                padding_side=padding_side,
                seed=seed,
                salt=zlib.crc32(f"{identity['model']}/{source.name}".encode()),
                progress=bar,
            ):
                if questions is not None:
                    table = _with_question_keys(table, questions, documents)
                writer.write(table)
                n_new += len(set(table.column("sample_id").to_pylist()))
        except BaseException:
            writer.abort()
            raise
        finally:
            bar.close()
        writer.close()
        total = len(done) + n_new
        store.mark_done(partition, n_samples=total)
    return CollectResult(partition, total, n_new)


def _with_question_keys(
    table: pa.Table, questions: dict[int, tuple[str | None, int | None]], documents: dict[int, str]
) -> pa.Table:
    """Add the task question's ``subject`` and ``question_id`` to each row (the keys of intervention
    rows), and its source ``document`` where the task has them (the cluster of its sequences)."""
    samples = table.column("sample_id").to_pylist()
    keys = [questions[i] for i in samples]
    subject = pa.array([k[0] for k in keys], pa.string())
    question_id = pa.array([k[1] for k in keys], pa.int64())
    table = table.append_column("subject", subject).append_column("question_id", question_id)
    if documents:
        table = table.append_column("document", pa.array([documents.get(i) for i in samples], pa.string()))
    return table
