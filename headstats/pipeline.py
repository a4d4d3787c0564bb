"""The Python API of ``headstats run``: a study file of any kind, or a loaded analysis or confirmation.

Every kind of study file runs through :mod:`headstats.studies` (:func:`run_study` looks the kind up
once); :func:`run_analysis`, :func:`run_confirmation` and :func:`compare` run a loaded spec, or a
comparison's models, the same way. The report is rebuilt from the Parquet results alone
(:mod:`headstats.report`).
"""

from __future__ import annotations

from headstats.studies import run_study
from headstats.studies.analysis import report_analysis, run_analysis
from headstats.studies.confirm import run_confirmation
from headstats.studies.runner import compare, compare_with_answer

__all__ = ["compare", "compare_with_answer", "report_analysis", "run_analysis", "run_confirmation", "run_study"]
