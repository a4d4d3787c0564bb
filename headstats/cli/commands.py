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
    add_spec(p, Output, required=("out",))
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
    add_spec(p, Output)
    add_spec(p, SummarySpec)
    add_resources(p)
    p.set_defaults(func=run_ablate)


def run_ablate(args: argparse.Namespace) -> int:
    from headstats.io import store
    from headstats.io.models import model_slug
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
    add_spec(p, Results)
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
    add_spec(p, Output, required=("out",))
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
    add_spec(p, Output, required=("out",))
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
        help="run a declarative analysis (analyses/*.toml): collect -> ablate -> report",
        description="Run every stage of an analysis file, skipping work that is already done. --dtype and "
        "--device override the file's [models] settings; in a confirmation file (a [confirm] section) each "
        "computation path sets the dtype, and --paths chooses among them.",
        epilog=examples(
            "headstats run analyses/embedded.toml --dry-run",
            "headstats run analyses/embedded.toml --all-models --stages collect,ablate",
        ),
    )
    add_spec(p, RunSpec)
    add_resources(p)
    p.set_defaults(func=run_run)


def run_run(args: argparse.Namespace) -> int:
    from headstats.jobs.compare import is_comparison
    from headstats.jobs.confirm import is_confirmation

    run = spec_from_args(args, RunSpec)
    progress = not getattr(args, "quiet", False)
    if is_comparison(Path(run.analysis)) and run.dry_run:
        from headstats.pipeline import dry_run_comparison_file

        print(dry_run_comparison_file(run.analysis, run).summary())
        return 0
    if is_comparison(Path(run.analysis)):
        from headstats.pipeline import run_comparison_file

        index = run_comparison_file(run.analysis, run)
    elif is_confirmation(Path(run.analysis)):
        try:
            grid = "--launcher" if spec_from_args(args, Resources).launcher is not None else None
        except SpecError as err:  # a job's setting without a launcher: answered as a launcher would be
            grid = err.label
        if grid:
            raise SpecError(
                "launcher",
                "a confirmation file runs its paths in this process, one after another; to spread them over "
                f"jobs, run headstats run {run.analysis} --paths PATH --models MODEL --stages ablate in each, then "
                "--stages report once",
                label=grid,
            )
        index = run_confirmation_file(run, progress=progress)
    elif run.only_paths:
        raise SpecError(
            "paths",
            f"chooses among a confirmation file's computation paths; {run.analysis} has none (no [confirm] section)",
            label="--paths",
        )
    else:
        index = run_analysis_file(run, spec_from_args(args, Resources), progress=progress)
    if index is not None:
        _report_line(str(index))
    return 0


def run_analysis_file(run: RunSpec, resources: Resources, *, progress: bool) -> Path | None:
    """``headstats run`` of an analysis file: its stages, or with ``--dry-run`` what they would run."""
    from headstats.jobs.analysis import load_analysis

    spec = load_analysis(run.analysis)  # every section checked before any work
    if run.dry_run:
        from headstats.jobs.dryrun import dry_run

        print(dry_run(spec, run).summary())
        return None
    from headstats.pipeline import run_analysis

    return run_analysis(spec, run, resources=resources, progress=progress)


def run_confirmation_file(run: RunSpec, *, progress: bool) -> Path | None:
    """``headstats run`` of a confirmation file (:mod:`headstats.jobs.confirm`): every path's sweeps,
    then the verdicts; ``--dry-run`` sizes every path. Each path sets its own dtype."""
    from headstats.jobs.confirm import load_confirmation

    plan = load_confirmation(run.analysis)
    if run.dry_run:
        from headstats.jobs.dryrun import dry_run_confirmation

        print(dry_run_confirmation(plan, run).summary())
        return None
    from headstats.pipeline import run_confirmation

    return run_confirmation(plan, run, progress=progress)


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
