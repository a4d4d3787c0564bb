"""``headstats compare REFERENCE OTHER [OTHER ...]``: the other models against the reference on the same
texts, answer first (:func:`headstats.pipeline.compare`); the flags are
:class:`headstats.specs.CompareSpec`'s."""

from __future__ import annotations

import argparse

from headstats.cli.options import add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import CompareSpec


def add(sub: Subparsers) -> None:
    parser = sub.add_parser(
        "compare",
        help="compare models with a reference on the same texts: how far, equivalent or not, how far each head moved",
        description=(
            "Collect every model on every --data dataset (resumable; tables under OUT/results), then per (model, "
            "dataset, score): W1 over the reference's IQR with a bootstrap interval, a paired permutation test, and "
            "equivalence against a margin (default: how far the reference moves under a prompt-format change on "
            "the same texts); per head when the architectures match (each head's shift against its margin). Prints "
            "the answer and writes OUT/index.html and OUT/summary.md."
        ),
        epilog=examples(
            "headstats compare smollm2-135m my-finetuned/ --data wikipedia,piqa --limit 64 --out compare/",
            "headstats compare smollm2-135m smollm2-135m@bfloat16 gemma3-270m --data wikipedia --out compare-bf16/",
        ),
    )
    parser.sections["what to run"].add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="the reference, then the models compared with it (NAME@bfloat16: a model in another dtype)",
    )
    add_spec(parser, CompareSpec, required=("out",))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if len(args.models) < 2:
        raise ValueError("headstats compare needs a reference and at least one other model: REFERENCE OTHER ...")
    spec = spec_from_args(args, CompareSpec, models=tuple(args.models))  # every option checked before loading
    from headstats.pipeline import compare_with_answer

    index, answer = compare_with_answer(spec.models, out=str(spec.out), spec=spec)
    print(answer, flush=True)
    print(f"report: {index}", flush=True)
    return 0


register_command(Command("compare", add, position=80))
