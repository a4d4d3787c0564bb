"""Where removing heads pays: paired, interleaved timing of pruned models against the unpruned one
at long contexts and with a KV cache, each speed-up with its 95% interval and its ceilings.

    python benchmarks/bench_prune_speed.py --device cuda --dtype bfloat16 --out OUT
    python benchmarks/bench_prune_speed.py --models smollm2-135m --settings prefill:2048:1,decode:1024:1 \
        --dtype float32 --out OUT                                   # on a CPU: pick the settings

Speed needs no trained weights: every model is built with random weights from a config in
``benchmarks/configs/`` (the embedded models' own configs, and the shapes of Llama-3.1-8B), so the
script runs on a machine that holds no model files. The heads removed:

- as ``headstats prune --unit head`` and ``--unit kv-group`` select them
  (:func:`headstats.jobs.prune.select_heads`) from per-head means of ``ahon_ln``: for the embedded
  models their means over 64 Wikipedia passages, committed in ``results/prune-embedded/``; for the
  others seeded uniform draws (the speed of a pruned model depends on how many heads each layer keeps
  and how they fall into KV groups, not on which ones). Only the kv-group unit shrinks the KV cache of
  a grouped-query model in general: a head unit removes a KV head only when every query head of its
  group goes.

Each setting times the unpruned model (the reference), an identical copy (the control, whose
interval should contain 1) and the pruned models in interleaved rounds
(:func:`headstats.jobs.timing.paired_rounds`) until every interval is within ``--target`` (1%) or
``--max-seconds`` pass. Each speed-up is printed beside its ceilings: the ratio of FLOPs (prefill)
and of bytes a decode step reads, weights plus KV cache (decode), from
:func:`headstats.engine.speed.inference_cost`, and the share of the ceiling's gain reached.
Rows go to ``OUT/speed.csv`` as they are measured, every kept round's seconds to ``OUT/rounds.csv`` (a
run stopped by ``--budget-seconds`` keeps them).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from headstats.engine.prune import geometry, prune_heads
from headstats.engine.speed import Setting, inference_cost, phase_timer, random_prompts, setting_ceiling
from headstats.jobs.prune import kv_group_size, select_heads
from headstats.jobs.timing import paired_rounds

HERE = Path(__file__).resolve().parent
MEANS = HERE.parent / "results" / "prune-embedded" / "model={}" / "means.parquet"
DEFAULT_SETTINGS = (
    "prefill:512:1,prefill:2048:1,prefill:4096:1,prefill:512:8,prefill:2048:8,prefill:4096:8,"
    "decode:1024:1,decode:4096:1,decode:1024:8,decode:4096:8"
)


def parse_settings(text: str, new_tokens: int) -> list[Setting]:
    """``phase:context:batch`` items, comma-separated."""
    out = []
    for item in text.split(","):
        phase, context, batch = item.strip().split(":")
        out.append(Setting(phase, int(batch), int(context), new_tokens))
    return out


def head_means(model, name: str, score: str, seed: int) -> pd.DataFrame:
    """Per-head means of ``score``: the committed ones of an embedded model, else seeded uniform draws
    (the speed of a pruned model depends on how many heads each layer keeps, not on which)."""
    path = Path(str(MEANS).format(name))
    if path.exists():
        means = pd.read_parquet(path)
        return means[means["score"] == score][["layer", "head", "mean"]]
    layers, heads, _, _ = geometry(model)
    grid = pd.MultiIndex.from_product([range(layers), range(heads)], names=["layer", "head"]).to_frame(index=False)
    return grid.assign(mean=np.random.default_rng(seed).random(len(grid)))


def build(name: str, dtype: torch.dtype, device: str, seed: int):
    config = AutoConfig.for_model(
        **{
            k: v
            for k, v in json.loads((HERE / "configs" / f"{name}.json").read_text()).items()
            if not k.startswith("_")
        }
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def ceilings(before, after, setting: Setting) -> dict:
    out = setting_ceiling(before, after, setting)
    out.pop("kv_bytes_saved")
    return out


def machine(device: str) -> dict:
    info = {
        "device": device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor(),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    else:
        try:
            lines = Path("/proc/cpuinfo").read_text().splitlines()
            info["cpu"] = next(x.split(":", 1)[1].strip() for x in lines if x.startswith("model name"))
        except (OSError, StopIteration):
            pass
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2-135m,llama3-8b,gemma3-270m")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, help="phase:context:batch items")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--units", default="head,kv-group")
    parser.add_argument("--score", default="ahon_ln")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--target", type=float, default=0.01, help="stop a setting at this interval half-width")
    parser.add_argument("--min-rounds", type=int, default=6)
    parser.add_argument("--max-seconds", type=float, default=20.0, help="timing seconds per setting at most")
    parser.add_argument("--budget-seconds", type=float, default=float("inf"), help="start no setting after this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--clock", default="wall", choices=["wall", "cpu"], help="cpu: the process's CPU seconds (a shared CPU)"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    settings = parse_settings(args.settings, args.new_tokens)
    info = machine(args.device)
    (args.out / "machine.json").write_text(json.dumps({**info, "args": {k: str(v) for k, v in vars(args).items()}}))
    print(json.dumps(info), flush=True)
    rows, rounds, started = [], [], time.perf_counter()
    for name in args.models.split(","):
        if time.perf_counter() - started > args.budget_seconds:
            break
        model = build(name, dtype, args.device, args.seed)
        models = {"unpruned": model, "copy": copy.deepcopy(model)}
        removed, means = {}, head_means(model, name, args.score, args.seed)
        for unit in args.units.split(","):
            heads = select_heads(means, args.score, args.share, unit=unit, group_size=kv_group_size(model))
            pruned = copy.deepcopy(model)
            prune_heads(pruned, heads)
            models[f"{unit}"] = pruned
            removed[unit] = len(heads)
        costs = {k: inference_cost(m) for k, m in models.items()}
        kv_before = costs["unpruned"].kv_bytes(1)
        print(f"{name}: removed {removed} heads; KV cache per token {kv_before} bytes", flush=True)
        for setting in settings:
            if time.perf_counter() - started > args.budget_seconds:
                print(f"budget of {args.budget_seconds:.0f} s spent: stopping before {name} {setting.name}")
                break
            ids = random_prompts(model, setting, args.seed)
            runs = {k: phase_timer(m, setting, ids, args.clock) for k, m in models.items()}
            result = paired_rounds(
                runs, "unpruned", target=args.target, min_rounds=args.min_rounds, max_seconds=args.max_seconds
            )
            for row in result.rows(
                model=name,
                setting=setting.name,
                phase=setting.phase,
                batch=setting.batch,
                context=setting.context,
                new_tokens=setting.new_tokens,
                dtype=args.dtype,
                clock=args.clock,
                **info,
            ):
                unit = row["candidate"]
                row["heads_removed"] = removed.get(unit, 0)
                row["kv_bytes_saved_per_token"] = kv_before - costs[unit].kv_bytes(1)
                row.update(ceilings(costs["unpruned"], costs[unit], setting))
                gain = row["ceiling"] - 1
                row["share_of_ceiling_gain"] = (row["speedup"] - 1) / gain if gain > 1e-9 else float("nan")
                rows.append(row)
                print(
                    f"{name:13s} {setting.name:24s} {unit:9s} x{row['speedup']:.3f} "
                    f"[{row['low']:.3f}, {row['high']:.3f}] n={row['rounds']:3d} ceiling x{row['ceiling']:.3f} "
                    f"({row['ceiling_basis']}) reached {row['share_of_ceiling_gain']:.0%}",
                    flush=True,
                )
            for contestant, seconds in result.seconds.items():  # every kept round, so the intervals can be recomputed
                rounds.extend(
                    {"model": name, "setting": setting.name, "contestant": contestant, "round": i, "seconds": s}
                    for i, s in enumerate(seconds)
                )
            pd.DataFrame(rows).to_csv(args.out / "speed.csv", index=False)
            pd.DataFrame(rounds).to_csv(args.out / "rounds.csv", index=False)
            del runs
        del models, model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
