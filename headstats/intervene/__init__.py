"""Interventions (SPEC §3): zeroing heads, calibrating thresholds, sweeps and their summaries.

- :mod:`headstats.intervene.zeroing`: :func:`ablate_heads`, the dynamic / random / static context manager;
- :mod:`headstats.intervene.calibration`: thresholds for target fractions from a score table;
- :mod:`headstats.intervene.sweep`: ``headstats ablate``, a baseline plus (score, target) points on a task;
- :mod:`headstats.intervene.summary`: per-point and per-curve tables with paired statistics.
"""

from headstats.intervene.calibration import QUANTILE_METHOD, threshold_for_fraction, thresholds_for_fractions
from headstats.intervene.summary import summarize_curves, summarize_interventions
from headstats.intervene.sweep import add_command, run_sweep
from headstats.intervene.zeroing import Ablation, ablate_heads

__all__ = [
    "QUANTILE_METHOD",
    "Ablation",
    "ablate_heads",
    "add_command",
    "run_sweep",
    "summarize_curves",
    "summarize_interventions",
    "threshold_for_fraction",
    "thresholds_for_fractions",
]
