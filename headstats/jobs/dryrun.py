"""What ``headstats run --dry-run`` says: each unit's counts and estimated time (:class:`WorkUnit`), and
a whole dry run's table, totals and notes (:class:`DryRun`): the source of its speeds, how each model
was read, where a real run writes, and the work it leaves out (models not found, not written yet,
or left for another machine).

:mod:`headstats.jobs.dryrun_units` counts and times one unit; :mod:`headstats.studies.dryrun` loops
over a study's units.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

import pandas as pd

from headstats.io.machine import usable_cores

# How many units a run's opening line names before it says "and N more".
HEADLINE_UNITS = 8


@dataclass(frozen=True)
class WorkUnit:
    """One dataset (collection) or task (sweep) of one model, as a dry run sees it."""

    model: str
    stage: str  # collect or ablate
    what: str  # dataset or task
    items: int  # documents (collect) or questions (ablate)
    # The next four are measured on the loaded model; None when nothing is left to run, so the
    # model was not loaded.
    sequences: int | None  # token sequences of one pass (collect: those not yet scored)
    tokens: int | None  # tokens of one pass (collect: of the sequences not yet scored)
    computed: int | None  # tokens one pass computes, padding included, in its length-sorted batches
    passes_left: int  # passes still to run (collect: 1 or 0; ablate: baseline/calibration + points)
    passes_total: int
    batch_size: int
    tokens_per_s: float | None  # computed tokens per second, measured on a probe of this unit's own sequences
    reused: int = 0  # planned points that reuse the baseline's answers (no pass: they zero nothing)
    saved: int = 0  # sequences of the passes left already finished in saved batches (a stopped pass)
    seconds: float | None = None  # the time left from a recorded rate, where no probe measures it (stage time)
    speed_from: str | None = None  # where tokens_per_s comes from, when not from a probe (a recorded speed)

    def with_speed_from(self, source: str | None) -> WorkUnit:
        return replace(self, speed_from=source)

    @property
    def forwards_left(self) -> int:
        """Batched forward passes still to run."""
        if not self.passes_left or self.sequences is None:
            return 0
        return math.ceil(self.sequences / self.batch_size) * self.passes_left - self.saved // self.batch_size

    @property
    def untimed(self) -> bool:
        """Work left with neither a probe nor a recorded rate to time it (est. time -)."""
        return bool(self.passes_left) and self.seconds is None and not self.tokens_per_s

    @property
    def seconds_left(self) -> float:
        if self.seconds is not None:
            return self.seconds
        if not self.passes_left or self.computed is None or not self.tokens_per_s:
            return 0.0
        # A stopped pass's saved batches are taken as their share of its sequences (batches are
        # length-sorted, so this is approximate in tokens).
        passes = self.passes_left - (self.saved / self.sequences if self.sequences else 0.0)
        return self.computed * passes / self.tokens_per_s


SWEEP_NOTE = (
    "passes of a sweep: the baseline (it also records the calibration scores) and each planned point that "
    "runs; reuse: the planned points that provably zero nothing (every p = 0 point, and targets whose "
    "threshold equals p = 0's, as a score tied within layers) and take the baseline's answers, so scores x "
    "targets = passes - 1 + reuse; saved seq: sequences of the passes left that a stopped pass already "
    "finished and saved (it resumes from them). A model whose units have no pass left is not loaded "
    "(-: not measured)."
)
FRONTIER_NOTE = (
    "passes of a frontier: per task, the unpruned baseline's evaluation and one per (score, share, unit) point without "
    "its record, each costed at the unpruned model's measured speed (a pruned model computes a little less, so "
    "this is an upper estimate; the calibration means and the speed timings of each point are not counted); "
    "saved seq: sequences of the evaluations left that a stopped run already finished and saved. A model with "
    "no point left is not loaded (-: not measured)."
)


@dataclass
class DryRun:
    units: list[WorkUnit]
    device: str
    probe_sequences: int  # items each unit's probe ran (0: timed from recorded speeds, nothing ran)
    note: str = SWEEP_NOTE
    refused: list[str] = field(default_factory=list)  # work a real run here leaves for another machine, why
    absent: list[str] = field(default_factory=list)  # model folders not written yet (a chain still training)
    missing: list[str] = field(default_factory=list)  # models not found on this machine, each with why
    # (1-minute load average, cores) when the dry run began: other work then shares the probe's cores
    load_at_start: tuple[float, int] | None = None
    writes: tuple[str, ...] = ()  # the folders a real run writes, each with what goes there
    read: dict[str, str] = field(default_factory=dict)  # model -> how it was read (its files, or transformers)

    @property
    def sources(self) -> list[str]:
        """Where the units' speeds come from, each once, in the order of the units: a unit's ``speed``
        column is its letter here."""
        return list(dict.fromkeys(u.speed_from for u in self.units if u.speed_from))

    def _speed_key(self, unit: WorkUnit) -> str:
        if unit.speed_from:
            return self._speed_key_of(self.sources.index(unit.speed_from))
        return "probe" if unit.tokens_per_s else "-"

    def table(self) -> pd.DataFrame:
        rows = [
            {
                "model": u.model,
                "stage": u.stage,
                "what": u.what,
                "items": u.items,
                "sequences": "-" if u.sequences is None else u.sequences,
                "tokens/pass": "-" if u.tokens is None else u.tokens,
                "padding": f"{1 - u.tokens / u.computed:.0%}" if u.computed and u.tokens is not None else "-",
                "passes left": f"{u.passes_left}/{u.passes_total}",
                "reuse": u.reused if u.stage == "ablate" else "-",
                "saved seq": u.saved if u.stage in ("ablate", "prune") else "-",
                "forwards left": u.forwards_left,
                "tok/s": "-" if u.tokens_per_s is None else round(u.tokens_per_s),
                "speed": self._speed_key(u),
                "est. time": "-" if u.untimed else duration(u.seconds_left),
            }
            for u in self.units
        ]
        return pd.DataFrame(rows)

    @property
    def seconds(self) -> float:
        return sum(u.seconds_left for u in self.units)

    @property
    def forwards(self) -> int:
        return sum(u.forwards_left for u in self.units)

    @property
    def untimed(self) -> int:
        """Units with work left that nothing timed (-): the estimate leaves them out."""
        return sum(u.untimed for u in self.units)

    def _estimate_text(self) -> str:
        if not self.untimed:
            return f"estimated {duration(self.seconds)}"
        return (
            f"estimated {duration(self.seconds)} plus {self.untimed} unit(s) with work left and no rate to time "
            "them (est. time -)"
        )

    def _speed_text(self) -> str:
        if self.probe_sequences:
            return f"measured on {self.probe_sequences} items per unit in length-sorted batches"
        if not self.sources:  # no unit with a pass left: no speed was looked up
            return "from recorded speeds, no model loaded"
        return "from recorded speeds, no model loaded; speed: " + "; ".join(
            f"{self._speed_key_of(i)} = {source}" for i, source in enumerate(self.sources)
        )

    @staticmethod
    def _speed_key_of(i: int) -> str:
        return "abcdefghijklmnopqrstuvwxyz"[i % 26]

    def _writes_text(self) -> str:
        if not self.writes:
            return ""
        return "\nA real run writes: " + "; ".join(self.writes) + "."

    def _read_text(self) -> str:
        """How the models were read, each way once with the models read that way."""
        ways: dict[str, list[str]] = {}
        for model, way in self.read.items():
            ways.setdefault(way, []).append(model)
        return "".join(f"\nRead {way}: {', '.join(models)}." for way, models in ways.items())

    def summary(self) -> str:
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            body = self.table().to_string(index=False) if self.units else "(nothing to run)"
        return (
            f"{body}\n\nin all: {self.forwards:,} batched forward passes still to run, {self._estimate_text()} "
            f"on {self.device} (tok/s: tokens computed per second, padding included, {self._speed_text()}; "
            "padding: the share of a pass's computed tokens that are padding; model loading and the report not "
            f"included). Nothing was written.{self._writes_text()}{self._read_text()}"
            f"{self._busy_text()}\n{self.note}{self._refused_text()}{self._absent_text()}{self._missing_text()}"
        )

    def headline(self) -> str:
        """One line for the start of a real run: what it runs, where it writes, and for about how long."""
        passes = sum(u.passes_left for u in self.units)
        left = [u for u in self.units if u.passes_left]
        where = f"; it writes {'; '.join(self.writes)}" if self.writes else ""
        source = ", ".join(dict.fromkeys(u.speed_from or "a probe" for u in left if not u.untimed)) or "no speed"
        named = left if len(left) <= HEADLINE_UNITS else left[: HEADLINE_UNITS - 1]
        units = "; ".join(f"{u.model} {u.stage} {u.what}" for u in named)
        more = f"; and {len(left) - len(named)} more" if len(named) < len(left) else ""
        return (
            f"{len(left)} unit(s) with work left ({units}{more}: {passes} pass(es), {self.forwards:,} batched "
            f"forward passes) on {self.device}{where}; {self._estimate_text()} (model loading and the report not "
            f"included; speeds from {source})"
        )

    def _absent_text(self) -> str:
        if not self.absent:
            return ""
        lines = "\n".join(f"- {name}" for name in self.absent)
        return (
            f"\n\nNot counted above: {len(self.absent)} model folder(s) not written yet (a fine-tuning chain still "
            f"training?); a real run stops at the first of them:\n{lines}"
        )

    def _missing_text(self) -> str:
        if not self.missing:
            return ""
        lines = "\n".join(f"- {why}" for why in self.missing)
        return (
            f"\n\nNot counted above: {len(self.missing)} model(s) not found on this machine (a real run here stops "
            f"at the first of them; download them, or choose others with --models):\n{lines}"
        )

    def _busy_text(self) -> str:
        """Why the times may be long: the probe ran while other work shared the CPU's cores."""
        if not self.probe_sequences or self.load_at_start is None or not self.device.startswith("cpu"):
            return ""
        average, cores = self.load_at_start
        slower = (cores + average) / cores  # the probe's threads got about cores / (cores + load) of the CPU
        if slower < BUSY_SLOWDOWN:
            return ""
        return (
            f"\nThis machine was busy in the minute before the dry run began (load average {average:.1f} on "
            f"{cores} cores): if that work went on, it shared the probe's cores, and the times above may be up to "
            f"about {slower:.1f} times what the same run takes alone. Rerun the dry run when the machine is idle "
            "for a closer estimate."
        )

    def _refused_text(self) -> str:
        if not self.refused:
            return ""
        lines = "\n".join(f"- {why}" for why in self.refused)
        return f"\n\nNot counted above, as a real run here leaves them for another machine:\n{lines}"


# a probe that shared its cores this much (expected time over the time alone) says so
BUSY_SLOWDOWN = 1.25


def machine_load() -> tuple[float, int] | None:
    """(1-minute load average, cores this process may use), or None where the system keeps no load average.
    In a container the load average may be the host's: the note it gives says "may"."""
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return average, usable_cores()


def duration(seconds: float) -> str:
    """A time in the unit a reader takes in at once: seconds, minutes or hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["FRONTIER_NOTE", "SWEEP_NOTE", "DryRun", "WorkUnit", "duration", "machine_load"]
