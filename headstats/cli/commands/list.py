"""``headstats list [WHAT]``: the names of a registry, one per line with a short description: score ids,
tasks, collection datasets or embedded models."""

from __future__ import annotations

import argparse

from headstats.cli.options import add_spec, examples, spec_from_args
from headstats.cli.registry import Command, Subparsers, register_command
from headstats.specs import LIST_ALL, LISTABLE, ListSpec


def add(sub: Subparsers) -> None:
    p = sub.add_parser(
        "list",
        help="registered score ids, tasks, collection datasets or embedded models, one per line",
        description="Print the names headstats knows, one per line with a short description: scores, tasks, "
        "datasets (for collect --dataset; a file works too) or models (embedded, no download of weights needed).",
        epilog=examples("headstats list", "headstats list scores"),
    )
    add_spec(p, ListSpec)
    p.set_defaults(func=run)


def listing(what: str) -> list[tuple[str, str]]:
    """(name, description) of every entry of a registry."""
    if what == "scores":
        from headstats.engine.scores import SCORES

        return [
            (
                sid,
                f"{s.name}; a head is inactive when {s.inactive_when}"
                + (f": {s.description}" if s.description else ""),
            )
            for sid, s in SCORES.items()
        ]
    if what == "tasks":
        from headstats.io.tasks import TASKS

        return [(name, getattr(task, "summary", "")) for name, task in TASKS.items()]
    if what == "datasets":
        from headstats.io.tasks import COLLECTION_DATASETS
        from headstats.io.tasks.collection import TASK_DATASETS

        texts = {"wikipedia": "Wikipedia passages (BoolQ validation)", "books": "book passages (LAMBADA)"}
        return [
            (name, texts.get(name) or f"the prompts of task {TASK_DATASETS.get(name, name)}")
            for name in COLLECTION_DATASETS
        ]
    from headstats.io.assets import EMBEDDED_MODELS

    return [(name, f"{m.description} ({m.licence})") for name, m in EMBEDDED_MODELS.items()]


def run(args: argparse.Namespace) -> int:
    what = spec_from_args(args, ListSpec).what
    kinds = LISTABLE if what == LIST_ALL else (what,)
    for i, kind in enumerate(kinds):
        entries = listing(kind)
        if len(kinds) > 1:
            print(("\n" if i else "") + f"{kind}:")
        width = max(len(name) for name, _ in entries)
        for name, text in entries:
            print(("  " if len(kinds) > 1 else "") + f"{name:<{width}}  {text}".rstrip())
    return 0


register_command(Command("list", add, position=70))
