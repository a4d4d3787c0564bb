"""What a comparison's models and tables are, checked before anything is computed.

A comparison of a model with itself is a check of the method, never a finding: two of its models
that are one folder, or the same weights in one dtype, are refused unless the user asks for a
self-comparison (``--self-comparison``, ``self_comparison = true``). A name's ``@dtype`` suffix
(``smollm2-135m@bfloat16``) is a dtype only when no folder of that exact name exists; when both
readings name a model, the name is refused as ambiguous. Every score table a comparison reads is
found by the model it should hold (:func:`stored_slug`, :func:`dataset_partition`) and checked against
that model, its dtype and the collection settings, from its own records (:func:`check_table`,
:func:`check_same_weights`), and refused by name when it holds another's.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from headstats.io import store
from headstats.options import narrow
from headstats.specs import CollectSpec, CompareSpec

DTYPE_SUFFIXES = ("float32", "bfloat16", "float16")
COMMIT = re.compile(r"[0-9a-f]{40}")  # a Hub commit: the weights' identity where no content hash is recorded
SELF = (
    "every distance would be noise, not a finding: give another model, or --self-comparison "
    "(self_comparison = true in a study file) to compare a model with itself on purpose"
)


def split_dtype(name: str) -> tuple[str, str | None]:
    """``"smollm2-135m@bfloat16"`` -> (``"smollm2-135m"``, ``"bfloat16"``): a model compared with itself
    in another dtype (the numerical-noise yardstick); a name without such a suffix, or a folder of that
    exact name, is itself. A name that is both a folder and another model in a dtype is refused."""
    from headstats.io.assets import EMBEDDED_MODELS

    base, sep, suffix = name.rpartition("@")
    if not (sep and base and suffix in DTYPE_SUFFIXES):
        return name, None
    if Path(name).expanduser().exists():
        if base in EMBEDDED_MODELS or Path(base).expanduser().exists():
            raise ValueError(
                f"{name!r} names both the folder {name} and {base} in {suffix}: give {name}/ (with the slash) for "
                f"the folder, or rename the folder to compare {base} in {suffix}"
            )
        return name, None
    return base, suffix


def dtype_label(name: str, spec: CompareSpec) -> str:
    """The dtype ``name`` is compared in: its ``@dtype`` suffix, else the comparison's ``dtype``, else
    the device's default (:func:`~headstats.io.models.resolve_dtype`)."""
    suffix = split_dtype(name)[1]
    if suffix or (spec.dtype and spec.dtype != "auto"):
        return (
            str(suffix or spec.dtype).replace("bf16", "bfloat16").replace("fp32", "float32").replace("fp16", "float16")
        )
    if spec.dtype == "auto":
        return "auto"
    import torch

    from headstats.io.models import default_device, resolve_dtype

    device = torch.device(spec.device) if spec.device else default_device()
    return str(resolve_dtype(None, device)).removeprefix("torch.")


def _weights(path: str) -> str:
    """How two models are told apart before any loads: a local folder by the content hash of its weight
    files alone (a copy saved with another config is the same weights), a Hub id by its name."""
    from headstats.io.fingerprint import files_digest, weight_files
    from headstats.io.identity import directory_fingerprint

    folder = Path(path).expanduser()
    if not folder.is_dir():
        return path
    files = weight_files(folder.resolve())
    return files_digest((f.name, f) for f in files)[:23] if files else directory_fingerprint(folder.resolve())


def groups_of(spec: CompareSpec) -> dict[str, str]:
    """Each model's group: a compared model is its own, a replicate its replicated model's."""
    group = {name: name for name in spec.models}
    for entry in spec.replicates:
        model, sep, replicate = entry.partition("=")
        group.setdefault(replicate, model if sep else spec.models[0])
    return group


def identical(spec: CompareSpec, name: str, other: str, what: str) -> None:
    """Two of a comparison's models are ``what`` (one folder, the same weights): refused when one is the
    reference or both belong to one model's replicates (every distance between them would be noise);
    otherwise, as a chain stage that did not change its weights, both are compared and a note says so."""
    group = groups_of(spec)
    reference = spec.models[0]
    if reference in (name, other) or group.get(name, name) == group.get(other, other):
        raise ValueError(f"{name!r} is {other!r} itself ({what}): {SELF}")
    print(
        f"note: {name!r} is {other!r} itself ({what}): its distances from {reference!r} repeat {other!r}'s",
        file=sys.stderr,
    )


def check_identities(spec: CompareSpec, names: list[str], paths: list[str]) -> None:
    """Before any collection: neither the reference nor one model's replicates are one folder or the same
    weights in one dtype as another of the comparison's models, unless ``spec.self_comparison``."""
    check_given_once(spec, names)
    if spec.self_comparison:
        return
    seen: dict[tuple[str, str], str] = {}
    folders: dict[tuple[str, str], str] = {}
    for name, path in zip(names, paths, strict=True):
        label = dtype_label(name, spec)
        where = (os.path.realpath(Path(path).expanduser()), label)
        if where in folders:
            identical(spec, name, folders[where], f"the same folder, in {label}")
            continue
        folders[where] = name
        weights = _weights(path)
        if (weights, label) in seen:
            identical(spec, name, seen[(weights, label)], f"the same weights, {weights}, in {label}")
            continue
        seen[(weights, label)] = name


