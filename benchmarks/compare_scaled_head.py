"""The real check of ``headstats compare``'s per-head verdicts: SmolLM2-135M against a saved unchanged copy
and against a copy with one head's weights changed.

    python benchmarks/compare_scaled_head.py WORK [--layer 15] [--head 4] [--change query] [--limit 64]
        [--scores-dir DIR]

writes WORK/smollm2-copy/ and WORK/smollm2-<change>-L<layer>H<head>/ (saved once): ``query`` scales the
head's query-projection rows by 0.3 (its attention flattens), ``output`` its output rows of W_O (its
columns of o_proj) by 3. Then it runs ``headstats compare smollm2-135m WORK/smollm2-copy WORK/<changed>
--data wikipedia,piqa --limit 64 --out WORK/report --self-comparison`` (the unchanged copy is the model itself, on
purpose; ``--scores-dir``: a results folder to reuse and add
to, e.g. a copy of results/compare-embedded, so that only the copies are scored) and prints, per copy,
its heads by verdict and the heads moved beyond their margin: the changed one should name (layer, head)
and no head of an earlier layer, the unchanged one none.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import torch


def save_copies(work: Path, layer: int, head: int, change: str) -> tuple[Path, Path]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headstats.io.assets import embedded_model

    source = Path(embedded_model("smollm2-135m"))
    copy, changed = work / "smollm2-copy", work / f"smollm2-{change}-L{layer}H{head}"
    if not copy.is_dir():
        shutil.copytree(source, copy)
    if not changed.is_dir():
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        attention = model.model.layers[layer].self_attn
        head_dim = model.config.hidden_size // model.config.num_attention_heads
        rows = slice(head * head_dim, (head + 1) * head_dim)
        with torch.no_grad():
            if change == "query":
                attention.q_proj.weight[rows] *= 0.3
            else:
                attention.o_proj.weight[:, rows] *= 3.0
        model.save_pretrained(changed)
        AutoTokenizer.from_pretrained(source).save_pretrained(changed)
    return copy, changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--layer", type=int, default=15)
    parser.add_argument("--head", type=int, default=4)
    parser.add_argument("--change", choices=("query", "output"), default="query")
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--scores-dir", type=Path, default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    copy, changed = save_copies(args.work, args.layer, args.head, args.change)
    from headstats.cli import main as headstats_main

    started = time.perf_counter()
    out = args.work / "report"
    argv = ["compare", "smollm2-135m", str(copy), str(changed), "--data", "wikipedia,piqa", "--self-comparison"]
    argv += ["--scores-dir", str(args.scores_dir)] if args.scores_dir else []
    code = headstats_main([*argv, "--limit", str(args.limit), "--out", str(out)])
    print(f"headstats compare: exit {code}, {time.perf_counter() - started:.0f} s")
    heads = pd.read_csv(out / "tables" / "heads.csv")
    for name in (copy.name, changed.name):
        mine = heads[heads["model_b"] == name]
        moved = mine[mine["verdict"] == "moved beyond the margin"]
        print(f"{name}: {mine['verdict'].value_counts().to_dict()}")
        print(f"  moved beyond: {list(zip(moved['layer'], moved['head'], moved['moved_on'], strict=True))}")
    return code


if __name__ == "__main__":
    sys.exit(main())
