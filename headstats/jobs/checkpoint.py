"""Passes that resume from their last saved batch instead of starting again.

A pass over a task is hundreds of batched forward passes. :class:`PassCheckpoint` keeps the batches a
pass has finished in a hidden record beside the file the pass will write
(:func:`headstats.io.store.partial_file`), saved at most every :data:`SAVE_EVERY` seconds
(``$HEADSTATS_SAVE_EVERY``, default 60) and whenever the pass stops on an error. A pass run again
with the same key takes those batches from the record and runs only the rest. Batches are formed
exactly as before (the same sequences, batch size and padding), so a resumed pass gives the same
numbers, bit for bit, as one that never stopped. The record goes once the pass's file is written.

The record also keeps what the pass has cost so far (:class:`Spent`): wall and CPU seconds over every
process that ran its batches (up to :data:`SAVE_EVERY` seconds of a stopped process are lost), and
the machines that ran them, so that a pass resumed across sessions reports its whole time and every
machine that computed it.

The key names everything a batch's numbers depend on (the run's settings with the weights' hash, the
point and its threshold, the scores recorded, the batch size and a hash of the token sequences); a
record with another key is ignored and overwritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from headstats.engine.probe import ForwardRecord
from headstats.io import store

logger = logging.getLogger("headstats")

SAVE_EVERY_VARIABLE = "HEADSTATS_SAVE_EVERY"  # the environment variable that sets SAVE_EVERY (seconds)


def save_interval(default: float = 60.0) -> float:
    """Seconds between saves of a pass's finished batches: ``$HEADSTATS_SAVE_EVERY`` when set (0 saves
    after every batch), else ``default``."""
    text = os.environ.get(SAVE_EVERY_VARIABLE, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"${SAVE_EVERY_VARIABLE}={text!r} is not a number of seconds; give e.g. 60, or unset it"
        ) from None
    if not value >= 0:
        raise ValueError(f"${SAVE_EVERY_VARIABLE}={text!r} is negative; give 0 or more seconds, or unset it")
    return value


SAVE_EVERY = save_interval()  # seconds between saves of a pass's finished batches (and at an error)


@dataclass
class DoneBatch:
    """One finished batch of a pass: its sequences' per-choice log-likelihoods and zeroed-head
    counts, and the probe's record where the pass keeps a history (calibration)."""

    rows: np.ndarray  # (B,) int64: indices of the batch's sequences
    logliks: list[np.ndarray]  # per row, float64, one per choice of the row's sequence
    zeroed: np.ndarray  # (B,) float64
    record: ForwardRecord | None = None


@dataclass
class Spent:
    """What a pass has cost so far, over every process that ran its batches."""

    seconds: float = 0.0  # wall time
    cpu_seconds: float = 0.0  # the processes' CPU time, all threads
    machines: list[dict] = field(default_factory=list)  # [{"machine": machine_info(...), "batches": n}]
    untimed_batches: int = 0  # restored from a record saved before times were kept

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> Spent:
        raw = json.loads(text)
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


def sequences_digest(input_ids: Sequence[Sequence[int]], keys: Sequence[int]) -> str:
    """A hash of a pass's token sequences and their sample keys, in order."""
    digest = hashlib.blake2b(digest_size=16)
    for ids, key in zip(input_ids, keys, strict=True):
        digest.update(np.asarray([len(ids), key], dtype=np.int64).tobytes())
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
    return digest.hexdigest()


class MixedKernelsError(RuntimeError):
    """A reduced-precision pass would join numbers that other kernels computed: a sweep's or a
    frontier's points are compared answer for answer, and bf16 products round differently on other
    kernels (:func:`headstats.io.machine.mixed_kernels`)."""


class PassCheckpoint:
    """The finished batches of one pass, kept in ``path`` under ``key`` (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        key: Mapping[str, object],
        *,
        every: float | None = None,
        machine: Mapping[str, object] | None = None,
    ) -> None:
        """``machine``: what this process runs on (:func:`headstats.io.models.machine_info`), kept
        with the batches it runs."""
        self.path = path
        self.key = json.dumps(key, sort_keys=True, default=str)
        self.every = SAVE_EVERY if every is None else every
        self.machine = dict(machine) if machine is not None else None
        self._batches: dict[int, DoneBatch] = {}  # by the batch's first sequence
        self._unsaved = 0
        self._saved_at = time.monotonic()
        self._earlier = Spent()  # what the restored batches cost
        self._ran_here = 0
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        self._load()

    @property
    def earlier(self) -> Spent:
        """What the batches restored from the record cost, and where they ran."""
        return self._earlier

    def spent(self) -> Spent:
        """The pass's cost so far: the restored batches' and this process's since the record was opened."""
        machines = [dict(m) for m in self._earlier.machines]
        if self._ran_here:
            here = next((m for m in machines if m.get("machine") == self.machine), None)
            if here is None:
                machines.append({"machine": self.machine, "batches": self._ran_here})
            else:
                here["batches"] += self._ran_here
        return Spent(
            self._earlier.seconds + time.perf_counter() - self._wall0,
            self._earlier.cpu_seconds + time.process_time() - self._cpu0,
            machines,
            self._earlier.untimed_batches,
        )

    @property
    def n_sequences(self) -> int:
        """Sequences finished so far (restored or run)."""
        return sum(len(b.rows) for b in self._batches.values())

    def restore(self, rows: Sequence[int]) -> DoneBatch | None:
        """The finished batch of exactly these sequences, or None when it must run."""
        done = self._batches.get(int(rows[0])) if len(rows) else None
        if done is None or not np.array_equal(done.rows, np.asarray(rows, dtype=np.int64)):
            return None
        return done

    def add(self, batch: DoneBatch) -> None:
        """Keep a batch the pass just ran; saved when :attr:`every` seconds passed since the last save."""
        self._batches[int(batch.rows[0])] = batch
        self._unsaved += 1
        self._ran_here += 1
        if time.monotonic() - self._saved_at >= self.every:
            self.save()

    def save(self) -> None:
        """Write the finished batches (atomically; nothing when none is new)."""
        if self._unsaved:
            arrays = _pack(self.key, list(self._batches.values()))
            arrays["spent"] = np.asarray(self.spent().to_json())
            store.write_arrays_atomic(arrays, self.path)
            logger.debug("%d finished sequences of a pass saved to %s", self.n_sequences, self.path)
        self._unsaved, self._saved_at = 0, time.monotonic()

    def discard(self) -> None:
        """Drop the record: its pass's file is written."""
        self.path.unlink(missing_ok=True)
        self._batches.clear()
        self._unsaved = 0

    def _load(self) -> None:
        arrays = store.read_arrays(self.path)
        if arrays is None:
            return
        if str(arrays.get("key", "")) != self.key:
            logger.info("%s holds batches of another pass (another key); they will be run again", self.path)
            return
        self._batches = {int(b.rows[0]): b for b in _unpack(arrays)}
        if "spent" in arrays:
            self._earlier = Spent.from_json(str(arrays["spent"]))
        else:
            self._earlier = Spent(untimed_batches=len(self._batches))
        logger.info("resuming a pass: %d finished sequences restored from %s", self.n_sequences, self.path)


