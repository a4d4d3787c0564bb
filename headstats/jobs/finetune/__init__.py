"""Build a fine-tuning chain from a base model: SFT -> DPO -> GRPO with TRL, checkpointed along the way.

This is how the study's comparison (base vs its fine-tuned versions, docs/guides/compare.md) runs on weights a user
has: OLMo-2's post-training recipe in miniature. Supervised fine-tuning on question -> answer pairs
(TriviaQA, Natural Questions, SciQ), preference tuning with DPO on gold vs wrong answers, and
reinforcement learning with a verifiable reward (GRPO). The material and its train / held-out split
live in :mod:`headstats.jobs.finetune_data`. One module per idea:

- :mod:`~headstats.jobs.finetune.recipe`: the recipe, an option set whose hash names the chain;
- :mod:`~headstats.jobs.finetune.layout`: the chain's directory, its records and checkpoints;
- :mod:`~headstats.jobs.finetune.evidence`: each stage's learning metrics on held-out examples;
- :mod:`~headstats.jobs.finetune.training`: one stage trained with TRL;
- :mod:`~headstats.jobs.finetune.chain`: the chain built, or finished after an interruption
  (:func:`finetune`);
- :mod:`~headstats.jobs.finetune.study`: a seed study (a study file with ``[design]``), its chains and
  checkpoints;
- :mod:`~headstats.jobs.finetune.records`: a chain as a comparison sees it: each checkpoint's stage and
  step, the chain's recipe and metrics copied beside the score tables, and whether each stage learned.

:func:`finetune` is loaded on first use: the recipe and the layout are read without torch.
"""

from __future__ import annotations

from headstats.jobs.finetune.layout import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    RECIPE_FILE,
    Chain,
    Checkpoint,
    base_identity,
    chain_dir,
    checkpoint_path,
    is_complete,
    iter_checkpoints,
)
from headstats.jobs.finetune.recipe import STAGES, Recipe, StageRecipe, read_recipe, recipe_of


def __getattr__(name: str):
    if name == "finetune":
        from headstats.jobs.finetune.chain import finetune

        return finetune
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHECKPOINT_FILE",
    "METRICS_FILE",
    "RECIPE_FILE",
    "STAGES",
    "Chain",
    "Checkpoint",
    "Recipe",
    "StageRecipe",
    "base_identity",
    "chain_dir",
    "checkpoint_path",
    "finetune",
    "is_complete",
    "iter_checkpoints",
    "read_recipe",
    "recipe_of",
]
