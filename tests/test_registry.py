"""One registry type for every name headstats looks up (headstats/registry.py): score ids, tasks, embedded
models, report sections, study kinds and commands. A name it lacks is refused with every name it has;
a lazy ``"module:object"`` entry whose module lacks the object names the file; every entry of every
registry of the package resolves."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from headstats.cli.commands import COMMANDS
from headstats.engine.scores import SCORES
from headstats.io.assets import EMBEDDED_MODELS
from headstats.io.tasks import TASKS
from headstats.registry import Registry, UnknownName
from headstats.report.sections import SECTIONS
from headstats.studies import STUDY_KINDS

REGISTRIES = {
    "score id": SCORES,
    "task": TASKS,
    "embedded model": EMBEDDED_MODELS,
    "report section": SECTIONS,
    "study kind": STUDY_KINDS,
    "command": COMMANDS,
}


def test_a_name_not_registered_lists_every_name_that_is_and_a_lazy_entry_names_its_file() -> None:
    registry: Registry[int] = Registry("thing")
    registry.register("one", 1)
    with pytest.raises(ValueError, match="thing 'one' is registered already"):
        registry.register("one", 2)
    registry.register_lazy("path", "os.path:join")
    registry.register_lazy("gone", "os.path:no_such_thing")
    assert list(registry) == ["one", "path", "gone"] and registry["path"] is os.path.join
    with pytest.raises(LookupError) as err:
        registry["gone"]
    assert str(err.value) == (
        f"thing 'gone' is registered as 'os.path:no_such_thing', but {Path(os.path.__file__).as_posix()} defines no "
        "'no_such_thing': define it there, or register 'gone' with the module that does"
    )
    with pytest.raises(UnknownName) as err:
        registry["two"]
    assert str(err.value) == "unknown thing 'two': registered are one, path, gone"
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)  # a mapping's, and a bad value
    assert registry.get("two") is None and "two" not in registry  # a mapping: get() and `in` are a dict's
    with pytest.raises(ValueError, match=r"give its entry as 'package\.module:object'"):
        registry.register_lazy("three", "os.path.join")


def test_item_assignment_replaces_and_del_removes_as_a_test_that_swaps_an_entry_needs() -> None:
    registry: Registry[int] = Registry("thing")
    registry.register_lazy("path", "os.path:join")
    registry["path"] = 3  # replaces the lazy entry without importing it
    assert registry["path"] == 3
    del registry["path"]
    assert len(registry) == 0
    with pytest.raises(UnknownName, match=r"unknown thing 'path': registered are $"):
        del registry["path"]


@pytest.mark.parametrize("what", REGISTRIES)
def test_every_entry_of_every_registry_resolves_and_an_unknown_name_lists_them(what: str) -> None:
    registry = REGISTRIES[what]
    assert registry.what == what and len(registry) > 0
    for name in registry:
        assert registry[name] is not None  # a lazy entry imports its module and finds its object here
    with pytest.raises(ValueError, match=re.escape(f"unknown {what} 'nope': registered are {', '.join(registry)}")):
        registry["nope"]


def test_each_command_is_a_module_of_its_own_with_a_place_in_the_help() -> None:
    """One module per command (headstats/cli/commands/NAME.py, '-' spelt '_'), and no two built-in
    commands share a position, so that `headstats --help` lists them in the order chosen, not by name."""
    folder = Path(__file__).resolve().parents[1] / "headstats" / "cli" / "commands"
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(command.module.rsplit(".", 1)[1] for command in COMMANDS.values()) == modules
    assert all(command.module.endswith("." + name.replace("-", "_")) for name, command in COMMANDS.items())
    positions = [command.position for command in COMMANDS.values()]
    assert len(set(positions)) == len(positions)
