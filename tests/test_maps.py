"""The maps of the package stay true: ``docs/design.md``'s "Where things live" and each package's
docstring name every module and sub-package it holds, so a module added without a place on the map
fails here by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "headstats"
PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def members(package: Path) -> list[str]:
    """The modules (file stems) and sub-packages of ``package``."""
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    return sorted(modules + [p.name for p in package.iterdir() if (p / "__init__.py").is_file()])


def words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def test_the_design_pages_map_names_every_module() -> None:
    page = (ROOT / "docs" / "design.md").read_text()
    block = words(page.split("## Where things live {#layout}", 1)[1].split("```", 2)[1])
    missing = [
        f"{package.relative_to(ROOT).as_posix()}/{name}" for package in PACKAGES for name in members(package)
        if name not in block
    ]  # fmt: skip
    assert not missing, f"docs/design.md#layout does not name {', '.join(missing)}: add each to its package's line"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_packages_docstring_names_its_modules(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [name for name in members(package) if name not in words(docstring)]
    where = (package / "__init__.py").relative_to(ROOT).as_posix()
    assert not missing, f"the docstring of {where} does not name {', '.join(missing)}: say what each holds there"
