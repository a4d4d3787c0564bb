"""Start-up time of the command line: ``headstats --help``, ``headstats list`` and ``headstats summary``.

    python benchmarks/bench_cli.py                 # 5 runs of each command after one warm-up
    python benchmarks/bench_cli.py --runs 10 --results results/study/model=smollm2-135m/task=piqa

Each command runs as a fresh process (what a user or a script pays), and the benchmark prints the
median and range of its wall time and of its CPU time (user + sys of the child, from the OS's
accounting). On a shared machine the wall time includes waiting for a core; the CPU time does not,
so it is the figure to compare across machines and loads. ``summary`` reads a small results folder:
by default the baseline and the ``ahon_ln`` points of the committed study's SmolLM2 PIQA sweep
(copied into a temporary folder), so that it measures start-up and reading, not a large analysis.
Target: every command under 2 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY_PIQA = ROOT / "results" / "study" / "model=smollm2-135m" / "task=piqa"


def small_results(dest: Path) -> Path:
    """The baseline and ahon_ln points of one committed sweep, in the results layout under ``dest``."""
    partition = dest / "model=smollm2-135m" / "task=piqa"
    partition.mkdir(parents=True)
    for path in STUDY_PIQA.iterdir():
        if path.name in ("_provenance.json", "_calibration.json", "baseline.parquet") or path.name.startswith(
            "point-ahon_ln-"
        ):
            shutil.copy2(path, partition / path.name)
    return dest


def time_command(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, exit status) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="counted runs per command (after one warm-up)")
    parser.add_argument("--results", help="results folder for `headstats summary` (default: a copy of a small sweep)")
    args = parser.parse_args(argv)

    exe = [sys.executable, "-m", "headstats.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        results = args.results or str(small_results(Path(tmp)))
        commands = {
            "headstats --help": [*exe, "--help"],
            "headstats list": [*exe, "list"],
            "headstats summary": [*exe, "summary", results],
            "python -c pass": [sys.executable, "-c", "pass"],  # the interpreter alone, for reference
        }
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.runs} runs each after a warm-up")
        print(f"{'command':<20} {'wall s median [min, max]':>28} {'CPU s median [min, max]':>28}  exit")
        for name, command in commands.items():
            time_command(command)  # warm-up: file-system caches, .pyc files
            runs = [time_command(command) for _ in range(args.runs)]
            wall, cpu = [r[0] for r in runs], [r[1] for r in runs]
            codes = sorted({r[2] for r in runs})
            print(
                f"{name:<20} {statistics.median(wall):>10.2f} [{min(wall):.2f}, {max(wall):.2f}]".ljust(49)
                + f"{statistics.median(cpu):>10.2f} [{min(cpu):.2f}, {max(cpu):.2f}]".ljust(29)
                + f" {','.join(map(str, codes))}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
