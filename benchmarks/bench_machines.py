"""Noise from the machine alone: a confirmation path's baseline recomputed here against the committed one.

    python benchmarks/bench_machines.py [--path explicit-bfloat16] [--model smollm2-135m] [--questions 64]
        [--threads 1,2]

Recomputes the baseline pass of one path of ``analyses/confirm.toml`` (its kernel and dtype, nothing
zeroed, whole sequences in the sweep's batches) on the first ``--questions`` held-out questions, and
joins it question by question with the committed baseline of that path and with the committed
explicit-fp32 one. Printed: the machine each side ran on, the median and largest |delta gold
log-likelihood| and the answers that differ. In fp32 two machines agree to rounding that moves no
answer; in bf16 a machine with other bf16 kernels differs from the committed pass as much as fp32
does, which is why a sweep refuses to join reduced-precision numbers from different kernels
(:class:`headstats.jobs.sweep.MixedKernelsError`). A bf16 body on a CPU without bf16 units is slow:
64 questions took 15 min on a 2-core AVX2 EPYC beside another job.

``--threads 1,2`` recomputes the pass once per torch thread count and compares the first count's
answers with each other's: whether a machine's kernels give the same numbers whatever the threads
(the kernel key that guards a resumed bf16 pass leaves the thread count out).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import pandas as pd
import torch

from headstats.engine.probe import Probe
from headstats.io import store
from headstats.io.machine import describe_machine
from headstats.io.models import load_model, machine_info
from headstats.io.tasks.base import load_task
from headstats.jobs.confirm import load_confirmation
from headstats.jobs.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="explicit-bfloat16")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16, help="the confirmation's sweeps run 16")
    parser.add_argument(
        "--threads", default=None, help="comma-separated torch thread counts, one pass each (default: torch's own)"
    )
    args = parser.parse_args()
    threads = [int(n) for n in args.threads.split(",")] if args.threads else [torch.get_num_threads()]

    plan = load_confirmation(ROOT / "analyses" / "confirm.toml")
    path = next((p for p in plan.paths if p.name == args.path), None)
    if path is None:
        parser.error(f"no path {args.path!r}: choose from {', '.join(p.name for p in plan.paths)}")
    sec = plan.section
    task = load_task(
        sec.task,
        limit=sec.limit,
        sample="random",
        seed=sec.seed,
        exclude_limit=sec.exclude_limit,
        exclude_seed=sec.exclude_seed,
    )
    task = dataclasses.replace(task, questions=task.questions[: args.questions])
    model, tokenizer = load_model(args.model, dtype=path.dtype, device="cpu")
    heads = model.config.get_text_config().num_attention_heads

    def never(layer: int, scores: dict, keys: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(keys), heads, dtype=torch.bool)

    passes = {}
    for n in threads:
        torch.set_num_threads(n)
        start = time.perf_counter()
        with (
            torch.inference_mode(),
            Probe(model, [], never, seed=sec.seed, materialise=path.kernel == "explicit") as probe,
        ):
            passes[n] = evaluate(
                model, tokenizer, task, batch_size=args.batch_size, probe=probe, progress=True, share_prefix=False
            )
        machine = describe_machine(machine_info("cpu"))
        print(f"{len(passes[n])} questions in {time.perf_counter() - start:.0f} s on {machine}")
    here = passes[threads[0]]
    for n in threads[1:]:
        compare(f"{threads[0]} thread(s)", here, f"{n} thread(s)", passes[n], exact=True)
    committed = {}
    for name in dict.fromkeys([path.name, "explicit-float32"]):
        where = plan.results_of(next(p for p in plan.paths if p.name == name))
        file = where / f"model={args.model}" / f"task={sec.task}" / "baseline.parquet"
        if not file.is_file():
            print(f"{name}: no committed baseline at {file}")
            continue
        machine = describe_machine((store.file_provenance(file) or {}).get("machine"))
        committed[name] = (pd.read_parquet(file), machine)
        compare(f"here ({path.name})", here, f"committed {name} ({machine})", committed[name][0])
    if len(committed) == 2:  # the dtype's own distance on the same questions, for scale
        (a, _), (b, _) = committed.values()
        compare(f"committed {path.name}", a[a["question_id"].isin(here["question_id"])], "committed fp32", b)


def compare(left_name: str, left: pd.DataFrame, right_name: str, right: pd.DataFrame, *, exact: bool = False) -> None:
    joined = left.merge(right, on="question_id", suffixes=("", "_there"))
    delta = (joined["gold_loglik"] - joined["gold_loglik_there"]).abs()
    differ = int((joined["pred"] != joined["pred_there"]).sum())
    same = f"; gold loglik bit for bit equal: {bool((delta == 0).all())}" if exact else ""
    print(
        f"{left_name} vs {right_name}: n={len(joined)}, |delta gold loglik| median {delta.median():.3g}, "
        f"max {delta.max():.3g}; answers differ {differ}{same}"
    )


if __name__ == "__main__":
    main()
