"""Multiple testing: Holm's step-down adjustment of a family of p-values, the smallest adjusted p-value a
permutation count allows, and the permutations a family needs to reach a level."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike


def holm(p_values: ArrayLike) -> np.ndarray:
    """Holm-adjusted p-values (family = the finite entries given; NaN stays NaN); equal to
    ``statsmodels.stats.multitest.multipletests(p, method="holm")[1]``."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    # Written out rather than calling multipletests, which runs gc.collect() on every call (about
    # 1 s in a process holding large tables, once per table here).
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order]) if m else order
    out[order] = np.minimum(stepped, 1.0)
    return out


def holm_floor(n_tests: int, n_perm: int) -> float:
    """The smallest Holm-adjusted p-value in a family of ``n_tests`` permutation p-values from
    ``n_perm`` permutations each: a permutation p-value is at least 1 / (1 + ``n_perm``), and Holm
    multiplies the smallest by the family size."""
    if n_tests < 1 or n_perm < 1:
        raise ValueError(f"a Holm floor needs at least one test and one permutation, not {n_tests} and {n_perm}")
    return min(1.0, n_tests / (1 + n_perm))


def permutations_for(n_tests: int, alpha: float = 0.05) -> int:
    """The fewest permutations per test for which the smallest Holm-adjusted p-value of ``n_tests``
    tests can reach ``alpha`` (:func:`holm_floor` <= ``alpha``). For a report, ``n_tests`` is its
    whole Holm family (every p-value it adjusts together, e.g. checkpoints x datasets x scores x
    depths) and ``alpha`` the smallest level it means to state (``permutations_for(24, 0.01)`` =
    2399). The design bounds p-values too: a paired design with U clusters cannot give a p-value
    below about 2**(1 - U) (see :func:`_permutations`), whatever the count."""
    if n_tests < 1 or not 0 < alpha <= 1:
        raise ValueError(f"permutations_for needs at least one test and 0 < alpha <= 1, not {n_tests} and {alpha}")
    return max(1, math.ceil(n_tests / alpha - 1 - 1e-9))


def holm_family(tables: pd.DataFrame | Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Several :func:`model_distance` tables (or their concatenation) as one Holm family: a copy of
    their rows with ``p_holm`` adjusted over every p-value of all of them, ``n_tests`` their number
    and ``p_holm_min`` the family's floor (:func:`holm_floor` with the largest ``n_perm``). A report
    that reads distances of several checkpoints, datasets and scores side by side adjusts them
    together, not table by table."""
    table = tables if isinstance(tables, pd.DataFrame) else pd.concat(list(tables), ignore_index=True)
    missing = [c for c in ("p_value", "n_perm") if c not in table.columns]
    if missing:
        raise ValueError(f"holm_family needs model_distance tables; these lack {', '.join(missing)}")
    out = table.copy()
    out["p_holm"] = holm(out["p_value"])
    tested = int(out["p_value"].notna().sum())
    n_perm = int(out.loc[out["p_value"].notna(), "n_perm"].max()) if tested else 0
    out["p_holm_min"] = holm_floor(tested, n_perm) if tested else np.nan
    out["n_tests"] = tested
    return out
