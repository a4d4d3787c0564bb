"""Where a model is and what it is called, without loading anything (no torch, no transformers): an
embedded name, a local folder or a Hub id resolved (:func:`resolve_model_path`), the name results
record for it (:func:`recorded_model`), its partition slug (:func:`model_slug`) and a local folder's
content hash (:func:`directory_fingerprint`). :mod:`headstats.io.models` loads what these find."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

from headstats.io import assets


class ModelNotFoundError(ValueError):
    pass


class ModelLoadError(ValueError):
    """A model that was found but cannot be loaded (a broken config, tokenizer or weights file)."""


# A Hub repository id: "name" or "org/name" (letters, digits, '-', '_', '.'; no leading '.' or '-').
_HUB_ID = re.compile(r"^(?![.-])[\w.-]{1,96}(/(?![.-])[\w.-]{1,96})?$")


def resolve_model_path(name_or_path: str) -> str:
    """An embedded name, a local directory, or a Hub id (``org/name`` or ``name``, as ``gpt2``),
    returned as is for transformers."""
    if name_or_path in assets.EMBEDDED_MODELS:
        return str(assets.embedded_model(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model directory {str(path)!r} has no config.json: give a directory written by save_pretrained"
            )
        return str(path)
    if not _HUB_ID.match(name_or_path):
        raise ModelNotFoundError(not_found_message(name_or_path))
    if not _in_hf_cache(name_or_path) and not hub_reachable():
        raise ModelNotFoundError(
            f"{not_found_message(name_or_path)}; it is not in the local Hugging Face cache and the Hub is not "
            "reachable from this machine"
        )
    return name_or_path


_HUB: dict[str, bool] = {}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub can be reached, asked once per process (one TCP connection with a
    short timeout) instead of letting every download retry for half a minute. False under
    ``HF_HUB_OFFLINE``; when it is not reachable, offline mode is switched on, so that models in the
    local cache load from it at once. Behind a proxy (``HTTPS_PROXY``) the proxy decides: True."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    if "reachable" not in _HUB:
        if any(os.environ.get(key) for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
            _HUB["reachable"] = True
        else:
            url = urlparse(constants.ENDPOINT)
            try:
                socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout).close()
                _HUB["reachable"] = True
            except OSError:
                _HUB["reachable"] = False
                constants.HF_HUB_OFFLINE = True
    return _HUB["reachable"]


def _in_hf_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repository id
        return False


def is_local(path: str) -> bool:
    return Path(path).expanduser().is_dir()


def not_found_message(name: str) -> str:
    """The error for a model found nowhere: what may be given instead."""
    return (
        f"model {name!r} not found: give a local directory, a Hub id (org/name or name, from your HF cache or the "
        f"Hub), or one of: {', '.join(assets.EMBEDDED_MODELS)}"
    )


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
    from headstats.io.fingerprint import files_digest, weight_files

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


__all__ = [
    "CONFIG_WRITER_STAMP",
    "ModelLoadError",
    "ModelNotFoundError",
    "checkpoint_info",
    "directory_fingerprint",
    "hub_reachable",
    "is_local",
    "model_slug",
    "not_found_message",
    "recorded_model",
    "resolve_model_path",
    "trainer_step",
]
