"""Heads skipped per prompt: a skipping study's ``[adaptive]`` (:mod:`headstats.jobs.adaptive`)."""

from __future__ import annotations

from typing import ClassVar

from headstats.options import Spec, SpecError, compose, option
from headstats.specs.groups import MaxDrop, Seed
from headstats.specs.values import UNITS, check_fraction, check_score_id, score_ids, task_names

TEXT_TASKS = ("wikipedia", "books")


def adaptive_tasks() -> tuple[str, ...]:
    """What a skipping study measures on: the registered tasks, and passages cut into prompt and continuation."""
    return (*task_names(), *TEXT_TASKS)


@compose(Seed, MaxDrop)
class AdaptiveSpec(Spec):
    """``[adaptive]`` of a skipping-study file (``analyses/adaptive_embedded.toml``): per task, items whose
    heads are skipped at each share by four selections (per-prompt, static, random, oracle), against the
    full model on the same items."""

    WHAT: ClassVar[str] = "skipping study"

    score: str = option("ahon_ln", "the score that ranks heads on each prompt", choices=score_ids, each=check_score_id)
    shares: tuple[float, ...] = option((0.1, 0.2, 0.3), "fractions of all heads skipped", each=check_fraction)
    unit: str = option(
        "head", "what a selection takes: head, or kv-group (whole KV groups)", choices=UNITS, noun="unit"
    )
    tasks: tuple[str, ...] = option(("piqa", "hellaswag", "wikipedia"), "tasks", choices=adaptive_tasks, noun="task")
    limits: tuple[int, ...] = option((80, 48, 80), "measured items of each task", minimum=1)
    calibration_limit: int = option(32, "items of each task that calibrate the static selection", minimum=1)
    prompt_tokens: int = option(64, "a passage's prompt tokens (wikipedia, books)", minimum=1)
    continuation_tokens: int = option(32, "a passage's scored continuation tokens (wikipedia, books)", minimum=2)
    loss_margin: float = option(0.02, "largest certified increase of a passage's loss, nats per token", minimum=0)

    def check(self) -> None:
        if len(self.limits) != len(self.tasks):
            raise SpecError("limits", f"gives {len(self.limits)} limits for {len(self.tasks)} tasks: one per task")
        if not self.shares or any(s <= 0 for s in self.shares) or list(self.shares) != sorted(set(self.shares)):
            raise SpecError(
                "shares", "needs increasing shares above 0 (the full model is always measured), e.g. [0.1, 0.2]"
            )
