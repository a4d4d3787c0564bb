"""``headstats frontier FILE``: ``headstats run FILE`` for a pruning frontier file
(:mod:`headstats.studies.frontier`); its flags are :class:`headstats.specs.FrontierRunSpec`'s."""

from __future__ import annotations

import argparse

from headstats.cli.commands.run import run_study_file
from headstats.cli.options import examples, spec_command, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import FrontierRunSpec


def add(sub: Subparsers) -> None:
    spec_command(
        sub,
        "frontier",
        run,
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


def run(args: argparse.Namespace) -> int:
    """``headstats frontier FILE``: ``headstats run FILE`` for a frontier file (its stages: collect = the
    calibration means, ablate = the pruned points, time = every finished point timed again, report)."""
    command = spec_from_args(args, FrontierRunSpec)
    from headstats.studies import kind_of  # every kind's jobs and report: not at `headstats --help`

    kind = kind_of(command.analysis)
    if kind.name != "frontier":
        table = f" (it has [{kind.section}])" if kind.section else ""
        raise ValueError(
            f"{command.analysis} is {kind.article} file{table}: run it with headstats run {command.analysis}"
        )
    return run_study_file(command, quiet=getattr(args, "quiet", False))


register_command(Command("frontier", add, position=110))
