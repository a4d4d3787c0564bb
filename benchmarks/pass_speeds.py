"""The calibration table of pass speeds a dry run times units with (``headstats/data/pass_speeds.csv``).

    python benchmarks/pass_speeds.py [--results results/study,results/confirm] [--measure] [--write]

Two sources of rows, each row one (machine, dtype, work, kernel, model) with its GFLOP/s (the FLOPs of the
model body over the pass's padded, length-sorted batches, :meth:`InferenceCost.pass_flops`, over its wall
seconds; :mod:`headstats.io.speeds`):

- ``--results``: the sweep points committed under those folders. Every point file records its pass's wall
  seconds and the machine that ran it; its sweep's options give its questions, which are tokenised again
  here (no model is loaded) to count the pass's FLOPs. Points of one (machine, dtype, kernel, model)
  pool: the row is their FLOPs over their seconds, and names the folders, tasks and pass count.
- ``--measure``: passes timed here, now, for each embedded model in fp32: a collection (every score, the
  explicit kernel) of ``--texts`` Wikipedia passages and of as many MMLU prompts, and an evaluation of
  ``--questions`` MMLU questions through each kernel. Say how loaded the machine was (the load average is
  printed): a loaded machine records slow speeds.

Score tables written before this version record no machine, so the committed collections give no rows: a
dry run times a collection at the closest evaluation's speed, and says so, until a collection has run on
this account (or ``--measure`` has added collection rows). Printed as a table; ``--write`` replaces the
committed table with these rows.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import time
from collections import defaultdict
from pathlib import Path

from headstats.io import store
from headstats.io.speeds import TABLE, Speed, machine_kind

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("machine", "device", "dtype", "work", "kernel", "model", "gflops", "seconds", "date", "source")


def _sweep_lengths(model: str, dtype: str, options: dict, task: str, cache: dict) -> tuple[list[int], int]:
    """The token lengths of a sweep's evaluator sequences (from its recorded options) and its batch size."""
    from dataclasses import fields

    from headstats.io.models import load_skeleton
    from headstats.jobs.evaluate import model_sequences
    from headstats.jobs.sweep_plan import load_sweep_task
    from headstats.specs import SweepSpec

    known = {f.name for f in fields(SweepSpec)}
    spec = SweepSpec.from_kwargs({k: v for k, v in options.items() if k in known})
    key = (model, task, repr(sorted((k, str(v)) for k, v in spec.kwargs().items() if k not in ("scores", "targets"))))
    if (model, dtype) not in cache:
        cache[(model, dtype)] = load_skeleton(model, dtype=dtype, device="cpu")
    if key not in cache:
        skeleton, tokenizer = cache[(model, dtype)]
        questions = load_sweep_task(task, spec).questions
        cache[key] = [len(s.input_ids) for s in model_sequences(skeleton, tokenizer, questions, spec.prompt_format)]
    return cache[key], spec.batch_size


def _file_options(root: Path, task: str | None) -> dict | None:
    """The options of ``task``'s sweep in the analysis file whose results folder is ``root``: what a point
    written before points recorded their options was run with."""
    from headstats.jobs.analysis import load_analysis

    for path in sorted((ROOT / "analyses").glob("*.toml")):
        try:
            spec = load_analysis(path)
        except (ValueError, KeyError, TypeError):
            continue  # another kind of study file
        if (ROOT / spec.results).resolve() == root.resolve():
            return next((a.kwargs() for a in spec.ablate if str(a.task) == task), None)
    return None


def from_results(roots: list[Path]) -> list[Speed]:
    from headstats.engine.speed import inference_cost

    pooled: dict[tuple, dict] = defaultdict(lambda: {"flops": 0.0, "seconds": 0.0, "passes": 0, "where": set()})
    cache: dict = {}
    for root in roots:
        for path in sorted(root.rglob("*.parquet")):
            if path.name.startswith((".", "_")) or "task=" not in str(path):
                continue
            record = store.file_provenance(path) or {}
            point = record.get("point") or {}
            seconds = point.get("seconds")
            machines = point.get("machines") or [{"machine": record.get("machine")}]
            timed = seconds and len(machines) == 1 and not point.get("untimed_batches") and machines[0].get("machine")
            model, task, dtype = record.get("model"), record.get("task"), record.get("dtype")
            options = record.get("options") or _file_options(root, task)
            if not timed or not isinstance(options, dict) or "materialise" not in point:
                continue  # untimed, or written before points recorded their options or kernel
            lengths, batch = _sweep_lengths(model, dtype, options, task, cache)
            cost = inference_cost(cache[(model, dtype)][0])
            machine = machines[0]["machine"]
            key = (
                machine_kind(machine),
                "cpu" if not machine.get("gpu") else "cuda",
                dtype,
                bool(point["materialise"]),
            )
            entry = pooled[(*key, model)]
            entry["flops"] += cost.pass_flops(lengths, batch)
            entry["seconds"] += float(seconds)
            entry["passes"] += 1
            entry["where"].add(f"{path.parent.parent.parent.relative_to(ROOT)} {task}")
            entry["date"] = max(entry.get("date", ""), str(point.get("finished", ""))[:10])
    rows = []
    for (kind, device, dtype, explicit, model), e in sorted(pooled.items()):
        source = f"{e['passes']} sweep passes of {', '.join(sorted(e['where']))}"
        rows.append(
            Speed(
                kind,
                device,
                dtype,
                "evaluate",
                "explicit" if explicit else "fused",
                model,
                round(e["flops"] / e["seconds"] / 1e9, 2),
                round(e["seconds"], 1),
                e["date"],
                source,
            )
        )
    return rows


