"""``headstats finetune``: build a base -> SFT -> DPO -> GRPO chain (:mod:`headstats.jobs.finetune`);
its flags are :class:`headstats.specs.FinetuneSpec`'s."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from headstats.cli.options import add_spec, spec_from_args
from headstats.specs import FinetuneSpec


def add_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="train a fine-tuning chain (SFT -> DPO -> GRPO) from a base model with TRL",
        description=(
            "Train SFT -> DPO -> GRPO from BASE on the bundled data, writing checkpoints at 25/50/100% of each "
            "stage (each a directory `headstats collect --model` reads), recipe.json and metrics.json (learning "
            "evidence on held-out parts) under OUT/<base>-<recipe hash>/. Re-running resumes; a finished chain "
            "is not trained again. Needs the `train` extra (pip install 'headstats[train]')."
        ),
    )
    add_spec(parser, FinetuneSpec)
    parser.set_defaults(func=_main)


def _recipe(spec: FinetuneSpec):
    from headstats.jobs.finetune import Recipe

    overrides: dict[str, object] = {}
    if spec.recipe_seed is not None:
        overrides["seed"] = spec.recipe_seed
    if spec.bf16:
        overrides["bf16"] = True
    if spec.recipe:
        data = json.loads(Path(spec.recipe).read_text())
        # A chain's recipe.json wraps the recipe with its provenance; a bare recipe works too.
        recipe = Recipe.from_dict(data["recipe"] if isinstance(data.get("recipe"), dict) else data)
        return dataclasses.replace(recipe, **overrides)  # type: ignore[arg-type]
    return Recipe.default(spec.scale, **overrides)


def _main(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, FinetuneSpec)
    recipe = _recipe(spec)
    if spec.print_recipe:
        print(recipe.to_json())
        return 0
    from headstats.jobs.finetune import finetune

    chain = finetune(
        spec.base, spec.chains, recipe, stages=spec.chain_stages, measure=spec.measure, eval_size=spec.eval_size
    )
    print(f"chain: {chain.root}")
    for ckpt in chain.checkpoints:
        print(f"  {ckpt.name:<12} {ckpt.path}")
    return 0
