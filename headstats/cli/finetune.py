"""``headstats finetune``: build a base -> SFT -> DPO -> GRPO chain (:mod:`headstats.jobs.finetune`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="train a fine-tuning chain (SFT -> DPO -> GRPO) from a base model with TRL",
        description=(
            "Train SFT -> DPO -> GRPO from BASE on the bundled data, writing checkpoints at 25/50/100%% of each "
            "stage (each a directory `headstats collect --model` reads), recipe.json and metrics.json (learning "
            "evidence on held-out parts) under OUT/<base>-<recipe hash>/. Re-running resumes; a finished chain "
            "is not trained again. Needs the `train` extra (pip install 'headstats[train]')."
        ),
    )
    parser.add_argument("--base", default="gemma3-270m", help="embedded model name or save_pretrained directory")
    parser.add_argument("--out", default="finetune", help="directory that holds the chains (default: finetune)")
    parser.add_argument("--recipe", default=None, help="a recipe.json to train with (default: the built-in recipe)")
    parser.add_argument(
        "--scale", type=float, default=1.0,
        help="multiply every stage's steps and batch size (e.g. 8 on a GPU); ignored with --recipe",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=None, help="training and split seed (default 0)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (fast on GPUs, slow on most CPUs)")
    parser.add_argument("--stages", default="sft,dpo,grpo", help="a leading part of sft,dpo,grpo to build")
    parser.add_argument(
        "--measure", choices=("ends", "all", "none"), default="ends",
        help="learning metrics at each stage's start and end (ends), at every checkpoint (all), or none",
    )  # fmt: skip
    parser.add_argument("--eval-size", type=int, default=None, help="held-out examples per learning metric")
    parser.add_argument("--print-recipe", action="store_true", help="print the recipe as JSON and exit")
    parser.set_defaults(func=_main)


def _recipe(args: argparse.Namespace):
    from headstats.jobs.finetune import Recipe

    overrides: dict[str, object] = {}
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.bf16:
        overrides["bf16"] = True
    if args.recipe:
        import dataclasses

        data = json.loads(Path(args.recipe).read_text())
        # A chain's recipe.json wraps the recipe with its provenance; a bare recipe works too.
        recipe = Recipe.from_dict(data["recipe"] if isinstance(data.get("recipe"), dict) else data)
        return dataclasses.replace(recipe, **overrides)  # type: ignore[arg-type]
    return Recipe.default(args.scale, **overrides)


def _main(args: argparse.Namespace) -> int:
    recipe = _recipe(args)
    if args.print_recipe:
        print(recipe.to_json())
        return 0
    from headstats.jobs.finetune import finetune

    stages = [s for s in args.stages.split(",") if s]
    chain = finetune(args.base, args.out, recipe, stages=stages, measure=args.measure, eval_size=args.eval_size)
    print(f"chain: {chain.root}")
    for ckpt in chain.checkpoints:
        print(f"  {ckpt.name:<12} {ckpt.path}")
    return 0
