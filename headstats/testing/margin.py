"""Paired texts whose two score distributions lie a known W1 apart, for checking the size of
``headstats compare``'s verdicts at the margin (:func:`verdict_rates`; tests/test_compare.py and
benchmarks/compare_margin_size.py).

Each text is a block of :data:`ROWS` rows sharing a text effect; the two models' rows are N(0, 1) and
N(shift, 1) overall, their text effects correlated 0.8, so the true W1 between the two distributions
is ``shift``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headstats.stats.compare import EQUIVALENT, MOVED, equivalence, w1_bounds

ROWS = 6


def paired_texts(rng: np.random.Generator, n_texts: int, shift: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two models' rows (``sample_id``, ``ahon``) of ``n_texts`` paired texts: N(0, 1) and N(shift, 1)."""
    text = rng.normal(0, np.sqrt(0.5), size=n_texts)
    a = (text[:, None] + rng.normal(0, np.sqrt(0.5), size=(n_texts, ROWS))).ravel()
    b = (shift + 0.8 * text[:, None] + rng.normal(0, np.sqrt(1 - 0.32), size=(n_texts, ROWS))).ravel()
    seq = np.repeat(np.arange(n_texts), ROWS)
    return pd.DataFrame({"sample_id": seq, "ahon": a}), pd.DataFrame({"sample_id": seq, "ahon": b})


def verdict_rates(
    n_texts: int, margin: float, shift: float, reps: int, *, alpha: float = 0.05, n_boot: int = 400, seed: int = 0
) -> dict[str, float]:
    """The share of ``reps`` simulated comparisons (true W1 ``shift``) that :func:`w1_bounds` and the
    interval-inclusion rule call "moved beyond" and "equivalent within" ``margin``."""
    rng = np.random.default_rng(seed)
    verdicts = []
    for rep in range(reps):
        a, b = paired_texts(rng, n_texts, shift)
        low, high = w1_bounds(a, b, "ahon", alpha=alpha, n_boot=n_boot, seed=seed + rep)
        verdicts.append(equivalence(low, high, margin))
    verdicts = np.array(verdicts)
    return {"moved": float(np.mean(verdicts == MOVED)), "equivalent": float(np.mean(verdicts == EQUIVALENT))}
