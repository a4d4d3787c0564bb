"""Study kinds: every ``analyses/*.toml`` file is loaded, planned, run and reported through one registry.

=================  ================  =====================================  ==============================
kind               marked by         stages                                 units
=================  ================  =====================================  ==============================
analysis           (no kind table)   collect, ablate, report                collections, zeroing sweeps
confirmation       ``[confirm]``     ablate, report                         each path's sweeps
frontier           ``[prune]``       collect, ablate, time, report          frontier points, timings
comparison         ``[compare]``     collect, report                        collections
fine-tuning        ``[design]``      train, collect, report                 training steps, texts
skipping           ``[adaptive]``    ablate, report                         items of each task
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
(comparison), :mod:`~headstats.studies.finetuning` (fine-tuning: a seed study, its chains trained,
collected and reported) and :mod:`~headstats.studies.adaptive` (skipping: heads skipped per prompt).
"""

from __future__ import annotations

from headstats.registry import import_registering
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


# Every module of this package but MACHINERY registers a kind; one that does not fails here, naming its file.
import_registering(
    __name__,
    __path__,
    STUDY_KINDS,
    kind_module,
    "register_kind(StudyKind(...)) (docs/developing.md#a-study-kind)",
    machinery=MACHINERY,
)

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
