"""Collection: model x dataset -> a Parquet score table (docs/design.md#table-layout), streamed and resumable.

Scores are written as they are computed, into part files of at most ``rows_per_part`` rows that
are closed at least every ``part_seconds``. A part is written under a hidden temporary name and
renamed when complete; a run that stops (an interrupt, SIGTERM, an error) closes the open part
with the batches written so far, so it leaves only whole parts of whole batches, and a re-run with
the same settings reads the sample ids already stored and scores only the rest (no duplicates,
nothing lost but the batch that was running). ``_SUCCESS`` marks a finished table. Writing, locking and the
resume check are :mod:`headstats.io.store`'s; this module decides what to score.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.scoring import iter_score_tables
from headstats.engine.zeroing import warn_tied_scores
from headstats.io import speeds, store
from headstats.io.assets import portable_name
from headstats.io.identity import model_from_table, model_identity, model_location, trainer_step
from headstats.io.model_paths import resolve_model_path
from headstats.io.models import load_model, machine_info
from headstats.io.tasks import collection_source
from headstats.jobs.collect_plan import (  # noqa: F401  (the planner's names, where callers have found them)
    COLLECT_AXES,
    RECORDED_NAMES,
    RESOLVED,
    Collection,
    PlannedModel,
    collect_key,
    collected_scores,
    collection_sample,
    plan_collection_for,
    planned_sample,
    recorded_changes,
    texts_left,
)
from headstats.jobs.resume import jsonable
from headstats.specs import CollectSpec, LoadOptions

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


def planned_model(model: PreTrainedModel, identity: Mapping[str, object] | None = None) -> PlannedModel:
    """What a collection's plan reads of a loaded model (or of its meta-device skeleton); ``identity``:
    its :func:`~headstats.io.identity.model_identity`, when the caller has it."""
    identity = identity or model_identity(model)
    return PlannedModel(
        str(identity["model"]),
        str(identity["revision"]),
        str(identity["model_type"]),
        model_location(model),
        str(next(model.parameters()).dtype).removeprefix("torch."),  # float32, as --dtype spells it
        position_limit(model),
    )


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
    spec = CollectSpec.from_kwargs(options, base=spec)  # every option checked here, before any work
    run = plan_collection(model, tokenizer, dataset, out, spec)
    warn_tied_scores(model, run.ids, run.model_name)
    with store.writer_lock(run.partition):
        run.check()  # again, now that no one else writes
        done = store.stored_sample_ids(run.partition)
        lengths: list[int] = []
        started = time.perf_counter()
        n_new = write_scores(run, model, tokenizer, done, lengths)
        kernel = "explicit" if S.reads_weights(run.ids) else "fused"
        name = model_location(model) or run.model_name
        speeds.record_pass(model, name, "collect", kernel, lengths, spec.batch_size, time.perf_counter() - started)
        total = len(done) + n_new
        store.mark_done(run.partition, n_samples=total)
    return CollectResult(run.partition, total, n_new)


def check_collection(names: Sequence[str], datasets: Sequence[str], out: str | os.PathLike, spec: CollectSpec) -> None:
    """Refuse, before any model loads, a collection of ``datasets`` by the models ``names`` into ``out``
    that could not finish: an output folder that cannot be written, no dataset, a model that cannot be
    found, a dataset without documents."""
    store.ensure_writable(out, create=False)  # created with the first table: a refused run leaves nothing
    if not datasets:
        raise ValueError("no dataset given: give a built-in one (headstats list datasets) or a file")
    for name in names:  # an unknown model fails before any other loads
        resolve_model_path(name)
    for dataset in datasets:  # a bad dataset fails before any time is spent on a model
        if len(collection_source(dataset, data_dir=spec.data_dir, text_column=spec.text_column)) == 0:
            raise ValueError(f"dataset {dataset!r} has no documents to score")


def collect_models(
    names: Sequence[str], datasets: Sequence[str], out: str | os.PathLike, *, spec: CollectSpec, load: LoadOptions
) -> Iterator[CollectResult]:
    """Score every dataset with each model in turn, in this process and one model in memory at a time,
    yielding each table's result as it is finished (``headstats collect``). Everything is checked
    before the first model loads (:func:`check_collection`);
    :func:`headstats.jobs.grid.collect_grid` runs the same pairs as jobs of a grid."""
    check_collection(names, datasets, out, spec)
    for name in names:
        model, tokenizer = load_model(name, **load.kwargs())
        for dataset in datasets:
            yield collect_scores(model, tokenizer, dataset, out, spec=spec)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def plan_collection(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dataset: str, out: str | os.PathLike, spec: CollectSpec
) -> Collection:
    """The collection's source, sample, resume key (:func:`~headstats.jobs.collect_plan.plan_collection_for`)
    and the provenance its run records; refuses a partition that holds scores of other settings."""
    identity = model_identity(model)
    run = plan_collection_for(planned_model(model, identity), tokenizer, dataset, out, spec)
    identity |= model_from_table(model, run.partition)
    param = next(model.parameters())
    facts = dict(
        kind="scores",
        limit=spec.limit,
        dataset_source=portable_name(dataset),
        device=str(param.device),
        n_documents_available=len(run.source),
        bos_token=getattr(tokenizer, "bos_token", None),
        attn_implementation="headstats",
        options=jsonable(spec.kwargs()),
        n_parameters=sum(p.numel() for p in model.parameters()),
        machine=machine_info(param.device),  # what the parts' times were measured on (io/speeds.py)
        **({"trainer_step": step} if (step := trainer_step(Path(str(model.config.name_or_path or "")))) else {}),
    )
    settings = run.settings
    run.provenance = store.make_provenance(settings, **{**run.format.provenance(), **identity, **settings, **facts})
    return run


def write_scores(
    run: Collection,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    done: set[int],
    lengths: list[int] | None = None,
) -> int:
    """Score the documents not ``done`` into new part files; returns how many were scored. ``lengths``
    gets the token count of each document scored."""
    spec, source = run.spec, run.source
    has_questions = hasattr(source, "task")
    questions = {k[0]: (k[1], k[2]) for k in run.keys} if has_questions else None
    documents = source.documents() if has_questions else {}
    schema = store.score_schema(run.ids, question_keys=questions is not None, documents=bool(documents))
    lengths = [] if lengths is None else lengths

    def todo() -> Iterator[tuple[int, list[int]]]:
        for sample_id, tokens in run.sequences(tokenizer):
            if sample_id not in done:
                lengths.append(len(tokens))
                yield sample_id, tokens

    pending = todo()
    writer = store.PartWriter(run.partition, schema, run.provenance, spec.rows_per_part, spec.part_seconds)
    # the partition's model name, which tells apart local folders named alike (sft/step-40, grpo/step-40)
    desc = f"{run.partition.parent.name.removeprefix('model=')} on {source.name}"
    bar = tqdm(total=max(run.todo(done), 0), desc=desc, unit="seq", disable=not spec.progress)
    n_new = 0
    try:
        for table in iter_score_tables(
            model,
            pending,
            batch_size=spec.batch_size,
            score_ids=list(run.ids),
            padding_side=spec.padding_side,
            seed=spec.seed,
            salt=zlib.crc32(f"{run.model_name}/{source.name}".encode()),
            progress=bar,
        ):
            if questions is not None:
                table = _with_question_keys(table, questions, documents)
            writer.write(table)
            n_batch = len(set(table.column("sample_id").to_pylist()))
            n_new += n_batch
            log.debug("%s: a batch of %d sequences written (%d new in all)", desc, n_batch, n_new)
    except BaseException:  # an interrupt, SIGTERM or error: the batches written so far stay
        writer.keep()
        raise
    finally:
        bar.close()
    writer.close()
    return n_new


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
