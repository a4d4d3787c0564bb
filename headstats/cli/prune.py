"""``headstats prune``: remove the heads a score calls inactive and save the smaller model
(:mod:`headstats.jobs.prune`); its flags are :class:`headstats.jobs.specs.PruneSpec`'s."""

from __future__ import annotations

import argparse

from headstats.cli.options import add_spec, spec_from_args
from headstats.jobs.specs import PruneSpec


def add_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prune",
        help="remove inactive heads physically and save the smaller model",
        description=(
            "Rank every head by the mean of --score over a calibration set (default: 64 bundled Wikipedia "
            "passages), remove the --share of heads that look most inactive (or the largest share certified "
            "within --max-drop on the --certify task) from the weights, and write the model to --out with "
            "pruning.json. Load it with headstats.load_model(OUT) or "
            "AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)."
        ),
    )
    add_spec(parser, PruneSpec)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, PruneSpec)
    from headstats.jobs.prune import run_prune

    record = run_prune(spec)
    print(
        f"{spec.out}: removed {record['n_removed']} of {record['n_heads']} heads ({record['share']:.0%}) by "
        f"{record['score']}; parameters {record['params_before']:,} -> {record['params_after']:,}"
    )
    return 0
