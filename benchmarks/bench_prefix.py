"""Shared-prefix reuse on MMLU 5-shot, and the bf16 fast path, measured side by side in one run.

    python benchmarks/bench_prefix.py [--model smollm2-135m] [--subjects 2] [--per-subject 6]
                                      [--batch-size 8] [--repeats 1] [--device cpu] [--dtype float32]
                                      [--threads 1] [--variants collect,sdpa,baseline]
    python benchmarks/bench_prefix.py --bf16 [--per-subject 4]      # bf16 vs fp32 instead

Inputs are the 5-shot MMLU contexts the evaluator feeds the model (header, five dev shots, question)
for the first ``--per-subject`` questions of ``--subjects`` subjects. Variants, interleaved repeat by
repeat so that machine load hits all alike (median repeat reported). Times are CPU seconds of this
process (the machine is shared; wall seconds are printed too), with one torch thread by default:

- collect whole / collect prefix: every score of every head (``iter_score_tables``, all 16 scores),
  without and with shared-prefix reuse;
- sdpa whole / sdpa prefix: a plain forward of the model body with PyTorch SDPA attention, no scores
  (the fastest thing a user could run instead), without and with the same prefix reuse;
- baseline whole / baseline prefix: the un-zeroed evaluation (``question_logliks``, one pass per
  question, last-position logits).

Each row prints the FLOPs the variant executes (valid tokens only: linear layers, attention over the
keys each query sees, the LM head where logits are read), the achieved GFLOP/s, and that as a
fraction of a dense matmul of the same dtype measured on the same machine in the same run (the roof).
Agreement: largest relative score difference (prefix vs whole) and largest |delta log-likelihood|.
Target (issue 13): collection and baseline >= 3x faster with prefix reuse, scores equal <= 1e-4
(relative), log-likelihoods <= 1e-5.

``--bf16`` instead compares the model body in bf16 with fp32 (both with prefix reuse; softmax and
scores are fp32 in both): speed of collection and baseline, score relative error, prediction
agreement and |delta log-likelihood|.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import torch
from bench_models import load

from headstats.engine.attention import hooked_module
from headstats.engine.batching import length_sorted_batches
from headstats.engine.prefix import PrefixRunner, continue_inputs, shared_prefix_groups
from headstats.engine.scoring import iter_score_tables
from headstats.io.tasks import PromptRenderer, get_task, load_task
from headstats.io.tasks.data import data_root
from headstats.jobs.evaluate import format_for_model, question_logliks

# -- machine roof and FLOP counts (shared with bench_eval_vs_lmeval.py) ------------------------------


def matmul_roof(dtype: torch.dtype, device: str, n: int | None = None, repeats: int = 5) -> float:
    """GFLOP per CPU second (GFLOP/s on one core) of the best of ``repeats`` dense n x n products: what
    this machine's kernels reach. CPU time, not wall time, because other jobs share the cores; on
    CUDA, wall time, with n = 8192 (smaller products leave a large GPU idle)."""
    n = n or (8192 if device == "cuda" else 1024)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    best = float("inf")
    clock = time.perf_counter if device == "cuda" else time.process_time
    # Both kernels a model's layers use (without AVX512-BF16, CPU bf16 matmul and linear differ ~7x).
    for kernel in (torch.matmul, torch.nn.functional.linear):
        kernel(a, b)
        for _ in range(repeats):
            if device == "cuda":
                torch.cuda.synchronize()
            start = clock()
            kernel(a, b)
            if device == "cuda":
                torch.cuda.synchronize()
            best = min(best, clock() - start)
    return 2 * n**3 / best / 1e9


def model_geometry(model) -> tuple[int, int, int, int, int]:
    """(matrix parameters applied to every token, layers, query heads x head dim, d_model, vocab)."""
    config = model.config.get_text_config()
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    head_w = head.weight if head is not None else None
    linear = sum(p.numel() for p in model.parameters() if p.dim() == 2 and p is not emb and p is not head_w)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return linear, config.num_hidden_layers, heads * head_dim, config.hidden_size, emb.shape[0]


def forward_flops(model, spans: Sequence[tuple[int, int]], read: int = 0) -> float:
    """FLOPs of running (query tokens, keys already cached) spans, plus ``read`` LM-head rows:
    2 x parameters per token for the linear layers, 4 x H x D per (query, key) pair for QK^T and AV."""
    linear, layers, hd, d_model, vocab = model_geometry(model)
    total = 0.0
    for q, k0 in spans:
        total += 2 * linear * q + 4 * layers * hd * (q * k0 + q * (q + 1) / 2)
    return total + 2 * d_model * vocab * read


def spans_for(sequences: Sequence[Sequence[int]], prefix: bool, keep: Sequence[int] | int = 1) -> list[tuple[int, int]]:
    if not prefix:
        return [(len(s), 0) for s in sequences]
    groups, rest = shared_prefix_groups(sequences, keep=keep)
    spans = [(len(sequences[i]), 0) for i in rest]
    for g in groups:
        spans.append((g.length, 0))
        spans.extend((len(sequences[i]) - g.length, g.length) for i in g.members)
    return spans


def mmlu_questions(subjects: int, per_subject: int):
    names = get_task("mmlu").subjects(data_root())[:subjects]
    return load_task("mmlu", subjects=names, limit_per_subject=per_subject).questions


def contexts(model, tokenizer, questions) -> list[list[int]]:
    renderer = PromptRenderer(format_for_model("tokenizer", model, tokenizer), tokenizer)
    return [renderer.requests(q)[0][0] for q in questions]


# -- variants ---------------------------------------------------------------------------------------


def collect(model, sequences, batch_size: int, share: bool) -> np.ndarray:
    tables = iter_score_tables(model, enumerate(sequences), batch_size=batch_size, progress=False, share_prefix=share)
    frame = pa.concat_tables(list(tables)).to_pandas().sort_values(["sample_id", "layer", "head"])
    return frame.drop(columns=["random"]).iloc[:, 5:].to_numpy()


@torch.inference_mode()
def sdpa_forward(model, sequences, batch_size: int, share: bool) -> None:
    previous = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    body = hooked_module(model)
    device = next(model.parameters()).device
    try:
        if not share:
            for batch in length_sorted_batches(sequences, batch_size, device=device):
                body(**batch.model_inputs(), use_cache=False)
            return
        for batch, prefix in PrefixRunner(model).batches(sequences, batch_size, device=device):
            if prefix is None:
                body(**batch.model_inputs(), use_cache=False)
            else:
                body(**continue_inputs(prefix, batch.model_inputs()), use_cache=True)
    finally:
        model.set_attn_implementation(previous)


def baseline(model, tokenizer, questions, batch_size: int, share: bool) -> np.ndarray:
    scored = question_logliks(model, tokenizer, questions, batch_size=batch_size, progress=False, share_prefix=share)
    return np.stack([s.logliks for s in scored])


def timed(
    variants: dict[str, Callable[[], object]], repeats: int, device: str = "cpu"
) -> tuple[dict[str, float], dict[str, float], dict[str, object]]:
    """Median seconds the ratios use, median wall seconds, and each variant's last result. On a CPU
    the first is process time (what the work costs, robust to other jobs taking the cores); on CUDA
    it is wall time between synchronisations, and the peak GPU memory of each run is printed."""
    cuda = device.startswith("cuda")
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, object] = {}
    for _ in range(repeats):
        for name, run in variants.items():
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start, start_cpu = time.perf_counter(), time.process_time()
            results[name] = run()
            if cuda:
                torch.cuda.synchronize()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
            peak = f", peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if cuda else ""
            print(f"    {name}: {cpu[name][-1]:.1f} CPU s, {wall[name][-1]:.2f} s wall{peak}", flush=True)
    walls = {name: statistics.median(t) for name, t in wall.items()}
    median = walls if cuda else {name: statistics.median(t) for name, t in cpu.items()}
    return median, walls, results


def relative_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-6)


def scaled_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| / max(|b|, 1e-3 x the column's median |b|): relative, except for values a thousand times
    below their score's typical size (an entropy of 4e-5 nats in a fully focused head, computed as a
    difference of two O(1) numbers, carries fp32 round-off of ~1e-8 absolute, ~1e-3 relative; the
    same value changes that much between batch sizes 1 and 4 in whole passes)."""
    floor = 1e-3 * np.median(np.abs(b), axis=0, keepdims=True)
    return np.abs(a - b) / np.maximum(np.abs(b), np.maximum(floor, 1e-12))


