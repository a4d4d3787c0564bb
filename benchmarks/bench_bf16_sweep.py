"""bf16 model body vs fp32 on the powered study's own job: speed and agreement of zeroing sweeps.

    python benchmarks/bench_bf16_sweep.py [--models smollm2-135m,gemma3-270m]
        [--tasks arc_easy,piqa,hellaswag] [--limit 100] [--targets 0,0.15] [--batch-size 16]
        [--scores ahon_ln,awft,random] [--out /tmp/headstats-bf16-sweep]

For each model and task, the same seeded sample of ``--limit`` questions is swept (``run_sweep``:
baseline, then every score at every non-zero target, dynamic zeroing with thresholds calibrated on
the evaluated prompts, as ``analyses/study.toml`` does) once with the model body in fp32 and once in
bf16; softmax and every score are fp32 in both. The two runs of a (model, task) follow each other, so
they meet the same machine load. Printed per (model, task):

- wall and CPU seconds of each dtype and their ratio (the speed-up of the bf16 body);
- baseline: accuracy in each dtype, the share of questions whose predicted choice agrees, and
  |delta gold log-likelihood| (mean, max);
- zeroed points: largest relative threshold difference (the scores' calibration quantiles), realised
  % of heads zeroed in each dtype, prediction agreement, and the largest |delta accuracy| over points.

Results land in ``--out`` (deleted first, so that every point is really run and timed). Run it on an
otherwise idle machine: a second torch process with one thread per core oversubscribes the cores, and
both then run many times slower (pause a background study with ``kill -STOP`` / ``kill -CONT``).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headstats import load_model
from headstats.io.store import read_interventions
from headstats.jobs.sweep import run_sweep

DTYPES = ("float32", "bfloat16")
KEY = ["score", "target", "question_id"]


def sweep_seconds(model, tok, task: str, out: Path, args: argparse.Namespace) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run_sweep(
        model,
        task,
        tokenizer=tok,
        out=out,
        scores=tuple(args.scores.split(",")),
        targets=tuple(float(t) for t in args.targets.split(",")),
        limit=args.limit,
        batch_size=args.batch_size,
        progress=False,
    )
    return time.perf_counter() - wall, time.process_time() - cpu


def _rows(out: Path, model: str, task: str) -> pd.DataFrame:
    frame = read_interventions(out)
    frame = frame[(frame["model"] == model) & (frame["task"] == task)]
    return frame.set_index(KEY).sort_index()


def compare(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, float]:
    """fp32 rows ``a`` against bf16 rows ``b`` of one (model, task), joined on (score, target, question)."""
    a, b = a.align(b, join="inner", axis=0)
    base = a.index.get_level_values("target") == 0
    dll = (a["gold_loglik"] - b["gold_loglik"]).abs()
    zeroed_a, zeroed_b = a[~base], b[~base]
    acc_a = zeroed_a.groupby(level=["score", "target"])["correct"].mean()
    acc_b = zeroed_b.groupby(level=["score", "target"])["correct"].mean()
    thr = zeroed_a.groupby(level=["score", "target"])["threshold"].first()
    thr_b = zeroed_b.groupby(level=["score", "target"])["threshold"].first()
    return {
        "n": a[base].index.get_level_values("question_id").nunique(),
        "acc32": 100 * a[base]["correct"].mean(),
        "acc16": 100 * b[base]["correct"].mean(),
        "agree": 100 * (a[base]["pred"] == b[base]["pred"]).mean(),
        "dll_mean": float(dll[base].mean()),
        "dll_max": float(dll[base].max()),
        "thr_rel": float(((thr - thr_b).abs() / thr.abs().clip(lower=1e-12)).max()) if len(thr) else np.nan,
        "zero32": 100 * float((zeroed_a["n_zeroed"] / zeroed_a["n_heads"]).mean()),
        "zero16": 100 * float((zeroed_b["n_zeroed"] / zeroed_b["n_heads"]).mean()),
        "agree_z": 100 * float((zeroed_a["pred"] == zeroed_b["pred"]).mean()),
        "dacc_max": 100 * float((acc_a - acc_b).abs().max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--tasks", default="arc_easy,piqa,hellaswag")
    parser.add_argument("--scores", default="ahon_ln,awft,random")
    parser.add_argument("--targets", default="0,0.15")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("/tmp/headstats-bf16-sweep"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability {capability}")
    lines = []
    for name in args.models.split(","):
        loaded = {dtype: load_model(name, dtype=dtype, device="cpu") for dtype in DTYPES}
        for task in args.tasks.split(","):
            seconds = {}
            for dtype in DTYPES:
                model, tok = loaded[dtype]
                seconds[dtype] = sweep_seconds(model, tok, task, args.out / dtype, args)
                print(
                    f"  {name} {task} {dtype}: {seconds[dtype][0]:.1f} s wall, {seconds[dtype][1]:.1f} CPU s",
                    flush=True,
                )
            stats = compare(*(_rows(args.out / dtype, name, task) for dtype in DTYPES))
            speed = seconds["float32"][1] / seconds["bfloat16"][1]
            lines.append(
                {
                    "model": name,
                    "task": task,
                    "fp32 s": seconds["float32"][0],
                    "bf16 s": seconds["bfloat16"][0],
                    "speed-up (CPU s)": speed,
                    **stats,
                }
            )
        del loaded
    table = pd.DataFrame(lines)
    points = len(args.scores.split(",")) * len([t for t in args.targets.split(",") if float(t) > 0])
    print(f"\nbf16 body vs fp32, {args.limit} sampled questions per task, baseline + {points} zeroed points")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.3g}".format):
        print(table.to_string(index=False))
    print(
        "\nacc = baseline accuracy (%); agree = baseline predictions equal (%); dll = |delta gold log-likelihood|;"
        "\nthr_rel = largest relative threshold difference; zero = realised % of heads zeroed; agree_z = predictions"
        "\nequal at the zeroed points (%); dacc_max = largest |delta accuracy| (points) over the zeroed points"
    )


if __name__ == "__main__":
    main()
