"""headstats' evaluator against lm-evaluation-harness's own HFLM, side by side in one run.

    python benchmarks/bench_eval_vs_lmeval.py [--model smollm2-135m] [--subjects 2] [--per-subject 4]
                                              [--batch-sizes 4,8] [--repeats 1] [--threads 1]
                                              [--device cpu] [--dtype float32]

Same questions (the first ``--per-subject`` MMLU test questions of ``--subjects`` subjects, 5-shot from
dev, from headstats' bundled data), same model object, same dtype, same batch size. lm-eval's MMLU task
would download its data from the Hub, so the loglikelihood requests are built here from the same
rendered prompts (context and " A".." D" strings, as lm-eval's MMLU template writes them) and passed
to ``HFLM.loglikelihood`` directly; HFLM runs the model with PyTorch SDPA attention, as an lm-eval
user would. headstats variants:

- headstats whole: ``question_logliks`` with ``share_prefix=False`` (one pass per question);
- headstats prefix: ``question_logliks`` with shared-prefix reuse (the default);
- headstats probe: the sweep's baseline pass, through a probe (headstats' attention kernel, an
  all-False zeroing policy), with prefix reuse.

Times are CPU seconds of this process (the machine is shared; wall seconds are printed too), one torch
thread by default, median over ``--repeats`` interleaved repeats. Each row prints the FLOPs the variant
executes and the achieved GFLOP per CPU second as a fraction of a dense matmul of the same dtype
measured in the same run (the roof). Agreement: largest |delta log-likelihood| against HFLM, and
whether the predictions agree.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

try:
    from bench_prefix import (
        contexts,
        forward_flops,
        matmul_roof,
        mmlu_questions,
        model_geometry,
        report,
        spans_for,
        timed,
    )
except ImportError:  # run as benchmarks.bench_eval_vs_lmeval
    from benchmarks.bench_prefix import (
        contexts,
        forward_flops,
        matmul_roof,
        mmlu_questions,
        model_geometry,
        report,
        spans_for,
        timed,
    )  # fmt: skip

import headstats
from headstats.engine.probe import Probe
from headstats.io.tasks import PromptRenderer
from headstats.jobs.evaluate import format_for_model, question_logliks


def lmeval_requests(renderer: PromptRenderer, questions):
    from lm_eval.api.instance import Instance

    requests = []
    for qi, q in enumerate(questions):
        for choice in range(q.n_choices):
            arguments = (renderer.context(q, choice), renderer.continuation(q, choice))
            requests.append(Instance("loglikelihood", {}, arguments, idx=choice, doc_id=qi))
    return requests


def run_hflm(model, tokenizer, requests, questions, batch_size: int, device: str) -> np.ndarray:
    from lm_eval.models.huggingface import HFLM

    previous = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=device, dtype=model.dtype)
        out = lm.loglikelihood(requests, disable_tqdm=True)
    finally:
        model.set_attn_implementation(previous)
    logliks = np.array([ll for ll, _ in out])
    return logliks.reshape(len(questions), -1)


def run_headstats(model, tokenizer, questions, batch_size: int, share: bool, probed: bool) -> np.ndarray:
    if not probed:
        scored = question_logliks(
            model, tokenizer, questions, batch_size=batch_size, progress=False, share_prefix=share
        )
        return np.stack([s.logliks for s in scored])
    heads = model.config.get_text_config().num_attention_heads

    def never(layer, scores, keys):
        return torch.zeros(len(keys), heads, dtype=torch.bool)

    with Probe(model, (), never) as probe:
        scored = question_logliks(
            model, tokenizer, questions, batch_size=batch_size, progress=False, share_prefix=share, probe=probe
        )
    return np.stack([s.logliks for s in scored])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--subjects", type=int, default=2)
    parser.add_argument("--per-subject", type=int, default=4)
    parser.add_argument("--batch-sizes", default="4,8")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, tokenizer = headstats.load_model(args.model, dtype=args.dtype, device=args.device)
    questions = mmlu_questions(args.subjects, args.per_subject)
    renderer = PromptRenderer(format_for_model("tokenizer", model, tokenizer), tokenizer)
    requests = lmeval_requests(renderer, questions)
    sequences = contexts(model, tokenizer, questions)
    print(
        f"{len(questions)} MMLU 5-shot questions ({len(requests)} loglikelihood requests), "
        f"{sum(len(s) for s in sequences)} context tokens; {args.device}, {model.dtype}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    roof = matmul_roof(model.dtype, args.device)
    print(f"matmul roof: {roof:.1f} GFLOP per CPU second", flush=True)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    # Warm-up: lazy initialisation of both stacks.
    run_hflm(model, tokenizer, requests[:4], questions[:1], 1, args.device)
    run_headstats(model, tokenizer, questions[:1], 1, False, False)
    variants = {}
    for b in sizes:
        variants[f"lm-eval HFLM b{b}"] = lambda b=b: run_hflm(model, tokenizer, requests, questions, b, args.device)
        variants[f"headstats whole b{b}"] = lambda b=b: run_headstats(model, tokenizer, questions, b, False, False)
        variants[f"headstats prefix b{b}"] = lambda b=b: run_headstats(model, tokenizer, questions, b, True, False)
        variants[f"headstats probe b{b}"] = lambda b=b: run_headstats(model, tokenizer, questions, b, True, True)
    median, wall, results = timed(variants, args.repeats)
    _, _, _, d_model, vocab = model_geometry(model)
    head = 2 * d_model * vocab * len(questions)  # one row of logits per question
    whole = forward_flops(model, spans_for(sequences, False)) + head
    prefix = forward_flops(model, spans_for(sequences, True)) + head
    flops = {name: (whole if "HFLM" in name or "whole" in name else prefix) for name in variants}
    print(f"median of {args.repeats} repeat(s):")
    report([(name, median[name], wall[name], flops[name]) for name in variants], roof)
    for b in sizes:
        ref = results[f"lm-eval HFLM b{b}"]
        for kind in ("whole", "prefix", "probe"):
            name = f"headstats {kind} b{b}"
            speed = median[f"lm-eval HFLM b{b}"] / median[name]
            dll = np.abs(results[name] - ref).max()
            agree = (results[name].argmax(1) == ref.argmax(1)).mean()
            print(f"batch {b}: {name} {speed:.2f}x lm-eval's speed; |delta loglik| <= {dll:.1e}; agree {agree:.0%}")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
