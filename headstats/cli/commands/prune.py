"""``headstats prune``: remove the heads a score calls inactive and save the smaller model
(:mod:`headstats.jobs.prune`); its flags are :class:`headstats.specs.PruneSpec`'s."""

from __future__ import annotations

import argparse

from headstats.cli.options import examples, spec_command, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import PruneSpec


def add(sub: Subparsers) -> None:
    spec_command(
        sub,
        "prune",
        run,
        PruneSpec,
        help="remove inactive heads physically and save the smaller model",
        description=(
            "Rank every head by the mean of --score over a calibration set (default: 64 bundled Wikipedia "
            "passages), remove the fraction --share of heads that look most inactive (or the largest share certified "
            "within --max-drop on the --certify task) from the weights, and write the model to --out with "
            "pruning.json. Load it with headstats.load_model(OUT) or "
            "AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True). Its files and folders are created "
            "with your umask: readable by others under the usual 022 (0644 and 0755), yours alone under 077."
        ),
        epilog=examples(
            "headstats prune --model smollm2-135m --score ahon_ln --share 0.1 --out pruned/smollm2-10pct",
            "headstats prune --model smollm2-135m --certify piqa --share 0.05,0.1,0.2 --out pruned/smollm2-certified",
        ),
    )


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, PruneSpec)
    from headstats.jobs.prune import run_prune  # torch: not at `headstats --help`

    record = run_prune(spec)
    print(
        f"{spec.out}: removed {record['n_removed']} of {record['n_heads']} heads ({record['share']:.0%}) by "
        f"{record['score']}; parameters {record['params_before']:,} -> {record['params_after']:,}"
    )
    return 0


register_command(Command("prune", add, position=100))
