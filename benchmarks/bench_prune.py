"""Pruned vs unpruned, side by side in one process: prefill and cached decode speed, KV cache, peak
memory, and the arithmetic roof of the removed heads.

    python benchmarks/bench_prune.py [--model smollm2-135m] [--score ahon_ln] [--share 0.3]
        [--unit head|kv-group] [--batches 1,8] [--prompt-length 128] [--new-tokens 32]
        [--decode-contexts 1024,4096] [--max-seconds 120] [--dtype float32] [--calibration-limit 32]
        [--device cpu] [--clock wall|cpu] [--point RESULTS/model=M/points/POINT.json]

The heads are selected as ``headstats prune`` selects them (the score's mean over a seeded sample of
the bundled Wikipedia passages), or read from a frontier point's record (``--point``: its
``removed_heads``, so the benchmark explains that point), and removed from a copy of the model.
``--clock cpu`` counts every timing in this process's CPU seconds (on a machine shared with other
jobs; with one torch thread, the work itself). Printed:

- the equivalence check: max relative logit difference between the pruned model and the unpruned
  one with the same heads zeroed (``headstats.ablate_heads``), fp32;
- per batch size and setting (prefill of the prompt; cached decoding after it; cached decoding after
  a 1,024- and a 4,096-token cache, ``--decode-contexts``): the speed-up of the pruned model and of an
  identical copy (the control) over the unpruned one, from paired interleaved rounds until the 95%
  interval is within 1% or ``--max-seconds`` pass (:func:`headstats.jobs.timing.paired_rounds`),
  beside its ceiling (:func:`headstats.engine.speed.setting_ceiling`), and the KV-cache bytes after
  prefill;
- peak memory: on CUDA the peak allocated bytes of each model's run; on CPU the peak resident set of
  a fresh process per model doing the same work (so neither model's allocations count for the other);
- the roof: the share of per-token FLOPs (prefill) and of the bytes a decode step reads (weights +
  cache) that the removed heads carried, and the speed-ups those shares allow at most;
- where the time goes (``headstats.engine.speed.time_breakdown``): per batch size and phase, each
  model's milliseconds per token in the attention projections, the attention core, the MLPs,
  lm_head and the rest, so the gap between the roof and the measured speed-up can be placed;
- the CPU model, its bf16 units and torch's thread count.

Run it on an otherwise idle machine (a second torch process oversubscribes the cores); set
``OMP_NUM_THREADS`` to the cores you mean to measure.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import headstats
from headstats.engine.prune import count_parameters, prune_heads
from headstats.engine.speed import (
    COMPONENTS,
    Setting,
    inference_cost,
    phase_timer,
    random_prompts,
    setting_ceiling,
    time_breakdown,
    time_inference,
)
from headstats.io.models import machine_info
from headstats.jobs.prune import calibration_set, head_means, kv_group_size, select_heads
from headstats.jobs.timing import paired_rounds


def _equivalence(model, pruned, heads, tokenizer) -> float:
    text = "Attention heads that contribute almost nothing can be removed from the weights of a model."
    ids = torch.tensor([tokenizer(text)["input_ids"]], device=next(model.parameters()).device)
    with torch.no_grad(), headstats.ablate_heads(model, heads=heads):
        zeroed = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    with torch.no_grad():
        out = pruned(input_ids=ids, use_cache=False).logits
    return float((out - zeroed).abs().max() / zeroed.abs().max())


def _peak_child(path: str, args: argparse.Namespace, batch: int) -> int:
    """Peak RSS bytes of a fresh process that loads ``path`` and runs one prefill + decode, counted
    from after the load: Linux resets the high-water mark on writing 5 to /proc/self/clear_refs, so
    loading (which briefly holds more than the model) does not set the peak."""
    code = (
        "import gc, re, headstats\n"
        "from pathlib import Path\n"
        "from headstats.engine.speed import time_inference\n"
        f"m, _ = headstats.load_model({path!r}, dtype={args.dtype!r}, device='cpu')\n"
        "gc.collect()\n"
        "Path('/proc/self/clear_refs').write_text('5')\n"
        f"time_inference({{'m': m}}, batch={batch}, prompt_length={args.prompt_length}, "
        f"new_tokens={args.new_tokens}, repeats=1)\n"
        "status = Path('/proc/self/status').read_text()\n"
        "print(int(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)) * 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def _contexts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _print_breakdown(rows: list[dict]) -> None:
    """Milliseconds per token by component and phase, both models, and the attention's share of the
    unpruned time: removing a share s of the heads can save at most about s of that share."""
    table = {(r["model"], r["phase"], r["component"]): 1e3 * r["seconds_per_token"] for r in rows}
    for phase in ("prefill", "decode"):
        print(f"  where {phase} time goes (ms/token, with component hooks):")
        totals = {m: sum(table[m, phase, c] for c in COMPONENTS) for m in ("unpruned", "pruned")}
        for c in COMPONENTS:
            u, p = table["unpruned", phase, c], table["pruned", phase, c]
            print(
                f"    {c:<22} unpruned {u:8.3f} ({u / totals['unpruned']:5.1%})  pruned {p:8.3f}  saved {u - p:+8.3f}"
            )
        u, p = totals["unpruned"], totals["pruned"]
        attention = table["unpruned", phase, "attention projections"] + table["unpruned", phase, "attention core"]
        print(
            f"    {'total':<22} unpruned {u:8.3f}           pruned {p:8.3f}  speed-up x{u / p:.3f}; "
            f"attention is {attention / u:.1%} of the unpruned time"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--score", default="ahon_ln")
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--unit", default="head", choices=("head", "kv-group"), help="what is removed")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt-length", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument(
        "--decode-contexts", default="1024,4096", help="KV-cache tokens of the long decode settings ('' for none)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the time breakdown")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="paired timing per setting at most")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default=None)
    parser.add_argument("--calibration-limit", type=int, default=32)
    parser.add_argument("--no-peak", action="store_true", help="skip the peak-memory measurement")
    parser.add_argument("--clock", default="wall", choices=("wall", "cpu"), help="what every timing counts")
    parser.add_argument("--point", default=None, help="a frontier point's record: remove its removed_heads")
    args = parser.parse_args()

    model, tokenizer = headstats.load_model(args.model, dtype=args.dtype, device=args.device)
    device = next(model.parameters()).device
    info = machine_info(device)
    print(f"machine: {info['cpu']} | bf16 units: {info['bf16_units'] or 'none'} | torch threads: "
          f"{info['torch_threads']} | device: {device}{' | ' + info['gpu'] if 'gpu' in info else ''}")  # fmt: skip
    if args.point is not None:
        heads = [tuple(h) for h in json.loads(Path(args.point).read_text())["removed_heads"]]
        print(f"heads from {args.point}: {heads}")
    else:
        calibration = calibration_set(tokenizer, "wikipedia", limit=args.calibration_limit, model_name=args.model)
        means = head_means(model, calibration, args.score)
        heads = select_heads(means, args.score, args.share, unit=args.unit, group_size=kv_group_size(model))
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    layers, per_layer = model.config.num_hidden_layers, model.config.num_attention_heads
    sizes = f"{count_parameters(model):,} -> {count_parameters(pruned):,}"
    rule = Path(args.point).stem if args.point else f"{args.score} (share {args.share:g}, unit {args.unit})"
    print(f"{args.model}: removed {len(heads)} of {layers * per_layer} heads by {rule}; parameters {sizes}")
    if args.dtype == "float32":
        gap = _equivalence(model, pruned, heads, tokenizer)
        print(f"equivalence: max |pruned - zeroed| / max |zeroed| logits = {gap:.2e}")

    before, after = inference_cost(model), inference_cost(pruned)
    context = args.prompt_length + args.new_tokens // 2
    print("\nroof (share the removed heads carried -> largest speed-up it allows):")
    for label, b, a in (
        (f"prefill FLOPs ({args.prompt_length} tokens)", before.prefill_flops(args.prompt_length),
         after.prefill_flops(args.prompt_length)),
        (f"decode FLOPs/token (context {context})", before.flops(context), after.flops(context)),
        *[(f"decode bytes/step (batch {b_}, context {context})", before.decode_bytes(context, b_),
           after.decode_bytes(context, b_)) for b_ in (int(x) for x in args.batches.split(","))],
        ("KV cache bytes/token", sum(x.kv_bytes_per_token for x in before.layers),
         sum(x.kv_bytes_per_token for x in after.layers)),
    ):  # fmt: skip
        print(f"  {label:<44} {1 - a / b:6.1%} removed -> x{b / a:.3f}")

    rows = []
    models = {"unpruned": model, "copy": copy.deepcopy(model), "pruned": pruned}
    for batch in (int(x) for x in args.batches.split(",")):
        res = time_inference({"unpruned": model, "pruned": pruned}, batch=batch, prompt_length=args.prompt_length,
                             new_tokens=args.new_tokens, repeats=1)  # fmt: skip
        u, p = res
        print(f"\nbatch {batch} (prompt {args.prompt_length}, {args.new_tokens} new tokens):")
        settings = [Setting(phase, batch, args.prompt_length, args.new_tokens) for phase in ("prefill", "decode")]
        settings += [Setting("decode", batch, c, args.new_tokens) for c in _contexts(args.decode_contexts)]
        for setting in settings:
            ids = random_prompts(model, setting)
            runs = {name: phase_timer(m, setting, ids, args.clock) for name, m in models.items()}
            timed = paired_rounds(runs, "unpruned", max_seconds=args.max_seconds)
            roof = setting_ceiling(before, after, setting)
            rows.extend(timed.rows(setting=setting.name, batch=batch, context=setting.context, **roof))
            note = "" if timed.resolved else ", not resolved to 1%"
            for name, up in timed.speedups.items():
                print(f"  {setting.name:<26} {name:<7} x{up.speedup:.3f} [{up.low:.3f}, {up.high:.3f}] "
                      f"({up.rounds} paired rounds{note}); "
                      f"ceiling x{roof['ceiling']:.3f} ({roof['ceiling_basis']})")  # fmt: skip
        print(f"  {'KV cache bytes':<18} unpruned {u['kv_cache_bytes']:10,}  pruned {p['kv_cache_bytes']:10,}  "
              f"ratio {p['kv_cache_bytes'] / u['kv_cache_bytes']:.3f}")  # fmt: skip
        if u["peak_cuda_bytes"]:
            print(f"  {'peak CUDA bytes':<18} unpruned {u['peak_cuda_bytes']:10,}  pruned {p['peak_cuda_bytes']:10,}"
                  f"  ratio {p['peak_cuda_bytes'] / u['peak_cuda_bytes']:.3f}")  # fmt: skip
        split = time_breakdown(
            {"unpruned": model, "pruned": pruned},
            batch=batch,
            prompt_length=args.prompt_length,
            new_tokens=args.new_tokens,
            repeats=args.repeats,
            clock=args.clock,
        )
        _print_breakdown(split)
    if device.type == "cpu" and not args.no_peak:
        batch = max(int(x) for x in args.batches.split(","))
        with tempfile.TemporaryDirectory() as tmp:
            pruned.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            peaks = {name: _peak_child(path, args, batch) for name, path in (("unpruned", args.model), ("pruned", tmp))}
        u, p = peaks["unpruned"] / 2**20, peaks["pruned"] / 2**20
        print(f"\npeak RSS during inference (fresh process, after loading; batch {batch}): unpruned {u:.0f} MiB, "
              f"pruned {p:.0f} MiB, ratio {p / u:.3f}")  # fmt: skip
    print("\n" + json.dumps({"rows": rows, "rusage_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
