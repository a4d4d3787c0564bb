"""``headstats lm-eval ARGS...``: lm-eval's own command line with the ``headstats`` model registered
(:mod:`headstats.lmeval`). Everything after ``lm-eval`` goes to lm-eval untouched (a ``passthrough``
command); lm-eval, an optional dependency, is imported only when the command runs, so the other
commands never pay for it."""

from __future__ import annotations

import argparse

from headstats.cli.registry import Command, Subparsers, register_command


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lm-eval",
        add_help=False,
        prefix_chars="\0",
        help="run lm-eval's command line with `--model headstats` available (`headstats lm-eval --help`)",
    )
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, help="lm-eval's own arguments")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from headstats.lmeval import run_lm_eval  # lm-eval, torch and transformers: when the command runs

    return run_lm_eval(args.lm_eval_args)


register_command(Command("lm-eval", add, position=130, passthrough=True))