def report(rows: list[tuple[str, float, float, float]], roof: float) -> None:
    """Rows of (variant, CPU seconds, wall seconds, FLOPs executed)."""
    print(f"  {'variant':<18} {'CPU s':>8} {'wall s':>8} {'GFLOP':>8} {'GFLOP/CPU-s':>12} {'of roof':>8}")
    for name, seconds, wall, flops in rows:
        rate = flops / seconds / 1e9
        print(f"  {name:<18} {seconds:>8.2f} {wall:>8.2f} {flops / 1e9:>8.1f} {rate:>12.1f} {rate / roof:>8.1%}")


def bench_prefix(model, tokenizer, questions, args) -> None:
    sequences = contexts(model, tokenizer, questions)
    groups, rest = shared_prefix_groups(sequences)
    shared = sum(g.length * len(g.members) for g in groups) / sum(len(s) for s in sequences)
    print(
        f"{len(sequences)} MMLU 5-shot contexts, {sum(len(s) for s in sequences)} tokens "
        f"(mean {np.mean([len(s) for s in sequences]):.0f}); {len(groups)} shared prefixes of "
        f"{[g.length for g in groups]} tokens cover {shared:.0%} of the tokens; {len(rest)} sequences alone"
    )
    roof = matmul_roof(model.dtype, args.device)
    print(f"matmul roof ({model.dtype}, {torch.get_num_threads()} threads): {roof:.1f} GFLOP/s", flush=True)
    b = args.batch_size
    warm = sequences[:2]  # warm-up: first calls pay for lazy initialisation
    collect(model, warm, b, False)
    sdpa_forward(model, warm, b, False)
    baseline(model, tokenizer, questions[:2], b, False)
    variants = {
        "collect whole": lambda: collect(model, sequences, b, False),
        "collect prefix": lambda: collect(model, sequences, b, True),
        "sdpa whole": lambda: sdpa_forward(model, sequences, b, False),
        "sdpa prefix": lambda: sdpa_forward(model, sequences, b, True),
        "baseline whole": lambda: baseline(model, tokenizer, questions, b, False),
        "baseline prefix": lambda: baseline(model, tokenizer, questions, b, True),
    }
    kinds = args.variants.split(",")
    variants = {name: run for name, run in variants.items() if name.split()[0] in kinds}
    median, wall, results = timed(variants, args.repeats, args.device)
    whole_flops = forward_flops(model, spans_for(sequences, False))
    prefix_flops = forward_flops(model, spans_for(sequences, True))
    n = len(sequences)
    flops = {
        "collect whole": whole_flops, "collect prefix": prefix_flops,
        "sdpa whole": whole_flops, "sdpa prefix": prefix_flops,
        "baseline whole": whole_flops + 2 * model_geometry(model)[3] * model_geometry(model)[4] * n,
        "baseline prefix": prefix_flops + 2 * model_geometry(model)[3] * model_geometry(model)[4] * n,
    }  # fmt: skip
    print(f"median of {args.repeats} repeat(s), batch size {b}, {args.device}, {model.dtype}:")
    report([(name, median[name], wall[name], flops[name]) for name in variants], roof)
    for what in ("collect", "sdpa", "baseline"):
        if what in kinds:
            ratio = median[f"{what} whole"] / median[f"{what} prefix"]
            print(f"{what}, prefix reuse vs whole: {ratio:.2f}x faster (target >= 3x for collect and baseline)")
    if "collect" in kinds and "sdpa" in kinds:
        print(
            f"collection vs plain SDPA forward: whole {median['collect whole'] / median['sdpa whole']:.2f}x, "
            f"prefix {median['collect prefix'] / median['sdpa prefix']:.2f}x the time; "
            f"collect prefix vs sdpa whole: {median['sdpa whole'] / median['collect prefix']:.2f}x faster"
        )
    print(f"executed FLOPs, whole / prefix: {whole_flops / prefix_flops:.2f}x")
    if "collect" in kinds:
        err = relative_error(results["collect prefix"], results["collect whole"])
        scaled = scaled_error(results["collect prefix"], results["collect whole"])
        worst, p999 = err.max(), np.quantile(err, 0.999)
        print(f"scores, prefix vs whole: largest relative difference {worst:.2e} (99.9th pct {p999:.2e})")
        print(f"  relative to max(|x|, 1e-3 x median |x| of the score): largest {scaled.max():.2e} (target 1e-4)")
    if "baseline" in kinds:
        dll = np.abs(results["baseline prefix"] - results["baseline whole"])
        agree = (results["baseline prefix"].argmax(1) == results["baseline whole"].argmax(1)).mean()
        print(f"log-likelihoods, prefix vs whole: largest |delta| {dll.max():.2e} (target <= 1e-5)")
        print(f"predictions agree: {agree:.0%}")


