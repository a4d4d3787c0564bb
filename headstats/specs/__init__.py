"""The options of every headstats job, each declared once.

A job's options are one frozen dataclass (:class:`CollectSpec`, :class:`SweepSpec`,
:class:`ReportSpec`, :class:`Resources`, ...) of fields declared with
:func:`headstats.options.option`; Python keywords, analysis-file keys, command-line flags and every
check derive from it (:mod:`headstats.options`). So every check runs before any model loads,
whichever way a job is started. To add an option, add one field to its group and use it in the
one function that applies the group (``Sampling.select``, ``Calibration.sequences``, ...;
docs/developing.md#adding-an-option).

Every name is importable from here (``from headstats.specs import SweepSpec``); the modules:

- :mod:`~headstats.specs.values`: what an option may hold (fixed choices and defaults, the
  registries' names, the sections of ``--help``) and the checks of one value;
- :mod:`~headstats.specs.groups`: the small option groups (``LoadOptions``, ``Sampling``,
  ``Calibration``, ...), each with the one method that applies it;
- :mod:`~headstats.specs.resources`: where a grid's jobs run (``Resources``, the submitit parameters);
- :mod:`~headstats.specs.commands`: the specs of the single commands (collect, ablate, summary,
  report, paper, list, compare, inactive, the lm-eval model's zeroing);
- :mod:`~headstats.specs.studies`: the sections of study files and ``headstats run``'s options;
- :mod:`~headstats.specs.pruning`: ``headstats prune`` and a pruning frontier's ``[prune]``;
- :mod:`~headstats.specs.finetuning`: ``headstats finetune``'s chain and a fine-tuning study's design;
- :mod:`~headstats.specs.skipping`: a skipping study's ``[adaptive]`` (heads skipped per prompt).
"""

from __future__ import annotations

from headstats.specs.commands import (
    LIST_ALL,
    LISTABLE,
    SERIES_ORDERS,
    CollectSpec,
    CompareSpec,
    InactiveSpec,
    ListSpec,
    PaperSpec,
    ReportSpec,
    SummaryOutput,
    SummarySpec,
    SweepSpec,
    ZeroingSpec,
)
from headstats.specs.finetuning import (
    FINETUNE_STAGES,
    HOLM_FAMILIES,
    MEASURES,
    SEED_RULES,
    FinetuneDesign,
    FinetuneSpec,
)
from headstats.specs.groups import (
    AccuracyMetric,
    Batching,
    Calibration,
    Datasets,
    Equivalence,
    Figures,
    LoadOptions,
    MaxDrop,
    Models,
    Output,
    OutputFormat,
    Progress,
    Prompting,
    Questions,
    Results,
    Sampling,
    ScoredZeroing,
    Scoring,
    Seed,
    Shares,
    Stages,
    Task,
    Truncation,
    needs_names,
)
from headstats.specs.pruning import RANKING_CALIBRATION, FrontierSpec, PruneSpec
from headstats.specs.resources import Resources, SubmititParameters
from headstats.specs.skipping import AdaptiveSpec
from headstats.specs.studies import (
    AblateSection,
    AnalysisHeader,
    Claim,
    CollectSection,
    ConfirmSection,
    FrontierRunSpec,
    ModelsSection,
    RunSpec,
)
from headstats.specs.values import (
    ATTENTION_KERNELS,
    DATA,
    DEFAULT_CALIBRATION_LIMIT,
    DEFAULT_PRUNE_SHARES,
    DEFAULT_SWEEP_SCORES,
    DEFAULT_TARGETS,
    DROP_POINTS,
    GRID,
    HELP_GROUPS,
    LAUNCHERS,
    METRICS,
    MODEL_LOADING,
    OUTPUT,
    RESOURCES,
    RUN_STAGES,
    SAVE_DTYPES,
    STAGES,
    STATISTICS,
    SUMMARY_FORMATS,
    SUMMARY_TABLES,
    UNITS,
    WHAT_TO_RUN,
    ZEROING,
    head_pairs,
)

__all__ = [
    "ATTENTION_KERNELS",
    "DATA",
    "DEFAULT_CALIBRATION_LIMIT",
    "DEFAULT_PRUNE_SHARES",
    "DEFAULT_SWEEP_SCORES",
    "DEFAULT_TARGETS",
    "DROP_POINTS",
    "FINETUNE_STAGES",
    "GRID",
    "HELP_GROUPS",
    "HOLM_FAMILIES",
    "LAUNCHERS",
    "LISTABLE",
    "LIST_ALL",
    "MEASURES",
    "METRICS",
    "MODEL_LOADING",
    "OUTPUT",
    "RANKING_CALIBRATION",
    "RESOURCES",
    "RUN_STAGES",
    "SAVE_DTYPES",
    "SEED_RULES",
    "SERIES_ORDERS",
    "STAGES",
    "STATISTICS",
    "SUMMARY_FORMATS",
    "SUMMARY_TABLES",
    "UNITS",
    "WHAT_TO_RUN",
    "ZEROING",
    "AblateSection",
    "AccuracyMetric",
    "AdaptiveSpec",
    "AnalysisHeader",
    "Batching",
    "Calibration",
    "Claim",
    "CollectSection",
    "CollectSpec",
    "CompareSpec",
    "ConfirmSection",
    "Datasets",
    "Equivalence",
    "Figures",
    "FinetuneDesign",
    "FinetuneSpec",
    "FrontierRunSpec",
    "FrontierSpec",
    "InactiveSpec",
    "ListSpec",
    "LoadOptions",
    "MaxDrop",
    "Models",
    "ModelsSection",
    "Output",
    "OutputFormat",
    "PaperSpec",
    "Progress",
    "Prompting",
    "PruneSpec",
    "Questions",
    "ReportSpec",
    "Resources",
    "Results",
    "RunSpec",
    "Sampling",
    "ScoredZeroing",
    "Scoring",
    "Seed",
    "Shares",
    "Stages",
    "SubmititParameters",
    "SummaryOutput",
    "SummarySpec",
    "SweepSpec",
    "Task",
    "Truncation",
    "ZeroingSpec",
    "head_pairs",
    "needs_names",
]
