"""``headstats collect``: score every head of each model on each dataset into Parquet tables, in this
process (:func:`headstats.jobs.collect.collect_models`) or as jobs of a grid (``--launcher``)."""

from __future__ import annotations

import argparse

from headstats.cli.options import add_resources, add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.options import narrow
from headstats.specs import CollectSection, CollectSpec, LoadOptions, ModelsSection, Output, Resources


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "collect",
        help="score every head of a model on datasets into Parquet tables",
        description="Stream datasets through models and write one row per (sequence, layer, head) with every "
        "score id. Re-running the same command resumes an interrupted run.",
        epilog=examples(
            "headstats collect --model smollm2-135m --dataset wikipedia --limit 16 --out results/scores",
            "headstats collect --model smollm2-135m,gemma3-270m --dataset mmlu,piqa --limit 32 --scores ahon_ln,awft "
            "--out results/scores",
        ),
    )
    add_spec(p, ModelsSection, required=("names",))
    add_spec(p, CollectSection, required=("datasets",))
    add_spec(
        p,
        Output,
        required=("out",),
        helps={"out": "the results root: one score table per model and dataset, OUT/model=NAME/dataset=NAME/"},
    )
    add_resources(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    models = spec_from_args(args, ModelsSection)  # an unusable --device fails here, before any work
    section = spec_from_args(args, CollectSection)
    out = str(spec_from_args(args, Output).out)
    resources = spec_from_args(args, Resources)
    spec, load = narrow(section, CollectSpec), narrow(models, LoadOptions)
    from headstats.jobs.collect import check_collection, collect_models  # torch: not at `headstats --help`

    if resources.launcher is not None:
        from headstats.jobs.grid import collect_grid

        check_collection(models.names, section.datasets, out, spec)
        result = collect_grid(models.names, section.datasets, out, resources=resources, spec=spec, load=load)
        print(result.summary(), flush=True)
        return 0
    for table in collect_models(models.names, section.datasets, out, spec=spec, load=load):
        print(f"{table.partition}: {table.n_samples} sequences ({table.n_new} new)", flush=True)
    return 0


register_command(Command("collect", add, position=10))
