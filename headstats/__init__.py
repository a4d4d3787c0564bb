"""headstats: find and evaluate inactive attention heads in pretrained decoder LLMs.

Data flows one way: model -> per-head scores (:mod:`headstats.attention`, :mod:`headstats.scores`)
-> Parquet tables (:mod:`headstats.collect`, :mod:`headstats.store`) -> statistics
(:mod:`headstats.stats`) -> figures and reports (:mod:`headstats.plots`, :mod:`headstats.report`).
"""

from headstats.attention import ATTN_IMPLEMENTATION, Probe, UnsupportedModelError, register
from headstats.models import load_model
from headstats.scores import SCORE_IDS, SCORES, get_score
from headstats.scoring import score_sequences, score_texts

__version__ = "0.1.0"

register()

__all__ = [
    "ATTN_IMPLEMENTATION",
    "SCORES",
    "SCORE_IDS",
    "Probe",
    "UnsupportedModelError",
    "__version__",
    "get_score",
    "load_model",
    "register",
    "score_sequences",
    "score_texts",
]
