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
    [report_options]
    n_boot = 200

Each section is a spec of :mod:`headstats.specs` (``[models]``: :class:`ModelsSection`,
``[collect]``: :class:`CollectSection`, ``[[ablate]]``: :class:`AblateSection`, ``[report_options]``:
:class:`ReportSpec`): its keys are that spec's fields, with the same names as the command-line
flags and the Python keywords. An unknown key or a value of the wrong type is refused when the file
is loaded, naming the file, the section and the key, before any model loads.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from headstats.io import store
from headstats.names import check_name
from headstats.options import Spec, SpecError, narrow, option
from headstats.specs import (
    STAGES,
    AblateSection,
    CollectSection,
    CollectSpec,
    LoadOptions,
    ModelsSection,
    ReportSpec,
    Resources,
    SweepSpec,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

logger = logging.getLogger("headstats")
SECTIONS = ("models", "collect", "ablate", "report_options")


@dataclass(frozen=True)
class AnalysisHeader(Spec):
    """The top-level keys of an analysis file (its sections are read by their own specs)."""

    WHAT: ClassVar[str] = "analysis"

    name: str | None = option(
        None, "name of the analysis (default: the file name)", cli=False, each=lambda n: check_name(n, "name")
    )
    description: str = option("", "title of the report", cli=False)
    results: str | None = option(None, "Parquet results directory (default: results/NAME)", cli=False)
    report: str | None = option(None, "report directory (default: reports/NAME)", cli=False)


@dataclass
class AnalysisSpec:
    """A checked analysis file."""

    name: str
    path: Path
    description: str
    results: Path
    report: Path
    models_section: ModelsSection
    collect_section: CollectSection
    ablate: list[AblateSection]
    report_options: ReportSpec = field(default_factory=ReportSpec)

    @property
    def models(self) -> list[str]:
        return list(self.models_section.names)

    @property
    def optional_models(self) -> list[str]:
        return list(self.models_section.optional)

    @property
    def load(self) -> LoadOptions:
        return narrow(self.models_section, LoadOptions)

    @property
    def collect_datasets(self) -> list[str]:
        return list(self.collect_section.datasets)

    @property
    def collect(self) -> CollectSpec:
        return narrow(self.collect_section, CollectSpec)

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


def _table(raw: Mapping[str, Any], key: str, path: Path) -> Mapping[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise SpecError(key, f"{path}: {key} must be a [{key}] section, not {value!r}", label="")
    return value


def load_analysis(path: str | Path) -> AnalysisSpec:
    """Parse and check an analysis file: every key, type and name, before any work starts."""
    from headstats.io.tasks import COLLECTION_DATASETS, collection_source

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"analysis file {str(path)!r} not found (see analyses/*.toml for examples)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}); save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from err
    header = AnalysisHeader.from_toml(raw, f"{path}: top level", extra=SECTIONS)
    models = ModelsSection.from_toml(_table(raw, "models", path), f"{path}: [models]")
    collect = CollectSection.from_toml(_table(raw, "collect", path), f"{path}: [collect]")
    for dataset in collect.datasets:
        if dataset not in COLLECTION_DATASETS:  # a missing or bad user file fails now
            collection_source(dataset, data_dir=collect.data_dir, text_column=collect.text_column)
    sections = raw.get("ablate", [])
    if not isinstance(sections, list) or not all(isinstance(t, Mapping) for t in sections):
        raise SpecError("ablate", f"{path}: ablate must be [[ablate]] sections, not {sections!r}", label="")
    ablations = [AblateSection.from_toml(t, f"{path}: [[ablate]] #{i + 1}") for i, t in enumerate(sections)]
    report_options = ReportSpec.from_toml(_table(raw, "report_options", path), f"{path}: [report_options]")
    name = header.name or path.stem
    if header.results is None or header.report is None:  # results/NAME, reports/NAME
        try:
            check_name(name, "analysis name")
        except ValueError as err:
            raise ValueError(f"{path}: {err} (or give results = and report = folders)") from None
    return AnalysisSpec(
        name=name,
        path=path,
        description=header.description,
        results=Path(header.results or f"results/{name}"),
        report=Path(header.report or f"reports/{name}"),
        models_section=models,
        collect_section=collect,
        ablate=ablations,
        report_options=report_options,
    )


def merged_load(spec: AnalysisSpec, load: LoadOptions | Mapping[str, Any] | None) -> LoadOptions:
    """The file's [models] dtype/device, with the ones given (command line) taking precedence."""
    given = load.kwargs() if isinstance(load, LoadOptions) else dict(load or {})
    return LoadOptions.from_kwargs({k: v for k, v in given.items() if v is not None}, base=spec.load)


def run_analysis(
    spec: AnalysisSpec,
    *,
    all_models: bool = False,
    only_models: Sequence[str] | None = None,
    stages: Sequence[str] = STAGES,
    load: LoadOptions | None = None,
    progress: bool = True,
    resources: Resources | None = None,
) -> Path | None:
    """Run the stages of ``spec`` in order, resuming finished work; returns the report's index.html.

    ``load`` overrides the file's dtype/device. With ``resources`` (a launcher; see
    :mod:`headstats.jobs.grid`) each model's collection and sweeps run as one grid job, and the
    report is built here once all have finished."""
    from headstats.report.writer import build_report

    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}: choose from {', '.join(STAGES)}")
    models = spec.selected_models(all_models, only_models)
    load = merged_load(spec, load)
    store.ensure_writable(spec.results)
    started = time.monotonic()
    model_stages = [s for s in stages if s in ("collect", "ablate")]
    needs_model = ("collect" in stages and spec.collect_datasets) or ("ablate" in stages and spec.ablate)
    if needs_model and resources is not None and resources.launcher is not None:
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
                    "load": load.kwargs(),
                    "progress": False,
                },
                output_paths=(str(store.partition_dir(spec.results, model=model_slug(name))),),
            )
            for name in models
        ]
        if resources.folder is None:
            resources = replace(resources, folder=str(spec.results / "_grid"))
        logger.info(run_grid(jobs, resources, progress=progress).summary())
    elif needs_model:
        for name in models:
            run_model_stages(spec, name, model_stages, load=load, progress=progress)
    index = None
    if "report" in stages:
        logger.info("building the report into %s", spec.report)
        options = replace(spec.report_options, progress=progress and spec.report_options.progress)
        planned = planned_points(spec, spec.selected_models(all_models), load) if spec.ablate else None
        index = build_report(
            spec.results,
            spec.report,
            planned=planned,
            analysis=spec.path,
            **{**options.kwargs(), "title": spec.description or spec.name},
        )
    logger.info("done in %.0f s", time.monotonic() - started)
    return index


