"""headstats: find and evaluate inactive attention heads in pretrained decoder LLMs.

Data flows one way: model -> per-head scores (:mod:`headstats.engine`) -> Parquet tables
(:mod:`headstats.jobs.collect`, :mod:`headstats.io.store`) -> statistics (:mod:`headstats.stats`)
-> figures and reports (:mod:`headstats.report`). Interventions zero heads inside the same attention
function (:mod:`headstats.engine.zeroing`) and measure task accuracy (:mod:`headstats.jobs.sweep`).
"""

import sys

from headstats.engine import scores
from headstats.engine.attention import ATTN_IMPLEMENTATION, UnsupportedModelError, register
from headstats.engine.probe import Probe
from headstats.engine.scores import SCORES, get_score, score_ids
from headstats.engine.scoring import score_sequences, score_texts
from headstats.engine.zeroing import ablate_heads
from headstats.io.models import load_model
from headstats.io.store import read_interventions, read_scores
from headstats.io.tasks import load_task
from headstats.jobs.collect import collect_scores
from headstats.jobs.sweep import run_sweep
from headstats.stats.summary import summarize_curves, summarize_interventions
from headstats.stats.thresholds import threshold_for_fraction, thresholds_for_fractions

__version__ = "0.1.0"


def connect(root: str) -> object:
    """A DuckDB connection with views ``scores`` and ``interventions`` over a results folder
    (:func:`headstats.io.sql.connect`; needs ``pip install 'headstats[sql]'``)."""
    from headstats.io.sql import connect as _connect

    return _connect(root)


# ``headstats.scores`` is the public name of the score registry (``headstats.scores.register(Score(...))``,
# ``from headstats.scores import Score``); the module lives in the engine.
sys.modules.setdefault("headstats.scores", scores)

register()

__all__ = [
    "ATTN_IMPLEMENTATION",
    "SCORES",
    "Probe",
    "UnsupportedModelError",
    "__version__",
    "ablate_heads",
    "collect_scores",
    "connect",
    "get_score",
    "load_model",
    "load_task",
    "read_interventions",
    "read_scores",
    "register",
    "run_sweep",
    "score_ids",
    "score_sequences",
    "score_texts",
    "scores",
    "summarize_curves",
    "summarize_interventions",
    "threshold_for_fraction",
    "thresholds_for_fractions",
]
