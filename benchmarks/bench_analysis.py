"""Analysis of a large score table: out-of-core (headstats.stats.large) vs plain pandas, side by side.

    python benchmarks/bench_analysis.py                       # 50M rows (writes ~4 GB once, then reuses it)
    python benchmarks/bench_analysis.py --rows 2000000        # a quick run
    python benchmarks/bench_analysis.py --variants ours,summary,pandas --depth-bins 5

On a synthetic table (:mod:`headstats.testing.synthetic`: 5 models of different shapes, all 16 score columns)
it computes the W1 matrix of the 5 models for every score and the overlap (IoU) of ``awft`` and
``ahon_ln`` at 3 selection rates for every model, with

- ``ours``: :func:`~headstats.stats.large.distance_matrices_from_dataset` (exact) and
  :func:`~headstats.stats.large.score_overlap_from_dataset`, reading one column of one model at a time;
- ``summary``: the same with the quantile-summary W1 (bounded memory; prints its largest error);
- ``pandas``: what one writes without them: ``pd.read_parquet`` of the whole table, ``groupby``,
  ``scipy.stats.wasserstein_distance`` per pair, numpy thresholds and masks for the overlap.

Each variant runs in a fresh subprocess, which reports its wall time and its peak resident memory
(``VmHWM``). The variants' numbers are compared (largest W1 difference, overlap equality), and the
ratios are printed. Targets: ours >= 5x faster than pandas, peak memory < 4 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

PAIR = ("awft", "ahon_ln")
RATES = (0.05, 0.10, 0.20)


def peak_rss_gib() -> float:
    """Peak resident memory of this process (VmHWM), GiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_ours(root: Path, method: str, depth_bins: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    from headstats.stats import large as outofcore

    t0 = time.perf_counter()
    w1 = outofcore.distance_matrices_from_dataset(root, depth_bins=depth_bins, method=method, progress=False)  # type: ignore[arg-type]
    t1 = time.perf_counter()
    overlap = outofcore.score_overlap_from_dataset(root, *PAIR, rates=RATES, progress=False)
    t2 = time.perf_counter()
    return w1, overlap, {"w1_s": t1 - t0, "overlap_s": t2 - t1}


def run_pandas(root: Path, depth_bins: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    import scipy.stats

    from headstats.engine.scores import get_score
    from headstats.engine.scores import score_ids as registered_score_ids
    from headstats.stats.tables import depth_bin, depth_labels
    from headstats.stats.thresholds import QUANTILE_METHOD

    t0 = time.perf_counter()
    frame = pd.read_parquet(root)
    t_read = time.perf_counter() - t0
    rows = []
    layers = {m: g.to_numpy() for m, g in frame.groupby("model", observed=True)["layer"]} if depth_bins else {}
    for sid in registered_score_ids():
        # One score column per model at a time (not a copy of every column of every model).
        values = {m: g.to_numpy() for m, g in frame.groupby("model", observed=True)[sid]}
        for a, b in combinations(sorted(values), 2):
            rows.append(("all", sid, a, b, scipy.stats.wasserstein_distance(values[a], values[b])))
            if depth_bins:
                la = depth_bin(layers[a], layers[a].max() + 1, depth_bins)
                lb = depth_bin(layers[b], layers[b].max() + 1, depth_bins)
                for i, label in enumerate(depth_labels(depth_bins)):
                    w = scipy.stats.wasserstein_distance(values[a][la == i], values[b][lb == i])
                    rows.append((label, sid, a, b, w))
    w1 = pd.DataFrame(rows, columns=["depth", "score", "model_a", "model_b", "w1"])
    t1 = time.perf_counter()
    out = []
    for (model, dataset), group in frame.groupby(["model", "dataset"], observed=True):
        masks = {}
        for sid in PAIR:
            values = group[sid].to_numpy(np.float64)
            above = get_score(sid).inactive_when == "above"
            for rate in RATES:
                tau = np.quantile(values, 1 - rate if above else rate, method=QUANTILE_METHOD)
                masks[sid, rate] = values > tau if above else values < tau
        for rate in RATES:
            sa, sb = masks[PAIR[0], rate], masks[PAIR[1], rate]
            share = pd.DataFrame({"layer": group["layer"], "head": group["head"], "a": sa, "b": sb})
            usual = share.groupby(["layer", "head"]).mean() >= 0.5
            out.append({
                "model": model, "dataset": dataset, "rate": rate,
                "iou_triples": (sa & sb).sum() / (sa | sb).sum(),
                "iou_heads": (usual["a"] & usual["b"]).sum() / (usual["a"] | usual["b"]).sum(),
            })  # fmt: skip
    t2 = time.perf_counter()
    return w1, pd.DataFrame(out), {"read_s": t_read, "w1_s": t1 - t0, "overlap_s": t2 - t1}


def child(args: argparse.Namespace) -> None:
    """One variant, in this (fresh) process; writes its results and measurements as JSON."""
    import scipy.stats  # noqa: F401  (imports are not part of the measured time)

    import headstats.stats.large  # noqa: F401

    start = time.perf_counter()
    if args.run == "pandas":
        w1, overlap, timing = run_pandas(args.dir, args.depth_bins)
    else:
        w1, overlap, timing = run_ours(args.dir, "exact" if args.run == "ours" else "summary", args.depth_bins)
    timing["total_s"] = time.perf_counter() - start
    report = {
        "timing": timing,
        "peak_rss_gib": peak_rss_gib(),
        "w1": w1.to_dict(orient="list"),
        "overlap": overlap.to_dict(orient="list"),
    }
    Path(args.report).write_text(json.dumps(report, default=float))


def launch(variant: str, args: argparse.Namespace) -> dict:
    report = args.dir.parent / f".bench-analysis-{variant}.json"
    command = [sys.executable, __file__, "--run", variant, "--dir", str(args.dir), "--report", str(report)]
    command += ["--depth-bins", str(args.depth_bins)]
    done = subprocess.run(command)
    if done.returncode != 0:  # e.g. killed for memory: report it next to the others
        return {"failed": f"exit code {done.returncode}" + (" (killed: out of memory?)" if done.returncode < 0 else "")}
    result = json.loads(report.read_text())
    report.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50_000_000, help="total rows of the synthetic table")
    parser.add_argument("--dir", type=Path, default=None, help="where the table is written (default: a temp dir)")
    parser.add_argument("--variants", default="ours,summary,pandas")
    parser.add_argument("--depth-bins", type=int, default=0, help="also W1 per relative-depth bin (0 = overall only)")
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--report", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        child(args)
        return

    from headstats.testing.synthetic import write_synthetic_scores

    if args.dir is None:
        args.dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"headstats-bench-table-{args.rows}"
    t0 = time.perf_counter()
    written = write_synthetic_scores(args.dir, 5, rows=args.rows, progress=True)
    made = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in args.dir.rglob("*.parquet")) / 2**30
    verb = "reused" if written["reused"].all() else f"written in {made:.0f} s"
    print(f"table {args.dir}: {written['rows'].sum():,} rows, 5 models, {size:.2f} GiB on disk ({verb})")
    print(written[["model", "rows", "parts"]].to_string(index=False))

    results = {}
    for variant in [v for v in args.variants.split(",") if v]:
        print(f"running {variant} ...", flush=True)
        outcome = launch(variant, args)
        if "failed" in outcome:
            print(f"  {variant}: failed, {outcome['failed']}", flush=True)
            continue
        results[variant] = outcome
        t = outcome["timing"]
        print(f"  {variant}: {t['total_s']:.1f} s, peak {outcome['peak_rss_gib']:.2f} GiB", flush=True)

    print(f"\n{written['rows'].sum():,} rows; W1 matrix 5 models x 16 scores"
          f"{f' x (all + {args.depth_bins} depth bins)' if args.depth_bins else ''}; overlap {PAIR[0]} vs {PAIR[1]} "
          f"at {len(RATES)} rates; {os.cpu_count()} CPU cores")  # fmt: skip
    print(f"  {'variant':<10} {'W1 (s)':>9} {'overlap (s)':>12} {'total (s)':>10} {'peak RSS (GiB)':>15}")
    for variant, r in results.items():
        t = r["timing"]
        print(f"  {variant:<10} {t['w1_s']:9.1f} {t['overlap_s']:12.1f} {t['total_s']:10.1f} {r['peak_rss_gib']:15.2f}")
    if "ours" in results and "pandas" in results:
        ours, base = results["ours"], results["pandas"]
        print(f"pandas / ours, total time: {base['timing']['total_s'] / ours['timing']['total_s']:.1f}x (target >= 5x)")
        print(f"pandas / ours, peak memory: {base['peak_rss_gib'] / ours['peak_rss_gib']:.1f}x; "
              f"ours {ours['peak_rss_gib']:.2f} GiB (target < 4 GiB)")  # fmt: skip
        a = pd.DataFrame(ours["w1"]).set_index(["depth", "score", "model_a", "model_b"])["w1"]
        b = pd.DataFrame(base["w1"]).set_index(["depth", "score", "model_a", "model_b"])["w1"]
        gap = (a - b.reindex(a.index)).abs()
        relative = (gap / b.reindex(a.index)).max()
        print(f"largest |W1 ours - W1 scipy| over {len(gap)} distances: {gap.max():.2e} (relative {relative:.2e})")
        key = ["model", "dataset", "rate"]
        oa = pd.DataFrame(ours["overlap"]).set_index(key)[["iou_triples", "iou_heads"]]
        ob = pd.DataFrame(base["overlap"]).set_index(key)[["iou_triples", "iou_heads"]].reindex(oa.index)
        print(f"largest overlap difference: {(oa - ob).abs().to_numpy().max():.2e}")
    if "summary" in results and "ours" in results:
        s = pd.DataFrame(results["summary"]["w1"])
        e = pd.DataFrame(results["ours"]["w1"])
        err = (s["w1"] - e["w1"]).abs()
        within = bool((err <= s["error_bound"] + 1e-12).all())
        print(f"summary vs exact W1: largest error {err.max():.2e} (its stated bound there: "
              f"{s['error_bound'][err.idxmax()]:.2e}); all within their bounds: {within}")  # fmt: skip


if __name__ == "__main__":
    main()
