"""The documentation: README.md and docs/ run as written, the site builds strictly, the CLI reference is
generated from the option declarations, and the README stays the short way in.

Every ```python block of a page runs, the page's blocks in order in one fresh process and an empty
folder (a page is one script, as a reader would paste it). A block not meant to run says so in its info
string (```{.python .notest}); such blocks are few. A page that loads an embedded model is an integration test.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
EMBEDDED = re.compile(r"smollm2-135m|gemma3-270m")
CITATION = re.compile(r"docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?")
MOST_NOTEST = 5  # blocks that may be shown without running (a model folder the page cannot make, ...)


NOTEST = "{.python .notest}"  # a fence the site's Markdown renders as Python, which the docs tests do not run


def blocks(page: Path) -> list[tuple[str, str]]:
    """``(info string, code)`` of every fenced block of ``page``, in order."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(page.read_text())]


def python_blocks(page: Path) -> list[str]:
    return [code for info, code in blocks(page) if info == "python"]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _page_params() -> list:
    params = []
    for page in PAGES:
        if page == README:  # its quick start runs in its own test, which also reads what it prints
            continue
        code = "\n".join(python_blocks(page))
        if not code:
            continue
        marks = [pytest.mark.integration] if EMBEDDED.search(code) else []
        params.append(pytest.param(page, marks=marks, id=_name(page)))
    return params


def test_every_python_block_runs_or_says_it_does_not() -> None:
    infos = {info for page in PAGES for info, _ in blocks(page) if info.startswith("python")}
    known = {"python", NOTEST}
    assert infos <= known, f"unknown info strings: {infos - known}"
    notest = [_name(p) for p in PAGES for info, _ in blocks(p) if info == NOTEST]
    assert len(notest) <= MOST_NOTEST, f"{len(notest)} python blocks do not run: {notest}"
    assert sum(len(python_blocks(p)) for p in PAGES) >= 10  # the examples are there, and they run


def _imported_modules(code: str) -> set[str]:
    found = re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", code, flags=re.M)
    return set(found)


def _run_page(page: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The page's python blocks as one script, in a fresh process and an empty folder."""
    code = "\n\n".join(python_blocks(page))
    missing = sorted(m for m in _imported_modules(code) if importlib.util.find_spec(m) is None)
    if missing:
        pytest.skip(f"{_name(page)} imports {', '.join(missing)}, which is not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["HF_DATASETS_OFFLINE"] = "1"
    env["MPLBACKEND"] = "Agg"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200
    )
    assert run.returncode == 0, f"{_name(page)}'s examples failed:\n{run.stderr[-4000:]}"
    return run


@pytest.mark.parametrize("page", _page_params())
def test_the_pages_python_examples_run(page: Path, tmp_path: Path) -> None:
    _run_page(page, tmp_path)


ZEROED = re.compile(r"zeroed (\d+\.\d)% of (\d+) heads: next-token loss (\d+\.\d+) -> (\d+\.\d+)")


@pytest.mark.integration
def test_the_readmes_quick_start_zeroes_heads_and_says_what_it_did(tmp_path: Path) -> None:
    """The README's Python quick start, run as written, names the heads that look inactive, zeroes a
    share of heads that is not zero, prints the next-token loss before and after, and prints the line the
    README quotes (so the README says what a newcomer will see)."""
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert python_blocks(README)[0] in section  # the quick start is the README's first python block
    out = _run_page(README, tmp_path).stdout
    (line,) = [line for line in out.splitlines() if ZEROED.search(line)]
    share, n_heads, before, after = ZEROED.search(line).groups()
    assert float(share) > 0 and int(n_heads) == 270 and float(before) > 0 and float(after) > 0
    # What the README quotes is what it prints (to round-off between CPUs: a head at the threshold may flip).
    quoted = [float(x) for x in ZEROED.search(section).groups()]
    assert quoted == pytest.approx([float(share), int(n_heads), float(before), float(after)], abs=0.5)
    assert abs(quoted[2] - float(before)) <= 0.005 and abs(quoted[3] - float(after)) <= 0.02
    header = out.splitlines()[0].split()
    assert header == ["layer", "head", "inactive_share", "low", "high", "mean_score"]


def test_the_readme_is_the_short_way_in() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.split()) <= 1500
    for heading in ("## Install", "## Quick start", "## Two commands for a fresh machine", "## Command line"):
        assert heading in text
    # Every local link of the README (reports, docs pages) names a file of the repository.
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("reports/") for link in local)
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_ci_runs_the_readmes_test_command_and_the_strict_build() -> None:
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    test_command = next(line for line in readme.splitlines() if "pip install -q -e '.[test]'" in line)
    assert test_command in ci.splitlines()
    assert "mkdocs build --strict" in ci


def test_no_citation_of_a_document_outside_the_repository() -> None:
    files = [ROOT / "README.md", *(ROOT / "headstats").rglob("*.py"), *(ROOT / "headstats").rglob("*.md")]
    citing = [_name(f) for f in files if "SPEC §" in f.read_text()]
    assert citing == []
    listed = subprocess.run(
        [sys.executable, "-m", "headstats", "list"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "SPEC" not in listed and "mmlu" in listed


# --- the site -------------------------------------------------------------------------------------


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_generated_with_every_flag_of_every_command() -> None:
    from headstats.cli import build_parser

    hooks = _hooks()
    page = (ROOT / "docs" / "cli.md").read_text()
    assert hooks.MARKER in page and "--limit" not in page  # generated at build time, never copied in
    reference = hooks.cli_reference()
    commands = hooks.subcommands(build_parser())
    assert {"collect", "ablate", "run", "prune", "list", "lm-eval"} <= set(commands)
    for name, (parser, _) in commands.items():
        section = reference[reference.index(f"## `headstats {name}`") :]
        section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:  # an old spelling that still works, unlisted (prune --scores)
                continue
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in section, f"headstats {name}: {flag} is missing from the CLI reference"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert (tmp_path / "site" / "statistics" / "index.html").read_text().count('id="certified"') == 1
    assert "--calibration-limit" in (tmp_path / "site" / "cli" / "index.html").read_text()
    assert (tmp_path / "site" / "reports" / "confirm" / "index.html").exists()  # the findings' links resolve
    # A fence the Markdown did not take for one prints the rest of its page as text.
    unrendered = [p for p in (tmp_path / "site").rglob("index.html") if "<p>```" in p.read_text()]
    assert not unrendered, f"fences printed as text in {unrendered}"
    # Every docs page the package, the tests and the README cite exists, with the anchor cited.
    sources = [ROOT / "README.md", *(ROOT / "headstats").rglob("*.py"), *(ROOT / "tests").glob("*.py")]
    cited = {m for f in sources for m in CITATION.findall(f.read_text())}
    assert len(cited) >= 10
    for page, anchor in sorted(cited):
        built = tmp_path / "site" / re.sub(r"(^|/)index\.md$|\.md$", r"\1", page) / "index.html"
        assert built.exists(), f"docs/{page} is cited but not built"
        assert not anchor or f'id="{anchor}"' in built.read_text(), f"docs/{page}#{anchor} is cited but has no anchor"
