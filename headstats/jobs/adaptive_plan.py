"""A skipping study's file and results, read without torch: the checked file (:class:`AdaptiveStudy`),
what it registers, and the rows measured so far (:mod:`headstats.jobs.adaptive` measures them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from headstats.io import store
from headstats.jobs.analysis import read_analysis_file, section_table
from headstats.jobs.registration import Registered
from headstats.specs import AdaptiveSpec, ModelsSection


def registered(models: dict, adaptive: dict) -> Registered:
    """What decides the study's verdicts (every key of its [models] and [adaptive] tables), recorded
    under its results before the first item (:func:`headstats.jobs.registration.register`)."""
    return Registered(keys={"models": dict(models), "adaptive": dict(adaptive)})


@dataclass(frozen=True)
class AdaptiveStudy:
    """A checked skipping-study file: its header (name, description, results, report), ``[models]`` and
    ``[adaptive]``, and the two tables as written (what the study registers)."""

    path: Path
    name: str
    description: str
    results: Path
    report: Path
    models: ModelsSection
    adaptive: AdaptiveSpec
    tables: dict

    def model_names(self, all_models: bool = False) -> list[str]:
        return list(self.models.names) + (list(self.models.optional) if all_models else [])

    @property
    def registered(self) -> Registered:
        return registered(self.tables["models"], self.tables["adaptive"])


def load_adaptive(path: str | Path) -> AdaptiveStudy:
    """Read and check a skipping-study file; every error names the file, section and key."""
    path = Path(path)
    raw, header = read_analysis_file(
        path, ("models", "adaptive"), what="skipping study file", example="analyses/adaptive_embedded.toml"
    )
    name, results, report = header.folders(path)
    models = ModelsSection.from_toml(section_table(raw, "models", path), f"{path}: [models]")
    adaptive = AdaptiveSpec.from_toml(section_table(raw, "adaptive", path), f"{path}: [adaptive]")
    tables = {"models": dict(raw["models"]), "adaptive": dict(raw["adaptive"])}
    return AdaptiveStudy(path, name, header.description, results, report, models, adaptive, tables)


def finished_items(folder: Path) -> int:
    """Items measured in ``folder``'s finished chunks."""
    rows = store.read_adaptive_chunks(folder)
    return 0 if rows.empty else int(rows["item"].nunique())


def read_rows(study: AdaptiveStudy) -> pd.DataFrame:
    """Every finished row of the study, with its model and task."""
    parts = []
    for model in study.model_names(all_models=True):
        for task in study.adaptive.tasks:
            rows = store.read_adaptive_chunks(store.adaptive_folder(study.results, model, task))
            if not rows.empty:
                parts.append(rows.assign(model=model, task=task))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