def saved_machines(path: Path) -> list[object]:
    """The machines that computed the batches saved in ``path``, whatever the pass's key (read
    without a model); empty when there is no record or it kept no machines."""
    arrays = store.read_arrays(path)
    if arrays is None or "spent" not in arrays:
        return []
    return [m.get("machine") for m in Spent.from_json(str(arrays["spent"])).machines]


def _pack(key: str, batches: list[DoneBatch]) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {
        "key": np.asarray(key),
        "sizes": np.asarray([len(b.rows) for b in batches], dtype=np.int64),
        "rows": np.concatenate([b.rows for b in batches]).astype(np.int64),
        "n_choices": np.asarray([len(v) for b in batches for v in b.logliks], dtype=np.int64),
        "logliks": np.concatenate([v for b in batches for v in b.logliks]).astype(np.float64),
        "zeroed": np.concatenate([b.zeroed for b in batches]).astype(np.float64),
    }
    records = [b.record for b in batches]
    if records and all(r is not None for r in records):
        arrays.update(_pack_records(records))  # type: ignore[arg-type]
    return arrays


def _pack_records(records: list[ForwardRecord]) -> dict[str, np.ndarray]:
    """The records' tensors, concatenated over batches; scores in a dtype numpy holds exactly
    (bfloat16 as float32) with the original dtype's name beside them."""
    out: dict[str, np.ndarray] = {
        "n_tokens": torch.cat([r.n_tokens.cpu() for r in records]).numpy(),
        "sample_keys": torch.cat([r.sample_keys.cpu() for r in records]).numpy(),
    }
    for sid in records[0].scores:
        tensor = torch.cat([r.scores[sid].cpu() for r in records])
        out[f"dtype.{sid}"] = np.asarray(str(tensor.dtype).removeprefix("torch."))
        out[f"score.{sid}"] = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
    if all(r.zero_mask is not None for r in records):
        out["zero_mask"] = torch.cat([r.zero_mask.cpu() for r in records]).numpy()  # type: ignore[union-attr]
    return out


def _unpack(arrays: dict[str, np.ndarray]) -> list[DoneBatch]:
    ends = np.cumsum(arrays["sizes"])
    starts = ends - arrays["sizes"]
    choice_ends = np.cumsum(arrays["n_choices"])
    values = np.split(arrays["logliks"], choice_ends[:-1])
    scores = sorted(name.removeprefix("score.") for name in arrays if name.startswith("score."))
    out = []
    for start, end in zip(starts, ends, strict=True):
        record = None
        if "n_tokens" in arrays:
            record = ForwardRecord(
                scores={
                    sid: torch.from_numpy(arrays[f"score.{sid}"][start:end].copy()).to(
                        getattr(torch, str(arrays[f"dtype.{sid}"]))
                    )
                    for sid in scores
                },
                zero_mask=torch.from_numpy(arrays["zero_mask"][start:end].copy()) if "zero_mask" in arrays else None,
                n_tokens=torch.from_numpy(arrays["n_tokens"][start:end].copy()),
                sample_keys=torch.from_numpy(arrays["sample_keys"][start:end].copy()),
            )
        out.append(DoneBatch(arrays["rows"][start:end], values[start:end], arrays["zeroed"][start:end], record))
    return out


def advance_restored(bar: tqdm, n: int) -> None:
    """Move a progress bar past ``n`` items restored from a record, leaving them out of its rate.

    Counted as work done, thousands of restored sequences in a second would make the bar's rate and
    time left those of the restore (a resumed 5-hour pass read "23 minutes left")."""
    if bar.disable:
        return
    bar.initial += n  # the average rate counts n - initial items
    bar.n += n
    bar.last_print_n += n  # the smoothed rate counts n - last_print_n items since the last print
    now = bar._time()  # the bar's own clock
    if now - bar.last_print_t >= bar.mininterval:  # redrawn as often as update() would, not per batch
        bar.refresh()
        bar.last_print_t = now  # the next rate starts from here: the restore's time is left out too


__all__ = [
    "SAVE_EVERY",
    "DoneBatch",
    "MixedKernelsError",
    "PassCheckpoint",
    "Spent",
    "advance_restored",
    "saved_machines",
    "sequences_digest",
]
