"""``headstats prune``: remove the heads a score calls inactive and save the smaller model
(:mod:`headstats.jobs.prune`); its flags are :class:`headstats.specs.PruneSpec`'s."""

from __future__ import annotations

import argparse

from headstats.cli.options import examples, spec_command, spec_from_args
from headstats.specs import FrontierRunSpec, PruneSpec


def add_command(subparsers: argparse._SubParsersAction) -> None:
    spec_command(
        subparsers,
        "prune",
        _main,
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
    spec_command(
        subparsers,
        "frontier",
        _frontier,
        FrontierRunSpec,
        help="prune every model of an analysis file at every share by every score; accuracy, speed, report",
        description=(
            "The same as headstats run FILE for a pruning frontier file (e.g. analyses/prune_embedded.toml): rank "
            "heads on the "
            "calibration set (stage collect), remove them at each share by each score, evaluate the held-out tasks "
            "and time prefill and decode against the unpruned model side by side (stage ablate), and write the "
            "report (stage report). Re-running resumes. --stages time,report times every finished point again on "
            "this machine (a quiet one, or a GPU) and keeps its answers."
        ),
        epilog=examples(
            "headstats frontier analyses/prune_embedded.toml --dry-run",
            "headstats frontier analyses/prune_embedded.toml --stages report",
        ),
    )


def _main(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, PruneSpec)
    from headstats.jobs.prune import run_prune

    record = run_prune(spec)
    print(
        f"{spec.out}: removed {record['n_removed']} of {record['n_heads']} heads ({record['share']:.0%}) by "
        f"{record['score']}; parameters {record['params_before']:,} -> {record['params_after']:,}"
    )
    return 0


def _frontier(args: argparse.Namespace) -> int:
    """``headstats frontier FILE``: ``headstats run FILE`` for a frontier file (its stages: collect = the
    calibration means, ablate = the pruned points, time = every finished point timed again, report)."""
    command = spec_from_args(args, FrontierRunSpec)
    from headstats.cli.commands import run_study_file
    from headstats.studies import kind_of

    kind = kind_of(command.analysis)
    if kind.name != "frontier":
        table = f" (it has [{kind.section}])" if kind.section else ""
        raise ValueError(
            f"{command.analysis} is {kind.article} file{table}: run it with headstats run {command.analysis}"
        )
    return run_study_file(command, quiet=getattr(args, "quiet", False))
