"""Collection speed before and after a change: a paired, interleaved A/B of whole ``headstats collect``
commands, and where the CPU time of one batch goes.

    # A/B: the working tree against an older commit, OMP_NUM_THREADS=1 in both arms
    python benchmarks/bench_collect_speed.py ab --old f467def --model DIR --dataset mmlu --limit 8 --pairs 5
    # the time per text of each dataset (one pair, 128 texts each)
    python benchmarks/bench_collect_speed.py ab --old f467def --model DIR --dataset piqa,wikipedia,mmlu \\
        --limit 128 --pairs 1 --warmup 0
    # CPU shares of one batch (model body, attention kernel, score statistics, tables) for the code on
    # PYTHONPATH: run it once with the old tree's headstats first on the path
    python benchmarks/bench_collect_speed.py parts --model DIR --dataset mmlu --longest 8

The A/B arms run the same collect command (the finetuning-confirm design's options: scores ahon_ln,
awft, entropy_ln; chat prompts; batch 8; max length 1,024; the seeded random sample) into a fresh folder
each time, the old arm with ``git archive OLD headstats`` first on PYTHONPATH. Pairs alternate which arm
runs first (ABBA), so a drift in the machine's load falls on both. The figure compared is the process's
CPU time (user + system, from the kernel's accounting of the finished child): on a shared machine the
wall time is mostly waiting for a core. The ratio is new / old per pair; the interval is the range of
the pairs' ratios, a distribution-free interval for the median ratio whose coverage is
1 - 2 / 2^pairs (94% for 5 pairs). The CPU model and the load average before and after are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPTIONS = [
    "--scores", "ahon_ln,awft,entropy_ln", "--prompt-format", "chat", "--batch-size", "8", "--max-length", "1024",
    "--seed", "48", "--sample", "random", "--device", "cpu", "--no-progress",
]  # fmt: skip


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def run_collect(tree: Path, model: str, dataset: str, limit: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one collect command run with ``tree``'s headstats."""
    out = Path(tempfile.mkdtemp(prefix="headstats-ab-"))
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "headstats", "-q", "collect", "--model", model, "--dataset", dataset]
    command += ["--limit", str(limit), "--out", str(out), *OPTIONS]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"collect with {tree} failed: {process.stderr.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def old_tree(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "headstats"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def ab(args: argparse.Namespace) -> None:
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="headstats-old-") as folder:
        trees = {"old": old_tree(args.old, Path(folder)), "new": REPO}
        for dataset in args.dataset.split(","):
            for arm in ("old", "new")[: 2 if args.warmup else 0]:
                run_collect(trees[arm], args.model, dataset, args.limit)
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            for pair in range(args.pairs):
                for arm in ("old", "new") if pair % 2 == 0 else ("new", "old"):
                    seconds, wall = run_collect(trees[arm], args.model, dataset, args.limit)
                    cpu[arm].append(seconds)
                    print(f"  {dataset} pair {pair + 1} {arm}: {seconds:.1f} s CPU, {wall:.1f} s wall", flush=True)
            ratios = sorted(n / o for n, o in zip(cpu["new"], cpu["old"], strict=True))
            old, new = statistics.median(cpu["old"]), statistics.median(cpu["new"])
            print(
                f"{dataset}, {args.limit} texts: old {old:.1f} s CPU ({old / args.limit:.3f} s per text), "
                f"new {new:.1f} s ({new / args.limit:.3f} s per text); new / old per pair: median "
                f"{statistics.median(ratios):.3f}, range [{ratios[0]:.3f}, {ratios[-1]:.3f}] "
                f"({1 - 2 / 2 ** len(ratios):.0%} interval for the median); speed-up {old / new:.2f}x"
            )
    print(f"load average after: {os.getloadavg()}")


def parts(args: argparse.Namespace) -> None:
    """CPU seconds of one batch of the ``longest`` sequences (or those around the median length), by part."""
    import collections

    import torch

    from headstats.engine import attention, probe, scoring
    from headstats.engine import scores as S
    from headstats.io.models import load_model
    from headstats.io.tasks import Sample, collection_source

    model, tokenizer = load_model(args.model, device="cpu")
    source = collection_source(args.dataset)
    keys = list(source.keys()) if hasattr(source, "task") else None
    wanted = set(source.select(Sample(args.limit, "random"), seed=48, keys=keys))
    sequences = sorted(
        source.iter_sequences(tokenizer, prompt_format="chat", max_length=1024, model_name="x", ids=wanted),
        key=lambda item: len(item[1]),
    )
    middle = len(sequences) // 2
    batch = sequences[-args.longest :] if args.longest else sequences[middle - 4 : middle + 4]
    spent: collections.Counter[str] = collections.Counter()

    def timed(name, function):  # type: ignore[no-untyped-def]
        def wrapper(*a, **k):  # type: ignore[no-untyped-def]
            start = time.process_time()
            try:
                return function(*a, **k)
            finally:
                spent[name] += time.process_time() - start

        return wrapper

    probe.attention_with_stats = timed("attention", probe.attention_with_stats)
    attention.token_stat = timed("statistics", attention.token_stat)
    S.pool_rows = timed("statistics", S.pool_rows)
    scoring.record_to_table = timed("tables", scoring.record_to_table)
    ids = ["ahon_ln", "awft", "entropy_ln"]
    list(scoring.iter_score_tables(model, batch[:1], score_ids=ids, progress=False))  # warm-up
    spent.clear()
    start = time.process_time()
    list(scoring.iter_score_tables(model, batch, score_ids=ids, progress=False, batch_size=8))
    total = time.process_time() - start
    shares = {
        "model body (projections, MLP, norms, rotary)": total - spent["attention"] - spent["tables"],
        "attention kernel (logits, mask, softmax, P V)": spent["attention"] - spent["statistics"],
        "score statistics and pooling": spent["statistics"],
        "tables": spent["tables"],
    }
    print(
        f"{args.dataset}, lengths {[len(s) for _, s in batch]}, {torch.get_num_threads()} thread(s): {total:.2f} s CPU"
    )
    for name, seconds in shares.items():
        print(f"  {name:46s} {seconds:7.2f} s {100 * seconds / total:6.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("ab", help="paired, interleaved A/B of whole collect commands")
    a.add_argument("--old", required=True, help="the commit to compare the working tree against")
    a.add_argument("--model", required=True)
    a.add_argument("--dataset", default="mmlu", help="comma-separated")
    a.add_argument("--limit", type=int, default=8)
    a.add_argument("--pairs", type=int, default=5)
    a.add_argument("--warmup", type=int, default=1, help="1: one unmeasured run of each arm first")
    p = sub.add_parser("parts", help="CPU time of one batch by part, for the headstats on PYTHONPATH")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", default="mmlu")
    p.add_argument("--limit", type=int, default=128, help="the sample the batch is drawn from")
    p.add_argument("--longest", type=int, default=8, help="the longest N sequences; 0: 8 around the median")
    args = parser.parse_args()
    ab(args) if args.command == "ab" else parts(args)


if __name__ == "__main__":
    main()
