"""Noise from the computation path alone: what a sweep's "one path per sweep" rule removes.

    python benchmarks/bench_paths.py [--models smollm2-135m,gemma3-270m] [--dtypes float32,bfloat16]
        [--subjects anatomy,astronomy,...] [--per-subject 8] [--arc 150] [--batch-size 8]

Nothing is zeroed in any pass here; every pair below computes the same function of the same
questions and differs only in how attention is computed. Printed per model and dtype:

- ``kernel``: ARC-Easy (a seeded sample of ``--arc`` questions) through headstats' attention with
  PyTorch's fused SDPA kernel (what a pass whose scores read no probabilities would run) against the
  explicit kernel that materialises the probabilities (what awft/entropy need);
- ``prefix``: MMLU 5-shot (the first ``--per-subject`` questions of each of ``--subjects``, so
  each subject's questions share their 5-shot prefix) with the shared prefix run once
  into a KV cache against whole sequences.

Each line gives the share of questions whose predicted answer differs and the largest |delta gold
log-likelihood|. Both paths are exact in real arithmetic and fp32 inside attention; a bf16 body
rounds their outputs differently and carries the difference through the layers. A sweep therefore
runs all its passes, baseline included, on whole sequences with one kernel
(:attr:`headstats.jobs.sweep.SweepPlan.materialise`), so that a paired difference measures the
zeroing only. Run it on an otherwise idle machine (pause a background study with ``kill -STOP``).
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from headstats import load_model
from headstats.engine.probe import Probe
from headstats.io.tasks import load_task
from headstats.jobs.evaluate import evaluate


def answers(model, tok, task, *, materialise: bool, share_prefix: bool, batch_size: int) -> pd.DataFrame:
    heads = model.config.get_text_config().num_attention_heads

    def never(layer: int, scores: dict, keys: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(keys), heads, dtype=torch.bool)

    with Probe(model, (), never, materialise=materialise) as probe:
        frame = evaluate(
            model, tok, task, batch_size=batch_size, probe=probe, progress=False, share_prefix=share_prefix
        )
    return frame.sort_values(["subject", "question_id"], na_position="first").reset_index(drop=True)


def differ(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, float]:
    return {
        "questions": len(a),
        "answers differ": int((a["pred"] != b["pred"]).sum()),
        "differ %": 100.0 * float((a["pred"] != b["pred"]).mean()),
        "max |dLL|": float((a["gold_loglik"] - b["gold_loglik"]).abs().max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--subjects", default="abstract_algebra,anatomy,astronomy,college_biology,high_school_physics,marketing"
    )
    parser.add_argument("--per-subject", type=int, default=8)
    parser.add_argument("--arc", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU {torch.backends.cpu.get_cpu_capability()}"
    )
    arc = load_task("arc_easy", limit=args.arc, sample="random")
    mmlu = load_task("mmlu", subjects=args.subjects, limit_per_subject=args.per_subject)
    rows = []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            model, tok = load_model(name, dtype=dtype, device="cpu")
            start = time.perf_counter()
            fused = answers(model, tok, arc, materialise=False, share_prefix=False, batch_size=args.batch_size)
            explicit = answers(model, tok, arc, materialise=True, share_prefix=False, batch_size=args.batch_size)
            rows.append({"model": name, "dtype": dtype, "path": "kernel: fused vs explicit", **differ(fused, explicit)})
            whole = answers(model, tok, mmlu, materialise=False, share_prefix=False, batch_size=args.batch_size)
            reused = answers(model, tok, mmlu, materialise=False, share_prefix=True, batch_size=args.batch_size)
            rows.append({"model": name, "dtype": dtype, "path": "prefix: reused vs whole", **differ(whole, reused)})
            print(f"  {name} {dtype}: {time.perf_counter() - start:.0f} s", flush=True)
            del model
    table = pd.DataFrame(rows)
    print(f"\nnothing zeroed; ARC-Easy: {args.arc} sampled questions; MMLU: {len(mmlu.questions)} questions of")
    print(f"{args.subjects} ({args.per_subject} per subject share each subject's 5-shot prefix)")
    with pd.option_context("display.width", 200, "display.float_format", "{:.3g}".format):
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
