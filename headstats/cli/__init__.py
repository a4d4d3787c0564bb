"""``headstats ...`` commands. Each command lives next to the code it drives: a module listed in
COMMAND_MODULES defines ``add_command(subparsers)``, which adds its parser and sets ``func``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES = (
    "headstats.jobs.collect",
    "headstats.jobs.sweep",
    "headstats.report.writer",
    "headstats.report.paper",
    "headstats.jobs.analysis",
)


def build_parser() -> argparse.ArgumentParser:
    from headstats import __version__

    parser = argparse.ArgumentParser(
        prog="headstats", description="Find and evaluate inactive attention heads in pretrained decoder LLMs."
    )
    parser.add_argument("--version", action="version", version=f"headstats {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # a command not built yet
                continue
            raise
        module.add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from headstats.io.assets import AssetError
    from headstats.io.store import StoreError

    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except KeyboardInterrupt:
        print("headstats: interrupted; finished parts are kept and a re-run resumes from them", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, AssetError, StoreError, RuntimeError) as err:
        print(f"headstats: error: {err}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
