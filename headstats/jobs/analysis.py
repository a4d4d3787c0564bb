"""Declarative analyses (``analyses/NAME.toml``): reading and checking a file, and the sweep points
it plans.

An analysis file says which models, datasets, score ids, targets, tasks and limits to use. Each
collection and sweep skips what is already done (collection resumes by sample id, sweeps skip
finished points); :func:`headstats.pipeline.run_analysis` runs them, one unit at a time
(:mod:`headstats.studies.analysis`), and then rebuilds the report from the Parquet results alone
(``headstats run``). Relative paths in the file are relative to the working
directory (where ``headstats run`` is called).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from headstats.io import store
from headstats.options import SpecError, narrow
from headstats.specs import (
    AblateSection,
    AnalysisHeader,
    CollectSection,
    CollectSpec,
    LoadOptions,
    ModelsSection,
    ReportSpec,
    SweepSpec,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

logger = logging.getLogger("headstats")
SECTIONS = ("models", "collect", "ablate", "report_options")


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


def section_table(raw: Mapping[str, Any], key: str, path: Path) -> Mapping[str, Any]:
    """The ``[key]`` table of a file read by :func:`read_analysis_file` (empty when absent)."""
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise SpecError(key, f"{path}: {key} must be a [{key}] section, not {value!r}", label="")
    return value


def read_analysis_file(
    path: Path, sections: Sequence[str], *, what: str = "analysis file", example: str = "analyses/*.toml"
) -> tuple[Mapping[str, Any], AnalysisHeader]:
    """The TOML of the file at ``path`` and its checked top-level keys (``sections``: the tables the
    caller reads itself). Every error names the file."""
    if path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a folder: give a .toml file (see {example} for examples)")
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} not found (see {example} for examples)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}); save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from err
    tables = [key for key, value in raw.items() if isinstance(value, dict) and key not in sections]
    if tables:
        raise ValueError(
            f"{path}: top level: unknown key(s) {', '.join(tables)}; {'an' if what[0] in 'aeiou' else 'a'} {what} "
            f"reads {', '.join(f'[{t}]' for t in sections)}: a study file of another kind runs with headstats run "
            f"{path} (its kind is read from its table)"
        )
    return raw, AnalysisHeader.from_toml(raw, f"{path}: top level", extra=sections)


def top_level_keys(path: Path) -> set[str]:
    """The top-level keys of the TOML file at ``path``, which tell its kind (``[confirm]``: a
    confirmation file); empty when the file cannot be read (loading it then says why)."""
    try:
        return set(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return set()


def load_analysis(path: str | Path) -> AnalysisSpec:
    """Parse and check an analysis file: every key, type and name, before any work starts."""
    from headstats.io.tasks import COLLECTION_DATASETS, collection_source

    path = Path(path)
    raw, header = read_analysis_file(path, SECTIONS)
    models = ModelsSection.from_toml(section_table(raw, "models", path), f"{path}: [models]")
    collect = CollectSection.from_toml(section_table(raw, "collect", path), f"{path}: [collect]")
    for dataset in collect.datasets:
        if dataset not in COLLECTION_DATASETS:  # a missing or bad user file fails now
            collection_source(dataset, data_dir=collect.data_dir, text_column=collect.text_column)
    sections = raw.get("ablate", [])
    if not isinstance(sections, list) or not all(isinstance(t, Mapping) for t in sections):
        raise SpecError("ablate", f"{path}: ablate must be [[ablate]] sections, not {sections!r}", label="")
    ablations = [AblateSection.from_toml(t, f"{path}: [[ablate]] #{i + 1}") for i, t in enumerate(sections)]
    report_options = ReportSpec.from_toml(section_table(raw, "report_options", path), f"{path}: [report_options]")
    name, results, report = header.folders(path)
    return AnalysisSpec(
        name=name,
        path=path,
        description=header.description,
        results=results,
        report=report,
        models_section=models,
        collect_section=collect,
        ablate=ablations,
        report_options=report_options,
    )


def given_load(load: LoadOptions) -> dict[str, object]:
    """The loading options ``load`` sets: every value other than the default, as a command line's
    ``--dtype`` or a :class:`RunSpec`'s."""
    given, default = narrow(load, LoadOptions), LoadOptions()
    return {
        f.name: getattr(given, f.name)
        for f in fields(LoadOptions)
        if getattr(given, f.name) != getattr(default, f.name)
    }


def merged_load(spec: AnalysisSpec, load: LoadOptions | None = None) -> LoadOptions:
    """The file's [models] loading options, with those ``load`` sets taking precedence."""
    return spec.load if load is None else replace(spec.load, **given_load(load))


def planned_points(spec: AnalysisSpec, models: Sequence[str], load: LoadOptions | None = None) -> pd.DataFrame:
    """Every sweep point ``spec`` plans for ``models`` (the baseline included): columns model (the
    results' slug), task, score, target. Planned without loading a model."""
    from headstats.jobs.sweep_plan import plan_sweep

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
