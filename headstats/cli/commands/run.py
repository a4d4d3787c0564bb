"""``headstats run FILE``: a study file of any kind through its kind (:mod:`headstats.studies`), its
stages resuming and the report last; :func:`run_study_file` also runs ``headstats frontier``."""

from __future__ import annotations

import argparse
from pathlib import Path

from headstats.cli.options import add_resources, add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.options import SpecError
from headstats.specs import Resources, RunSpec


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="run a study file (analyses/*.toml) of any kind: its stages, resuming, the report last",
        description="Run the stages of a study file, skipping work that is already done. The file's kind decides "
        "what its stages compute (headstats.studies): an analysis collects score tables and runs zeroing sweeps, "
        "a confirmation ([confirm]) runs each computation path's sweeps, a frontier ([prune]) prunes and evaluates, "
        "a comparison ([compare]) collects every model, a fine-tuning study ([design]) trains its seeds' chains "
        "(--stages train) and scores their checkpoints; the report stage rebuilds the report from the results. "
        "--dry-run counts what is left of each unit and times it on this machine. --dtype and --device override "
        "the file's settings; in a confirmation file each computation path sets the dtype, and --paths chooses "
        "among them.",
        epilog=examples(
            "headstats run analyses/embedded.toml --dry-run",
            "headstats run analyses/prune_embedded.toml --stages time,report",
        ),
    )
    add_spec(p, RunSpec)
    add_resources(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, RunSpec)
    from headstats.studies import kind_of  # every kind's jobs and report: not at `headstats --help`

    kind = kind_of(spec.analysis)
    try:
        resources = spec_from_args(args, Resources)
        grid = "--launcher" if resources.launcher is not None else None
    except SpecError as err:  # a job's setting without a launcher: refused by a kind that takes none, as below
        if kind.grid:
            raise
        resources, grid = None, err.label
    return run_study_file(spec, resources=resources, grid=grid, quiet=getattr(args, "quiet", False))


def run_study_file(run: RunSpec, *, resources: Resources | None = None, grid: str | None = None, quiet: bool) -> int:
    """``headstats run FILE`` (and its aliases): the file through its kind (:mod:`headstats.studies`),
    printing the dry run or the report's index."""
    from headstats.jobs.dryrun import DryRun
    from headstats.studies import kind_of, run_loaded

    study = kind_of(run.analysis).load(Path(run.analysis))  # every key checked before any work
    result = run_loaded(study, run, resources=resources, grid=grid, progress=not quiet)
    if isinstance(result, DryRun):
        print(result.summary())
    elif result is not None:
        print(str(result), flush=True)
    return 0


register_command(Command("run", add, position=60))