def measure_here(texts: int, questions: int) -> list[Speed]:
    import torch

    from headstats.engine.probe import Probe
    from headstats.engine.scoring import score_sequences
    from headstats.engine.speed import inference_cost
    from headstats.io.models import load_model, machine_info
    from headstats.io.tasks import collection_source, load_task
    from headstats.jobs.evaluate import model_sequences, question_logliks

    today = _dt.date.today().isoformat()
    rows = []
    for name in ("smollm2-135m", "gemma3-270m"):
        model, tokenizer = load_model(name, dtype="float32", device="cpu")
        kind = machine_kind(machine_info("cpu"))
        cost = inference_cost(model)
        for dataset in ("wikipedia", "mmlu"):
            seqs = [
                ids for _, ids in collection_source(dataset).iter_sequences(tokenizer, limit=texts, max_length=1024)
            ]
            score_sequences(model, seqs[:1], batch_size=8)  # warm-up
            started = time.perf_counter()
            score_sequences(model, seqs, batch_size=8)
            seconds = time.perf_counter() - started
            gflops = cost.pass_flops(list(map(len, seqs)), 8) / seconds / 1e9
            where = f"{texts} {dataset} texts, batch 8"
            rows.append(
                Speed(
                    kind,
                    "cpu",
                    "float32",
                    "collect",
                    "explicit",
                    name,
                    round(gflops, 2),
                    round(seconds, 1),
                    today,
                    f"benchmarks/pass_speeds.py --measure: {where}",
                )
            )
        task = load_task("mmlu", limit=questions)
        planned = model_sequences(model, tokenizer, task.questions)
        lengths = [len(s.input_ids) for s in planned]
        heads = model.config.get_text_config().num_attention_heads

        def never(layer, scores, keys, heads=heads):
            return torch.zeros(len(keys), heads, dtype=torch.bool)

        for kernel in ("explicit", "fused"):
            with Probe(model, (), never, materialise=kernel == "explicit") as probe:
                question_logliks(
                    model, tokenizer, task.questions[:1], batch_size=4, progress=False, share_prefix=False, probe=probe
                )
                started = time.perf_counter()
                question_logliks(
                    model, tokenizer, task.questions, batch_size=4, progress=False, share_prefix=False, probe=probe
                )
                seconds = time.perf_counter() - started
            gflops = cost.pass_flops(lengths, 4) / seconds / 1e9
            where = f"{questions} MMLU questions, batch 4"
            rows.append(
                Speed(
                    kind,
                    "cpu",
                    "float32",
                    "evaluate",
                    kernel,
                    name,
                    round(gflops, 2),
                    round(seconds, 1),
                    today,
                    f"benchmarks/pass_speeds.py --measure: {where}",
                )
            )
        del model
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results/study,results/study-fine,results/confirm")
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--texts", type=int, default=32)
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    roots = [ROOT / p for p in args.results.split(",") if p]
    rows = from_results(roots)
    if args.measure:
        print(f"load average before measuring: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        rows += measure_here(args.texts, args.questions)
    width = max(len(r.machine) for r in rows)
    for r in rows:
        what = f"{r.dtype:<8}  {r.work:<8}  {r.kernel:<8}  {r.model:<14}"
        print(f"{r.machine:<{width}}  {what}  {r.gflops:8.2f} GFLOP/s  {r.seconds:9.1f} s  {r.source}")
    if args.write:
        with TABLE.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: getattr(r, k) for k in FIELDS})
        print(f"wrote {TABLE.relative_to(ROOT)} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
