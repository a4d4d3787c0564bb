"""The time of every command the README shows, as a newcomer runs them one after another.

    python benchmarks/bench_readme.py [--only collect,ablate] [--quiet-below 0.5] [--work /tmp/headstats-readme]

Reads README.md: its Python quick start and every ``headstats ...`` line of its bash blocks (a line ending
in ``\\`` continues), in order. Each runs as a fresh process in ``--work`` (deleted first; it holds a copy of
``analyses/`` and of the committed ``results/``, so that the study files find what a fresh clone has), as
the README gives it: the commands that read ``results/demo`` find what the ones before wrote there.
Printed per command: wall and CPU seconds (user + system of the process and its children), its exit
status, the 1-minute load average when it started, and the time the README states for it. With
``--quiet-below X`` each command waits until the load average is at most X (a quiet machine: the README
states times on a quiet 2-core CPU). Lines with a placeholder (``REFERENCE``, ``MODEL``) and the fresh-machine
installs are not run.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
PLACEHOLDERS = ("REFERENCE", "OTHER", "[scores|", "COMMAND")


def readme_commands(text: str) -> list[tuple[str, str]]:
    """(command, the time the README states for it) of the quick start and every headstats line."""
    out: list[tuple[str, str]] = []
    for lang, body in FENCE.findall(text):
        if lang == "python" and not out:
            out.append(("python -c QUICK_START", _stated_after(text, body)))
        if lang != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line.startswith("headstats ") or any(p in line for p in PLACEHOLDERS):
                continue
            command, _, comment = line.partition("#")
            stated = re.search(r"(\d+(?:\.\d+)?\s*(?:s|min|h))\b", comment)
            out.append((" ".join(command.split()), stated.group(1) if stated else "-"))
    return out


def _stated_after(text: str, body: str) -> str:
    after = text.split(body, 1)[1][:1500]
    found = re.search(r"takes ([\d.]+\s*(?:s|min))", after)
    return found.group(1) if found else "-"


def run(command: str, work: Path, quick_start: str) -> dict:
    argv = [sys.executable, "-c", quick_start] if command.startswith("python -c") else command.split()
    if argv[0] == "headstats":
        argv = [sys.executable, "-m", "headstats", *argv[1:]]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "rc": done.returncode, "load": load, "err": done.stderr[-300:]}


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated commands (their second word) to run")
    parser.add_argument("--quiet-below", type=float, default=None)
    parser.add_argument("--work", default="/tmp/headstats-readme")
    args = parser.parse_args()
    text = (ROOT / "README.md").read_text()
    quick_start = FENCE.findall(text)[[lang for lang, _ in FENCE.findall(text)].index("python")][1]
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "analyses", work / "analyses")
    shutil.copytree(ROOT / "results", work / "results")
    only = {w for w in args.only.split(",") if w}
    names = [
        line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in line
    ]
    cpu = names[0] if names else "?"
    print(f"README commands, {os.cpu_count()} CPUs ({cpu}), in {work}")
    for command, stated in readme_commands(text):
        word = command.split()[1] if command.startswith("headstats") else "quick-start"
        if only and word not in only:
            continue
        while args.quiet_below is not None and os.getloadavg()[0] > args.quiet_below:
            time.sleep(30)
        row = run(command, work, quick_start)
        times = f"wall {_duration(row['wall_s']):>8}  CPU {_duration(row['cpu_s']):>8}"
        print(f"{times}  load {row['load']:4.1f}  rc {row['rc']}  README: {stated:>8}  {command}", flush=True)
        if row["rc"]:
            print(f"    {row['err']}")


if __name__ == "__main__":
    main()
