"""The README's main job (``headstats run analyses/embedded.toml``) before and after a change: stage times
and whether the report's tables still say the same.

    python benchmarks/bench_main_job.py [--before main] [--out /tmp/headstats-main-job] [--dtype DTYPE]
    python benchmarks/bench_main_job.py --compare REPORT_DIR [--against reports/embedded]

Runs the job twice from scratch, once from the tree of git ref ``--before`` (exported with ``git
archive``; nothing of this checkout changes) and once from a copy of this checkout as it is, each
into its own results and report folders under ``--out`` (deleted first). The two alternate stage by
stage (collect, then ablate, then report: before, after, before, after, ...), so that load on a shared
machine falls on both alike.
Printed per stage and side: wall and CPU seconds (user + system of the process), and per sweep the wall
and CPU seconds its passes recorded; then the ratios, with the 1-minute load average at each stage's
start. Both reports' tables are then compared with each other and with the committed
``reports/embedded/tables`` (:func:`compare_tables`).

``--compare`` compares one report's tables with ``--against`` and prints the differences, nothing else.

The tolerance (stated before the runs): every table and column of the committed report, rows matched
on their keys, numbers equal to ``rtol`` 1e-3 / ``atol`` 1e-6 (fp32 arithmetic of another CPU; an
interval from resampling is computed from the same seeds) and every answer-count column exact. A bf16
model body (``--dtype bfloat16``, or ``fast`` on a CPU with bf16 units) moves about 1% of answers
(3,000 HellaSwag questions on an AVX512-BF16 EPYC: 99.0-99.7% of predictions equal, accuracy within
0.2 points; ``results/confirm``): its tolerance is 2 answers per accuracy and 2% relative for score
statistics, checked by ``--compare ... --bf16``. The run's own record of time and machine
(``run_times.csv``, ``provenance.csv``) is not compared.
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

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ROOT / "analyses" / "embedded.toml"
NOT_COMPARED = {"run_times.csv", "provenance.csv", "provenance.json"}
STAGES = ("collect", "ablate", "report")


def _export(ref: str, into: Path) -> Path:
    """The tree of ``ref`` as plain files under ``into`` (git archive: this checkout is untouched)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _job_file(source: Path, side: Path, dtype: str | None) -> Path:
    text = (source / "analyses" / "embedded.toml").read_text()
    text = re.sub(r'^results = ".*"$', f'results = "{side / "results"}"', text, flags=re.M)
    text = re.sub(r'^report = ".*"$', f'report = "{side / "report"}"', text, flags=re.M)
    if dtype:
        text = re.sub(r'^dtype = ".*"\n', "", text, flags=re.M)
        text = text.replace("[models]\n", f'[models]\ndtype = "{dtype}"\n')
    path = side / "embedded.toml"
    path.write_text(text)
    return path


def _run_stage(source: Path, job: Path, stage: str) -> dict:
    argv = [sys.executable, "-m", "headstats", "-q", "run", str(job), "--stages", stage]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=source, env={**os.environ, "PYTHONPATH": str(source)}, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{source}: {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"stage": stage, "wall_s": wall, "cpu_s": cpu, "load": load}


def sweep_times(results: Path) -> pd.DataFrame:
    """Per (model, task): the passes' recorded wall and CPU seconds (each point file's record)."""
    from headstats.io import store

    rows = []
    for path in sorted(results.glob("model=*/task=*/*.parquet")):
        point = (store.file_provenance(path) or {}).get("point") or {}
        if point.get("seconds") is None:
            continue
        rows.append(
            {
                "task": path.parent.name.removeprefix("task="),
                "passes": 1,
                "wall_s": float(point["seconds"]),
                "cpu_s": float(point.get("cpu_seconds") or 0.0),
            }
        )
    return pd.DataFrame(rows).groupby("task").sum() if rows else pd.DataFrame()


def _keys(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if frame[c].dtype == object or c in ("layer", "head", "target", "question_id")]