def planned_points(spec: AnalysisSpec, models: Sequence[str], load: LoadOptions | None = None) -> pd.DataFrame:
    """Every sweep point ``spec`` plans for ``models`` (the baseline included): columns model (the
    results' slug), task, score, target. Planned without loading a model."""
    from headstats.jobs.sweep import plan_sweep

    rows = []
    for name in models:
        for ablation in spec.ablate:
            plan = plan_sweep(name, str(ablation.task), out=spec.results, spec=narrow(ablation, SweepSpec), load=load)
            where = store.partition_of(plan.partition)
            assert where is not None
            rows += [
                {"model": where[1], "task": plan.task_name, "score": p.score, "target": p.target} for p in plan.points
            ]
    return pd.DataFrame(rows, columns=["model", "task", "score", "target"])


def run_model_stages(
    analysis: AnalysisSpec | str,
    model: str,
    stages: Sequence[str],
    *,
    load: LoadOptions | Mapping[str, Any] | None = None,
    progress: bool = True,
) -> None:
    """Collection and sweeps of one model of an analysis (also the unit of a grid job)."""
    from headstats.io.models import load_model
    from headstats.jobs.collect import collect_scores
    from headstats.jobs.sweep import run_sweep

    spec = analysis if isinstance(analysis, AnalysisSpec) else load_analysis(analysis)
    logger.info("[%s] loading", model)
    loaded, tokenizer = load_model(model, **merged_load(spec, load).kwargs())
    if "collect" in stages:
        collect = replace(spec.collect, progress=progress)
        for dataset in spec.collect_datasets:
            logger.info("[%s] collecting scores on %s", model, dataset)
            result = collect_scores(loaded, tokenizer, dataset, spec.results, spec=collect)
            logger.info("[%s] %s: %d sequences (%d new)", model, dataset, result.n_samples, result.n_new)
    if "ablate" in stages:
        for ablation in spec.ablate:
            logger.info("[%s] ablation sweep on %s: %s", model, ablation.task, ", ".join(ablation.scores or ()))
            sweep = replace(narrow(ablation, SweepSpec), progress=progress)
            run_sweep(loaded, str(ablation.task), tokenizer=tokenizer, out=spec.results, spec=sweep)
