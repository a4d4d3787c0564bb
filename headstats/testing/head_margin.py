"""Heads whose true shifts lie exactly at their margin, for checking the family-wise error of the
per-head verdicts of ``headstats compare`` (:func:`family_error`; tests/test_head_margin.py and
benchmarks/compare_head_margin_size.py).

Each replicate draws a units x heads matrix of paired differences (:func:`differences`): head h's true
shift is ``shifts[h]``, its noise has its own spread (from 0.5 to 3 times the margin), and a unit effect
shared by every head correlates them (``rho``); the noise is normal, skewed (a centred exponential, as
positive scores' differences often are) or spiky (small everywhere but on a few texts, as bf16's
rounding differences are). At the margin every head sits on its boundary, half at
``+margin`` and half at ``-margin``: the least favourable case for "moved beyond the margin", whose
family-wise error is the share of replicates in which any head is called moved beyond it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headstats.stats.compare import MOVED
from headstats.stats.heads import shift_verdicts, simultaneous_band

NOISES = ("normal", "skewed", "spiky")
RULES = ("simultaneous", "per head")


def _noise(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "normal":
        return rng.normal(size=shape)
    if kind == "skewed":
        return rng.exponential(size=shape) - 1.0
    if kind == "spiky":  # N(0, 0.3^2), and on 5% of the units N(0, 4^2) more; scaled to unit variance
        spikes = (rng.random(shape) < 0.05) * rng.normal(0.0, 4.0, size=shape)
        return (0.3 * rng.normal(size=shape) + spikes) / np.sqrt(0.09 + 0.05 * 16)
    raise ValueError(f"noise must be one of {', '.join(NOISES)}, not {kind!r}")


def differences(
    rng: np.random.Generator, n_units: int, shifts: Sequence[float], margin: float, *, noise: str = "normal",
    rho: float = 0.5,
) -> np.ndarray:  # fmt: skip
    """One replicate's units x heads differences: ``shifts`` plus noise of spread 0.5 to 3 margins
    per head, a shared unit effect correlating the heads ``rho``."""
    shifts = np.asarray(shifts, dtype=np.float64)
    spread = margin * np.linspace(0.5, 3.0, len(shifts))
    shared, own = _noise(rng, noise, (n_units, 1)), _noise(rng, noise, (n_units, len(shifts)))
    return shifts + spread * (rho * shared + np.sqrt(1 - rho**2) * own)


def at_margin(n_heads: int, margin: float) -> np.ndarray:
    """Every head on its boundary: ``+margin`` for even heads, ``-margin`` for odd ones."""
    return np.where(np.arange(n_heads) % 2 == 0, margin, -margin)


def verdicts(d: np.ndarray, margin: float, *, rule: str, alpha: float, n_boot: int, seed: int) -> np.ndarray:
    """The verdict of every head of ``d`` (units x heads) against ``margin``: by the committed rule
    (``simultaneous``: one band over the family) or by each head's own ``1 - 2 alpha`` interval
    (``per head``: the distribution rule applied head by head, no adjustment for the heads)."""
    if rule == "simultaneous":
        (band,), _ = simultaneous_band([d], alpha=alpha, n_boot=n_boot, seed=seed)
    elif rule == "per head":
        bands = [
            simultaneous_band([d[:, [h]]], alpha=alpha, n_boot=n_boot, seed=seed + h)[0][0] for h in range(d.shape[1])
        ]
        band = {k: np.concatenate([b[k].to_numpy() for b in bands]) for k in ("mean", "low", "high", "exact")}
    else:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    return shift_verdicts(band["mean"], band["low"], band["high"], np.full(d.shape[1], margin), band["exact"])


def family_error(
    n_units: int,
    n_heads: int,
    margin: float,
    reps: int,
    *,
    rule: str = "simultaneous",
    noise: str = "normal",
    alpha: float = 0.05,
    n_boot: int = 400,
    seed: int = 0,
) -> float:
    """The share of ``reps`` simulated comparisons, every head at its margin (:func:`at_margin`), in
    which ``rule`` calls any head "moved beyond the margin"."""
    rng = np.random.default_rng(seed)
    shifts = at_margin(n_heads, margin)
    wrong = 0
    for rep in range(reps):
        d = differences(rng, n_units, shifts, margin, noise=noise)
        wrong += bool((verdicts(d, margin, rule=rule, alpha=alpha, n_boot=n_boot, seed=seed + rep) == MOVED).any())
    return wrong / reps


def power(
    n_units: int,
    n_heads: int,
    margin: float,
    shift: float,
    reps: int,
    *,
    noise: str = "normal",
    alpha: float = 0.05,
    n_boot: int = 400,
    seed: int = 0,
) -> float:
    """The share of ``reps`` simulated comparisons in which the committed rule calls head 0, shifted by
    ``shift`` while every other head stays put, "moved beyond the margin"."""
    rng = np.random.default_rng(seed)
    shifts = np.zeros(n_heads)
    shifts[0] = shift
    found = 0
    for rep in range(reps):
        d = differences(rng, n_units, shifts, margin, noise=noise)
        found += bool(verdicts(d, margin, rule="simultaneous", alpha=alpha, n_boot=n_boot, seed=seed + rep)[0] == MOVED)
    return found / reps
