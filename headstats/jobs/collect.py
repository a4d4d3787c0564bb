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

import json
import logging
import os
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.scoring import iter_score_tables
from headstats.engine.zeroing import warn_tied_scores
from headstats.io import speeds, store
from headstats.io.assets import portable_name
from headstats.io.identity import model_from_table, model_identity, model_location, model_slug, trainer_step
from headstats.io.models import load_model, machine_info, resolve_model_path
from headstats.io.tasks import collection_source, resolve_format
from headstats.jobs.resume import check_key, jsonable, recorded_key, settings_key
from headstats.options import narrow
from headstats.specs import CollectSpec, LoadOptions, Sampling

log = logging.getLogger("headstats")

# Options that name which documents a table holds rather than how each is scored: a larger limit
# extends the same sample, so the table grows (:mod:`headstats.jobs.resume`).
COLLECT_AXES = ("limit",)
# Entries that score tables' records spell otherwise: their score ids were recorded as score_ids.
RECORDED_NAMES = {"score_ids": "scores"}


@dataclass
class CollectResult:
    partition: Path
    n_samples: int
    n_new: int


def collect_key(spec: CollectSpec, **inputs: object) -> dict[str, object]:
    """What decides a score table's rows: the collection's settings (its axis, the limit, left out)
    with the model, its weights' hash, the dataset by content, the dtype, the score ids and the
    truncation as resolved (``inputs``)."""
    return settings_key(spec, COLLECT_AXES, **inputs)


# Entries of a score table's settings that a collection resolves from its model and data rather than
# takes from its options (recorded_changes compares the others).
RESOLVED = ("model", "revision", "dataset", "dataset_identity", "dtype", "scores", "max_length")


def recorded_changes(provenance: Mapping[str, object], spec: CollectSpec, here: str = "here") -> list[str]:
    """The collection options in which a score table (its ``provenance``) was collected otherwise than
    ``spec`` asks, each named ``seed: 1 there, 48 here`` (``here``: how the message names ``spec``'s
    side); empty when none, or when the table records no settings (another tool wrote it). Entries
    resolved from the model and data (:data:`RESOLVED`) are left out, except a truncation longer than
    ``spec``'s (a model caps it, never lengthens it)."""
    record = provenance.get("settings")
    if not isinstance(record, Mapping):
        return []
    key = collect_key(spec)
    stored = recorded_key(record, collect_key(CollectSpec()), RECORDED_NAMES)
    changed = [name for name in sorted(key) if name not in RESOLVED and stored.get(name) != key.get(name)]
    there = stored.get("max_length")
    if isinstance(there, int) and spec.max_length is not None and there > spec.max_length:
        changed.append("max_length")
    return [f"{name}: {json.dumps(stored.get(name))} there, {json.dumps(key.get(name))} {here}" for name in changed]


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
            max_length,
            limit,
            limit,
        )
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


@dataclass
class Collection:
    """One collection, checked against what its partition holds before anything is scored."""

    spec: CollectSpec
    source: Any  # a collection source (headstats.io.tasks)
    ids: tuple[str, ...]
    model_name: str
    max_length: int | None
    keys: list  # the source's (sample id, subject, question id) keys
    wanted: set[int]  # the sample ids the collection's sampling takes
    partition: Path
    settings: dict[str, object]
    defaults: dict[str, object]
    provenance: dict[str, object]

    def check(self) -> None:
        check_key(self.partition, self.settings, self.defaults, what="scores", renamed=RECORDED_NAMES)

    def sequences(self, tokenizer: PreTrainedTokenizerBase) -> Iterator[tuple[int, list[int]]]:
        """(sample id, token ids) of every document the collection scores, in file order: the one
        source of its work, for the run and for the dry run."""
        return self.source.iter_sequences(
            tokenizer,
            prompt_format=self.spec.prompt_format,
            max_length=self.max_length,
            model_name=self.model_name,
            ids=self.wanted,
        )

    def todo(self, done: set[int]) -> int:
        """Documents still to score."""
        return len(self.wanted - done)


