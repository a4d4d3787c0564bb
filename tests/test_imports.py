"""The package's imports respect its layers, read from the source with ``ast`` (nothing is imported).

Data flows one way: engine -> io -> stats -> (specs) -> jobs -> report -> studies -> (pipeline) -> cli. A module
may import its own layer and the layers below it, never one above; no module imports a private name
(``_x``) of another module; and no two modules import each other, deferred imports inside functions
included. The modules outside the six layers get a place from what they import:

- ``headstats.names`` (path-safe names) imports nothing from headstats and the engine imports it, so
  it is the bottom layer, ``base``; ``headstats.options`` (the option machinery: :class:`Spec`,
  :func:`option`) imports only ``names`` and sits there too, as does ``headstats.registry`` (the one
  :class:`Registry` type, which imports nothing of headstats).
- ``headstats.specs`` (every job's option declarations) checks values against the registries of the
  engine (scores), io (tasks, datasets, dtypes) and stats (rank metrics), and every job, the report
  and the cli build its specs: the ``specs`` layer, between stats and jobs.
- ``headstats.lmeval`` (the lm-eval model) runs the engine's zeroing and ``jobs.evaluate``'s scoring
  inside lm-eval, and ``headstats.lmeval_tasks`` (lm-eval task code) reads the bundled data through
  ``io``: an adapter layer just above jobs, which only the cli loads.
- ``headstats.studies`` (the registry of study kinds: each kind loads, plans, runs and reports its
  files) composes jobs and report: the ``studies`` layer, above report.
- ``headstats.pipeline`` (the Python API of ``headstats run``) calls the studies: the ``pipeline``
  layer, above studies, which the cli calls.
- ``headstats.testing`` (synthetic tables for the tests and benchmarks) is not used by the package:
  it may read any layer below it and none may import it, the ``testing`` layer just under the facade.
- ``headstats`` (the package root: lazy re-exports and ``__version__``), ``headstats.__main__``
  (``python -m headstats``) and ``headstats.scores`` (the public alias of ``headstats.engine.scores``)
  are the facade: for users, above everything. Inside the package only ``__version__`` may be read
  from the root.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "headstats"

LAYERS = (
    "base",
    "engine",
    "io",
    "stats",
    "specs",
    "jobs",
    "lmeval",
    "report",
    "studies",
    "pipeline",
    "cli",
    "testing",
    "facade",
)
LAYER_OF_PREFIX = {
    "headstats.names": "base",
    "headstats.options": "base",
    "headstats.registry": "base",
    "headstats.engine": "engine",
    "headstats.io": "io",
    "headstats.stats": "stats",
    "headstats.specs": "specs",
    "headstats.jobs": "jobs",
    "headstats.lmeval": "lmeval",
    "headstats.lmeval_tasks": "lmeval",
    "headstats.report": "report",
    "headstats.studies": "studies",
    "headstats.pipeline": "pipeline",
    "headstats.cli": "cli",
    "headstats.testing": "testing",
}
FACADE = ("headstats", "headstats.__main__", "headstats.scores")


def _modules(root: Path) -> dict[str, Path]:
    modules = {}
    for path in root.rglob("*.py"):
        parts = ["headstats", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def scan(root: Path = PACKAGE) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """The module graph of the package under ``root`` (module -> the headstats modules it imports) and
    every private name one module takes from another, as (importer, "module.name")."""
    modules = _modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    private: list[tuple[str, str]] = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}  # local name -> the headstats module it is bound to
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name != "headstats":  # `import headstats` reads only __version__
                        targets.append(alias.name)
                    if alias.name in modules:
                        local = alias.asname or alias.name.partition(".")[0]
                        aliases[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                if base.partition(".")[0] != "headstats":
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in modules:  # a submodule, reached through its package
                        targets += [full] if base == "headstats" else [full, base]
                        aliases[alias.asname or alias.name] = full
                        continue
                    if _is_private(alias.name) and resolve(base) != module:
                        private.append((module, full))
                    # The root holds only lazy re-exports and __version__: any other name taken from
                    # it is an import of the facade.
                    if base != "headstats" or not alias.name.startswith("__"):
                        targets.append(base)
            for target in targets:
                found = resolve(target)
                if target == "headstats" and module != "headstats":  # a public name read from the root
                    graph[module].add(target)
                # A package importing its own submodules, or a module its package, is no cycle.
                elif found and found != module and not module.startswith(found + "."):
                    graph[module].add(found)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                owner = _dotted(node.value)
                if owner is None or owner.partition(".")[0] not in aliases:
                    continue
                head, _, rest = owner.partition(".")
                full = aliases[head] + (f".{rest}" if rest else "")
                if full in modules and full != module:
                    private.append((module, f"{full}.{node.attr}"))
    return graph, private


def layer_of(module: str) -> str | None:
    if module in FACADE:
        return "facade"
    matches = [p for p in LAYER_OF_PREFIX if module == p or module.startswith(p + ".")]
    return LAYER_OF_PREFIX[max(matches, key=len)] if matches else None


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if LAYERS.index(layer_of(target) or "facade") > LAYERS.index(layer_of(module) or "facade")
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    layers: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for module, targets in graph.items():
        for target in targets:
            if layer_of(target) != layer_of(module):
                layers[layer_of(module) or "facade"].add(layer_of(target) or "facade")
    return layers


def test_every_module_has_a_layer() -> None:
    graph, _ = scan()
    assert len(graph) > 20  # the walk saw the package
    unplaced = sorted(m for m in graph if layer_of(m) is None)
    assert not unplaced, f"give these modules a layer in LAYER_OF_PREFIX (from what they import): {unplaced}"


def test_no_import_runs_up_the_layers() -> None:
    graph, _ = scan()
    upward = sorted(upward_imports(graph))
    found = "; ".join(f"{m} ({layer_of(m)}) imports {t} ({layer_of(t)})" for m, t in upward)
    assert not upward, f"imports up the layers ({' -> '.join(LAYERS)}): {found}"


def test_no_import_cycle_between_modules_or_layers() -> None:
    graph = scan()[0]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])
    cycle = find_cycle(layer_graph(graph))
    assert cycle is None, "layer cycle: " + " -> ".join(cycle or [])


def test_no_private_name_crosses_a_module() -> None:
    _, private = scan()
    assert not private, "private names used by another module (make them public, with a docstring): " + "; ".join(
        f"{m} uses {name}" for m, name in sorted(private)
    )


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_planted_violations_in_a_copy_are_found(tmp_path) -> None:
    root = tmp_path / "headstats"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    before_graph, before_private = scan(root)
    with (root / "engine" / "batching.py").open("a") as f:
        f.write("\n\ndef planted():\n    from headstats.report.writer import ReportWriter\n\n    return ReportWriter\n")
    with (root / "io" / "sql.py").open("a") as f:
        f.write("\nfrom headstats.stats import stability\nfrom headstats.jobs.sweep import _planted\n")
        f.write("\n\ndef planted():\n    return stability._planted_too\n")
    with (root / "stats" / "w1.py").open("a") as f:
        f.write("\nfrom headstats import load_model\n")
    with (root / "specs" / "commands.py").open("a") as f:
        f.write("\nfrom headstats.jobs.sweep import run_sweep\n")
    with (root / "options.py").open("a") as f:
        f.write("\nfrom headstats.specs import SweepSpec\n")
    graph, private = scan(root)
    assert upward_imports(graph) - upward_imports(before_graph) == {
        ("headstats.engine.batching", "headstats.report.writer"),
        ("headstats.io.sql", "headstats.stats"),  # importing a submodule runs its package too
        ("headstats.io.sql", "headstats.stats.stability"),
        ("headstats.io.sql", "headstats.jobs.sweep"),
        ("headstats.stats.w1", "headstats"),
        ("headstats.specs.commands", "headstats.jobs.sweep"),
        ("headstats.options", "headstats.specs"),
    }
    assert set(private) - set(before_private) == {
        ("headstats.io.sql", "headstats.jobs.sweep._planted"),
        ("headstats.io.sql", "headstats.stats.stability._planted_too"),
    }
    # engine -> report closes a layer cycle with the report's imports of engine.scores.
    assert find_cycle(layer_graph(before_graph)) is None
    assert find_cycle(layer_graph(graph)) is not None
