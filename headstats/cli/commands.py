"""The ``headstats`` subcommands: each adds its flags from the specs and calls the library.

Every command builds its specs from the parsed flags first (:func:`spec_from_args`), so a bad
option is refused, naming its flag, before a model loads or a file is written.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from headstats.cli.options import add_resources, add_spec, examples, spec_from_args
from headstats.options import SpecError, narrow
from headstats.specs import (
    LIST_ALL,
    LISTABLE,
    AblateSection,
    CollectSection,
    CollectSpec,
    ListSpec,
    LoadOptions,
    ModelsSection,
    Output,
    PaperSpec,
    ReportSpec,
    Resources,
    Results,
    RunSpec,
    SummaryOutput,
    SummarySpec,
    SweepSpec,
)

logger = logging.getLogger("headstats")
Subparsers = argparse._SubParsersAction


def _report_line(text: str) -> None:
    """A result of the command (stdout, kept under --quiet)."""
    print(text, flush=True)


# --- collect --------------------------------------------------------------------------------------


def add_collect(sub: Subparsers) -> None:
    p = sub.add_parser(
        "collect",
        help="score every head of a model on datasets into Parquet tables",
        description="Stream datasets through models and write one row per (sequence, layer, head) with every "
        "score id. Re-running the same command resumes an interrupted run.",
        epilog=examples(
            "headstats collect --model smollm2-135m --dataset wikipedia --limit 16 --out results/scores",
            "headstats collect --model smollm2-135m,gemma3-270m --dataset mmlu,piqa --limit 32 --scores ahon_ln,awft "
            "--out results/scores",
        ),
    )
    add_spec(p, ModelsSection, required=("names",))
    add_spec(p, CollectSection, required=("datasets",))
    add_spec(
        p,
        Output,
        required=("out",),
        helps={"out": "the results root: one score table per model and dataset, OUT/model=NAME/dataset=NAME/"},
    )
    add_resources(p)
    p.set_defaults(func=run_collect)


def run_collect(args: argparse.Namespace) -> int:
    import torch

    from headstats.io import store
    from headstats.io.models import load_model, resolve_model_path
    from headstats.io.tasks import collection_source
    from headstats.jobs.collect import collect_scores

    models = spec_from_args(args, ModelsSection)  # an unusable --device fails here, before any work
    section = spec_from_args(args, CollectSection)
    out = str(spec_from_args(args, Output).out)
    resources = spec_from_args(args, Resources)
    spec, load = narrow(section, CollectSpec), narrow(models, LoadOptions)
    store.ensure_writable(out, create=False)  # created with the first table: a refused run leaves nothing
    if not section.datasets:
        raise ValueError("--dataset names no dataset: give a built-in one (headstats list datasets) or a file")
    for name in models.names:  # an unknown model fails before any other loads
        resolve_model_path(name)
    for name in section.datasets:  # fail on a bad dataset before spending time on a model
        if len(collection_source(name, data_dir=spec.data_dir, text_column=spec.text_column)) == 0:
            raise ValueError(f"dataset {name!r} has no documents to score")
    if resources.launcher is not None:
        from headstats.jobs.grid import collect_grid

        result = collect_grid(models.names, section.datasets, out, resources=resources, spec=spec, load=load)
        _report_line(result.summary())
        return 0
    for name_or_path in models.names:
        model, tokenizer = load_model(name_or_path, **load.kwargs())
        for name in section.datasets:
            result = collect_scores(model, tokenizer, name, out, spec=spec)
            _report_line(f"{result.partition}: {result.n_samples} sequences ({result.n_new} new)")
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0


# --- ablate and summary ---------------------------------------------------------------------------


def add_ablate(sub: Subparsers) -> None:
    p = sub.add_parser(
        "ablate",
        help="accuracy of a task while zeroing heads (baseline + score x target sweep)",
        description=(
            "Run the baseline once, calibrate each score's threshold for each target fraction, evaluate the task "
            "with heads zeroed at every (score, target) point, and write per-question rows to "
            "OUT/model=<slug>/task=<task>/ (one Parquet file per point; a re-run resumes). --task and --model take "
            "comma-separated lists."
        ),
        epilog=examples(
            "headstats ablate --model smollm2-135m --task piqa --limit 40 --out results/zeroing",
            "headstats ablate --model smollm2-135m --task mmlu --limit 32 --scores ahon_ln --targets 0,0.1,0.2 "
            "--out results/zeroing",
        ),
    )
    add_spec(p, ModelsSection)
    add_spec(p, AblateSection)
    add_spec(p, Output, helps={"out": "the results root: one Parquet file per sweep point, OUT/model=NAME/task=NAME/"})
    add_spec(p, SummarySpec)
    add_resources(p)
    p.set_defaults(func=run_ablate)


def run_ablate(args: argparse.Namespace) -> int:
    from headstats.io import store
    from headstats.io.model_paths import model_slug
    from headstats.jobs.sweep import run_sweep

    summary = spec_from_args(args, SummarySpec)
    given = {"--model": getattr(args, "names", None), "--task": getattr(args, "task", None)}
    given["--out"] = getattr(args, "out", None)
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise ValueError(f"headstats ablate needs {', '.join(missing)} (headstats summary RESULTS prints results)")
    models = spec_from_args(args, ModelsSection)
    tasks = [t.strip() for t in str(args.task).split(",") if t.strip()]
    sweeps = [narrow(spec_from_args(args, AblateSection, task=task), SweepSpec) for task in tasks]
    out = str(spec_from_args(args, Output).out)
    resources = spec_from_args(args, Resources)
    load = narrow(models, LoadOptions)
    if resources.launcher is not None:
        from headstats.jobs.grid import FunctionJob, run_grid

        if resources.folder is None:
            resources = replace(resources, folder=os.fspath(Path(out) / "_grid"))
        # One job per (model, task): the points of one sweep share its baseline and calibration file.
        jobs = [
            FunctionJob(
                f"ablate {model} {task}",
                run_sweep,
                {"model": model, "task": task, "out": out, **spec.kwargs(), **load.kwargs(), "progress": False},
                output_paths=(str(store.partition_dir(out, model=model_slug(model), task=task)),),
            )
            for model in models.names
            for task, spec in zip(tasks, sweeps, strict=True)
        ]
        result = run_grid(jobs, resources, progress=sweeps[0].progress)
        _report_line(result.summary())
        print_summary(out, metric=summary.metric)
        return 0
    for model in models.names:
        for task, spec in zip(tasks, sweeps, strict=True):
            partition = run_sweep(model, task, out=out, spec=spec, load=load)
            model_part, task_part = (part.name.split("=", 1)[1] for part in (partition.parent, partition))
            print_summary(out, metric=summary.metric, model=model_part, task=task_part)
    return 0


def add_summary(sub: Subparsers) -> None:
    p = sub.add_parser(
        "summary",
        help="per-point and per-curve summaries of intervention results (no model is loaded)",
        description="Print accuracy, paired differences and curve summaries of the headstats ablate results "
        "under RESULTS.",
        epilog=examples(
            "headstats summary results/study",
            "headstats summary results/study --format csv --table points > points.csv",
        ),
    )
    add_spec(p, Results, helps={"results": "a results directory holding sweep points, as headstats ablate writes them"})
    add_spec(p, SummarySpec)
    add_spec(p, SummaryOutput)
    p.set_defaults(func=run_summary)


def run_summary(args: argparse.Namespace) -> int:
    output = spec_from_args(args, SummaryOutput)
    print_summary(
        spec_from_args(args, Results).results,
        metric=spec_from_args(args, SummarySpec).metric,
        fmt=output.format,
        table=output.table,
    )
    return 0


def print_summary(
    root: str | os.PathLike,
    *,
    metric: str = "correct",
    model: str | None = None,
    task: str | None = None,
    fmt: str = "table",
    table: str = "both",
) -> None:
    """Print the per-point and per-curve summaries of the intervention results under ``root``
    (only ``model`` / ``task``, given as their partition values, if set) in ``fmt``
    (:func:`headstats.cli.tables.format_summary`)."""
    from headstats.cli.tables import format_summary
    from headstats.io import store
    from headstats.stats.summary import summarize_curves, summarize_interventions

    df = store.read_interventions(root)
    for col, value in (("model", model), ("task", task)):
        if value is not None and col in df.columns:
            df = df[df[col] == value]
    points = summarize_interventions(df, metric=metric)
    curves = summarize_curves(df, points)
    print(format_summary(points, curves, metric=metric, fmt=fmt, table=table), flush=True)


# --- report and paper -----------------------------------------------------------------------------


def add_report(sub: Subparsers) -> None:
    p = sub.add_parser(
        "report",
        help="HTML + markdown report of score tables and intervention results (no model is loaded)",
        description="Build OUT/index.html (self-contained) and OUT/summary.md from the Parquet results under "
        "RESULTS: score distributions, distances, stability, overlap, intervention curves and ranks.",
        epilog=examples(
            "headstats report results/study --out reports/mine",
            "headstats report results/study --out reports/mine --n-boot 1000 --metric correct_norm",
        ),
    )
    add_spec(p, Results)
    add_spec(p, Output, required=("out",), helps={"out": "the report folder: index.html, summary.md, tables, figures"})
    add_spec(p, ReportSpec)
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from headstats.report.writer import build_report

    results, out = spec_from_args(args, Results).results, spec_from_args(args, Output).out
    spec = spec_from_args(args, ReportSpec)
    index = build_report(results, str(out), spec=spec)
    _report_line(f"report: {index}")
    return 0


def add_paper(sub: Subparsers) -> None:
    p = sub.add_parser(
        "paper",
        help="the study's Table 2 and MMLU figures from its published numbers (bundled; no model needed)",
        description="Write OUT/table2.csv, per-model tables, figures and an HTML/markdown report of the study's "
        "published MMLU intervention results.",
        epilog=examples("headstats paper --out reports/paper", "headstats paper --out reports/paper --dpi 150"),
    )
    add_spec(
        p,
        Output,
        required=("out",),
        helps={"out": "the report folder: table2.csv, per-model tables, figures, index.html, summary.md"},
    )
    add_spec(p, PaperSpec)
    p.set_defaults(func=run_paper)


def run_paper(args: argparse.Namespace) -> int:
    import pandas as pd

    from headstats.report.paper import write_paper

    out = str(spec_from_args(args, Output).out)
    index = write_paper(out, spec=spec_from_args(args, PaperSpec))
    table = pd.read_csv(Path(out) / "table2.csv")
    with pd.option_context("display.width", 160):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}", na_rep=""))
    _report_line(f"report: {index}")
    return 0


# --- run ------------------------------------------------------------------------------------------


def add_run(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="run a study file (analyses/*.toml) of any kind: its stages, resuming, the report last",
        description="Run the stages of a study file, skipping work that is already done. The file's kind decides "
        "what its stages compute (headstats.studies): an analysis collects score tables and runs zeroing sweeps, "
        "a confirmation ([confirm]) runs each computation path's sweeps, a frontier ([prune]) prunes and evaluates, "
        "a comparison ([compare]) collects every model, a fine-tuning study ([design]) trains its seeds' chains "
        "(--stages train) and scores their checkpoints; the report stage rebuilds the report from the results. "
        "--dry-run counts what is left of each unit and times it on this machine. --dtype and --device override "
        "the file's settings; in a confirmation file each computation path sets the dtype, and --paths chooses "
        "among them.",
        epilog=examples(
            "headstats run analyses/embedded.toml --dry-run",
            "headstats run analyses/prune_embedded.toml --stages time,report",
        ),
    )
    add_spec(p, RunSpec)
    add_resources(p)
    p.set_defaults(func=run_run)


def run_run(args: argparse.Namespace) -> int:
    run = spec_from_args(args, RunSpec)
    from headstats.studies import kind_of

    kind = kind_of(run.analysis)
    try:
        resources = spec_from_args(args, Resources)
        grid = "--launcher" if resources.launcher is not None else None
    except SpecError as err:  # a job's setting without a launcher: refused by a kind that takes none, as below
        if kind.grid:
            raise
        resources, grid = None, err.label
    return run_study_file(run, resources=resources, grid=grid, quiet=getattr(args, "quiet", False))


def run_study_file(run: RunSpec, *, resources: Resources | None = None, grid: str | None = None, quiet: bool) -> int:
    """``headstats run FILE`` (and its aliases): the file through its kind (:mod:`headstats.studies`),
    printing the dry run or the report's index."""
    from headstats.jobs.dryrun import DryRun
    from headstats.studies import kind_of, run_loaded

    study = kind_of(run.analysis).load(Path(run.analysis))  # every key checked before any work
    result = run_loaded(study, run, resources=resources, grid=grid, progress=not quiet)
    if isinstance(result, DryRun):
        print(result.summary())
    elif result is not None:
        _report_line(str(result))
    return 0


