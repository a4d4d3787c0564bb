"""``headstats paper --out OUT``: the study's Table 2, per-model tables and MMLU figures from its
published numbers, bundled with the package (:func:`headstats.report.paper.write_paper`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from headstats.cli.options import add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import Output, PaperSpec


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "paper",
        help="the study's Table 2 and MMLU figures from its published numbers (bundled; no model needed)",
        description="Write OUT/table2.csv, per-model tables, figures and an HTML/markdown report of the study's "
        "published MMLU intervention results.",
        epilog=examples("headstats paper --out reports/paper", "headstats paper --out reports/paper --dpi 150"),
    )
    add_spec(
        p,
        Output,
        required=("out",),
        helps={"out": "the report folder: table2.csv, per-model tables, figures, index.html, summary.md"},
    )
    add_spec(p, PaperSpec)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd  # pandas and matplotlib: not at `headstats --help`

    from headstats.report.paper import write_paper

    out = str(spec_from_args(args, Output).out)
    index = write_paper(out, spec=spec_from_args(args, PaperSpec))
    table = pd.read_csv(Path(out) / "table2.csv")
    with pd.option_context("display.width", 160):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}", na_rep=""))
    print(f"report: {index}", flush=True)
    return 0


register_command(Command("paper", add, position=50))
