"""Paired, interleaved timing rounds that run until the speed-up is resolved.

One round runs every model once on the same work (:func:`headstats.engine.speed.phase_timer`), in an
order that reverses from round to round (A B C, C B A, A B C, ...), so drift and slow spells of a
shared machine fall alike on all; the timed functions (:func:`headstats.engine.speed.phase_timer`)
move each model's weights to fresh memory before every run, so a lucky memory layout is not taken
for a speed-up. Warm-up rounds run first and are discarded. Rounds continue until
every candidate's speed-up over the reference (:func:`headstats.stats.speed.paired_speedup`) is known
to within ``target`` (the 95% interval's half-width, 0.01 = 1%) after at least ``min_rounds``, or
until ``max_seconds`` of timing or ``max_rounds`` rounds; then the widths reached are reported as
they are. The stopping rule looks at the interval it reports, which makes that interval slightly
optimistic; ``min_rounds`` keeps the first, most variable estimates from stopping it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from headstats.stats.speed import Speedup, paired_speedup


@dataclass
class Rounds:
    """The seconds of every model in every kept round, and each candidate's speed-up."""

    reference: str
    seconds: dict[str, list[float]] = field(default_factory=dict)
    speedups: dict[str, Speedup] = field(default_factory=dict)
    resolved: bool = False  # every candidate reached the target width
    threads: int = 0

    def rows(self, **context: object) -> list[dict]:
        """One row per candidate: the speed-up, its interval, the rounds, and ``context``."""
        return [
            {
                **context,
                "reference": self.reference,
                "candidate": name,
                **speedup.as_dict(),
                "resolved": self.resolved,
                "reference_seconds_median": float(torch.tensor(self.seconds[self.reference]).median()),
                "candidate_seconds_median": float(torch.tensor(self.seconds[name]).median()),
                "torch_threads": self.threads,
            }
            for name, speedup in self.speedups.items()
        ]


def _order(names: list[str], round_index: int) -> list[str]:
    return names if round_index % 2 == 0 else names[::-1]


def paired_rounds(
    runs: Mapping[str, Callable[[], float]],
    reference: str,
    *,
    target: float = 0.01,
    min_rounds: int = 6,
    max_rounds: int = 400,
    max_seconds: float = 120.0,
    warmup: int = 1,
    confidence: float = 0.95,
    progress: Callable[[Rounds], None] | None = None,
) -> Rounds:
    """Time every function of ``runs`` (name -> a function returning one run's seconds) in interleaved
    rounds and return each other name's speed-up over ``reference``."""
    if reference not in runs:
        raise ValueError(f"reference {reference!r} is not among the timed models: {', '.join(runs)}")
    if len(runs) < 2:
        raise ValueError("paired timing needs the reference and at least one candidate")
    if min_rounds < 2 or max_rounds < min_rounds:
        raise ValueError(f"need 2 <= min_rounds <= max_rounds, got {min_rounds} and {max_rounds}")
    names = list(runs)
    result = Rounds(reference, {name: [] for name in names}, threads=torch.get_num_threads())
    for r in range(warmup):
        for name in _order(names, r):
            runs[name]()
    started = time.perf_counter()
    for r in range(max_rounds):
        for name in _order(names, warmup + r):
            result.seconds[name].append(runs[name]())
        if r + 1 < 2:
            continue
        ref = result.seconds[reference]
        result.speedups = {
            name: paired_speedup(ref, result.seconds[name], confidence) for name in names if name != reference
        }
        result.resolved = all(s.half_width <= target for s in result.speedups.values())
        if progress is not None:
            progress(result)
        if r + 1 >= min_rounds and (result.resolved or time.perf_counter() - started >= max_seconds):
            break
    return result
