"""``headstats prune``: remove the heads a score calls inactive and save the smaller model
(:mod:`headstats.jobs.prune`); its flags are :class:`headstats.jobs.specs.PruneSpec`'s."""

from __future__ import annotations

import argparse

from headstats.cli.options import add_spec, spec_from_args
from headstats.jobs.specs import FrontierCommand, PruneSpec


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
    frontier = subparsers.add_parser(
        "frontier",
        help="prune every model of an analysis file at every share by every score; accuracy, speed, report",
        description=(
            "Run a pruning frontier analysis file (e.g. analyses/prune_embedded.toml): select and remove heads "
            "at each share by each score, evaluate the held-out tasks, time prefill and decode against the "
            "unpruned model side by side, and write the report. Re-running resumes."
        ),
    )
    add_spec(frontier, FrontierCommand)
    frontier.set_defaults(func=_frontier)


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
    command = spec_from_args(args, FrontierCommand)
    from headstats.jobs.frontier import load_frontier, run_frontier

    spec = load_frontier(command.analysis)
    if "run" in command.stages:
        seconds = run_frontier(spec, list(command.only) if command.only else None)
        print(f"{spec.results}: frontier run took {seconds / 60:.1f} min")
    if "report" in command.stages:
        from headstats.report.frontier import build_frontier_report

        print(build_frontier_report(spec))
    return 0
