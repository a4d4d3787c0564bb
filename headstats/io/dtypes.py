"""The dtype a model loads in, by name and without importing torch: ``--dtype``'s values checked
(:func:`check_dtype`) and resolved for a device (:func:`dtype_name`). :func:`headstats.io.models.resolve_dtype`
turns the name into torch's dtype; the specs' checks and the dry run use the name alone.

None -> bf16 on CUDA (as the study ran), fp32 elsewhere (bf16 matmuls are slow on CPUs without
AVX512-BF16 or AMX). ``fast`` -> bf16 where the device computes it natively (a GPU; a CPU with bf16
matrix units), fp32 elsewhere. ``auto`` -> the checkpoint's own dtype, which only its configuration
says (resolved where the configuration is read); before that, the device default.
"""

from __future__ import annotations

from collections.abc import Callable

from headstats.io import machine

# --dtype's names of a fixed dtype, and the dtype each names.
DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


def check_dtype(dtype: str | None) -> None:
    """Refuse a ``--dtype`` name that is none of auto, fast or :data:`DTYPE_NAMES` (None and a torch dtype
    pass)."""
    if isinstance(dtype, str) and dtype not in ("auto", "fast", *DTYPE_NAMES):
        raise ValueError(f"unknown dtype {dtype!r}: choose from auto, fast, {', '.join(DTYPE_NAMES)}")


def cpu_has_bf16_units() -> bool:
    """Whether this CPU computes bf16 products natively (AVX512-BF16 or AMX): what
    :func:`headstats.io.machine.emulated_bf16` says of it."""
    return machine.emulated_bf16("cpu") is None


def dtype_name(dtype: str | None, device_type: str, *, native_bf16: Callable[[], bool] = cpu_has_bf16_units) -> str:
    """The name of the dtype (``float32``, ``bfloat16``, ``float16``) that ``dtype`` resolves to on a
    device of ``device_type`` (cpu, cuda, ...); ``auto`` gives the device default here.
    ``native_bf16``: whether the CPU computes bf16 natively, asked only for ``fast`` on a CPU."""
    check_dtype(dtype)
    if dtype == "fast":
        native = device_type == "cuda" or (device_type == "cpu" and native_bf16())
        return "bfloat16" if native else "float32"
    if dtype is None or dtype == "auto":
        return "bfloat16" if device_type == "cuda" else "float32"
    return DTYPE_NAMES[dtype]


__all__ = ["DTYPE_NAMES", "check_dtype", "cpu_has_bf16_units", "dtype_name"]
