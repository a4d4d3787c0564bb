"""The cost of the lm-eval plugin: HeadstatsLM against lm-eval's own HFLM on the same requests.

    python benchmarks/bench_lmeval.py [--model smollm2-135m] [--mmlu 16] [--piqa 32] [--batch-size 8]
                                      [--repeats 3] [--device cpu]

Requests are lm-eval's own, built by its task machinery from the task configs (MMLU world religions
5-shot, PIQA 0-shot) over the bundled copies of the data, and every mode scores the same list through
``loglikelihood``. Modes, interleaved repeat by repeat so that machine load affects all of them
alike (median repeat reported):

- hf: lm-eval's HFLM (no attention mask; logits of every position);
- headstats, no zeroing: HeadstatsLM without score/heads (2-D mask, logits of the positions read);
- headstats, ahon_ln zeroing nothing: the dynamic intervention at the p = 0 threshold (scores
  computed in every layer, no head crosses it);
- headstats, ahon_ln p=0.1: the study's intervention, for scale.

Wall and process CPU time are both reported; the verdict uses CPU time, which on a shared machine
moves far less with other processes' load than wall time does (run with one torch thread).

Log-likelihoods of the modes that zero nothing are compared with HFLM's. Target (issue 12):
HeadstatsLM with nothing zeroed costs at most 1.1x plain HFLM.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import headstats
from headstats.lmeval import HeadstatsLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_lmeval import LM_EVAL_TASKS, lm_eval_instances


def requests(mmlu: int, piqa: int) -> list:
    LM_EVAL_TASKS["mmlu"] = (*LM_EVAL_TASKS["mmlu"][:4], mmlu)
    LM_EVAL_TASKS["piqa"] = (*LM_EVAL_TASKS["piqa"][:4], piqa)
    return [inst for task in ("mmlu", "piqa") for inst in lm_eval_instances(task)[0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--mmlu", type=int, default=16, help="MMLU questions (4 requests, one input each)")
    parser.add_argument("--piqa", type=int, default=32, help="PIQA questions (2 requests, two inputs each)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    from lm_eval.models.huggingface import HFLM

    model, tok = headstats.load_model(args.model, device=args.device)
    instances = requests(args.mmlu, args.piqa)
    tokens = sum(len(tok(a)["input_ids"]) + len(tok(b)["input_ids"]) for a, b in (i.args for i in instances))
    zero_nothing = HeadstatsLM(pretrained=model, tokenizer=tok, score="ahon_ln", target=0.0, batch_size=args.batch_size)
    zero_nothing.loglikelihood(instances, disable_tqdm=True)  # calibrates the p = 0 threshold once
    p10 = HeadstatsLM(pretrained=model, tokenizer=tok, score="ahon_ln", target=0.1, batch_size=args.batch_size)
    p10.loglikelihood(instances, disable_tqdm=True)
    modes = {
        "hf (lm-eval HFLM)": HFLM(pretrained=model, tokenizer=tok, batch_size=args.batch_size),
        "headstats, no zeroing": HeadstatsLM(pretrained=model, tokenizer=tok, batch_size=args.batch_size),
        "headstats, ahon_ln p=0": HeadstatsLM(
            pretrained=model,
            tokenizer=tok,
            score="ahon_ln",
            threshold=zero_nothing.threshold,
            batch_size=args.batch_size,
        ),
        "headstats, ahon_ln p=0.1": HeadstatsLM(
            pretrained=model, tokenizer=tok, score="ahon_ln", threshold=p10.threshold, batch_size=args.batch_size
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    cpu: dict[str, list[float]] = {name: [] for name in modes}
    values: dict[str, np.ndarray] = {}
    with torch.inference_mode():
        for repeat in range(args.repeats + 1):  # the first round warms up
            for name, lm in modes.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                values[name] = np.array([ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)])
                wall, used = time.perf_counter() - start, time.process_time() - start_cpu
                if repeat:
                    times[name].append(wall)
                    cpu[name].append(used)
                print(f"  round {repeat}: {name:28s} wall {wall:7.2f} s  cpu {used:7.2f} s", flush=True)
    hf = "hf (lm-eval HFLM)"
    base, base_cpu = statistics.median(times[hf]), statistics.median(cpu[hf])
    print(
        f"\n{args.model} on {args.device} ({next(model.parameters()).dtype}), {len(instances)} lm-eval requests "
        f"({args.mmlu} MMLU 5-shot, {args.piqa} PIQA; {tokens} tokens), batch {args.batch_size}, "
        f"median of {args.repeats}, torch threads {torch.get_num_threads()}"
    )
    print(
        f"{'mode':28s} {'wall s':>8s} {'x hf':>6s} {'cpu s':>8s} {'x hf':>6s} {'realised %':>11s} "
        f"{'max |dLL| vs hf':>16s}"
    )
    for name, lm in modes.items():
        seconds, used = statistics.median(times[name]), statistics.median(cpu[name])
        realised = lm.realised_fraction() if isinstance(lm, HeadstatsLM) else None
        shown = "-" if realised is None else f"{100 * realised:.1f}"
        diff = float(np.abs(values[name] - values[hf]).max())
        print(
            f"{name:28s} {seconds:8.2f} {seconds / base:6.2f} {used:8.2f} {used / base_cpu:6.2f} {shown:>11s} "
            f"{diff:16.2e}"
        )
    # CPU time of the process: on a shared machine it moves far less with other load than wall time.
    nothing = ("headstats, no zeroing", "headstats, ahon_ln p=0")
    worst = max(statistics.median(cpu[n]) for n in nothing) / base_cpu
    print(f"HeadstatsLM with nothing zeroed costs {worst:.2f}x plain HFLM in CPU time (target <= 1.1x)")


if __name__ == "__main__":
    main()
