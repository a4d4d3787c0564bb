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
same units. A new kind is one module that registers a :class:`StudyKind`, imported here.
"""

from __future__ import annotations

from headstats.studies import analysis, compare, confirm, finetuning, frontier  # noqa: F401  (each registers its kind)
from headstats.studies.dryrun import dry_run
from headstats.studies.registry import (
    STUDY_KINDS,
    Registry,
    Session,
    Study,
    StudyKind,
    Unit,
    kind_of,
    load_study,
    register_kind,
)
from headstats.studies.runner import plan_study, run_loaded, run_study

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
