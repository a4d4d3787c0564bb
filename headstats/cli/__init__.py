"""``headstats ...``: the command line. argparse only: every flag is derived from the option
declarations of :mod:`headstats.specs` (:mod:`headstats.cli.options`), and each command is one module
of :mod:`headstats.cli.commands` that registers itself (:mod:`headstats.cli.registry`), builds its
specs from the parsed flags and calls the library.

- :mod:`~headstats.cli.options`: the flags derived from the specs' option declarations, and the parser;
- :mod:`~headstats.cli.registry`: the registry of commands (:class:`~headstats.cli.registry.Command`,
  ``register_command``) and the order ``headstats --help`` lists them in;
- :mod:`~headstats.cli.commands`: the subcommands, one module each, found by importing the package;
- :mod:`~headstats.cli.tables`: how ``headstats summary`` prints its summaries: an aligned table, or
  every column as CSV or JSON;
- ``__main__``: ``python -m headstats.cli``, the same as the ``headstats`` command.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence

from headstats import __version__
from headstats.cli.commands import COMMANDS
from headstats.cli.options import CommandLineError, Parser, examples, join_dash_values
from headstats.cli.registry import in_help_order

logger = logging.getLogger("headstats")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so captured and redirected streams work)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


PREFIX = "headstats: "


def without_prefix(text: str) -> str:
    """``text`` without a leading "headstats: ", which the command line adds itself (never twice)."""
    return text[len(PREFIX) :] if text.startswith(PREFIX) else text


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return PREFIX + without_prefix(super().format(record))


_HANDLER = _StderrHandler()
_HANDLER.setFormatter(_Formatter("%(message)s"))

# Errors that end a command with one line (exit status 2) instead of a traceback. headstats' own
# error classes are looked up only in modules already imported (an error of a module never
# imported cannot have been raised), so that `headstats --help` imports neither.
_ONE_LINE_ERRORS = (ValueError, FileNotFoundError, RuntimeError)
_ONE_LINE_ERROR_CLASSES = (("headstats.io.assets", "AssetError"), ("headstats.io.store", "StoreError"))


def _is_one_line_error(err: BaseException) -> bool:
    classes = [getattr(sys.modules[m], name) for m, name in _ONE_LINE_ERROR_CLASSES if m in sys.modules]
    return isinstance(err, (*_ONE_LINE_ERRORS, *classes))


def configure_logging(quiet: bool = False, verbose: bool = False) -> None:
    """headstats' messages on stderr: progress and results (INFO), with ``verbose`` also the details
    of each step (DEBUG: batches written, probes timed, files read); with ``quiet`` only warnings and
    errors, and no progress bars."""
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    if quiet:  # the bars transformers draws while loading weights too
        quiet_hub_bars()


def quiet_hub_bars() -> None:
    """No progress bars from transformers or the Hub. Without importing transformers (a dry run never
    does): its bars start off once the Hub's are off when it is first imported."""
    if "transformers.utils.logging" in sys.modules:
        sys.modules["transformers.utils.logging"].disable_progress_bar()
        return
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()


# -q / -v: before the command name (headstats -q run ...) or after it (headstats run -q ...).
VERBOSITY = (
    (("-q", "--quiet"), "warnings and errors only, no progress bars"),
    (("-v", "--verbose"), "debug messages too (each batch written, each probe timed, ...)"),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``headstats`` parser: every registered command, in :func:`~headstats.cli.registry.in_help_order`."""
    parser = Parser(
        prog="headstats",
        description="Find and evaluate inactive attention heads in pretrained decoder LLMs.",
        epilog=examples(
            "headstats list",
            "headstats collect --model smollm2-135m --dataset wikipedia --limit 16 --out results/scores",
            "headstats run analyses/embedded.toml --dry-run",
            "headstats COMMAND --help",
        ),
    )
    parser.add_argument("--version", action="version", version=f"headstats {__version__}")
    for flags, text in VERBOSITY:
        parser.add_argument(*flags, action="store_true", default=False, help=text)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for command in in_help_order():
        command.add(sub)
        if command.name not in sub.choices:
            raise RuntimeError(f"command {command.name!r} of {command.module}: its add() adds no parser of that name")
        if not command.passthrough:
            for flags, text in VERBOSITY:
                sub.choices[command.name].add_argument(
                    *flags, action="store_true", default=argparse.SUPPRESS, help=text
                )
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, or a scheduler's time limit): the command stops as an interrupt does, so
    that what finished is saved."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals to whoever owns it
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    passthrough = {command.name for command in COMMANDS.values() if command.passthrough}
    try:
        if passthrough.isdisjoint(argv):  # such a command's arguments go to the program it runs untouched
            argv = join_dash_values(argv, parser)
        args = parser.parse_args(argv)
    except CommandLineError as err:
        print(f"headstats: error: {without_prefix(str(err))}", file=sys.stderr)
        return 2
    quiet, verbose = bool(getattr(args, "quiet", False)), bool(getattr(args, "verbose", False))
    if quiet and verbose:
        print("headstats: error: give -q (quiet) or -v (verbose), not both", file=sys.stderr)
        return 2
    configure_logging(quiet, verbose)
    try:
        with _terminate_as_interrupt():
            result = args.func(args)
    except KeyboardInterrupt as stop:
        how = "terminated" if isinstance(stop, Terminated) else "interrupted"
        print(
            f"headstats: {how}; what finished is kept (a collection's written batches, a pass's saved batches), "
            "and a re-run resumes from it",
            file=sys.stderr,
        )
        return 143 if isinstance(stop, Terminated) else 130
    except BrokenPipeError:  # the reader stopped early (`headstats summary ... | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
    except Exception as err:
        if not _is_one_line_error(err):
            raise
        print(f"headstats: error: {without_prefix(str(err))}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
