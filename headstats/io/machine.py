"""What a machine record (:func:`headstats.io.models.machine_info`) says, in words and as the kernels
that compute a reduced-precision body's products there. Plain dictionaries: no torch import, so
reports read them cheaply."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

REDUCED_PRECISION = ("bfloat16", "float16")
# The CPU flags of the matrix units that compute bf16 products natively.
BF16_UNITS = ("avx512_bf16", "amx_bf16")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system keeps one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_record() -> dict[str, object]:
    """The part of a machine record the processor decides: its name, its bf16 matrix units
    (:data:`BF16_UNITS`, from ``/proc/cpuinfo``; none where the system does not say) and the cores
    this process may use."""
    cpu = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        cpu = names[0].strip() if names else cpu
        first = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        flags = set(first.group(1).split()) if first else set()
    except OSError:
        pass
    return {"cpu": cpu, "bf16_units": [f for f in BF16_UNITS if f in flags], "cores": usable_cores()}


BF16_EMULATED_COST = (
    "a bf16 pass takes about 6 times as long as a float32 one (SmolLM2-135M's fused HellaSwag baseline, 12,000 "
    "sequences, on a 2-core AVX2 EPYC: 7.6 CPU-hours against 1.3, 4.9 h of wall time against 50 min; one "
    "2048x576 by 576x1536 product: 64 times)"
)
"""What emulated bf16 costs, as measured (README.md, "Machines differ"; reports/confirm's run time)."""


def emulated_bf16(device: object) -> str | None:
    """The CPU's name when ``device`` (``cpu``, ``cuda:0``, or torch's device) is a CPU without bf16
    matrix units (AVX512-BF16 or AMX), where PyTorch emulates bf16 products (:data:`BF16_EMULATED_COST`);
    None on a GPU or on a CPU that has them."""
    if str(device).split(":")[0] != "cpu":
        return None
    record = cpu_record()
    return None if record["bf16_units"] else str(record["cpu"])


def describe_machine(machine: object) -> str:
    """A run's machine in a few words: the CPU, its cores and torch threads, and its bf16 matrix units
    (none: bf16 is emulated there, about 6 times slower than fp32 per pass), or the GPU."""
    if not isinstance(machine, dict):
        return "not recorded"
    text = f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, {machine.get('torch_threads', '?')} threads"
    if machine.get("bf16_units"):
        text += f" ({', '.join(machine['bf16_units'])})"
    elif "bf16_units" in machine and not machine.get("gpu"):
        text += " (no bf16 units)"
    if machine.get("gpu"):
        text = f"{machine['gpu']} ({machine.get('device', 'cuda')}); {text}"
    return text


def reduced_precision_kernels(machine: object, dtype: str, *, capability: bool = True) -> str | None:
    """Which kernels compute a ``dtype`` body's products on ``machine``, as words that are equal
    exactly when two machines compute them alike: the GPU's name, or the CPU's bf16 matrix units
    (AVX512-BF16 and AMX each select their own oneDNN kernels; without them PyTorch emulates) and, with
    ``capability``, the vector instructions PyTorch dispatches to (``cpu_capability``: an AVX512 CPU
    without bf16 units runs oneDNN's emulation, an AVX2 one PyTorch's own loops). None for fp32 and fp64,
    whose products agree across machines to rounding that moves no answer (the confirmatory run's two
    kernels gave the same 3,000 answers), and for a machine not recorded."""
    if dtype.removeprefix("torch.") not in REDUCED_PRECISION or not isinstance(machine, dict):
        return None
    if machine.get("gpu"):
        return f"GPU kernels ({machine['gpu']})"
    if "bf16_units" not in machine:
        return None
    units = sorted(machine.get("bf16_units") or [])
    text = f"CPU kernels with {' and '.join(units)}" if units else "CPU kernels without bf16 units"
    if capability and machine.get("cpu_capability"):
        text += f" ({machine['cpu_capability']} instructions)"
    return text


def other_kernels(earlier: object, here: object, dtype: str) -> tuple[str, str] | None:
    """(earlier's kernels, here's) when a ``dtype`` body's products on machine ``here`` would round
    differently from those on ``earlier``; None when they agree, or when either cannot tell. The
    instruction set counts only when both records name it (records before 2026-12-03 do not)."""
    both = all(isinstance(m, dict) and m.get("cpu_capability") for m in (earlier, here))
    there, mine = (reduced_precision_kernels(m, dtype, capability=both) for m in (earlier, here))
    if there is None or mine is None or there == mine:
        return None
    return there, mine


def mixed_kernels(
    earlier: list[tuple[str, object]], here: object, dtype: str, where: object, remedy: str
) -> str | None:
    """Why a ``dtype`` pass on machine ``here`` may not join the numbers that ``earlier`` (what, the
    machine that computed it) holds in ``where``: the first whose kernels round ``dtype`` products
    otherwise (:func:`other_kernels`), with ``remedy`` (what to do instead); None when every one agrees."""
    for what, machine in earlier:
        differ = other_kernels(machine, here, dtype)
        if differ is None:
            continue
        there, mine = differ
        return (
            f"{where}: {what} ran in {dtype} on {describe_machine(machine)} ({there}); this "
            f"machine has {mine}, whose {dtype} products round differently (on a SmolLM2 bf16 baseline, an "
            "AVX2 CPU moved gold log-likelihoods by a median 0.15 nat from an AVX512-BF16 CPU's, more than "
            f"fp32 does), so joining the two would count flips that pruning or zeroing did not cause. {remedy}"
        )
    return None


__all__ = [
    "BF16_EMULATED_COST",
    "BF16_UNITS",
    "REDUCED_PRECISION",
    "cpu_record",
    "describe_machine",
    "emulated_bf16",
    "mixed_kernels",
    "other_kernels",
    "reduced_precision_kernels",
    "usable_cores",
]
