"""MMLU evaluation throughput and the cost of head zeroing, each measured side by side in one run.

    python benchmarks/bench_intervene.py [--model smollm2-135m] [--questions 16] [--batch-size 8]
                                         [--repeats 5] [--device cpu] [--dtype float32]

First, MMLU questions per second through :func:`headstats.jobs.evaluate.question_logliks` with one forward
pass per question (the context serves " A".." D"; only the last position's logits are computed)
against one pass per (question, choice), as a harness that scores each choice separately does; both
give the same log-likelihoods (checked). Target (issue 3): at least 3x.

Then zeroing. Inputs are real: the 5-shot MMLU contexts the evaluator feeds the embedded model (one sequence per
question, logits of the last position only, as :func:`headstats.jobs.evaluate.evaluate` computes them).
Modes, each timed over the same batches, interleaved repeat by repeat so that machine load affects
all of them alike (the median repeat is reported):

- plain: the model outside any probe (headstats' attention then delegates to PyTorch SDPA);
- static: ``ablate_heads(heads=...)``, no score computed (attention through headstats' kernel);
- dynamic ahon_ln / awft: the study's intervention, threshold calibrated for p = 0.1;
- random: ``score="random", threshold=0.1``.

Target (issue 3): dynamic zeroing costs at most 1.3x the plain forward.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from bench_models import load

import headstats
from headstats import ablate_heads, threshold_for_fraction
from headstats.engine.batching import length_sorted_batches
from headstats.io.tasks import collection_source, load_task
from headstats.jobs.evaluate import question_logliks


def bench_questions(model, tokenizer, n: int, batch_size: int, repeats: int) -> None:
    """Questions per second, one pass per question vs one pass per (question, choice)."""
    questions = load_task("mmlu", limit=n).questions
    variants = {"one pass per question": True, "one pass per choice": False}
    times: dict[str, list[float]] = {name: [] for name in variants}
    logliks: dict[str, list] = {}
    for repeat in range(repeats + 1):  # the first round warms up
        for name, one_pass in variants.items():
            start = time.perf_counter()
            scored = question_logliks(
                model, tokenizer, questions, batch_size=batch_size, one_pass_per_question=one_pass, progress=False
            )
            if repeat:
                times[name].append(time.perf_counter() - start)
            logliks[name] = [s.logliks for s in scored]
            if not repeat:
                n_seq = sum(s.n_sequences for s in scored)
                print(f"  {name}: {n_seq} forward sequences for {len(questions)} questions", flush=True)
    worst = max(
        abs(a - b).max() for a, b in zip(logliks["one pass per question"], logliks["one pass per choice"], strict=True)
    )
    print(f"MMLU evaluation, {len(questions)} questions, batch {batch_size}, median of {repeats}")
    print(f"{'variant':<24}{'seconds':>10}{'q/s':>10}")
    for name, values in times.items():
        t = statistics.median(values)
        print(f"{name:<24}{t:>10.3f}{len(questions) / t:>10.2f}")
    ratio = statistics.median(times["one pass per choice"]) / statistics.median(times["one pass per question"])
    print(
        f"one pass per question is {ratio:.2f}x faster than one per choice (target >= 3x); "
        f"largest log-likelihood difference {worst:.1e}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="embedded name, or config:NAME (random weights)")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device")
    parser.add_argument("--dtype")
    args = parser.parse_args()

    model, tokenizer = load(args.model, dtype=args.dtype, device=args.device)
    device = next(model.parameters()).device
    bench_questions(model, tokenizer, args.questions, args.batch_size, args.repeats)
    sequences = [ids for _, ids in collection_source("mmlu").iter_sequences(tokenizer, limit=args.questions)]
    batches = list(length_sorted_batches(sequences, args.batch_size, device=device))
    tokens = sum(len(s) for s in sequences)

    calibration = headstats.score_sequences(model, sequences, args.batch_size, scores=["ahon_ln", "awft"])
    tau = {sid: threshold_for_fraction(calibration, sid, 0.1) for sid in ("ahon_ln", "awft")}
    layers = model.config.get_text_config().num_hidden_layers
    static_heads = [(0, 0), (layers // 3, 1), (2 * layers // 3, 2)]  # three heads spread over the depth
    modes: dict[str, Callable[[], AbstractContextManager]] = {
        "plain": nullcontext,
        "static (3 heads)": lambda: ablate_heads(model, heads=static_heads),
        "dynamic ahon_ln p=0.1": lambda: ablate_heads(model, score="ahon_ln", threshold=tau["ahon_ln"]),
        "dynamic awft p=0.1": lambda: ablate_heads(model, score="awft", threshold=tau["awft"]),
        "random p=0.1": lambda: ablate_heads(model, score="random", threshold=0.1),
    }

    def run(mode: str) -> float:
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        with torch.inference_mode(), modes[mode]():
            sync()
            start = time.perf_counter()
            for batch in batches:
                model(**batch.model_inputs(), use_cache=False, logits_to_keep=1)
            sync()
            return time.perf_counter() - start

    for mode in modes:  # warm-up: kernels, allocator, caches
        run(mode)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.repeats):
        for mode in modes:
            times[mode].append(run(mode))

    plain = statistics.median(times["plain"])
    print(
        f"{args.model} on {device} ({next(model.parameters()).dtype}), {len(sequences)} MMLU 5-shot contexts "
        f"({tokens} tokens, mean {tokens / len(sequences):.0f}), batch {args.batch_size}, median of {args.repeats}"
    )
    print(f"{'mode':<24}{'seconds':>10}{'seq/s':>10}{'x plain':>10}")
    for mode, values in times.items():
        t = statistics.median(values)
        print(f"{mode:<24}{t:>10.3f}{len(sequences) / t:>10.2f}{t / plain:>10.2f}")
    worst = max(statistics.median(times[m]) for m in modes if m.startswith("dynamic")) / plain
    print(f"dynamic zeroing costs {worst:.2f}x the plain forward (target <= 1.3x)")


if __name__ == "__main__":
    main()