def expected_names(name: str) -> set[str]:
    """The names a table of the model ``name`` may record as its ``model``: as results record it now
    (:func:`~headstats.io.identity.recorded_model`), or a folder by its name alone (``<local>/<name>``),
    the folder gone or not."""
    from headstats.io.assets import ELSEWHERE
    from headstats.io.identity import recorded_model

    return {recorded_model(name), name, f"{ELSEWHERE}/{Path(name.rstrip('/')).name}"}


def check_table(
    spec: CompareSpec, name: str, partition: Path, record: Mapping[str, object], *, what: str = "compared"
) -> None:
    """Refuse a score table under ``partition`` that its records say holds another model than ``name``,
    another dtype than the comparison asks of it, or scores collected with other settings (``what``:
    compared, or format-change, whose prompt format is the yardstick's own)."""
    from headstats.io.identity import recorded_model
    from headstats.jobs.collect_plan import recorded_changes

    fix = "give another results folder, or move that table away and collect it again"
    held = record.get("model")
    if isinstance(held, str) and recorded_model(held) not in expected_names(name) and held not in expected_names(name):
        raise ValueError(f"{partition} holds the scores of {held}, not of {name} (its records name it): {fix}")
    dtype = record.get("dtype")
    wanted = split_dtype(name)[1] or (spec.dtype if spec.dtype not in (None, "auto") else None)
    if wanted and isinstance(dtype, str) and dtype != dtype_label(name, spec):
        raise ValueError(f"{partition} holds {name} in {dtype}, the comparison asks for {wanted}: {fix}")
    collect = narrow(spec, CollectSpec)
    changed = [
        c
        for c in recorded_changes(record, collect, "in the comparison")
        if what == "compared" or not c.startswith("prompt_format:")
    ]
    if changed:
        raise ValueError(f"{partition} was collected with other settings ({'; '.join(changed)}): {fix}")


def check_given_once(spec: CompareSpec, given: list[str]) -> None:
    """Refuse a model given twice (``given``: the compared models and the replicates as the user named
    them; the reference as a compared model or as its own replicate), unless ``spec.self_comparison``."""
    for i, name in enumerate(given):
        if name in given[:i] and not spec.self_comparison:
            raise ValueError(f"{name!r} is {name!r} itself (given twice): {SELF}")


def check_same_weights(spec: CompareSpec, records: Mapping[str, Mapping[str, object]]) -> None:
    """Refuse, from the tables' records alone, the reference or one model's replicates whose tables hold
    the same weights in one dtype as another model's (a table copied over another, a model given
    twice), unless ``spec.self_comparison``; two stages of a chain may hold the same weights."""
    if spec.self_comparison:
        return
    seen: dict[tuple[str, str], str] = {}
    for name, record in records.items():
        revision, dtype = record.get("revision"), record.get("dtype")
        if not isinstance(revision, str) or not (revision.startswith("sha256:") or COMMIT.fullmatch(revision)):
            continue  # no identity of weights (a synthetic table's generator version)
        key = (revision, str(dtype))
        if key not in seen:
            seen[key] = name
            continue
        group, reference = groups_of(spec), spec.models[0]
        if reference in (name, seen[key]) or group.get(name, name) == group.get(seen[key], seen[key]):
            raise ValueError(
                f"the score tables of {seen[key]!r} and {name!r} hold the same weights ({revision}, in {dtype}): "
                f"{SELF}; or collect {name!r} again into another results folder if its table was replaced"
            )


def _same_folder(partition: Path, provenance: dict, folder: Path) -> bool:
    """Whether the table in ``partition`` was collected from the model folder ``folder``: where it lay
    relative to the table (``model_from_table``), else its recorded path (``model_path``)."""
    from headstats.io.assets import local_path

    here = provenance.get("model_from_table")
    recorded = partition / str(here) if here else local_path(str(provenance.get("model_path") or ""))
    return bool(here or provenance.get("model_path")) and os.path.normpath(recorded.absolute()) == os.path.normpath(
        folder.absolute()
    )


def stored_slug(name: str, tables: Path) -> str:
    """The table name under ``tables`` of the model the user named ``name``, as :func:`collect_all`
    wrote it (:func:`~headstats.io.identity.model_slug`); for a folder that is no longer there, the table
    whose provenance records that folder (the caller refuses a name whose table is not there)."""
    from headstats.io.identity import model_slug

    slug = model_slug(name)
    if (tables / f"model={slug}").is_dir() or split_dtype(name)[1]:
        return slug
    folder = Path(name).expanduser()
    for model_dir in sorted(tables.glob("model=*")):
        for partition in sorted(model_dir.glob("dataset=*")):
            if _same_folder(partition, store.read_provenance(partition) or {}, folder):
                return model_dir.name.split("=", 1)[1]
    return slug


def dataset_partition(model_dir: Path, dataset: str) -> Path | None:
    """The partition of ``model_dir`` that holds ``dataset`` (a bundled name or a file, as given to
    collect): the one named so, else the one whose provenance records it as its source."""
    from headstats.io.assets import portable_name

    if (model_dir / f"dataset={dataset}").is_dir():
        return model_dir / f"dataset={dataset}"
    for partition in sorted(model_dir.glob("dataset=*")):
        if (store.read_provenance(partition) or {}).get("dataset_source") == portable_name(dataset):
            return partition
    return None


__all__ = [
    "DTYPE_SUFFIXES",
    "check_given_once",
    "check_identities",
    "check_same_weights",
    "check_table",
    "dataset_partition",
    "dtype_label",
    "expected_names",
    "split_dtype",
    "stored_slug",
]
