"""headstats: find and evaluate inactive attention heads in pretrained decoder LLMs.

Data flows one way: model -> per-head scores (:mod:`headstats.attention`, :mod:`headstats.scores`)
-> Parquet tables (:mod:`headstats.collect`, :mod:`headstats.store`) -> statistics
(:mod:`headstats.stats`) -> figures and reports (:mod:`headstats.plots`, :mod:`headstats.report`).
Interventions (:mod:`headstats.intervene`) zero heads inside the same attention function and
measure task accuracy (:mod:`headstats.tasks`, :func:`headstats.evaluate.evaluate`).
"""

from headstats.attention import ATTN_IMPLEMENTATION, Probe, UnsupportedModelError, register
from headstats.collect import collect_scores
from headstats.intervene import (
    ablate_heads,
    run_sweep,
    summarize_curves,
    summarize_interventions,
    threshold_for_fraction,
    thresholds_for_fractions,
)
from headstats.models import load_model
from headstats.scores import SCORE_IDS, SCORES, get_score
from headstats.scoring import score_sequences, score_texts
from headstats.store import read_interventions, read_scores
from headstats.tasks import load_task

__version__ = "0.1.0"

register()

__all__ = [
    "ATTN_IMPLEMENTATION",
    "SCORES",
    "SCORE_IDS",
    "Probe",
    "UnsupportedModelError",
    "__version__",
    "ablate_heads",
    "collect_scores",
    "get_score",
    "load_model",
    "load_task",
    "read_interventions",
    "read_scores",
    "register",
    "run_sweep",
    "score_sequences",
    "score_texts",
    "summarize_curves",
    "summarize_interventions",
    "threshold_for_fraction",
    "thresholds_for_fractions",
]
