"""Removing heads: ``headstats prune``'s options and a pruning frontier's ``[prune]``, both ranking
heads on a collection dataset."""

from __future__ import annotations

from typing import ClassVar

from headstats.options import Spec, SpecError, compose, option
from headstats.specs.groups import (
    Batching,
    Calibration,
    LoadOptions,
    MaxDrop,
    Models,
    Output,
    Progress,
    Prompting,
    Sampling,
    Scoring,
    Seed,
    Shares,
    Tasks,
    Truncation,
    Unit,
)
from headstats.specs.values import DEFAULT_SWEEP_SCORES, SAVE_DTYPES, UNITS, ZEROING, task_names

# What prune and the frontier rank heads on: a collection dataset's scores, fewer sequences than a sweep's.
RANKING_CALIBRATION = {"calibration": "wikipedia", "calibration_limit": 64}


@compose(
    LoadOptions,
    Models,
    Scoring,
    Sampling,
    Seed,
    Prompting,
    Batching,
    Progress,
    Calibration,
    Truncation,
    Shares,
    MaxDrop,
    Output,
    Unit,
    defaults={"scores": ("ahon_ln",), **RANKING_CALIBRATION},
    flags={"scores": "--score", "shares": "--share"},  # one of each (the plural flags still work)
    helps={
        "out": "the folder the pruned model is written to, with pruning.json (load it with headstats.load_model)",
        "limit": "questions of the --certify task, a sample (see --sample; without it, every question)",
        "calibration": "the texts heads are ranked on, by each head's mean score over --calibration-limit of them: "
        "a collection dataset (e.g. wikipedia) or a .jsonl/.parquet/.txt file",
        "calibration_limit": "texts of the --calibration dataset heads are ranked on",
    },
)
class PruneSpec(Spec):
    """``headstats prune``: remove the heads a score calls inactive (:mod:`headstats.jobs.prune`).
    ``--model`` and ``--score`` take one each; ``--limit`` counts the ``--certify`` task's questions."""

    WHAT: ClassVar[str] = "prune"
    GROUP: ClassVar[str | None] = ZEROING

    certify: str | None = option(
        None,
        "instead of one --share: remove the largest of the --share fractions whose accuracy drop on this task is "
        "certified "
        "within --max-drop (one-sided 95% Tango bound; shares tested in increasing order, stopping at the first "
        "failure)",
        choices=task_names,
        noun="task",
    )
    save_dtype: str | None = option(
        None, "dtype of the saved weights (default: the dtype the model ran in)", choices=SAVE_DTYPES, noun="dtype"
    )

    def check(self) -> None:
        if len(self.names) != 1:
            raise SpecError("names", f"prune takes one --model, not {len(self.names)}")
        if self.scores is None or len(self.scores) != 1:
            raise SpecError("scores", "prune ranks heads by one score: give one --score")
        if self.calibration == "eval":
            raise SpecError("calibration", "prune ranks heads on a collection dataset (e.g. wikipedia), not 'eval'")
        if self.certify is None and (self.shares is None or len(self.shares) != 1):
            raise SpecError("shares", "give one --share (a fraction of heads), or --certify TASK")
        if not self.out:
            raise SpecError("out", "give the directory to write the pruned model to (--out DIR)")


@compose(
    Scoring,
    Sampling,
    Seed,
    Prompting,
    Batching,
    Progress,
    Calibration,
    Truncation,
    Shares,
    MaxDrop,
    Tasks,
    defaults={"scores": DEFAULT_SWEEP_SCORES, **RANKING_CALIBRATION, "shares": (0.0, 0.1, 0.2, 0.3)},
)
class FrontierSpec(Spec):
    """``[prune]`` of a pruning-frontier file (``headstats frontier FILE``, :mod:`headstats.jobs.frontier`):
    every model pruned at every share by every score, with held-out accuracy and speed against the
    unpruned model."""

    WHAT: ClassVar[str] = "frontier"

    speed_batches: tuple[int, ...] = option((1, 8), "batch sizes of the speed measurement", minimum=1)
    prompt_length: int = option(128, "prompt tokens of the speed measurement", minimum=1)
    new_tokens: int = option(32, "decoded tokens of the speed measurement", minimum=1)
    repeats: int = option(3, "alternating rounds of the speed measurement (medians)", minimum=1)
    timing: str = option(
        "paired",
        "how speed is measured: paired (interleaved rounds at long contexts, a speed-up with its 95% interval) or "
        "medians (prompt_length / new_tokens / repeats side by side, medians)",
        choices=("paired", "medians"),
        noun="timing",
    )
    prefill_lengths: tuple[int, ...] = option((2048,), "prompt tokens of each timed prefill (paired timing)", minimum=1)
    decode_contexts: tuple[int, ...] = option(
        (1024, 4096), "KV-cache tokens before the timed new_tokens decode steps (paired timing)", minimum=1
    )
    time_cap: float = option(60.0, "seconds of paired rounds per setting and point at most", minimum=1)
    time_target: float = option(
        0.01, "paired rounds stop once the interval's half-width is this (0.01 = 1%)", minimum=0
    )
    time_clock: str = option(
        "wall",
        "what paired rounds count: wall (elapsed seconds) or cpu (the process's CPU seconds, on a CPU: without the "
        "time other processes of a shared machine held the core)",
        choices=("wall", "cpu"),
        noun="clock",
    )
    units: tuple[str, ...] = option(
        ("head",),
        "what each point removes: head (query heads), kv-group (whole KV groups, so the KV cache shrinks), or both",
        choices=UNITS,
        noun="unit",
    )

    def check(self) -> None:
        if not any(share > 0 for share in self.shares or ()):
            raise SpecError("shares", "needs at least one share above 0 (0 is the unpruned baseline), e.g. [0.1, 0.2]")
