"""``headstats finetune``: build a base -> SFT -> DPO -> GRPO chain (:mod:`headstats.jobs.finetune`);
its flags are :class:`headstats.specs.FinetuneSpec`'s."""

from __future__ import annotations

import argparse
import sys

from headstats.cli.options import add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import FinetuneSpec


def add(sub: Subparsers) -> None:
    parser = sub.add_parser(
        "finetune",
        help="train a fine-tuning chain (SFT -> DPO -> GRPO) from a base model with TRL",
        description=(
            "Train SFT -> DPO -> GRPO from BASE on the bundled data, writing checkpoints at 25/50/100% of each "
            "stage (each a directory `headstats collect --model` reads), recipe.json and metrics.json (learning "
            "evidence on held-out parts) under OUT/<base>-<recipe hash>-seed-<N>/, each checkpoint recording "
            "the recipe's hash, the seed and the code's git commit. Re-running resumes; a finished chain is not "
            "trained again. --seed unset trains with the recipe's seed (0 in the built-in one); the "
            "train/held-out split keeps the recipe's split_seed, so a seed replicate is measured on the same "
            "examples. Needs the `train` extra (pip install 'headstats[train]')."
        ),
        epilog=examples(
            "headstats finetune --base gemma3-270m --print-recipe",
            "headstats finetune --base smollm2-135m --stages sft --scale 0.5 --out finetune",
        ),
    )
    add_spec(parser, FinetuneSpec)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, FinetuneSpec)
    if spec.print_recipe:
        from headstats.jobs.finetune import chain_dir, recipe_of

        recipe = recipe_of(spec)
        print(recipe.to_json())
        print(f"chain: {chain_dir(spec.base, spec.out, recipe)}", file=sys.stderr)
        return 0
    from headstats.jobs.finetune import finetune

    chain = finetune(spec)
    print(f"chain: {chain.root}")
    for ckpt in chain.checkpoints:
        print(f"  {ckpt.name:<12} {ckpt.path}")
    return 0


register_command(Command("finetune", add, position=90))