# --- list -----------------------------------------------------------------------------------------


def add_list(sub: Subparsers) -> None:
    p = sub.add_parser(
        "list",
        help="registered score ids, tasks, collection datasets or embedded models, one per line",
        description="Print the names headstats knows, one per line with a short description: scores, tasks, "
        "datasets (for collect --dataset; a file works too) or models (embedded, no download of weights needed).",
        epilog=examples("headstats list", "headstats list scores"),
    )
    add_spec(p, ListSpec)
    p.set_defaults(func=run_list)


def listing(what: str) -> list[tuple[str, str]]:
    """(name, description) of every entry of a registry."""
    if what == "scores":
        from headstats.engine.scores import SCORES

        return [
            (
                sid,
                f"{s.name}; a head is inactive when {s.inactive_when}"
                + (f": {s.description}" if s.description else ""),
            )
            for sid, s in SCORES.items()
        ]
    if what == "tasks":
        from headstats.io.tasks import TASKS

        return [(name, getattr(task, "summary", "")) for name, task in TASKS.items()]
    if what == "datasets":
        from headstats.io.tasks import COLLECTION_DATASETS
        from headstats.io.tasks.collection import TASK_DATASETS

        texts = {"wikipedia": "Wikipedia passages (BoolQ validation)", "books": "book passages (LAMBADA)"}
        return [
            (name, texts.get(name) or f"the prompts of task {TASK_DATASETS.get(name, name)}")
            for name in COLLECTION_DATASETS
        ]
    from headstats.io.assets import EMBEDDED_MODELS

    return [(name, f"{m.description} ({m.licence})") for name, m in EMBEDDED_MODELS.items()]


