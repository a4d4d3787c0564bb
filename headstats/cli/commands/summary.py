"""``headstats summary RESULTS``: the per-point and per-curve summaries of intervention results, printed
as :mod:`headstats.cli.tables` lays them out (no model is loaded); :func:`print_summary` also ends each
``headstats ablate`` sweep."""

from __future__ import annotations

import argparse
import os

from headstats.cli.options import add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import Results, SummaryOutput, SummarySpec


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "summary",
        help="per-point and per-curve summaries of intervention results (no model is loaded)",
        description="Print accuracy, paired differences and curve summaries of the headstats ablate results "
        "under RESULTS.",
        epilog=examples(
            "headstats summary results/study",
            "headstats summary results/study --format csv --table points > points.csv",
        ),
    )
    add_spec(p, Results, helps={"results": "a results directory holding sweep points, as headstats ablate writes them"})
    add_spec(p, SummarySpec)
    add_spec(p, SummaryOutput)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output = spec_from_args(args, SummaryOutput)
    print_summary(
        spec_from_args(args, Results).results,
        metric=spec_from_args(args, SummarySpec).metric,
        fmt=output.format,
        table=output.table,
    )
    return 0


def print_summary(
    root: str | os.PathLike,
    *,
    metric: str = "correct",
    model: str | None = None,
    task: str | None = None,
    fmt: str = "table",
    table: str = "both",
) -> None:
    """Print the per-point and per-curve summaries of the intervention results under ``root``
    (only ``model`` / ``task``, given as their partition values, if set) in ``fmt``
    (:func:`headstats.cli.tables.format_summary`)."""
    # pandas and the readers load when a summary is printed, not at `headstats --help`
    from headstats.cli.tables import format_summary
    from headstats.io import store
    from headstats.stats.summary import summarize_curves, summarize_interventions

    df = store.read_interventions(root)
    for col, value in (("model", model), ("task", task)):
        if value is not None and col in df.columns:
            df = df[df[col] == value]
    points = summarize_interventions(df, metric=metric)
    curves = summarize_curves(df, points)
    print(format_summary(points, curves, metric=metric, fmt=fmt, table=table), flush=True)


register_command(Command("summary", add, position=30))
