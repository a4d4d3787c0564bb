"""The real check of ``headstats compare``: SmolLM2-135M against a saved unchanged copy and against a copy
whose last layer has one head's query-projection rows scaled by 0.3.

    python benchmarks/compare_scaled_head.py WORK [--head 4] [--limit 64]

writes WORK/smollm2-copy/ and WORK/smollm2-scaled/ (saved once), runs
``headstats compare smollm2-135m WORK/smollm2-copy WORK/smollm2-scaled --data wikipedia,piqa --limit 64
--out WORK/report --self-comparison`` (the unchanged copy is the model itself, on purpose) and prints
the moved heads of each copy: the scaled one should name (29, head) among them, the unchanged one none.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import torch


def save_copies(work: Path, head: int) -> tuple[Path, Path]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headstats.io.assets import embedded_model

    source = Path(embedded_model("smollm2-135m"))
    copy, scaled = work / "smollm2-copy", work / "smollm2-scaled"
    if not copy.is_dir():
        shutil.copytree(source, copy)
    if not scaled.is_dir():
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        last = model.model.layers[-1].self_attn.q_proj
        head_dim = (
            model.config.head_dim
            if getattr(model.config, "head_dim", None)
            else model.config.hidden_size // model.config.num_attention_heads
        )
        with torch.no_grad():
            last.weight[head * head_dim : (head + 1) * head_dim] *= 0.3
        model.save_pretrained(scaled)
        AutoTokenizer.from_pretrained(source).save_pretrained(scaled)
    return copy, scaled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--head", type=int, default=4)
    parser.add_argument("--limit", type=int, default=64)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    copy, scaled = save_copies(args.work, args.head)
    from headstats.cli import main as headstats_main

    started = time.perf_counter()
    out = args.work / "report"
    argv = ["compare", "smollm2-135m", str(copy), str(scaled), "--data", "wikipedia,piqa", "--self-comparison"]
    code = headstats_main([*argv, "--limit", str(args.limit), "--out", str(out)])
    print(f"headstats compare: exit {code}, {time.perf_counter() - started:.0f} s")
    moved = pd.read_csv(out / "tables" / "moved_heads.csv")
    for name in ("smollm2-copy", "smollm2-scaled"):
        heads = moved[moved["model_b"] == name]
        print(f"{name}: {len(heads)} moved head(s): {list(zip(heads['layer'], heads['head'], strict=True))}")
    return code


if __name__ == "__main__":
    sys.exit(main())