def run_list(args: argparse.Namespace) -> int:
    what = spec_from_args(args, ListSpec).what
    kinds = LISTABLE if what == LIST_ALL else (what,)
    for i, kind in enumerate(kinds):
        entries = listing(kind)
        if len(kinds) > 1:
            print(("\n" if i else "") + f"{kind}:")
        width = max(len(name) for name, _ in entries)
        for name, text in entries:
            print(("  " if len(kinds) > 1 else "") + f"{name:<{width}}  {text}".rstrip())
    return 0


# --- lm-eval -------------------------------------------------------------------------------------


def add_lm_eval(sub: Subparsers) -> None:
    """``headstats lm-eval ARGS...``: lm-eval's own command line with the ``headstats`` model registered
    (:mod:`headstats.lmeval`). Everything after ``lm-eval`` goes to lm-eval untouched; lm-eval is
    imported only when the command runs, so the other commands never pay for it."""
    p = sub.add_parser(
        "lm-eval",
        add_help=False,
        prefix_chars="\0",
        help="run lm-eval's command line with `--model headstats` available (`headstats lm-eval --help`)",
    )
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, help="lm-eval's own arguments")
    p.set_defaults(func=run_lm_eval)


def run_lm_eval(args: argparse.Namespace) -> int:
    import importlib

    return importlib.import_module("headstats.lmeval").run_lm_eval(args.lm_eval_args)


COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    add_collect,
    add_ablate,
    add_summary,
    add_report,
    add_paper,
    add_run,
    add_list,
)
