"""Study kinds: every ``analyses/*.toml`` file is loaded, planned, run and reported through one registry.

=================  ================  =====================================  ==============================
kind               marked by         stages                                 units
=================  ================  =====================================  ==============================
analysis           (no kind table)   collect, ablate, report                collections, zeroing sweeps
confirmation       ``[confirm]``     ablate, report                         each path's sweeps
frontier           ``[prune]``       collect, ablate, time, report          frontier points, timings
comparison         ``[compare]``     collect, report                        collections
fine-tuning        ``[design]``      train, collect, report                 training steps, texts
=================  ================  =====================================  ==============================

:mod:`headstats.studies.registry` holds the registry (:data:`STUDY_KINDS`, :func:`register_kind`) and
the :class:`Study` / :class:`Unit` / :class:`Session` types; :mod:`headstats.studies.runner` runs a
file of any kind (``headstats run FILE``) as one loop over its planned units, calling the kind's
``run`` on each unit with work left, and :mod:`headstats.studies.dryrun` is the one dry run over the
same units. A new kind is one module of this package that ends with ``register_kind(StudyKind(...))``:
the package imports every module it holds (nothing lists the kinds), and a module that registers no
kind and is not one of :data:`MACHINERY` fails the import, naming its file.

The kinds' modules: :mod:`~headstats.studies.analysis` (analysis), :mod:`~headstats.studies.confirm`
(confirmation), :mod:`~headstats.studies.frontier` (frontier), :mod:`~headstats.studies.compare`
(comparison) and :mod:`~headstats.studies.finetuning` (fine-tuning: a seed study, its chains trained,
collected and reported).
"""

from __future__ import annotations

import importlib
import pkgutil

from headstats.studies.dryrun import dry_run
from headstats.studies.registry import (
    STUDY_KINDS,
    Registry,
    Session,
    Study,
    StudyKind,
    Unit,
    kind_module,
    kind_of,
    load_study,
    register_kind,
)
from headstats.studies.runner import plan_study, run_loaded, run_study

MACHINERY = ("registry", "runner", "dryrun")  # the modules that run every kind and define none


def import_kinds() -> None:
    """Import every module of this package; each one not in :data:`MACHINERY` must register a kind."""
    for module in pkgutil.iter_modules(__path__):
        name = f"{__name__}.{module.name}"
        importlib.import_module(name)
        registering = {kind_module(kind) for kind in STUDY_KINDS.values()}
        if module.name not in MACHINERY and name not in registering:
            raise ImportError(
                f"headstats/studies/{module.name}.py registers no study kind: end it with "
                "register_kind(StudyKind(...)) (docs/developing.md#a-study-kind), or move what it holds out of "
                "headstats/studies/"
            )


import_kinds()

__all__ = [
    "STUDY_KINDS",
    "Registry",
    "Session",
    "Study",
    "StudyKind",
    "Unit",
    "dry_run",
    "kind_of",
    "load_study",
    "plan_study",
    "register_kind",
    "run_loaded",
    "run_study",
]
