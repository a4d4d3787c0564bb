"""A model read from its files alone, without torch or transformers: what a dry run reads of a model.

:func:`read_model_files` finds the model as :func:`headstats.io.models.load_model` would (an embedded
name, a local folder, a Hub id already in the local Hugging Face cache) and reads its ``config.json``
(:class:`ConfigView`) and its tokenizer (:class:`~headstats.io.tokenizer_files.FileTokenizer`). The
:class:`FileModel` it gives cannot run: it holds the configuration, the dtype and device the model
would load in, and its per-token cost from the configuration
(:func:`headstats.engine.cost.config_cost`). Files that do not describe the model fully (a layout the
configuration alone does not give, custom code, no ``tokenizer.json``) raise :class:`NeedsTransformers`:
the caller builds the model's shapes with transformers instead
(:func:`headstats.io.models.load_skeleton`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from headstats.engine.cost import InferenceCost, config_cost
from headstats.io.dtypes import dtype_name
from headstats.io.identity import directory_fingerprint, recorded_model
from headstats.io.model_paths import ModelNotFoundError, resolve_model_path
from headstats.io.tokenizer_files import FileTokenizer, NoTokenizerFile
from headstats.options import check_device

# Bytes per element of each dtype a model may load in.
ELEMENT_SIZES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}
# Names a config.json may record its own dtype under, and the dtype each is ("auto" loads it).
SAVED_DTYPES = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float16"}
SAVED_DTYPES |= {"half": "float16", "float64": "float64", "double": "float64"}
# Config fields GPT-2 names its own way, under the names the rest of the package reads (transformers'
# attribute_map of GPT2Config).
ATTRIBUTE_MAPS = {
    "gpt2": {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }
}


class NeedsTransformers(ValueError):
    """Files that do not describe a model fully without transformers, and why."""


class ConfigView:
    """A ``config.json`` read as transformers' configuration object reads: its fields as attributes
    (GPT-2's under the common names too, :data:`ATTRIBUTE_MAPS`), ``get_text_config()`` and
    ``to_dict()``; ``name_or_path`` is where it was loaded from."""

    def __init__(self, fields: dict, name_or_path: str) -> None:
        self._fields = dict(fields)
        self.name_or_path = name_or_path

    def __getattr__(self, name: str) -> object:
        fields = self.__dict__.get("_fields", {})
        name = ATTRIBUTE_MAPS.get(fields.get("model_type"), {}).get(name, name)
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def get_text_config(self) -> ConfigView:
        return self  # a FileModel's configuration is a text model's (multimodal ones are not read here)

    def to_dict(self) -> dict:
        return dict(self._fields)


@dataclass
class FileModel:
    """A model as its files describe it, in the dtype and on the device it would load in. It cannot
    run; planners read it where they read a loaded model's configuration, name, dtype and device."""

    config: ConfigView
    dtype: str  # float32, as --dtype spells it
    headstats_name: str  # as it was named: what results and partitions are named after
    headstats_device: str  # where it would run
    commit: str | None  # the Hub commit its files come from; None for a local folder

    @property
    def cost(self) -> InferenceCost:
        """Its FLOPs per token, from the configuration (what its shapes give)."""
        cost = config_cost(self.config.to_dict(), ELEMENT_SIZES[self.dtype])
        assert cost is not None  # read_model_files reads only layouts that config_cost knows
        return cost

    @property
    def position_limit(self) -> int | None:
        """The longest sequence its learned absolute positions take: GPT-2's ``n_positions``, the only
        learned positions of the layouts read here; None for the rotary ones."""
        limit = getattr(self.config, "n_positions", None)
        return int(limit) if limit else None

    @property
    def recorded_name(self) -> str:
        """Its name as results record it (:func:`~headstats.io.identity.recorded_model`)."""
        return recorded_model(self.headstats_name or self.config.name_or_path)

    @property
    def revision(self) -> str:
        """Its weights' identity as :func:`headstats.io.identity.model_identity` gives it: the Hub commit,
        or a local folder's content hash."""
        path = Path(self.config.name_or_path)
        return self.commit or (directory_fingerprint(path) if path.is_dir() else "")


def _cached_folder(repo_id: str, revision: str | None) -> tuple[Path, str]:
    """The local Hugging Face cache's snapshot of ``repo_id`` that holds its config.json, and its commit."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    if not isinstance(found, str):
        raise ModelNotFoundError(
            f"{repo_id}: its configuration is not in the local Hugging Face cache, and a dry run reads no model "
            f"from the Hub; download its configuration and tokenizer first (hf download {repo_id} --include "
            "'*.json' '*.jinja'), or time the run on the loaded model with --probe"
        )
    return Path(found).parent, Path(found).parent.name


def _dtype(raw: dict, dtype: str | None, device: str) -> str:
    """The dtype :func:`headstats.io.models.load_skeleton` gives: ``auto`` reads the configuration's."""
    if dtype != "auto":
        return dtype_name(dtype, device.split(":")[0])
    saved = raw.get("dtype")
    if saved is None and "torch_dtype" in raw:
        raise NeedsTransformers("its config.json names its dtype the older way (torch_dtype)")
    if saved is not None and saved not in SAVED_DTYPES:
        raise NeedsTransformers(f"its config.json records a dtype read here as no float type ({saved})")
    return SAVED_DTYPES.get(saved, "float32")


def _device(device: str | None, device_map: object) -> str:
    """Where the model would run, as :func:`headstats.io.models.load_skeleton` records it."""
    if device_map is not None:
        return check_device(None)  # accelerate places it on the GPUs where there are any
    if device is None:
        return check_device(None)
    if not re.fullmatch(r"(cpu|cuda)(:\d+)?", str(device)):
        raise NeedsTransformers(f"device {device!r} is named as torch names it")
    check_device(device)
    return str(device)


def read_model_files(
    name_or_path: str,
    dtype: str | None = None,
    device: str | None = None,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    device_map: object = None,
    token: object = None,
) -> tuple[FileModel, FileTokenizer]:
    """The model ``name_or_path`` and its tokenizer read from their files (the arguments are
    :func:`headstats.io.models.load_skeleton`'s): raises :class:`NeedsTransformers` where the files do
    not describe it fully, and :class:`~headstats.io.model_paths.ModelNotFoundError` for a Hub model
    not in the local cache."""
    path = resolve_model_path(name_or_path)
    local = Path(path).expanduser()
    folder, commit = (local, None) if local.is_dir() else _cached_folder(path, revision)
    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise NeedsTransformers(f"its config.json is not read here ({err})") from None
    if not isinstance(raw, dict) or "auto_map" in raw:
        raise NeedsTransformers("its configuration runs code of its own, or is no configuration")
    if config_cost(raw, 4) is None:
        raise NeedsTransformers(f"its layout ({raw.get('model_type')}) is one its configuration alone does not give")
    where = _device(device, device_map)
    try:
        tokenizer = FileTokenizer(folder)
    except NoTokenizerFile as err:
        raise NeedsTransformers(str(err)) from None
    model = FileModel(ConfigView(raw, path), _dtype(raw, dtype, where), name_or_path, where, commit)
    return model, tokenizer


__all__ = ["ConfigView", "FileModel", "NeedsTransformers", "read_model_files"]
