"""``headstats report RESULTS --out OUT``: the HTML and markdown report of a results folder's score tables
and intervention results (:func:`headstats.report.writer.build_report`; no model is loaded)."""

from __future__ import annotations

import argparse

from headstats.cli.options import add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import Output, ReportSpec, Results


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "report",
        help="HTML + markdown report of score tables and intervention results (no model is loaded)",
        description="Build OUT/index.html (self-contained) and OUT/summary.md from the Parquet results under "
        "RESULTS: score distributions, distances, stability, overlap, intervention curves and ranks.",
        epilog=examples(
            "headstats report results/study --out reports/mine",
            "headstats report results/study --out reports/mine --n-boot 1000 --metric correct_norm",
        ),
    )
    add_spec(p, Results)
    add_spec(p, Output, required=("out",), helps={"out": "the report folder: index.html, summary.md, tables, figures"})
    add_spec(p, ReportSpec)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from headstats.report.writer import build_report  # matplotlib: not at `headstats --help`

    results, out = spec_from_args(args, Results).results, spec_from_args(args, Output).out
    spec = spec_from_args(args, ReportSpec)
    index = build_report(results, str(out), spec=spec)
    print(f"report: {index}", flush=True)
    return 0


register_command(Command("report", add, position=40))
