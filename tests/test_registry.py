"""One registry type for every name headstats looks up (headstats/registry.py): score ids, tasks, embedded
models, report sections and study kinds. A name it lacks is refused with every name it has;
a lazy ``"module:object"`` entry whose module lacks the object names the file; every entry of every
registry of the package resolves."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

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
