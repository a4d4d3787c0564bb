"""Command-line flags derived from the option declarations of :mod:`headstats.specs`.

Each field of a spec becomes one flag (``--batch-size`` for ``batch_size``, or the field's declared
flag, or the spelling its spec gave it where it composed its groups); its help lists the allowed
names from the registry and the default, in the ``--help`` section of the option's group
(:data:`headstats.specs.HELP_GROUPS`). A
list option takes comma-separated values and may be repeated; a table option (``dict``) takes
``KEY=VALUE``, repeated. Flags default to "not given", so a spec built from parsed arguments
(:func:`spec_from_args`) gets its own defaults and runs its own checks, and an error names the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import textwrap
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from typing import Any, TypeVar

from headstats.options import Spec, choices_of, default_of, element_type, flag_of, group_of, hints, is_list
from headstats.specs import HELP_GROUPS, Resources

T = TypeVar("T", bound=Spec)


class CommandLineError(ValueError):
    """A command line argparse refused; main prints it as one line."""


class HelpFormatter(argparse.HelpFormatter):
    """Flags and their help side by side from a wider column; the description's paragraphs wrapped,
    and the examples' lines (indented in the text) kept as they are, so that they can be copied."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=28)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            if "\n  " in f"\n{block}":  # a block with indented lines: examples
                blocks.append(textwrap.indent(block, indent))
            else:
                blocks.append(super()._fill_text(block, width, indent))
        return "\n\n".join(blocks)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and leave the exit to :func:`headstats.cli.main`,
    whose options are listed in sections (the command's own options first, then
    :data:`headstats.specs.HELP_GROUPS`, then the general ones) and whose usage line names only what
    must be given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.sections = {title: self.add_argument_group(title) for title in HELP_GROUPS}
        self._optionals.title = "general options"
        # argparse lists sections in the order they were made: the general ones (-h, -q, -v) last
        self._action_groups[:] = [*self.sections.values(), *self._action_groups[: -len(HELP_GROUPS)]]

    def own_section(self) -> Any:
        """The section of the options only this command has (those of no shared group), listed first:
        "compare options" in ``headstats compare --help``."""
        title = f"{self.prog.split()[-1]} options"
        if title not in self.sections:
            self.sections[title] = self.add_argument_group(title)
            self._action_groups.insert(0, self._action_groups.pop())
        return self.sections[title]

    def error(self, message: str) -> Any:
        raise CommandLineError(f"{self.prog}: {message} (see {self.prog} --help)")

    def format_usage(self) -> str:
        return self.format_help().split("\n\n", 1)[0] + "\n"

    def format_help(self) -> str:
        if self.usage is None and self._subparsers is None:  # a command: what it needs, then [options]
            needed = [
                str(a.metavar or a.dest) if not a.option_strings else f"{a.option_strings[0]} {a.metavar}"
                for a in self._actions
                if (not a.option_strings and a.nargs != "?") or a.required
            ]
            optional = [f"[{a.metavar}]" for a in self._actions if not a.option_strings and a.nargs == "?"]
            self.usage = " ".join(["%(prog)s", *map(str, needed), *optional, "[options]"])
        return super().format_help()


def _metavar(hint: Any, f: Field, spec: type[Spec]) -> str:
    """The placeholder of a flag's value: the declared one, else short by kind (N, X, NAME, ...)."""
    if f.metadata.get("metavar"):
        return f.metadata["metavar"]
    kind = element_type(hint)
    if is_list(hint):
        return {int: "N,...", float: "X,..."}.get(kind, "NAMES")
    return "NAME" if choices_of(f) else {int: "N", float: "X"}.get(kind, f.name.upper())


def _help(spec: type[Spec], f: Field) -> str:
    """The option's help, then in one parenthesis the names it allows and its default."""
    notes = []
    names = choices_of(f)
    if names:
        notes.append(f"one of: {', '.join(names)}" + (", or a file" if not f.metadata.get("strict", True) else ""))
    default = default_of(f)
    if isinstance(default, tuple):
        default = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
    if default not in (None, "") and not isinstance(default, bool):
        notes.append(f"default: {default}")
    text = f.metadata.get("help", "") + (f" ({'; '.join(notes)})" if notes else "")
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


def _section(parser: argparse.ArgumentParser, f: Field, spec: type[Spec]) -> Any:
    """Where ``f``'s flag is listed in ``parser``'s help: its group's section, else the command's own."""
    group = group_of(f, spec)
    if group is None and isinstance(parser, Parser):
        return parser.own_section()
    return getattr(parser, "sections", {}).get(group, parser)


def add_spec(
    parser: argparse.ArgumentParser,
    spec: type[Spec],
    *,
    required: tuple[str, ...] = (),
    helps: dict[str, str] | None = None,
) -> None:
    """One flag (or positional argument) per command-line field of ``spec``, each in its section;
    ``helps`` words an option of a shared group in this command's terms (as ``compose(helps=)`` does
    for a spec)."""
    types_ = hints(spec)
    unknown = sorted(set(helps or {}) - {f.name for f in spec.options(where="cli")})
    if unknown:
        raise TypeError(f"helps for {', '.join(unknown)}, which {spec.__name__} has no flag for")
    for f in spec.options(where="cli"):
        if helps and f.name in helps:
            f = _with_help(f, helps[f.name])
        hint, help_text, section = types_[f.name], _help(spec, f), _section(parser, f, spec)
        if f.metadata.get("positional"):
            # A positional argument with a default may be left out (``headstats list``).
            optional = {"nargs": "?", "default": argparse.SUPPRESS} if f.default not in (None, "", MISSING) else {}
            section.add_argument(f.name, metavar=f.name.upper(), type=_value_parser(hint), help=help_text, **optional)
            continue
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_text}
        if hint is bool:
            kw["action"] = "store_false" if f.default is True else "store_true"
        elif typing.get_origin(hint) is dict:  # KEY=VALUE, repeatable
            kw["action"] = _KeyValue
            kw["metavar"] = f.metadata.get("metavar") or "KEY=VALUE"
        else:
            kw["type"] = _value_parser(hint, f.metadata.get("split", True))
            kw["metavar"] = _metavar(hint, f, spec)
            if is_list(hint):  # given twice (--dataset a --dataset b): both lists, in order
                kw["action"] = _Extend
        if f.name in required:
            kw["required"] = True
        section.add_argument(flag_of(f), **kw)
        if f.metadata.get("alias"):  # the option's own flag where a job spells it otherwise (prune --scores)
            parser.add_argument(f.metadata["alias"], **{**kw, "help": argparse.SUPPRESS, "required": False})


def _with_help(f: Field, text: str) -> Field:
    """``f`` with another help (its name, default and checks unchanged)."""
    copy = dataclasses.field(
        default=f.default, default_factory=f.default_factory, metadata={**f.metadata, "help": text}
    )
    copy.name, copy.type = f.name, f.type
    return copy


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
    add_spec(parser, Resources)


def examples(*commands: str) -> str:
    """A command's help epilog: example command lines, one a line, kept as written."""
    return "examples:\n" + "\n".join(f"  {command}" for command in commands)


def spec_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], int],
    spec: type[Spec],
    *,
    help: str,
    description: str,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """The subcommand ``name``, whose flags are ``spec``'s fields and which runs ``run(args)``."""
    parser = subparsers.add_parser(name, help=help, description=description, epilog=epilog)
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
