"""What a collection will score, planned from its model's name, revision, dtype and position limit
and its tokenizer, with no model loaded and no torch: the source and sample, the partition, the score
ids, the truncation and the resume key (checked against what the partition holds). The one planner of
a collection: :func:`headstats.jobs.collect.plan_collection` plans a loaded model's with it (and adds
the provenance a run records), and a dry run plans one from the model's files alone."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headstats.engine import scores as S
from headstats.io import store
from headstats.io.identity import model_slug
from headstats.io.tasks import PromptFormat
from headstats.jobs.resume import check_key, recorded_key, settings_key
from headstats.options import narrow
from headstats.specs import CollectSpec, Sampling

log = logging.getLogger("headstats")

# Options that name which documents a table holds rather than how each is scored: a larger limit
# extends the same sample, so the table grows (:mod:`headstats.jobs.resume`).
COLLECT_AXES = ("limit",)
# Entries that score tables' records spell otherwise: their score ids were recorded as score_ids.
RECORDED_NAMES = {"score_ids": "scores"}


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


@dataclass(frozen=True)
class PlannedModel:
    """What a collection's plan reads of its model, loaded or read from its files."""

    name: str  # as results record it (headstats.io.identity.recorded_model)
    revision: str  # the weights' Hub commit or content hash
    model_type: str
    location: str  # as it was named to load_model: what its partition is named after
    dtype: str  # float32, as --dtype spells it
    position_limit: int | None  # the longest sequence learned absolute positions take; None: relative ones


def capped_max_length(limit: int | None, max_length: int | None) -> int | None:
    """``max_length`` cut to a model's learned positions (``limit``), with a warning when it is."""
    if limit is not None and (max_length is None or max_length > limit):
        log.warning(
            "max_length %s is longer than this model's %d learned positions: sequences are truncated to %d tokens",
            max_length,
            limit,
            limit,
        )
        return limit
    return max_length


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
    format: PromptFormat  # the prompt format resolved for the model
    provenance: dict[str, object] = field(default_factory=dict)  # what a run records (its model loaded)

    def check(self) -> None:
        check_key(self.partition, self.settings, self.defaults, what="scores", renamed=RECORDED_NAMES)

    def sequences(self, tokenizer) -> Iterator[tuple[int, list[int]]]:
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


def plan_collection_for(
    model: PlannedModel, tokenizer, dataset: str, out: str | os.PathLike, spec: CollectSpec
) -> Collection:
    """The collection of ``dataset`` by ``model`` into ``out``: its source, sample, score ids, truncation
    and resume key, without the provenance a run records; refuses a partition that holds scores of
    other settings."""
    from headstats.io.tasks import collection_source, resolve_format

    store.ensure_writable(out, create=False)
    source = collection_source(dataset, data_dir=spec.data_dir, text_column=spec.text_column)
    if len(source) == 0:
        raise ValueError(f"dataset {dataset!r} has no documents to score")
    partition = store.table_dir(out, "scores", model_slug(model.location or model.name), source.name)
    ids = collected_scores(spec.scores, partition)
    max_length = capped_max_length(model.position_limit, spec.max_length)
    fmt = resolve_format(spec.prompt_format, tokenizer, model_name=model.name, model_type=model.model_type)
    keys, wanted = planned_sample(source, spec)
    inputs = dict(
        model=model.name,
        revision=model.revision,
        dataset=source.name,
        dataset_identity=source.identity,
        dtype=model.dtype,
        max_length=max_length,
        scores=list(ids),
    )
    settings = collect_key(spec, **inputs)
    defaults = collect_key(CollectSpec(), **inputs)
    run = Collection(spec, source, ids, model.name, max_length, keys, wanted, partition, settings, defaults, fmt)
    run.check()  # before anything is created
    return run


def planned_sample(source, spec: CollectSpec) -> tuple[list, set[int]]:
    """The source's (sample id, subject, question id) keys and the sample ids the collection's
    :class:`~headstats.specs.Sampling` takes of them; no model needed."""
    keys = list(source.keys())
    return keys, set(source.select(narrow(spec, Sampling), seed=spec.seed, keys=keys))


def collection_sample(dataset: str, spec: CollectSpec) -> tuple[str, set[int]]:
    """The name of ``dataset``'s source (its partitions' ``dataset=``) and the sample ids a collection
    under ``spec`` scores, as :func:`plan_collection_for` draws them, without a model."""
    from headstats.io.tasks import collection_source

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


__all__ = [
    "COLLECT_AXES",
    "RECORDED_NAMES",
    "RESOLVED",
    "Collection",
    "PlannedModel",
    "capped_max_length",
    "collect_key",
    "collected_scores",
    "collection_sample",
    "plan_collection_for",
    "planned_sample",
    "recorded_changes",
    "texts_left",
]
