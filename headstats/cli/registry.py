"""The registry of ``headstats`` commands: :data:`COMMANDS`, one :class:`Command` per subcommand.

A command is one module of :mod:`headstats.cli.commands` that ends with
``register_command(Command(name, add, position=...))``; the package imports every module it holds, so
nothing lists the commands, and a module that registers none fails the import, naming its file.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from headstats.registry import Registry

Subparsers = argparse._SubParsersAction

LAST = 1000  # the position of a command that names none: after the others, in name order


@dataclass(frozen=True)
class Command:
    """A ``headstats`` subcommand.

    ``add(subparsers)`` adds its parser, named ``name``, with its flags, help and the function it runs
    (``set_defaults(func=...)``). ``position`` orders ``headstats --help`` (ties in name order).
    ``passthrough``: its arguments go to another program untouched, so it takes no ``-q`` / ``-v`` and
    no value of theirs is rewritten (``headstats lm-eval``)."""

    name: str
    add: Callable[[Subparsers], object]
    position: int = LAST
    passthrough: bool = False

    @property
    def module(self) -> str:
        """The module that defines the command (where its ``add`` is written)."""
        return self.add.__module__


COMMANDS: Registry[Command] = Registry("command")


def register_command(command: Command) -> Command:
    """Add ``command`` to :data:`COMMANDS`; a name registered already is refused."""
    return COMMANDS.register(command.name, command)


def in_help_order() -> list[Command]:
    """Every registered command, in the order ``headstats --help`` lists them."""
    return sorted(COMMANDS.values(), key=lambda command: (command.position, command.name))
