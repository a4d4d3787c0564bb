"""``headstats prune``: remove the heads a score calls inactive and save the smaller model
(:mod:`headstats.jobs.prune`); its flags are :class:`headstats.specs.PruneSpec`'s."""

from __future__ import annotations

import argparse
from dataclasses import replace

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
            "AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)."
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
            "Run a pruning frontier analysis file (e.g. analyses/prune_embedded.toml): rank heads on the "
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


def _time_stage_plan(frontier, models: list[str]) -> str:
    """The ``--dry-run`` lines of the time stage: per model the points to time again and, from the last
    ended round, about how long (loads no model)."""
    from headstats.jobs.frontier import retime_left

    lines = []
    for name in models:
        left, finished, seconds = retime_left(frontier, name)
        if seconds is None:
            how_long = "no ended round to estimate from"
        else:
            how_long = f"about {left * seconds / 60:.1f} min at the last round's {seconds:.0f} s per point"
        lines.append(f"{name}: stage time: {left} of {finished} finished points to time again ({how_long})")
    return "\n".join(lines)


def _frontier(args: argparse.Namespace) -> int:
    """Stages of a frontier file: collect = the calibration means, ablate = the pruned points (the
    unpruned baseline first), time = every finished point timed again here, report = the report."""
    command = spec_from_args(args, FrontierRunSpec)
    from headstats.jobs.analysis import given_load
    from headstats.jobs.frontier import chosen_models, load_frontier, retime_model, run_frontier

    frontier = load_frontier(command.analysis)
    frontier = replace(frontier, models=replace(frontier.models, **given_load(command)))  # --dtype, --device, ...
    if getattr(args, "quiet", False):  # --quiet: no progress bars, whatever the file says
        frontier = replace(frontier, prune=replace(frontier.prune, progress=False))
    models = chosen_models(frontier, command)
    if command.dry_run:
        from headstats.jobs.dryrun import dry_run_frontier

        if {"collect", "ablate"} & set(command.stages):
            print(dry_run_frontier(frontier, models).summary())
        if "time" in command.stages:
            print(_time_stage_plan(frontier, models))
        return 0
    if {"collect", "ablate"} & set(command.stages):
        seconds = run_frontier(frontier, models, calibrate_only="ablate" not in command.stages)
        print(f"{frontier.results}: frontier run took {seconds / 60:.1f} min")
    if "time" in command.stages:
        for name in models:
            print(f"{retime_model(frontier, name)}: every finished point timed again")
    if "report" in command.stages:
        from headstats.report.frontier import build_frontier_report
        from headstats.report.frontier_paired import build_paired_report

        build = build_paired_report if frontier.prune.timing == "paired" else build_frontier_report
        print(build(frontier))
    return 0
