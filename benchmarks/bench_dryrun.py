"""How long ``headstats run FILE --dry-run`` takes for every study file in analyses/ (target: under 5 s each).

    python benchmarks/bench_dryrun.py [--files analyses/embedded.toml,...] [--repeats 1] [--measure]

Each dry run is a fresh process (``python -m headstats run FILE --dry-run -q``), as a user types it: the
imports, reading each model's configuration and tokenizer (no weights), counting its units and timing them
from the recorded speeds. Printed per file: wall and CPU seconds (user + system of the process; on a shared
machine the wall time is mostly waiting for a core, the CPU time is what the command costs), the exit
status, the estimate it printed and where its speeds came from, with the load average before each run.
``--measure`` times ``--dry-run --probe`` instead (the probe that loads every model: minutes).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(path: Path, measure: bool) -> dict:
    argv = [sys.executable, "-m", "headstats", "run", str(path.relative_to(ROOT)), "--dry-run", "-q"]
    if measure:
        argv.append("--probe")
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    estimate = re.search(r"estimated ([^(]*?)(?: on | plus )", done.stdout)
    sources = re.search(r"speed: (.*?); padding:", done.stdout)
    return {
        "file": path.name,
        "wall_s": wall,
        "cpu_s": cpu,
        "rc": done.returncode,
        "load": load,
        "estimate": estimate.group(1).strip() if estimate else ("-" if done.returncode == 0 else done.stderr[-200:]),
        "speeds": sources.group(1) if sources else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--measure", action="store_true")
    args = parser.parse_args()
    files = [ROOT / f for f in args.files.split(",") if f] or sorted((ROOT / "analyses").glob("*.toml"))
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    print(f"headstats run FILE --dry-run{' --probe' if args.measure else ''}, {os.cpu_count()} CPUs ({cpu})")
    print(f"{'file':<28} {'wall s':>7} {'CPU s':>6} {'load':>5} {'rc':>3}  estimate")
    rows = []
    for _ in range(args.repeats):
        for path in files:
            row = one(path, args.measure)
            rows.append(row)
            print(
                f"{row['file']:<28} {row['wall_s']:7.1f} {row['cpu_s']:6.1f} {row['load']:5.1f} {row['rc']:3d}  "
                f"{row['estimate']}",
                flush=True,
            )
    slowest = max(rows, key=lambda r: r["wall_s"])
    print(f"slowest: {slowest['file']} {slowest['wall_s']:.1f} s wall, {slowest['cpu_s']:.1f} s CPU (target < 5 s)")


if __name__ == "__main__":
    main()
