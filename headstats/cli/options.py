"""Command-line flags derived from the option declarations of :mod:`headstats.specs`.

Each field of a spec becomes one flag (``--batch-size`` for ``batch_size``, or the field's declared
flag); its help lists the allowed names from the registry and the default. A list option takes
comma-separated values and may be repeated; a table option (``dict``) takes ``KEY=VALUE``, repeated.
Flags default to "not given", so a spec built from parsed arguments (:func:`spec_from_args`) gets
its own defaults and runs its own checks, and an error names the flag.
"""

from __future__ import annotations

import argparse
import json
import os
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from typing import Any, TypeVar

from headstats.options import Spec, choices_of, default_of, element_type, hints, is_list
from headstats.specs import Resources

T = TypeVar("T", bound=Spec)


class CommandLineError(ValueError):
    """A command line argparse refused; main prints it as one line."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and leave the exit to :func:`headstats.cli.main`."""

    def error(self, message: str) -> Any:
        raise CommandLineError(f"{self.prog}: {message} (see {self.prog} --help)")


def flag_of(f: Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _help(spec: type[Spec], f: Field) -> str:
    text = f.metadata.get("help", "")
    names = choices_of(f, spec)
    if names:
        text += f" (one of: {', '.join(names)}" + (", or a file" if not f.metadata.get("strict", True) else "") + ")"
    default = default_of(spec, f)
    if isinstance(default, bool):
        return text
    if isinstance(default, tuple):
        default = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
    if default not in (None, ""):
        text += f" (default: {default})"
    return text.replace("%", "%%")


def _parse_scalar(kind: Any, text: str) -> Any:
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    return text


def _value_parser(hint: Any, split: bool = True) -> Any:
    kind = element_type(hint)
    if is_list(hint) and not split:
        return lambda text: (text,)
    if is_list(hint):
        return lambda text: tuple(_parse_scalar(kind, item) for item in list_items(text))
    return lambda text: _parse_scalar(kind, text)


def list_items(text: str) -> list[str]:
    """The comma-separated items of a list flag; refused when empty, when an item is empty
    (``0.1,,0.2``), or when the whole text is an existing path holding a comma (it would be split)."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("is empty: give at least one item (items are separated by commas)")
    if "," in text and os.path.exists(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a path holding a comma, and list items are separated by commas: give a path without one"
        )
    if not all(items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item: separate the items with single commas")
    return items


def add_spec(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, spec: type[Spec], *, required: tuple[str, ...] = ()
) -> None:
    """One flag (or positional argument) per command-line field of ``spec``."""
    types_ = hints(spec)
    for f in spec.options(where="cli"):
        hint, help_text = types_[f.name], _help(spec, f)
        if f.metadata.get("positional"):
            # A positional argument with a default may be left out (``headstats list``).
            optional = {"nargs": "?", "default": argparse.SUPPRESS} if f.default not in (None, "", MISSING) else {}
            parser.add_argument(f.name, metavar=f.name.upper(), type=_value_parser(hint), help=help_text, **optional)
            continue
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_text}
        if hint is bool:
            kw["action"] = "store_false" if f.default is True else "store_true"
        elif typing.get_origin(hint) is dict:  # KEY=VALUE, repeatable
            kw["action"] = _KeyValue
            kw["metavar"] = f.metadata.get("metavar") or "KEY=VALUE"
        else:
            kw["type"] = _value_parser(hint, f.metadata.get("split", True))
            kw["metavar"] = f.metadata.get("metavar") or f.name.upper()
            if is_list(hint):  # given twice (--dataset a --dataset b): both lists, in order
                kw["action"] = _Extend
        if f.name in required:
            kw["required"] = True
        parser.add_argument(flag_of(f), **kw)


class _Extend(argparse.Action):
    """A list flag that adds to what the same flag gave before, instead of replacing it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any, option=None):
        before = getattr(namespace, self.dest, None)
        merged = tuple(before or ()) + tuple(value)
        setattr(namespace, self.dest, tuple(dict.fromkeys(merged)))


class _KeyValue(argparse.Action):
    """A table option: each ``KEY=VALUE`` adds one entry (a JSON value as itself: numbers, true/false,
    lists; anything else as text)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any, option=None):
        table = dict(getattr(namespace, self.dest, None) or {})
        key, sep, text = str(value).partition("=")
        if not sep or not key:
            parser.error(f"{option}: give KEY=VALUE, e.g. slurm_account=abc, not {value!r}")
        try:
            table[key] = json.loads(text)
        except ValueError:
            table[key] = text
        setattr(namespace, self.dest, table)


def add_resources(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("grid execution (needs submitit: pip install 'headstats[slurm]')")
    add_spec(group, Resources)


def spec_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], int],
    spec: type[Spec],
    *,
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """The subcommand ``name``, whose flags are ``spec``'s fields and which runs ``run(args)``."""
    parser = subparsers.add_parser(name, help=help, description=description)
    add_spec(parser, spec)
    parser.set_defaults(func=run)
    return parser


def spec_from_args(args: argparse.Namespace, spec: type[T], **values: Any) -> T:
    """``spec`` from the parsed flags that belong to it (``values`` override); errors name the flag."""
    given = {f.name: getattr(args, f.name) for f in fields(spec) if hasattr(args, f.name)}
    if getattr(args, "quiet", False) and "progress" in spec.__dataclass_fields__:
        given["progress"] = False
    by_name = {f.name: f for f in fields(spec)}

    def label(key: str) -> str:
        if key not in by_name:
            return "--" + key.replace("_", "-")
        return key.upper() if by_name[key].metadata.get("positional") else flag_of(by_name[key])

    return spec.from_kwargs({**given, **values}, label=label)


def join_dash_values(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--targets -0.1,0.1`` as ``--targets=-0.1,0.1``: argparse would take a value starting with
    '-' for a flag, and the message would be about a missing argument, not about the value."""
    takes_value: set[str] = set()
    known: set[str] = set()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            known.update(action.option_strings)
            if action.option_strings and action.nargs != 0:
                takes_value.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if token in takes_value and following and following.startswith("-") and following not in known:
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out
