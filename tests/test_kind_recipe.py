"""Adding a study kind is one module of ``headstats/studies/`` (docs/developing.md#a-study-kind).

The test writes such a module into a copy of the package, nothing else touched: a ``describe`` kind
(a file with ``[describe]``) whose ``load`` reads the file. In a fresh process that imports the copy,
the kind is registered, ``kind_of`` gives it for a file with that table, and the default kind stays
the analysis. The same module with its ``register_kind`` call forgotten makes the import fail, naming
the file: a kind cannot be half added.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KIND = '''\
"""The describe kind: a file with ``[describe]`` (an example of the recipe)."""

from __future__ import annotations

from pathlib import Path

from headstats.studies.registry import Study, StudyKind, register_kind


def load(path: Path) -> Study:
    return Study("describe", Path(path), {"file": str(path)})


KIND = StudyKind(
    name="describe",
    section="describe",
    description="summary statistics of a model's score tables",
    stages=("report",),
    load=load,
    plan=lambda study, run: [],
    measure=lambda unit, model, tokenizer, n, probe: [],
    run=lambda unit, session: None,
    report=lambda study, run, *, progress=True: Path(study.spec["file"]),
)
register_kind(KIND)
'''

PROBE = """
import json, sys
from headstats.studies import STUDY_KINDS, kind_of
found = {"of_file": kind_of(sys.argv[1]).name, "of_plain": kind_of(sys.argv[2]).name}
print(json.dumps({"kinds": list(STUDY_KINDS), **found}))
"""


def run_copy(tmp_path: Path, module: str) -> subprocess.CompletedProcess:
    """Import the package copied under ``tmp_path`` with ``module`` as ``studies/describe.py``."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "headstats", copy / "headstats", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "headstats" / "studies" / "describe.py").write_text(module)
    (tmp_path / "mine.toml").write_text('[describe]\nscores = ["ahon"]\n')
    (tmp_path / "plain.toml").write_text('[models]\nnames = ["m"]\n')
    env = {**os.environ, "PYTHONPATH": str(copy)}
    args = [sys.executable, "-c", PROBE, str(tmp_path / "mine.toml"), str(tmp_path / "plain.toml")]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_kind_added_as_one_module_is_registered_and_found_by_its_table(tmp_path: Path) -> None:
    done = run_copy(tmp_path, KIND)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert "describe" in answer["kinds"] and answer["of_file"] == "describe" and answer["of_plain"] == "analysis"


def test_a_kind_module_that_forgets_to_register_fails_the_import_naming_its_file(tmp_path: Path) -> None:
    done = run_copy(tmp_path, KIND.replace("register_kind(KIND)\n", ""))
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: headstats/studies/describe.py registers no study kind: end it with "
        "register_kind(StudyKind(...)) (docs/developing.md#a-study-kind), or move what it holds out of "
        "headstats/studies/"
    )


@pytest.mark.parametrize("what", ["registered", "example"])
def test_every_registered_kind_is_a_module_of_its_own_with_a_committed_example(what: str) -> None:
    """Each kind is defined in its own module of headstats/studies/ and names a committed example file
    of its kind (the default kind's example holds none of the other kinds' tables)."""
    from headstats.studies import MACHINERY, STUDY_KINDS, kind_of
    from headstats.studies.registry import kind_module

    modules = sorted(p.stem for p in (ROOT / "headstats" / "studies").glob("*.py") if p.stem != "__init__")
    kinds = STUDY_KINDS.values()
    if what == "registered":
        assert sorted({kind_module(k).rsplit(".", 1)[1] for k in kinds} | set(MACHINERY)) == modules
        assert len({kind_module(k) for k in kinds}) == len(kinds)  # one kind per module
    else:
        for kind in kinds:
            assert kind.example, f"study kind {kind.name!r} names no example file: set example= in its StudyKind"
            assert (ROOT / kind.example).is_file(), f"{kind.name}: its example {kind.example} is not committed"
            assert kind_of(ROOT / kind.example).name == kind.name


def test_the_design_pages_kind_table_is_the_registry() -> None:
    """docs/design.md#study-kinds has one row per registered kind, with its table, its stages and every
    committed study file of that kind."""
    from headstats.studies import STUDY_KINDS, kind_of

    page = (ROOT / "docs" / "design.md").read_text().split("## Study kinds {#study-kinds}", 1)[1]
    first = page[page.index("\n| kind") :].split("\n\n", 1)[0]  # the section's first table
    rows = [line.split(" | ") for line in first.splitlines() if line.startswith("| ") and not line.startswith("| kind")]
    table = {row[0].removeprefix("| "): row for row in rows if not set(row[0]) <= set("|-")}
    assert sorted(table) == sorted(STUDY_KINDS), "docs/design.md#study-kinds: one row per registered study kind"
    files: dict[str, set[str]] = {}
    for path in sorted((ROOT / "analyses").glob("*.toml")):
        files.setdefault(kind_of(path).name, set()).add(path.stem)
    for name, kind in STUDY_KINDS.items():
        row = table[name]
        assert row[1] == (f"`[{kind.section}]`" if kind.section else "no kind table"), name
        assert row[2] == ", ".join(kind.stages), name
        listed = set(re.findall(r"`([a-z0-9_]+)`", row[4]))
        assert listed == files.get(name, set()), f"{name}: the committed files of this kind are {files.get(name)}"
