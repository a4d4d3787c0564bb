"""One idea per module, one screen per function: no module of the package is over 600 lines and no
function over 80, unless the first line of its docstring says why, as ``(long: REASON)``.

A function is measured from its first decorator to its last line (its docstring included: it is on
the screen too); a module by its lines. Nothing is imported: the sizes are read with ``ast``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "headstats"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
REASON = re.compile(r"\(long: [^)]+\)")  # in the docstring's first line, e.g. "(long: one table of 90 rows)"


@dataclass(frozen=True)
class Size:
    where: str  # path:line, relative to the package's parent
    name: str
    lines: int
    reason: bool  # whether its docstring's first line gives a reason


def _gives_reason(node: ast.AST) -> bool:
    doc = ast.get_docstring(node) or ""  # type: ignore[arg-type]
    return bool(REASON.search(doc.split("\n", 1)[0]))


def sizes(root: Path = PACKAGE) -> tuple[list[Size], list[Size]]:
    """Every module and every function (methods and nested functions included) under ``root``, with
    its length in lines, largest first."""
    modules, functions = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        name = path.relative_to(root.parent).as_posix()
        modules.append(Size(name, "", len(text.splitlines()), _gives_reason(tree)))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                size = node.end_lineno - start + 1
                functions.append(Size(f"{name}:{node.lineno}", node.name, size, _gives_reason(node)))
    return sorted(modules, key=lambda s: -s.lines), sorted(functions, key=lambda s: -s.lines)


def too_long(found: list[Size], limit: int) -> list[str]:
    """``found`` over ``limit`` lines without a reason, as ``path:line name (N lines)``."""
    over = [s for s in found if s.lines > limit and not s.reason]
    return [" ".join(filter(None, (s.where, s.name, f"({s.lines} lines)"))) for s in over]


def test_no_module_or_function_is_too_long_without_a_reason() -> None:
    modules, functions = sizes()
    assert len(modules) > 100 and len(functions) > 1000  # the walk saw the package
    print(f"\nlargest module: {modules[0].where} ({modules[0].lines} lines)")
    print(f"largest function: {functions[0].name} at {functions[0].where} ({functions[0].lines} lines)")
    long_modules = too_long(modules, MAX_MODULE_LINES)
    long_functions = too_long(functions, MAX_FUNCTION_LINES)
    assert not long_modules, (
        f"modules over {MAX_MODULE_LINES} lines: {'; '.join(long_modules)}. Split each by idea, or say why it "
        "cannot be in the first line of its docstring: (long: REASON)"
    )
    assert not long_functions, (
        f"functions over {MAX_FUNCTION_LINES} lines: {'; '.join(long_functions)}. Split each by idea, or say why "
        "it cannot be in the first line of its docstring: (long: REASON)"
    )


def test_a_planted_long_function_and_module_are_found_and_a_reason_lets_them_pass(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    root = tmp_path / "headstats"
    root.mkdir()
    fits = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 2))  # def + docstring + these = the limit
    (root / "short.py").write_text(f'def fits():\n    """Fits."""\n{fits}')
    (root / "long.py").write_text(f'def planted():\n    """Too long."""\n{body}')
    (root / "excused.py").write_text(
        f'def planted():\n    """A table (long: one row per case).\n\n    More."""\n{body}'
    )
    (root / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (root / "big_excused.py").write_text('"""Data (long: a generated table)."""\n' + "x = 1\n" * MAX_MODULE_LINES)
    modules, functions = sizes(root)
    assert [s.lines for s in functions if s.where.startswith("headstats/short.py")] == [MAX_FUNCTION_LINES]
    assert too_long(functions, MAX_FUNCTION_LINES) == [f"headstats/long.py:1 planted ({MAX_FUNCTION_LINES + 2} lines)"]
    assert too_long(modules, MAX_MODULE_LINES) == [f"headstats/big.py ({MAX_MODULE_LINES + 1} lines)"]
    excused = {s.where for s in [*modules, *functions] if s.reason}
    assert excused == {"headstats/big_excused.py", "headstats/excused.py:1"}
