"""Heads skipped per prompt: a skipping study's ``[adaptive]`` (:mod:`headstats.jobs.adaptive`)."""

from __future__ import annotations

from typing import ClassVar

from headstats.options import Spec, SpecError, compose, option
from headstats.specs.groups import Calibration, MaxDrop, ScoredZeroing, Seed, Shares, Tasks, Unit
from headstats.specs.values import task_names

TEXT_TASKS = ("wikipedia", "books")


def adaptive_tasks() -> tuple[str, ...]:
    """What a skipping study measures on: the registered tasks, and passages cut into prompt and continuation."""
    return (*task_names(), *TEXT_TASKS)


@compose(
    Seed,
    MaxDrop,
    ScoredZeroing,
    Shares,
    Unit,
    Tasks,
    Calibration,
    defaults={
        "score": "ahon_ln",
        "shares": (0.1, 0.2, 0.3),
        "tasks": ("piqa", "hellaswag", "wikipedia"),
        "calibration_limit": 32,
    },
    choices={"tasks": adaptive_tasks},
    helps={
        "score": "the score that ranks heads on each prompt",
        "shares": "fractions of all heads skipped",
        "unit": "what a selection takes: head, or kv-group (whole KV groups)",
        "calibration_limit": "items of each task that calibrate the static selection (disjoint from the measured ones)",
    },
)
class AdaptiveSpec(Spec):
    """``[adaptive]`` of a skipping-study file (``analyses/adaptive_embedded.toml``): per task, items whose
    heads are skipped at each share by four selections (per-prompt, static, random, oracle), against the
    full model on the same items."""

    WHAT: ClassVar[str] = "skipping study"

    limits: tuple[int, ...] = option((80, 48, 80), "measured items of each task", minimum=1)
    prompt_tokens: int = option(64, "a passage's prompt tokens (wikipedia, books)", minimum=1)
    continuation_tokens: int = option(32, "a passage's scored continuation tokens (wikipedia, books)", minimum=2)
    loss_margin: float = option(0.02, "largest certified increase of a passage's loss, nats per token", minimum=0)

    def check(self) -> None:
        if self.target is not None or self.calibration != "eval":
            name = "target" if self.target is not None else "calibration"
            raise SpecError(
                name, "a skipping study chooses heads by share, calibrated on each task's own items: leave it out"
            )
        if len(self.limits) != len(self.tasks):
            raise SpecError("limits", f"gives {len(self.limits)} limits for {len(self.tasks)} tasks: one per task")
        if not self.shares or any(s <= 0 for s in self.shares) or list(self.shares) != sorted(set(self.shares)):
            raise SpecError(
                "shares", "needs increasing shares above 0 (the full model is always measured), e.g. [0.1, 0.2]"
            )
