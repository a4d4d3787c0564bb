"""``headstats ablate``: a task's accuracy while zeroing heads, a baseline and a score x target sweep per
model and task (:func:`headstats.jobs.sweep.run_sweep`), in this process or as jobs of a grid
(``--launcher``); each sweep's summary is printed when it is finished."""

from __future__ import annotations

import argparse

from headstats.cli.commands.summary import print_summary
from headstats.cli.options import add_resources, add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.options import narrow
from headstats.specs import AblateSection, LoadOptions, ModelsSection, Output, Resources, SummarySpec, SweepSpec


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "ablate",
        help="accuracy of a task while zeroing heads (baseline + score x target sweep)",
        description=(
            "Run the baseline once, calibrate each score's threshold for each target fraction, evaluate the task "
            "with heads zeroed at every (score, target) point, and write per-question rows to "
            "OUT/model=<slug>/task=<task>/ (one Parquet file per point; a re-run resumes). --task and --model take "
            "comma-separated lists."
        ),
        epilog=examples(
            "headstats ablate --model smollm2-135m --task piqa --limit 40 --out results/zeroing",
            "headstats ablate --model smollm2-135m --task mmlu --limit 32 --scores ahon_ln --targets 0,0.1,0.2 "
            "--out results/zeroing",
        ),
    )
    add_spec(p, ModelsSection)
    add_spec(p, AblateSection)
    add_spec(p, Output, helps={"out": "the results root: one Parquet file per sweep point, OUT/model=NAME/task=NAME/"})
    add_spec(p, SummarySpec)
    add_resources(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    summary = spec_from_args(args, SummarySpec)
    given = {"--model": getattr(args, "names", None), "--task": getattr(args, "task", None)}
    given["--out"] = getattr(args, "out", None)
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise ValueError(f"headstats ablate needs {', '.join(missing)} (headstats summary RESULTS prints results)")
    models = spec_from_args(args, ModelsSection)
    tasks = [t.strip() for t in str(args.task).split(",") if t.strip()]
    sweeps = {task: narrow(spec_from_args(args, AblateSection, task=task), SweepSpec) for task in tasks}
    out = str(spec_from_args(args, Output).out)
    resources = spec_from_args(args, Resources)
    load = narrow(models, LoadOptions)
    from headstats.jobs.sweep import run_sweep, sweep_grid  # torch: not at `headstats --help`

    if resources.launcher is not None:
        print(sweep_grid(models.names, sweeps, out, resources=resources, load=load).summary(), flush=True)
        print_summary(out, metric=summary.metric)
        return 0
    for model in models.names:
        for task, spec in sweeps.items():
            partition = run_sweep(model, task, out=out, spec=spec, load=load)
            model_part, task_part = (part.name.split("=", 1)[1] for part in (partition.parent, partition))
            print_summary(out, metric=summary.metric, model=model_part, task=task_part)
    return 0


register_command(Command("ablate", add, position=20))
