"""Heads skipped per prompt, timed: the dense model, the statically pruned one and per-prompt skipping
(:mod:`headstats.engine.skip`) at the same share, in paired, interleaved rounds.

    python benchmarks/bench_skip.py --out benchmarks/results/skip-epyc-2core
    python benchmarks/bench_skip.py --models smollm2-135m --shares 0.3 --contexts 1024 --max-seconds 60 --out OUT

One run of a contestant is one prompt of ``context`` random tokens (seeded) followed by
``--new-tokens`` greedy tokens, batch 1, in fp32 on this machine's CPU (or ``--device``):

- ``dense``: the prompt with every head, then the continuation with every head (what a user runs);
- ``static``: the same on a copy pruned (``headstats prune``'s cut) of the heads the study's static
  selection takes at that share (``results/adaptive-embedded/<model>/wikipedia/calibration.json``);
- ``per-prompt``: the prompt scored in its own pass (``score_prompt``), the share of heads that look most
  inactive on it chosen, the attention cut to the others and the cache trimmed (``skipping``), then
  the continuation without them. Its decision (the scored pass, the choice and the cut) is timed
  inside its prefill: every cost of choosing per prompt is counted.

Each round times the three in an order that reverses from round to round
(:func:`headstats.jobs.timing.paired_rounds`). Every run's prefill and decode seconds are kept
(``OUT/rounds.csv``), and the speed-ups over dense, of the whole run and of the decode alone, with
their 95% intervals (``OUT/speed.csv``; :func:`headstats.stats.speed.paired_speedup`), with the CPU,
the torch threads and the load average (``OUT/machine.json``). An interval covers the rounds of this
one run on this one machine: repeated runs on one machine have disagreed beyond their intervals.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

import pandas as pd
import torch

import headstats
from headstats.engine.prune import prune_heads
from headstats.engine.pruned_model import geometry
from headstats.engine.skip import score_prompt, select_heads, skipping
from headstats.io.machine import cpu_record
from headstats.jobs.timing import paired_rounds
from headstats.stats.speed import paired_speedup

ROOT = Path(__file__).resolve().parents[1]
# What each speed-up times: the whole run, the prompt's pass alone (per-prompt's includes its decision: the
# scored pass, the choice and the cut), and the continuation's tokens alone.
PHASES = (("prefill+decode", lambda t: t[0] + t[1]), ("prefill", lambda t: t[0]), ("decode", lambda t: t[1]))
STATIC = ROOT / "results" / "adaptive-embedded" / "{model}" / "wikipedia" / "calibration.json"


def static_heads(model_name: str, model, share: float) -> list[tuple[int, int]]:
    """The study's static selection at ``share`` (its calibration means), or, without the study's
    results, the heads of the lowest per-head means over 8 random prompts."""
    path = Path(str(STATIC).format(model=model_name))
    if path.is_file():
        means = torch.tensor(json.loads(path.read_text())["calibration_means"])
    else:
        vocab = model.config.get_text_config().vocab_size
        prompts = torch.randint(3, vocab, (8, 64), generator=torch.Generator().manual_seed(1))
        means = torch.stack([score_prompt(model, {"input_ids": p[None]}, "ahon_ln").scores for p in prompts]).mean(0)
    return select_heads(means, share, score="ahon_ln")


def greedy(model, first_logits: torch.Tensor, cache, new_tokens: int) -> None:
    token = first_logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(new_tokens - 1):
        token = model(input_ids=token, cache=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)


def contestants(model, pruned, prompt: torch.Tensor, share: float, new_tokens: int, phases: dict) -> dict:
    """name -> a function running the prompt and its continuation once, returning the seconds; each
    run's prefill and decode seconds are appended to ``phases[name]``."""
    _, _, kv, _ = geometry(model)

    def plain(which):
        def run() -> float:
            with torch.no_grad():
                start = time.perf_counter()
                out = which(input_ids=prompt, use_cache=True)
                mid = time.perf_counter()
                greedy(which, out.logits, out.past_key_values, new_tokens)
                end = time.perf_counter()
            return mid - start, end - mid

        return run

    def per_prompt() -> tuple[float, float]:
        with torch.no_grad():
            start = time.perf_counter()
            decision = score_prompt(model, {"input_ids": prompt}, "ahon_ln")
            heads = select_heads(decision.scores, share, score="ahon_ln", kv_heads=kv)
            cache = decision.output.past_key_values
            with skipping(model, heads, cache):
                mid = time.perf_counter()
                greedy(model, decision.output.logits, cache, new_tokens)
                end = time.perf_counter()
        return mid - start, end - mid

    runs = {"dense": plain(model), "static": plain(pruned), "per-prompt": per_prompt}

    def timed(name, run):
        def once() -> float:
            prefill, decode = run()
            phases.setdefault(name, []).append((prefill, decode))
            return prefill + decode

        return once

    return {name: timed(name, run) for name, run in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--shares", default="0.1,0.2,0.3")
    parser.add_argument("--contexts", default="64,1024")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="timing seconds per setting at most")
    parser.add_argument("--min-rounds", type=int, default=6)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpu": cpu_record()["cpu"],
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": args.device,
        "load_average_at_start": os.getloadavg(),
        "command": "python benchmarks/bench_skip.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
    }
    (out / "machine.json").write_text(json.dumps(machine, indent=2))
    rounds, speeds = [], []
    for name in args.models.split(","):
        model, _ = headstats.load_model(name, dtype="float32", device=args.device)
        vocab = model.config.get_text_config().vocab_size
        for share in (float(s) for s in args.shares.split(",")):
            pruned = copy.deepcopy(model)
            prune_heads(pruned, static_heads(name, model, share))
            for context in (int(c) for c in args.contexts.split(",")):
                prompt = torch.randint(3, vocab, (1, context), generator=torch.Generator().manual_seed(context))
                prompt = prompt.to(args.device)
                phases: dict = {}
                runs = contestants(model, pruned, prompt, share, args.new_tokens, phases)
                done = paired_rounds(
                    runs, "dense", target=0.02, min_rounds=args.min_rounds, max_seconds=args.max_seconds
                )
                setting = {"model": name, "share": share, "context": context, "new_tokens": args.new_tokens}
                kept = len(done.seconds["dense"])
                for cand, times in phases.items():
                    for i, (prefill, decode) in enumerate(times[-kept:]):
                        rounds.append(
                            {**setting, "contestant": cand, "round": i, "prefill_s": prefill, "decode_s": decode}
                        )
                for cand in ("static", "per-prompt"):
                    for what, pick in PHASES:
                        ref = [pick(t) for t in phases["dense"][-kept:]]
                        got = [pick(t) for t in phases[cand][-kept:]]
                        s = paired_speedup(ref, got)
                        speeds.append(
                            {
                                **setting,
                                "contestant": cand,
                                "phase": what,
                                "speedup": s.speedup,
                                "low": s.low,
                                "high": s.high,
                                "rounds": kept,
                            }
                        )
                        print(
                            f"{name} share {share:.0%} context {context} {cand:>10} {what:>14}: "
                            f"x{s.speedup:.3f} [{s.low:.3f}, {s.high:.3f}]",
                            flush=True,
                        )
                pd.DataFrame(rounds).to_csv(out / "rounds.csv", index=False)
                pd.DataFrame(speeds).to_csv(out / "speed.csv", index=False)
            del pruned
    machine["load_average_at_end"] = os.getloadavg()
    (out / "machine.json").write_text(json.dumps(machine, indent=2))


if __name__ == "__main__":
    main()
