"""Cost of collecting every score, measured side by side in one run on the same batches.

    python benchmarks/bench_collect.py [--model smollm2-135m] [--n 32] [--batch-size 8] [--repeats 3]

Compares, on real MMLU 5-shot prompts of the embedded model:
  plain eager forward  |  plain SDPA forward  |  headstats, all 16 scores in one pass  |
  one pass per score function (how the published code collected them)  |
  the same scores by hand from ``output_attentions`` plus hooks on the value / output projections.
Each variant runs ``--repeats`` times, interleaved, and the median is reported. Ratios are printed
relative to the plain eager forward (the study's attention implementation).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import headstats
from headstats.engine.attention import hooked_module
from headstats.engine.batching import Batch, length_sorted_batches
from headstats.engine.probe import Probe
from headstats.io.tasks import collection_source


def by_hand_scores(model: torch.nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
    """What a user would write without headstats: eager attention weights + hooks, then the
    formulas of docs/concepts.md#scores with explicit padding masks. Returns (B, L, H) per score."""
    config = model.config
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    d = config.hidden_size // heads
    layers = model.base_model.layers
    values: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []
    hooks = [layer.self_attn.v_proj.register_forward_hook(lambda m, a, o: values.append(o)) for layer in layers]
    hooks += [layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a: outputs.append(a[0])) for layer in layers]
    try:
        out = model.base_model(**batch.model_inputs(), use_cache=False, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    valid = batch.attention_mask.bool()
    b, s = valid.shape
    vf = valid.float()
    n = vf.sum(-1).view(b, 1)
    first = valid.int().argmax(-1)
    last = s - 1 - valid.flip(-1).int().argmax(-1)
    rows = torch.arange(b)
    result: dict[str, list[torch.Tensor]] = {}
    for a, v, o, layer in zip(out.attentions, values, outputs, layers, strict=True):
        a = a.float()
        v = v.float().view(b, s, kv, d).repeat_interleave(heads // kv, dim=2)  # (B, S, H, D)
        o = o.float().view(b, s, heads, d)
        w = layer.self_attn.o_proj.weight.float()  # (d_model, H*D)
        full = torch.einsum("bshd,ehd->bshe", o, w.view(-1, heads, d)).norm(dim=-1)
        raw = {
            "awft": (a[rows, :, :, first] * vf[:, None]).sum(-1) / n,
            "entropy": ((-torch.special.xlogy(a, a).sum(-1)) * vf[:, None]).sum(-1) / n,
            "ftvvn": v[rows, first].norm(dim=-1),
            "avvn": (v.norm(dim=-1) * vf[..., None]).sum(1) / n,
            "lthon": o[rows, last].norm(dim=-1),
            "ahon": (o.norm(dim=-1) * vf[..., None]).sum(1) / n,
            "fhon": (full * vf[..., None]).sum(1) / n,
        }
        for name in ("awft", "entropy", "ftvvn", "avvn", "ahon", "fhon"):
            raw[f"{name}_ln"] = raw[name] / raw[name].mean(-1, keepdim=True)
        raw["lthon_ln"] = raw["lthon"] / raw["ahon"].mean(-1, keepdim=True)
        raw["lthon_hn"] = raw["lthon"] / raw["ahon"]
        for k, val in raw.items():
            result.setdefault(k, []).append(val)
    return {k: torch.stack(v, dim=1) for k, v in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n", type=int, default=32, help="MMLU prompts")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model, tokenizer = headstats.load_model(args.model)
    prompts = [ids for _, ids in collection_source("mmlu").iter_sequences(tokenizer, limit=args.n)]
    batches = list(length_sorted_batches(prompts, args.batch_size))
    tokens = sum(len(p) for p in prompts)
    body = hooked_module(model)

    def plain(impl: str) -> Callable[[], None]:
        def run() -> None:
            model.set_attn_implementation(impl)
            for batch in batches:
                body(**batch.model_inputs(), use_cache=False)

        return run

    def probed(score_ids: tuple[str, ...]) -> Callable[[], None]:
        def run() -> None:
            with Probe(model, score_ids):
                for batch in batches:
                    body(**batch.model_inputs(), use_cache=False)

        return run

    def one_pass_per_score() -> None:
        for sid in headstats.score_ids():
            probed((sid,))()

    def by_hand() -> None:
        model.set_attn_implementation("eager")
        for batch in batches:
            by_hand_scores(model, batch)

    variants: dict[str, Callable[[], None]] = {
        "plain eager forward": plain("eager"),
        "plain sdpa forward": plain("sdpa"),
        "headstats, all 16 scores, one pass": probed(headstats.score_ids()),
        "one pass per score (16 passes)": one_pass_per_score,
        "by hand: output_attentions + hooks": by_hand,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode():
        plain("eager")()  # warm-up
        for _ in range(args.repeats):
            for name, run in variants.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    eager = median["plain eager forward"]
    ours = median["headstats, all 16 scores, one pass"]
    print(f"model {args.model}, {len(prompts)} MMLU prompts, {tokens} tokens, batch size {args.batch_size}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")  # fmt: skip
    for name, t in median.items():
        print(f"  {name:<40} {t:8.2f} s   {t / eager:5.2f}x eager")
    print(f"all scores / plain eager forward:  {ours / eager:.2f}x   (target <= 1.2x)")
    print(f"all scores / plain sdpa forward:   {ours / median['plain sdpa forward']:.2f}x")
    per_score = median["one pass per score (16 passes)"] / ours
    print(f"one pass per score / all scores:   {per_score:.1f}x faster (target >= 10x)")
    print(f"by hand / all scores:              {median['by hand: output_attentions + hooks'] / ours:.2f}x")


if __name__ == "__main__":
    main()
