"""Peak memory of collection as the dataset grows: it must stay flat.

    python benchmarks/bench_memory.py [--model smollm2-135m] [--dataset wikipedia] [--sizes 16,64,256]
                                      [--batch-size 8] [--device cpu]

For each size N, a fresh subprocess loads the model, then runs
:func:`headstats.jobs.collect.collect_scores` on the first N documents of the dataset into an empty
directory. Scores stream to Parquet part by part, so nothing should accumulate with N: the peak
resident memory of the collection itself (above what the loaded model already holds; on CUDA, the
peak of allocated GPU memory) should not grow with N beyond what the longest sequence seen needs
(longer documents need larger activations; that is reported next to each peak).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _status(field: str) -> float:
    """A VmXXX field of /proc/self/status, in GiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2**20
    raise RuntimeError(f"no {field} in /proc/self/status (this benchmark needs Linux)")


def reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(args: argparse.Namespace) -> None:
    import pyarrow.dataset as pads
    import torch

    import headstats
    from headstats.jobs.collect import collect_scores

    t0 = time.perf_counter()
    model, tokenizer = headstats.load_model(args.model, dtype=args.dtype, device=args.device)
    load_s = time.perf_counter() - t0
    cuda = next(model.parameters()).device.type == "cuda"
    with tempfile.TemporaryDirectory() as out:
        rss_loaded = _status("VmRSS")
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        exact = reset_peak()
        t0 = time.perf_counter()
        result = collect_scores(
            model, tokenizer, args.dataset, out, limit=args.n, batch_size=args.batch_size, progress=False
        )
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        table = pads.dataset(result.partition, format="parquet").to_table(columns=["sample_id", "n_tokens"])
        report = {
            "n": result.n_samples,
            "rows": table.num_rows,
            "tokens": int(table.group_by("sample_id").aggregate([("n_tokens", "max")]).column(1).to_numpy().sum()),
            "longest": int(table.column("n_tokens").to_numpy().max()),
            "seconds": seconds,
            "load_s": load_s,
            "rss_loaded_gib": rss_loaded,
            "peak_rss_gib": _status("VmHWM"),
            "peak_exact": exact,
            "gpu_peak_gib": (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else None,
            "device": str(next(model.parameters()).device),
        }
    Path(args.report).write_text(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dataset", default="wikipedia")
    parser.add_argument("--sizes", default="16,64,256", help="comma-separated numbers of documents")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--n", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--report", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.report:
        child(args)
        return

    rows = []
    for n in [int(s) for s in args.sizes.split(",") if s]:
        with tempfile.NamedTemporaryFile(suffix=".json") as report:
            command = [sys.executable, __file__, "--n", str(n), "--report", report.name, "--model", args.model]
            command += ["--dataset", args.dataset, "--batch-size", str(args.batch_size)]
            command += ["--device", args.device] if args.device else []
            command += ["--dtype", args.dtype] if args.dtype else []
            # A fixed glibc mmap threshold returns every large freed block to the system at once;
            # otherwise glibc raises the threshold as blocks are freed and keeps later ones in a
            # fragmented heap, and the peak RSS measures the allocator's history, not what is held.
            env = {"MALLOC_MMAP_THRESHOLD_": "131072", **os.environ}
            subprocess.run(command, check=True, env=env)
            rows.append(json.loads(Path(report.name).read_text()))
        r = rows[-1]
        print(f"  {n} documents done in {r['seconds']:.1f} s", flush=True)

    first = rows[0]
    print(f"\ncollect_scores, {args.model} on {args.dataset}, batch size {args.batch_size}, device {first['device']}, "
          "each size in a fresh process")  # fmt: skip
    gpu = first["gpu_peak_gib"] is not None
    header = f"  {'docs':>6} {'rows':>9} {'tokens':>8} {'longest':>8} {'time (s)':>9} {'tok/s':>7}"
    header += f" {'RSS model (GiB)':>16} {'peak RSS (GiB)':>15} {'collection (GiB)':>17}"
    print(header + (f" {'GPU peak (GiB)':>15}" if gpu else ""))
    for r in rows:
        line = f"  {r['n']:>6} {r['rows']:>9} {r['tokens']:>8} {r['longest']:>8} {r['seconds']:9.1f}"
        line += f" {r['tokens'] / r['seconds']:7.0f} {r['rss_loaded_gib']:16.2f} {r['peak_rss_gib']:15.2f}"
        line += f" {r['peak_rss_gib'] - r['rss_loaded_gib']:17.2f}"
        print(line + (f" {r['gpu_peak_gib']:15.2f}" if gpu else ""))
    # Activations scale with the longest padded batch, so compare sizes along with their longest sequence.
    for a, b in itertools.pairwise(rows):
        ratio = (b["peak_rss_gib"] - b["rss_loaded_gib"]) / max(a["peak_rss_gib"] - a["rss_loaded_gib"], 1e-9)
        print(f"{a['n']} -> {b['n']} documents ({b['n'] / a['n']:.0f}x): collection memory {ratio:.2f}x, "
              f"longest sequence {a['longest']} -> {b['longest']} tokens")  # fmt: skip
    if not all(r["peak_exact"] for r in rows):
        print("note: /proc/self/clear_refs is unavailable, so peaks include the model loading itself")


if __name__ == "__main__":
    main()
