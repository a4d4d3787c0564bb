"""Recorded pass speeds: how fast a kind of pass ran on a kind of machine, so that a dry run can time a
study's units without loading a model (:mod:`headstats.jobs.dryrun`).

A speed is the GFLOP/s a pass achieved: the FLOPs of the model body over the pass's padded,
length-sorted batches (:meth:`headstats.engine.speed.InferenceCost.pass_flops`) over its wall seconds.
It is kept with what decides it: the machine (:func:`machine_kind`: the CPU, its cores and its bf16
units, or the GPU), the dtype, the work (``collect``: every head's scores; ``evaluate``: a task's
answers, zeroed or not), the attention kernel (``explicit``: probabilities materialised; ``fused``:
PyTorch's SDPA) and the model. Two sources:

- the calibration table committed with the package (``headstats/data/pass_speeds.csv``): passes the
  repository's own runs timed, each row saying where it comes from;
- a per-user cache of what real runs measured (``$HEADSTATS_CACHE/pass_speeds.jsonl``, or the file
  ``$HEADSTATS_SPEEDS_FILE`` names): every collection and every sweep pass of at least
  :data:`MIN_SECONDS` appends its speed when it finishes (:func:`record_pass`).

:func:`lookup` takes the closest record: the cache before the table, then the fewest differences, in
order of how much they move a speed (the device, the dtype, the machine, the work, the kernel, the
model), and says which it took and how it differs from the pass asked about.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import logging
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from headstats.io.assets import cache_dir

logger = logging.getLogger("headstats")

TABLE = Path(__file__).resolve().parents[1] / "data" / "pass_speeds.csv"
CACHE_NAME = "pass_speeds.jsonl"
WORKS = ("collect", "evaluate")
KERNELS = ("explicit", "fused")
# How many of the latest matching records of the cache a speed is the median of.
RECENT = 5
# A pass shorter than this (seconds) is not recorded: start-up and the first batch's warm-up dominate it.
MIN_SECONDS = 2.0


def cache_file() -> Path:
    """The per-user cache of measured speeds."""
    return Path(os.environ.get("HEADSTATS_SPEEDS_FILE") or cache_dir() / CACHE_NAME)


def machine_kind(machine: dict) -> str:
    """A machine record (:func:`headstats.io.models.machine_info`) as the key speeds are kept under: the
    GPU's name, or the CPU's name, the cores this process may use and its bf16 matrix units."""
    if machine.get("gpu"):
        return str(machine["gpu"])
    units = ", ".join(machine.get("bf16_units") or []) or "no bf16 units"
    return f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores ({units})"


@dataclass(frozen=True)
class Speed:
    """One pass's speed (module docstring), with what decides it and where it comes from."""

    machine: str
    device: str  # cpu or cuda
    dtype: str
    work: str  # collect or evaluate
    kernel: str  # explicit or fused
    model: str
    gflops: float  # GFLOP/s of the model body, padding included, over wall seconds
    seconds: float = 0.0
    date: str = ""
    source: str = ""  # where a table row comes from

    def differences(self, other: Speed) -> tuple[bool, ...]:
        """Which of the keys, in order of how much they move a speed, differ from ``other``'s."""
        keys = ("device", "dtype", "machine", "work", "kernel", "model")
        return tuple(getattr(self, key) != getattr(other, key) for key in keys)


@dataclass(frozen=True)
class Found:
    """The speed a pass is timed at, and a sentence on where it comes from."""

    gflops: float
    source: str


def read_table(path: Path = TABLE) -> list[Speed]:
    """The committed calibration table."""
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    names = {f.name for f in fields(Speed)}
    out = []
    for row in rows:
        values = {k: v for k, v in row.items() if k in names}
        out.append(Speed(**{**values, "gflops": float(values["gflops"]), "seconds": float(values["seconds"] or 0)}))
    return out


def read_cache(path: Path | None = None) -> list[Speed]:
    """What real runs on this account measured; a damaged line is skipped (the cache is advisory)."""
    path = path or cache_file()
    if not path.is_file():
        return []
    names = {f.name for f in fields(Speed)}
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            out.append(Speed(**{k: v for k, v in data.items() if k in names}))
        except (ValueError, TypeError):
            continue
    return out


def record(speed: Speed, path: Path | None = None) -> None:
    """Append a measured speed to the per-user cache. Never fails the run that measured it: a cache that
    cannot be written only costs a later dry run its estimate."""
    path = path or cache_file()
    dated = speed if speed.date else Speed(**{**asdict(speed), "date": _dt.date.today().isoformat()})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(dated)) + "\n")
    except OSError as err:
        logger.debug("pass speed not recorded in %s: %s", path, err)


def record_pass(
    model, name: str, work: str, kernel: str, lengths: Sequence[int], batch_size: int, seconds: float
) -> None:
    """Record the speed of a pass ``model`` (named ``name`` as the run was given it) just ran: ``work``
    over sequences of ``lengths`` in batches of ``batch_size``, through the ``kernel`` attention, in
    ``seconds`` of wall time."""
    from headstats.engine.speed import inference_cost
    from headstats.io.models import machine_info

    if seconds < MIN_SECONDS or not lengths:
        return
    param = next(model.parameters())
    flops = inference_cost(model).pass_flops(lengths, batch_size)
    speed = Speed(
        machine=machine_kind(machine_info(param.device)),
        device=param.device.type,
        dtype=str(param.dtype).removeprefix("torch."),
        work=work,
        kernel=kernel,
        model=name,
        gflops=round(flops / seconds / 1e9, 3),
        seconds=round(seconds, 2),
    )
    record(speed)


_WHAT_DIFFERS = ("device", "dtype", "machine", "work", "kernel", "model")


def _describe(found: Speed, wanted: Speed, cached: bool, n: int) -> str:
    differs = [key for key, d in zip(_WHAT_DIFFERS, found.differences(wanted), strict=True) if d]
    if cached:
        where = f"measured by {n} pass{'es' if n > 1 else ''} of runs here (latest {found.date})"
    else:
        where = f"the calibration table ({found.source})"
    if not differs:
        return where
    told = ", ".join(f"{key} {getattr(found, key)}" for key in differs)
    return f"{where}, for {told}"


def lookup(wanted: Speed, *, table: list[Speed] | None = None, cache: list[Speed] | None = None) -> Found | None:
    """The recorded speed closest to ``wanted`` (its ``gflops`` ignored): the records with the fewest
    differences, compared key by key in order of how much they move a speed, the cache's before the
    table's at equal differences; the median of the latest :data:`RECENT` of them. None when nothing
    is recorded for ``wanted``'s device."""
    table = read_table() if table is None else table
    cache = read_cache() if cache is None else cache
    candidates = [
        (s.differences(wanted), not cached, s) for cached, rows in ((True, cache), (False, table)) for s in rows
    ]
    candidates = [c for c in candidates if not c[0][0]]  # never a GPU's speed for a CPU pass, nor back
    if not candidates:
        return None
    best = min(c[:2] for c in candidates)
    chosen = [s for d, table_row, s in candidates if (d, table_row) == best]
    recent = sorted(chosen, key=lambda s: s.date)[-RECENT:]
    rate = statistics.median(s.gflops for s in recent)
    return Found(rate, _describe(recent[-1], wanted, not best[1], len(recent)))


__all__ = [
    "KERNELS",
    "TABLE",
    "WORKS",
    "Found",
    "Speed",
    "cache_file",
    "lookup",
    "machine_kind",
    "read_cache",
    "read_table",
    "record",
    "record_pass",
]