def plan_collection(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dataset: str, out: str | os.PathLike, spec: CollectSpec
) -> Collection:
    """The collection's source, sample, resume key and provenance; refuses a partition that holds
    scores of other settings."""
    store.ensure_writable(out, create=False)
    source = collection_source(dataset, data_dir=spec.data_dir, text_column=spec.text_column)
    if len(source) == 0:
        raise ValueError(f"dataset {dataset!r} has no documents to score")
    identity = model_identity(model)
    partition = store.table_dir(out, "scores", model_slug(model_location(model) or identity["model"]), source.name)
    identity |= model_from_table(model, partition)
    ids = collected_scores(spec.scores, partition)
    max_length = _cap_max_length(model, spec.max_length)
    fmt = resolve_format(spec.prompt_format, tokenizer, model_name=identity["model"], model_type=identity["model_type"])
    param = next(model.parameters())
    keys, wanted = planned_sample(source, spec)
    inputs = dict(
        model=identity["model"],
        revision=identity["revision"],
        dataset=source.name,
        dataset_identity=source.identity,
        dtype=str(param.dtype).removeprefix("torch."),  # float32, as --dtype spells it
        max_length=max_length,
        scores=list(ids),
    )
    settings = collect_key(spec, **inputs)
    facts = dict(
        kind="scores",
        limit=spec.limit,
        dataset_source=portable_name(dataset),
        device=str(param.device),
        n_documents_available=len(source),
        bos_token=getattr(tokenizer, "bos_token", None),
        attn_implementation="headstats",
        options=jsonable(spec.kwargs()),
        n_parameters=sum(p.numel() for p in model.parameters()),
        machine=machine_info(param.device),  # what the parts' times were measured on (io/speeds.py)
        **({"trainer_step": step} if (step := trainer_step(Path(str(model.config.name_or_path or "")))) else {}),
    )
    provenance = store.make_provenance(settings, **{**fmt.provenance(), **identity, **settings, **facts})
    defaults = collect_key(CollectSpec(), **inputs)
    run = Collection(
        spec, source, ids, identity["model"], max_length, keys, wanted, partition, settings, defaults, provenance
    )
    run.check()  # before anything is created
    return run


def planned_sample(source, spec: CollectSpec) -> tuple[list, set[int]]:
    """The source's (sample id, subject, question id) keys and the sample ids the collection's
    :class:`~headstats.specs.Sampling` takes of them; no model needed."""
    keys = list(source.keys())
    return keys, set(source.select(narrow(spec, Sampling), seed=spec.seed, keys=keys))


def collection_sample(dataset: str, spec: CollectSpec) -> tuple[str, set[int]]:
    """The name of ``dataset``'s source (its partitions' ``dataset=``) and the sample ids a collection
    under ``spec`` scores, as :func:`plan_collection` draws them, without a model."""
    source = collection_source(dataset, data_dir=spec.data_dir, text_column=spec.text_column)
    return source.name, planned_sample(source, spec)[1]


def texts_left(out: str | os.PathLike, name: str, sample: tuple[str, set[int]]) -> tuple[int, int]:
    """(documents left, documents) of the collection of ``sample`` (:func:`collection_sample`) by the
    model ``name`` (as given to :func:`~headstats.io.models.load_model`) into ``out``: the sample ids
    its partition lacks."""
    dataset, wanted = sample
    partition = store.table_dir(out, "scores", model_slug(name), dataset)
    done = store.stored_sample_ids(partition) if store.has_data(partition) else set()
    return len(wanted - done), len(wanted)


def collected_scores(scores: tuple[str, ...] | None, partition: Path) -> tuple[str, ...]:
    """The score ids a collection computes: ``scores``; or, for None (every score), the scores recorded
    in the partition it extends, so that a score registered since (in user code too) never locks an
    existing collection out; every registered score for a new partition."""
    if scores is not None or not store.has_data(partition):
        return S.resolve(scores)
    record = (store.read_provenance(partition) or {}).get("settings")
    recorded = recorded_key(record, {}, RECORDED_NAMES).get("scores") if isinstance(record, dict) else None
    if not isinstance(recorded, list):
        return S.resolve(None)  # the resume check explains what the partition holds
    missing = [sid for sid in recorded if sid not in S.SCORES]
    if missing:
        raise ValueError(
            f"{str(partition)!r} holds the score(s) {', '.join(missing)}, which are not registered now: register "
            "them (headstats.register_score) before extending it, or collect into another --out"
        )
    new = [sid for sid in S.SCORES if sid not in recorded]
    if new:
        log.info(
            "%s holds %d scores; extending it with those (not %s, registered since: collect into another --out "
            "for them)",
            partition,
            len(recorded),
            ", ".join(new),
        )
    return tuple(recorded)


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