def bench_bf16(args) -> None:
    models = {dt: load(args.model, dtype=dt, device=args.device) for dt in ("float32", "bfloat16")}
    tokenizer = models["float32"][1]
    questions = mmlu_questions(args.subjects, args.per_subject)
    sequences = contexts(models["float32"][0], tokenizer, questions)
    b = args.batch_size
    for dt, (model, _) in models.items():
        roof = matmul_roof(model.dtype, args.device)
        print(f"matmul roof ({dt}, {torch.get_num_threads()} threads): {roof:.1f} GFLOP/s")
        collect(model, sequences[:2], b, True)
    variants = {}
    for dt, (model, _) in models.items():
        variants[f"collect {dt}"] = lambda m=model: collect(m, sequences, b, True)
        variants[f"baseline {dt}"] = lambda m=model: baseline(m, tokenizer, questions, b, True)
    median, wall, results = timed(variants, args.repeats, args.device)
    flops = forward_flops(models["float32"][0], spans_for(sequences, True))
    print(f"{len(sequences)} MMLU 5-shot contexts, prefix reuse on, batch size {b}, {args.device}:")
    for name in variants:
        rate = flops / median[name] / 1e9
        print(f"  {name:<18} {median[name]:>8.2f} CPU s {wall[name]:>8.2f} s wall {rate:>7.1f} GFLOP/CPU-s")
    for what in ("collect", "baseline"):
        print(f"{what}: bf16 {median[f'{what} float32'] / median[f'{what} bfloat16']:.2f}x the speed of fp32")
    err = scaled_error(results["collect bfloat16"], results["collect float32"])
    ll32, ll16 = results["baseline float32"], results["baseline bfloat16"]
    dll = np.abs(ll16 - ll32)
    gold = np.array([q.gold for q in questions])
    print(
        f"scores, bf16 vs fp32 (relative, floor 1e-3 x median |x|): median {np.median(err):.2e}, "
        f"99th pct {np.quantile(err, 0.99):.2e}, "
        f"max {err.max():.2e}"
    )
    print(
        f"log-likelihoods: |delta| mean {dll.mean():.3f}, max {dll.max():.3f}; predictions agree "
        f"{(ll16.argmax(1) == ll32.argmax(1)).mean():.0%}; accuracy fp32 {(ll32.argmax(1) == gold).mean():.3f}, "
        f"bf16 {(ll16.argmax(1) == gold).mean():.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="embedded name, or config:NAME (random weights)")
    parser.add_argument("--subjects", type=int, default=2)
    parser.add_argument("--per-subject", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--bf16", action="store_true", help="compare bf16 with fp32 instead")
    parser.add_argument("--variants", default="collect,sdpa,baseline", help="which of collect,sdpa,baseline")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: honest CPU times when shared)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    if args.bf16:
        bench_bf16(args)
    else:
        model, tokenizer = load(args.model, dtype=args.dtype, device=args.device)
        bench_prefix(model, tokenizer, mmlu_questions(args.subjects, args.per_subject), args)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
