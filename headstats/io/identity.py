"""What a model is, as results record it: its identity (name, revision or content hash, architecture),
where it came from, the name results and resume keys record, its folder's content hash, and the
partition value (slug) its tables are filed under. Reads config files and sidecars only: no torch."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from headstats.io import assets
from headstats.io.fingerprint import files_digest, weight_files

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def model_identity(model: PreTrainedModel) -> dict[str, object]:
    """Name, revision / content hash and architecture, for provenance records.

    ``revision`` identifies the weights: the Hub commit the files came from, or a content hash of a
    local directory. ``requested_revision`` is the branch, tag or commit asked for (``revision=``),
    ``commit`` the Hub commit it resolved to ("" when unknown, e.g. a local directory). A checkpoint
    of ``headstats finetune`` adds ``checkpoint``: its stage, step and the stage's steps."""
    name = recorded_model(model_location(model) or type(model).__name__)
    path = Path(str(model.config.name_or_path or ""))
    commit = getattr(model.config, "_commit_hash", None) or getattr(model, "headstats_commit", None) or ""
    revision = commit
    if not revision and path.is_dir():
        revision = directory_fingerprint(path)
    identity = {
        "model": str(name),
        "model_path": assets.portable_name(str(model.config.name_or_path or "")),
        "revision": str(revision),
        "requested_revision": str(getattr(model, "headstats_revision", None) or ""),
        "commit": str(commit),
        "architecture": type(model).__name__,
        "model_type": str(model.config.model_type),
    }
    info = checkpoint_info(path)
    if info:
        identity["checkpoint"] = info
    return identity


def model_location(model: PreTrainedModel) -> str:
    """Where a loaded model came from, as it was named to :func:`~headstats.io.models.load_model` (an
    embedded name, a Hub id, a folder); what partitions are named after (:func:`model_slug`)."""
    return str(getattr(model, "headstats_name", None) or model.config.name_or_path or "")


def recorded_model(name: str) -> str:
    """A model's name as results and resume keys record it: an embedded name or Hub id as given, and a
    local folder as ``<local>/<folder name>`` wherever it lies (home, cache or elsewhere; given
    absolute or relative). The folder's content hash, recorded beside it as ``revision``, identifies
    the weights, so the record names no local path and a folder moved elsewhere keeps its key. A name
    recorded by an earlier version (the folder's path as given) reads the same way."""
    text = str(name)
    if not text or text in assets.EMBEDDED_MODELS or text.startswith(assets.ELSEWHERE + "/"):
        return text
    local = text.startswith(("/", "~", ".", assets.CACHE_VARIABLE))
    if not local:  # a Hub id, or a relative folder that is here
        try:
            local = Path(text).expanduser().is_dir()
        except OSError:
            local = False
    if not local:
        return text
    folder = assets.local_path(text).absolute()
    return f"{assets.ELSEWHERE}/{folder.name or folder.resolve().name}"


def model_from_table(model: PreTrainedModel, table: Path) -> dict[str, str]:
    """``{"model_from_table": PATH}``: where a model in a local folder outside the cache and home lies,
    relative to the folder of the table that records it (a report finds a fine-tuning chain's
    recipe and metrics beside its checkpoints there); empty for any other model, whose
    ``model_path`` locates it."""
    folder = Path(str(model.config.name_or_path or "")).expanduser()
    if not folder.is_dir() or not assets.portable_name(folder.absolute()).startswith(assets.ELSEWHERE + "/"):
        return {}
    return {"model_from_table": Path(os.path.relpath(folder.absolute(), Path(table).absolute())).as_posix()}


def checkpoint_info(path: Path) -> dict:
    """What ``headstats finetune`` wrote beside a checkpoint (stage, step, the stage's steps, chain);
    empty for any other folder. A damaged sidecar only loses the stage label."""
    sidecar = path / "HEADSTATS_CHECKPOINT.json"
    try:
        info = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def trainer_step(path: Path) -> int | None:
    """The ``global_step`` a Trainer checkpoint folder records (``trainer_state.json``), or None."""
    folder = Path(path).expanduser()
    state = folder / "trainer_state.json"
    try:
        step = json.loads(state.read_text()).get("global_step") if str(path) and state.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


# The ``transformers_version`` a config.json carries names the library that wrote the file, not the
# model: transformers 5.25 converting the same GGUF weights as 5.24 changed only that line, and with it
# the identity of every committed run. The fingerprint reads the stamp as this fixed value, the version
# that wrote the configs of every committed result, so that their identities stay what they were.
CONFIG_WRITER_STAMP = "5.24.0"


def _config_bytes(config: Path) -> bytes:
    """config.json as save_pretrained writes it (sorted keys, indent 2), its writer's stamp read as
    :data:`CONFIG_WRITER_STAMP`; a file that is not a JSON object counts as its bytes."""
    raw = config.read_bytes()
    try:
        content = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(content, dict):
        return raw
    if "transformers_version" in content:
        content["transformers_version"] = CONFIG_WRITER_STAMP
    return (json.dumps(content, indent=2, sort_keys=True) + "\n").encode()


def directory_fingerprint(path: Path) -> str:
    """A content hash of a checkpoint directory: config plus the bytes of every weight file, so
    weights saved again in place get another identity (each file's hash is cached by path, size
    and times in :mod:`headstats.io.fingerprint`, so reruns cost nothing). The version of
    transformers that wrote config.json is not part of it (:data:`CONFIG_WRITER_STAMP`)."""
    digest = hashlib.sha256()
    config = path / "config.json"
    if config.is_file():
        digest.update(_config_bytes(config))
    digest.update(files_digest((f.name, f) for f in weight_files(path)).encode())
    source = path / "HEADSTATS_SOURCE.json"
    if source.is_file():
        digest.update(json.dumps(json.loads(source.read_text()), sort_keys=True).encode())
    return "sha256:" + digest.hexdigest()[:16]


def model_slug(name: str) -> str:
    """A file-system safe partition value for a model name or path: a local folder's name, or for a
    checkpoint of ``headstats finetune`` its chain, stage and step (``gemma3-270m-<hash>-sft-15``:
    every stage has a ``step-00015``, so the folder name alone would mix them)."""
    base = name.rstrip("/").removeprefix(assets.ELSEWHERE + "/")
    if os.path.sep in base and Path(base).expanduser().exists():
        base = Path(base).expanduser().name
        info, folder = checkpoint_info(Path(name).expanduser()), Path(name).expanduser().resolve()
        if info.get("stage") == "base":  # OUT/<chain>/base
            base = f"{folder.parent.name}-base"
        elif info.get("stage") and info.get("step") is not None:  # OUT/<chain>/<stage>/step-N
            base = f"{info.get('chain') or folder.parent.parent.name}-{info['stage']}-{int(info['step'])}"
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in base.replace("/", "--"))
