"""Fine-tuning: ``headstats finetune``'s chain and a fine-tuning study's pre-registered design."""

from __future__ import annotations

from typing import ClassVar

from headstats.names import check_name
from headstats.options import Spec, SpecError, compose, option
from headstats.specs.groups import Equivalence, Output, Seed, Stages
from headstats.specs.values import OUTPUT, RESOURCES, STATISTICS, WHAT_TO_RUN

FINETUNE_STAGES: tuple[str, ...] = ("sft", "dpo", "grpo")
MEASURES: tuple[str, ...] = ("ends", "all", "none")


@compose(
    Seed,
    Stages,
    Output,
    # unset seed: the recipe's; the chains go under finetune/; the stages are the chain's
    defaults={"seed": None, "out": "finetune", "stages": FINETUNE_STAGES},
    choices={"stages": FINETUNE_STAGES},
    helps={
        "out": "the folder the chain is built in: one checkpoint folder per stage, and its records",
        "seed": "training seed: the order of the training data and every draw of training (default: the recipe's)",
    },
)
class FinetuneSpec(Spec):
    """``headstats finetune``: a base -> SFT -> DPO -> GRPO chain (:func:`headstats.jobs.finetune.finetune`)
    under ``out``. The recipe it trains with (:func:`headstats.jobs.finetune.recipe_of`) is the built-in
    one at ``scale``, or the ``recipe`` file, with ``seed`` and ``bf16`` on top. ``seed`` unset is the
    recipe's (0 in the built-in one); the train/held-out split keeps the recipe's ``split_seed``, so a
    seed replicate is measured on the same examples. ``stages``: a leading part of sft,dpo,grpo."""

    WHAT: ClassVar[str] = "finetune"
    GROUP: ClassVar[str | None] = WHAT_TO_RUN

    base: str = option("gemma3-270m", "embedded model name or save_pretrained directory")
    recipe: str | None = option(None, "a recipe.json to train with (default: the built-in recipe)")
    scale: float = option(
        1.0, "multiply every stage's steps and batch size (e.g. 8 on a GPU); ignored with --recipe", minimum=0
    )
    bf16: bool = option(False, "bf16 autocast (fast on GPUs, slow on most CPUs)", group=RESOURCES)
    measure: str = option(
        "ends",
        "learning metrics at each stage's start and end (ends), at every checkpoint (all), or none",
        choices=MEASURES,
        noun="measure",
        group=STATISTICS,
    )
    eval_size: int | None = option(None, "held-out examples per learning metric", minimum=1, group=STATISTICS)
    print_recipe: bool = option(
        False, "print the recipe as JSON (and its chain's directory) and exit", toml=False, group=OUTPUT
    )

    def check(self) -> None:
        if not self.scale > 0:
            raise SpecError("scale", f"must be above 0, not {self.scale:g}")
        if list(self.stages) != list(FINETUNE_STAGES[: len(self.stages)]) or not self.stages:
            raise SpecError(
                "stages",
                f"must be a leading part of {','.join(FINETUNE_STAGES)} (later stages start from the earlier ones), "
                f"not {','.join(self.stages)}",
            )


def _stage_end(value: str) -> None:
    stage, _, step = str(value).partition("@")
    if stage not in FINETUNE_STAGES or not step.isdigit():
        raise ValueError(f"a stage end is STAGE@STEP with STAGE one of {', '.join(FINETUNE_STAGES)}, not {value!r}")


HOLM_FAMILIES: tuple[str, ...] = ("stage_end", "all")
# A seed study's decision rules (docs/guides/finetuning-confirm.md): the seeds' mean base -> stage end
# distance against the margin, or (registered before rules were named) the contrast of that distance
# with the seed -> seed distance.
SEED_RULES: tuple[str, ...] = ("distance", "contrast")


@compose(Equivalence)
class FinetuneDesign(Spec):
    """``[design]`` of a fine-tuning study file (the table that marks its kind,
    :mod:`headstats.studies.finetuning`): the chains, seeds and stage ends, and the pre-registered
    decision with seeds as the unit (the file's comment block gives the reasons). Checked when the file
    loads, so a misspelt key fails before any work; the report that decides reads it."""

    WHAT: ClassVar[str] = "design"

    recipe_hash: str = option(
        "",
        "the hash, without the seed, of the recipe every chain trains with (in its directory's name)",
        cli=False,
        each=lambda value: check_name(value, "the value") if value else value,
    )
    base_model: str | None = option(
        None, "the base model every chain starts from (default: the one a chain of this recipe records)", cli=False
    )
    recipe_file: str | None = option(
        None, "the recipe file every chain trains with (default: the recipe a chain of this recipe records)", cli=False
    )
    chains: str = option("", "the folder the chains are built in", cli=False)
    seeds: tuple[int, ...] = option((), "the training seeds, one chain each", cli=False)
    stage_ends: tuple[str, ...] = option((), "the checkpoints compared with the base, as STAGE@STEP", each=_stage_end)
    texts: int = option(128, "texts per dataset", minimum=1, cli=False)
    family: str = option(
        "stage_end",
        "Holm family of the moved tests: the cells of one stage end, or every cell",
        choices=HOLM_FAMILIES,
        noun="Holm family",
        cli=False,
    )
    min_seeds: int = option(6, "fewest seeds that learned which still decide a stage end", minimum=2, cli=False)
    rule: str | None = option(
        None,
        "the decision rule: 'distance' (the seeds' mean base -> stage end distance against the margin) or "
        "'contrast' (that distance minus the seed -> seed distance, the rule of designs registered before rules "
        "were named; unset reads as it)",
        choices=SEED_RULES,
        noun="seed study rule",
        cli=False,
    )
    power_moved: float | None = option(None, "simulated power of the moved test at the margin", cli=False)
    power_equivalent: float | None = option(None, "simulated power of the equivalence test at no movement", cli=False)
    cpu_hours: float | None = option(None, "planned CPU hours (training and scoring)", minimum=0, cli=False)

    def check(self) -> None:
        if self.margin is None:
            raise SpecError("margin", "no margin given: state it in W1 over the base's IQR, before the data")
        if not 0 < self.alpha < 1:
            raise SpecError("alpha", f"must lie strictly between 0 and 1, not {self.alpha}")
        if len(self.seeds) < self.min_seeds:
            raise SpecError("seeds", f"lists {len(self.seeds)} seeds, fewer than min_seeds = {self.min_seeds}")
