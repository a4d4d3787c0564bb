"""Adding a command is one module of ``headstats/cli/commands/`` (docs/developing.md#adding-a-command).

The test writes such a module into a copy of the package, nothing else touched: ``headstats cache``,
which prints the folder the embedded assets are cached in. In a fresh process that runs the copy's
command line, ``headstats --help`` lists it (last: it names no position), ``headstats cache --help``
has the -q / -v every command takes, and ``headstats cache`` runs. The same module with its
``register_command`` call forgotten makes every command fail, naming the file; one whose parser is
named otherwise than its registration says so: a command cannot be half added.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMAND = '''\
"""``headstats cache``: the folder the embedded models and data are cached in (an example of the recipe)."""

from __future__ import annotations

import argparse

from headstats.cli.registry import Command, Subparsers, register_command


def add(sub: Subparsers) -> None:
    p = sub.add_parser("cache", help="the folder embedded models and data are cached in")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from headstats.io.assets import cache_dir

    print(cache_dir())
    return 0


register_command(Command("cache", add))
'''


def run_copy(tmp_path: Path, module: str, *argv: str) -> subprocess.CompletedProcess:
    """``headstats ARGV`` from the package copied under ``tmp_path`` with ``module`` as
    ``cli/commands/cache.py``."""
    copy = tmp_path / "copy"
    if not copy.exists():
        shutil.copytree(ROOT / "headstats", copy / "headstats", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "headstats" / "cli" / "commands" / "cache.py").write_text(module)
    env = {**os.environ, "PYTHONPATH": str(copy), "HEADSTATS_CACHE": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "headstats", *argv]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_command_added_as_one_module_is_listed_helped_and_run(tmp_path: Path) -> None:
    listed = run_copy(tmp_path, COMMAND, "--help")
    assert listed.returncode == 0, listed.stderr
    names = re.findall(r"^    (\S+)", listed.stdout, flags=re.MULTILINE)  # a continued help line is indented more
    assert names[-2:] == ["lm-eval", "cache"]  # no position: after the built-in commands
    helped = run_copy(tmp_path, COMMAND, "cache", "--help")
    assert helped.returncode == 0 and "-q, --quiet" in helped.stdout and "-v, --verbose" in helped.stdout
    done = run_copy(tmp_path, COMMAND, "cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "cache")


def test_a_command_module_that_forgets_to_register_fails_naming_its_file(tmp_path: Path) -> None:
    done = run_copy(tmp_path, COMMAND.replace('register_command(Command("cache", add))\n', ""), "list", "scores")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: headstats/cli/commands/cache.py registers no command: end it with "
        "register_command(Command(...)) (docs/developing.md#adding-a-command), or move what it holds out of "
        "headstats/cli/commands/"
    )


def test_a_command_registered_under_another_name_than_its_parser_is_refused(tmp_path: Path) -> None:
    done = run_copy(tmp_path, COMMAND.replace('Command("cache", add)', 'Command("caches", add)'), "--help")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "RuntimeError: command 'caches' of headstats.cli.commands.cache: its add() adds no parser of that name"
    )
