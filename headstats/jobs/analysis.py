"""Declarative analyses: ``headstats run analyses/NAME.toml`` runs collect -> ablate -> report.

An analysis file says which models, datasets, score ids, targets, tasks and limits to use; running
it performs each stage in order and skips what is already done (collection resumes by sample id,
sweeps skip finished points), then rebuilds the report from the Parquet results alone. Relative
paths in the file are relative to the working directory (where ``headstats run`` is called).

Layout of a file (all sections optional except ``models``)::

    name = "embedded"
    results = "results/embedded"       # Parquet results (collection and interventions)
    report = "reports/embedded"        # report directory
    [models]
    names = ["smollm2-135m"]           # run always
    optional = ["gemma3-270m"]         # run with --all-models
    dtype = "float32"                  # optional; default: bf16 on CUDA, fp32 on CPU
    [collect]
    datasets = ["mmlu", "wikipedia"]
    limit = 64
    [[ablate]]
    task = "mmlu"
    scores = ["ahon_ln", "awft", "random"]
    targets = [0, 0.1, 0.2, 0.3]
    limit_per_subject = 2
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headstats.engine import scores as S
from headstats.io import store
from headstats.jobs.grid import add_launcher_arguments, launcher_options

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

COLLECT_KEYS = {"datasets", "limit", "batch_size", "max_length", "prompt_format", "scores", "seed", "padding_side"}
ABLATE_KEYS = {
    "task",
    "scores",
    "targets",
    "limit",
    "limit_per_subject",
    "subjects",
    "batch_size",
    "prompt_format",
    "seed",
    "calibration",
    "calibration_limit",
}


@dataclass
class AblateSpec:
    task: str
    scores: list[str]
    targets: list[float]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnalysisSpec:
    name: str
    path: Path
    description: str
    results: Path
    report: Path
    models: list[str]
    optional_models: list[str]
    dtype: str | None
    device: str | None
    collect_datasets: list[str]
    collect_options: dict[str, Any]
    ablate: list[AblateSpec]
    report_options: dict[str, Any]

    def selected_models(self, all_models: bool = False, only: Sequence[str] | None = None) -> list[str]:
        pool = self.models + (self.optional_models if all_models else [])
        if only:
            unknown = [m for m in only if m not in self.models + self.optional_models]
            if unknown:
                raise ValueError(
                    f"{self.path}: model(s) {', '.join(unknown)} are not in this analysis "
                    f"(it lists {', '.join(self.models + self.optional_models)})"
                )
            return list(only)
        return pool


def _unknown_keys(section: str, given: dict, allowed: set[str], path: Path) -> None:
    extra = sorted(set(given) - allowed)
    if extra:
        raise ValueError(
            f"{path}: unknown key(s) in [{section}]: {', '.join(extra)}; allowed: {', '.join(sorted(allowed))}"
        )


def load_analysis(path: str | Path) -> AnalysisSpec:
    """Parse and validate an analysis file (everything is checked before any work starts)."""
    from headstats.io.tasks import COLLECTION_DATASETS, collection_source, get_task

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"analysis file {str(path)!r} not found (see analyses/*.toml for examples)")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from err
    _unknown_keys(
        "top level",
        raw,
        {"name", "description", "results", "report", "models", "collect", "ablate", "report_options"},
        path,
    )
    name = str(raw.get("name") or path.stem)
    models_section = raw.get("models") or {}
    _unknown_keys("models", models_section, {"names", "optional", "dtype", "device"}, path)
    models = list(models_section.get("names") or [])
    if not models:
        raise ValueError(f"{path}: [models] needs names = [...] (embedded names, directories or Hub ids)")
    collect = dict(raw.get("collect") or {})
    _unknown_keys("collect", collect, COLLECT_KEYS, path)
    datasets = list(collect.pop("datasets", []))
    for dataset in datasets:
        if dataset not in COLLECTION_DATASETS:
            collection_source(dataset)  # raises a clear error for a missing or bad user file
    if collect.get("scores") is not None:
        collect["scores"] = list(S.resolve(collect["scores"]))
    ablations = []
    for i, section in enumerate(raw.get("ablate") or []):
        _unknown_keys(f"ablate #{i + 1}", section, ABLATE_KEYS, path)
        section = dict(section)
        if "task" not in section:
            raise ValueError(f"{path}: [[ablate]] #{i + 1} needs a task")
        task = str(section.pop("task"))
        get_task(task)
        scores = list(S.resolve(section.pop("scores", ["ahon_ln", "awft", "random"])))
        targets = [float(t) for t in section.pop("targets", [0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3])]
        if any(not 0.0 <= t <= 1.0 for t in targets):
            raise ValueError(f"{path}: [[ablate]] {task}: targets must lie in [0, 1], got {targets}")
        ablations.append(AblateSpec(task, scores, targets, section))
    return AnalysisSpec(
        name=name,
        path=path,
        description=str(raw.get("description", "")),
        results=Path(raw.get("results") or f"results/{name}"),
        report=Path(raw.get("report") or f"reports/{name}"),
        models=models,
        optional_models=list(models_section.get("optional") or []),
        dtype=models_section.get("dtype"),
        device=models_section.get("device"),
        collect_datasets=datasets,
        collect_options=collect,
        ablate=ablations,
        report_options=dict(raw.get("report_options") or {}),
    )


def run_analysis(
    spec: AnalysisSpec,
    *,
    all_models: bool = False,
    only_models: Sequence[str] | None = None,
    stages: Sequence[str] = ("collect", "ablate", "report"),
    device: str | None = None,
    progress: bool = True,
    launcher: str | None = None,
    grid_options: dict[str, Any] | None = None,
) -> Path | None:
    """Run the stages of ``spec`` in order, resuming finished work; returns the report's index.html.

    With a ``launcher`` (``local``, ``slurm``, ``debug``; see :mod:`headstats.jobs.grid`) each model's
    collection and sweeps run as one grid job, and the report is built here once all have finished."""
    from headstats.report.writer import build_report

    models = spec.selected_models(all_models, only_models)
    store.ensure_writable(spec.results)
    started = time.monotonic()
    model_stages = [s for s in stages if s in ("collect", "ablate")]
    needs_model = ("collect" in stages and spec.collect_datasets) or ("ablate" in stages and spec.ablate)
    if needs_model and launcher is not None:
        from headstats.io.models import model_slug
        from headstats.jobs.grid import FunctionJob, run_grid

        jobs = [
            FunctionJob(
                f"{spec.name} {name}",
                run_model_stages,
                {
                    "analysis": str(spec.path),
                    "model": name,
                    "stages": model_stages,
                    "device": device,
                    "progress": False,
                },
                output_paths=(str(store.partition_dir(spec.results, model=model_slug(name))),),
            )
            for name in models
        ]
        grid = dict(grid_options or {})
        folder = grid.pop("folder", None) or spec.results / "_grid"
        print(run_grid(jobs, launcher, folder=folder, progress=progress, **grid).summary())
    elif needs_model:
        for name in models:
            run_model_stages(spec, name, model_stages, device=device, progress=progress)
    index = None
    if "report" in stages:
        _say(f"building the report into {spec.report}")
        index = build_report(
            spec.results, spec.report, title=spec.description or spec.name, progress=progress, **spec.report_options
        )
    _say(f"done in {time.monotonic() - started:.0f} s")
    return index


def run_model_stages(
    analysis: AnalysisSpec | str,
    model: str,
    stages: Sequence[str],
    *,
    device: str | None = None,
    progress: bool = True,
) -> None:
    """Collection and sweeps of one model of an analysis (also the unit of a grid job)."""
    from headstats.io.models import load_model
    from headstats.jobs.collect import collect_scores
    from headstats.jobs.sweep import run_sweep

    spec = analysis if isinstance(analysis, AnalysisSpec) else load_analysis(analysis)
    _say(f"[{model}] loading")
    loaded, tokenizer = load_model(model, dtype=spec.dtype, device=device or spec.device)
    if "collect" in stages:
        for dataset in spec.collect_datasets:
            _say(f"[{model}] collecting scores on {dataset}")
            result = collect_scores(loaded, tokenizer, dataset, spec.results, progress=progress, **spec.collect_options)
            _say(f"[{model}] {dataset}: {result.n_samples} sequences ({result.n_new} new)")
    if "ablate" in stages:
        for ablation in spec.ablate:
            _say(f"[{model}] ablation sweep on {ablation.task}: {', '.join(ablation.scores)}")
            run_sweep(
                loaded,
                ablation.task,
                tokenizer=tokenizer,
                scores=ablation.scores,
                targets=ablation.targets,
                out=spec.results,
                progress=progress,
                **ablation.options,
            )


def _say(message: str) -> None:
    print(f"headstats run: {message}", file=sys.stderr, flush=True)


def add_command(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a declarative analysis (analyses/*.toml): collect -> ablate -> report",
        description="Run every stage of an analysis file, skipping work that is already done.",
    )
    parser.add_argument("analysis", help="an analysis file, e.g. analyses/embedded.toml")
    parser.add_argument("--all-models", action="store_true", help="also run the file's optional models")
    parser.add_argument("--models", default=None, help="comma-separated subset of the file's models")
    parser.add_argument("--stages", default="collect,ablate,report", help="comma-separated stages to run")
    parser.add_argument("--device", default=None, help="override the device (cpu, cuda, ...)")
    add_launcher_arguments(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    spec = load_analysis(args.analysis)
    stages = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(stages) - {"collect", "ablate", "report"})
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}: choose from collect, ablate, report")
    only = [m for m in args.models.split(",") if m] if args.models else None
    grid = None
    if args.launcher is not None:
        grid = launcher_options(args)
        grid.pop("launcher")
    index = run_analysis(
        spec,
        all_models=args.all_models,
        only_models=only,
        stages=stages,
        device=args.device,
        launcher=args.launcher,
        grid_options=grid,
    )
    if index is not None:
        print(index)
    return 0