def compare_tables(new: Path, old: Path, *, rtol: float = 1e-3, atol: float = 1e-6, answers: int = 0) -> list[str]:
    """How the tables of report ``new`` differ from those of report ``old`` beyond the tolerance: numbers
    to ``rtol`` / ``atol``, count columns (``n_*``, ``only_*``, ``correct``) within ``answers``. Empty when
    they say the same."""
    problems = []
    old_tables = {p.name for p in (old / "tables").glob("*.csv")} - NOT_COMPARED
    new_tables = {p.name for p in (new / "tables").glob("*.csv")} - NOT_COMPARED
    for name in sorted(old_tables ^ new_tables):
        problems.append(f"{name}: in {'the old' if name in old_tables else 'the new'} report only")
    for name in sorted(old_tables & new_tables):
        a, b = pd.read_csv(old / "tables" / name), pd.read_csv(new / "tables" / name)
        if list(a.columns) != list(b.columns) or len(a) != len(b):
            problems.append(f"{name}: columns or rows differ ({a.shape} -> {b.shape})")
            continue
        for col in a.columns:
            x, y = a[col], b[col]
            if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
                xv, yv = x.to_numpy(float), y.to_numpy(float)
                counts = col.startswith(("n_", "only_")) or col in ("correct", "questions")
                tol = answers if counts else atol + rtol * np.abs(xv)
                bad = ~((np.abs(xv - yv) <= tol) | (np.isnan(xv) & np.isnan(yv)))
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    problems.append(
                        f"{name} {col}: {int(bad.sum())} of {len(a)} differ (row {i}: {xv[i]!r} -> {yv[i]!r})"
                    )
            elif not x.astype(str).equals(y.astype(str)):
                i = int(np.flatnonzero((x.astype(str) != y.astype(str)).to_numpy())[0])
                problems.append(f"{name} {col}: text differs (row {i}: {x.iloc[i]!r} -> {y.iloc[i]!r})")
    return problems


def _say_comparison(new: Path, old: Path, bf16: bool) -> None:
    kw = {"rtol": 0.02, "atol": 1e-4, "answers": 2} if bf16 else {}
    problems = compare_tables(new, old, **kw)
    n = len({p.name for p in (old / "tables").glob("*.csv")} - NOT_COMPARED)
    verdict = f"{len(problems)} differences" if problems else "equal within the tolerance"
    print(f"{new} against {old}: {n} tables, {verdict}")
    for line in problems:
        print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="git ref of the code before the change")
    parser.add_argument("--out", default="/tmp/headstats-main-job")
    parser.add_argument("--dtype", default=None, help="override the file's dtype on both sides")
    parser.add_argument("--compare", default=None, help="only compare this report's tables with --against")
    parser.add_argument("--against", default=str(ROOT / "reports" / "embedded"))
    parser.add_argument("--bf16", action="store_true", help="with --compare: the bf16 tolerance")
    args = parser.parse_args()
    if args.compare:
        _say_comparison(Path(args.compare), Path(args.against), args.bf16)
        return
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    # This checkout as it is now (its uncommitted edits too), so that editing it while the job runs
    # changes nothing of the run.
    after = out / "after-src"
    for folder in ("headstats", "analyses"):
        shutil.copytree(ROOT / folder, after / folder, ignore=shutil.ignore_patterns("__pycache__"))
    sources = {"before": _export(args.before, out / "before-src"), "after": after}
    jobs = {}
    for side, src in sources.items():
        (out / side).mkdir(parents=True)
        jobs[side] = _job_file(src, (out / side).resolve(), args.dtype)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    flags = Path("/proc/cpuinfo").read_text()
    units = [f for f in ("avx512_bf16", "amx_bf16") if f in flags] or ["no bf16 units"]
    print(f"main job, before = {args.before}, after = this checkout; {os.cpu_count()} CPUs ({cpu}, {', '.join(units)})")
    rows = []
    for stage in STAGES:
        for side in ("before", "after"):
            row = {"side": side, **_run_stage(sources[side], jobs[side], stage)}
            rows.append(row)
            times = f"wall {row['wall_s']:7.1f} s  CPU {row['cpu_s']:7.1f} s"
            print(f"  {stage:<8} {side:<6} {times}  (load {row['load']:.1f})", flush=True)
    table = pd.DataFrame(rows).pivot(index="stage", columns="side", values=["wall_s", "cpu_s"]).loc[list(STAGES)]
    table.loc["total"] = table.sum()
    for what in ("wall_s", "cpu_s"):
        table[(what, "after/before")] = table[(what, "after")] / table[(what, "before")]
    with pd.option_context("display.width", 160, "display.float_format", "{:.2f}".format):
        print(table)
        for side in ("before", "after"):
            print(f"sweeps, {side} (each pass's recorded seconds):")
            print(sweep_times(out / side / "results"))
    for side in ("before", "after"):
        _say_comparison(out / side / "report", Path(args.against), bf16=False)
    _say_comparison(out / "after" / "report", out / "before" / "report", bf16=False)


if __name__ == "__main__":
    main()
