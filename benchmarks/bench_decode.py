"""Where a decoded token's time goes, unpruned vs pruned, after a long KV cache.

    headstats prune --model smollm2-135m --unit kv-group --share 0.3 --out /tmp/pruned-kv30
    OMP_NUM_THREADS=1 python benchmarks/bench_decode.py --model smollm2-135m --pruned /tmp/pruned-kv30 \
        [--contexts 1024,4096] [--batches 1,8] [--new-tokens 16] [--repeats 3] [--dtype float32] [--clock cpu]

For every batch size and cache length, milliseconds per decoded token of each model without hooks
(``--repeats`` paired rounds, :func:`headstats.jobs.timing.paired_rounds`, the pruned model's
speed-up with its interval), and split by component (:func:`headstats.engine.speed.time_breakdown`,
forward hooks, which add their own time; models in alternating turns, medians):
attention projections, the KV-cache update (transformers' ``Cache.update``), the attention core
(rotary, the attention call), MLPs, lm_head and the rest (embedding, norms, masks, Python between
modules). Beside them:

- the dispatch floor: milliseconds per token (timed in the same rounds, no hooks) of the same
  architecture (layers, heads, KV heads, the same attention implementation) with every width cut to
  2 per head and random weights, which makes the unpruned model's per-token Python and operator
  dispatch with almost no arithmetic: the part of a token's time that no removal of heads shortens;
- the ceiling of the pruned model's decode speed-up (:func:`headstats.engine.speed.setting_ceiling`:
  bytes a step reads, weights plus KV cache).

The pruned folder is what ``headstats prune`` writes, loaded as a user loads it
(``headstats.load_model``).
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
from transformers import AutoModelForCausalLM

import headstats
from headstats.engine.speed import (
    COMPONENTS,
    Setting,
    inference_cost,
    phase_timer,
    random_prompts,
    setting_ceiling,
    time_breakdown,
)
from headstats.io.models import machine_info
from headstats.jobs.timing import paired_rounds


def dispatch_model(model: torch.nn.Module) -> torch.nn.Module:
    """``model``'s architecture with every width cut to 2 per head (hidden size, head_dim, MLP, vocabulary)
    and random weights: the same modules and calls per token, almost no arithmetic."""
    config = copy.deepcopy(model.config)
    text = config.get_text_config()
    heads = int(text.num_attention_heads)
    for name, value in (("hidden_size", 2 * heads), ("head_dim", 2), ("intermediate_size", 2), ("vocab_size", 128)):
        setattr(text, name, value)
    for name in ("headstats_pruning", "auto_map"):
        if hasattr(config, name):
            delattr(config, name)
    torch.manual_seed(0)
    tiny = AutoModelForCausalLM.from_config(config, attn_implementation=model.config._attn_implementation)
    return tiny.to(dtype=next(model.parameters()).dtype).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pruned", required=True, help="a folder written by headstats prune from --model")
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--clock", default="wall", choices=("wall", "cpu"), help="what every timing counts")
    args = parser.parse_args()

    model, _ = headstats.load_model(args.model, dtype=args.dtype, device="cpu")
    pruned, _ = headstats.load_model(args.pruned, dtype=args.dtype, device="cpu")
    floor = dispatch_model(model)
    info = machine_info(torch.device("cpu"))
    print(f"machine: {info['cpu']} | torch threads: {info['torch_threads']} | dtype {args.dtype} | clock {args.clock}")
    before, after = inference_cost(model), inference_cost(pruned)
    for batch in (int(x) for x in args.batches.split(",")):
        for context in (int(x) for x in args.contexts.split(",")):
            setting = Setting("decode", batch, context, args.new_tokens)
            ids = random_prompts(model, setting)
            models = {"unpruned": model, "pruned": pruned}
            runs = {name: phase_timer(m, setting, ids, args.clock) for name, m in models.items()}
            runs["floor"] = phase_timer(floor, setting, ids % floor.config.get_text_config().vocab_size, args.clock)
            rounds = max(2, args.repeats)
            plain = paired_rounds(runs, "unpruned", min_rounds=rounds, max_rounds=rounds)
            del runs
            per_token = {m: 1e3 * statistics.median(t) / setting.tokens for m, t in plain.seconds.items()}
            shape = {"batch": batch, "prompt_length": context, "new_tokens": args.new_tokens, "repeats": args.repeats}
            rows = time_breakdown({"unpruned": model, "pruned": pruned}, **shape, clock=args.clock)
            ms = {(r["model"], r["component"]): 1e3 * r["seconds_per_token"] for r in rows if r["phase"] == "decode"}
            total = {m: sum(ms[m, c] for c in COMPONENTS) for m in ("unpruned", "pruned")}
            roof = setting_ceiling(before, after, setting)
            up = plain.speedups["pruned"]
            print(f"\ndecode {args.new_tokens} after {context} x{batch} (ms/token)   unpruned     pruned      saved")
            for c in COMPONENTS:
                u, p = ms["unpruned", c], ms["pruned", c]
                print(f"  {c:<36} {u:9.2f}  {p:9.2f}  {u - p:+9.2f}")
            u, p = total["unpruned"], total["pruned"]
            print(f"  {'total (with the hooks)':<36} {u:9.2f}  {p:9.2f}  {u - p:+9.2f}")
            u, p, f = per_token["unpruned"], per_token["pruned"], per_token["floor"]
            print(f"  {'without hooks':<36} {u:9.2f}  {p:9.2f}  {u - p:+9.2f}   x{up.speedup:.3f} "
                  f"[{up.low:.3f}, {up.high:.3f}] ({up.rounds} rounds; ceiling x{roof['ceiling']:.3f})")  # fmt: skip
            print(f"  dispatch floor (the same calls, almost no arithmetic): {f:.2f} ms/token, {f / u:.0%} of unpruned")


if __name__ == "__main__":
    main()
