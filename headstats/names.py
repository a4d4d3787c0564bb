"""Names that become parts of file or folder names: score ids, task and dataset names, analysis names,
partition values. :func:`check_name` is the one rule every such name passes before it reaches a path,
so that no name can point outside its folder (``../x``, ``/etc``, ``a/b``) or hide a NUL byte."""

from __future__ import annotations

from collections.abc import Iterable

MAX_LENGTH = 200
ALLOWED = "letters, digits, '-', '_' and '.' (not first)"


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot be one component of a path, or None when it can."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if len(value) > MAX_LENGTH:
        return f"is longer than {MAX_LENGTH} characters"
    if "\0" in value:
        return "holds a NUL byte"
    if "/" in value or "\\" in value:
        return "holds a path separator"
    if value.startswith("."):
        return "starts with '.'" + (" (a parent-folder reference)" if value.startswith("..") else "")
    bad = sorted({ch for ch in value if not (ch.isalnum() or ch in "-_.")})
    if bad:
        return "holds " + ", ".join(repr(ch) for ch in bad)
    return None


def check_name(value: object, what: str) -> str:
    """``value`` if it is safe as one file or folder name component, else a ``ValueError`` that
    names ``what`` (e.g. "score id") and the allowed characters."""
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {value!r} {problem}; it becomes part of a file name, so use only {ALLOWED}")
    assert isinstance(value, str)
    return value


def canonical_name(value: str, known: Iterable[str]) -> str:
    """The spelling of a built-in task or dataset name: underscores, as lm-eval spells its tasks
    (``arc_easy``). A hyphenated spelling of a name in ``known`` (``arc-easy``) means that name;
    anything else (a file, a user's own name) is returned unchanged."""
    if not isinstance(value, str):
        return value
    underscored = value.replace("-", "_")
    return underscored if underscored != value and underscored in set(known) else value
