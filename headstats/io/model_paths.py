"""Where a model is, without loading anything (no torch, no transformers): an embedded name, a local
folder or a Hub id resolved (:func:`resolve_model_path`), and the errors for a model found nowhere or
found broken. What a model is called in results (its recorded name, slug and content hash) is
:mod:`headstats.io.identity`'s; :mod:`headstats.io.models` loads what these find."""

from __future__ import annotations

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


__all__ = [
    "ModelLoadError",
    "ModelNotFoundError",
    "hub_reachable",
    "is_local",
    "not_found_message",
    "resolve_model_path",
]
