"""Every Wasserstein-1 kernel of headstats, on numpy arrays (docs/statistics.md#w1: distances between models).

Two formulations of the same integral, each where it is cheapest:

- the CDF form, ``W1 = ∫ |F_a(x) - F_b(x)| dx`` on one sorted support holding both samples, with a
  weight per support point (:func:`w1_on_support`, :func:`w1_on_support_batch`). Weights make it
  the kernel of the resampling statistics: a bootstrap, permutation or split replicate only changes
  the weights, so the support is sorted once and a replicate costs a cumulative sum and a dot product;
  :func:`wasserstein1` (two weighted samples) is built on it;
- the quantile form, ``W1 = ∫_0^1 |Q_a(u) - Q_b(u)| du``, on two equal-weight samples sorted
  separately (:func:`wasserstein1_sorted`): O(n + m) time and O(chunk) memory, the kernel of the
  large-table reader :mod:`headstats.stats.large`.

Both equal ``scipy.stats.wasserstein_distance`` to float64 round-off; they are written here rather
than called from scipy because scipy re-sorts both samples on every call (one sort per replicate
instead of one per statistic) and materialises the merged support.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

CHUNK = 1 << 21  # elements per step of the O(n) loops: bounded temporaries, still vectorised
PERIOD_MAX = 1 << 12  # longest repeating breakpoint pattern read off per period (see _w1_periodic)


# --- the CDF form: one sorted support, weights per point ------------------------------------------


def w1_on_support(x: np.ndarray, wa: np.ndarray, wb: np.ndarray) -> float:
    """W1 = integral of |F_a - F_b| for weighted empirical distributions on the sorted support ``x``
    (``wa``, ``wb`` each sum to 1): between consecutive support points both CDFs are constant."""
    cdf_gap = np.cumsum(wa[:-1] - wb[:-1])
    return float(np.abs(cdf_gap) @ np.diff(x))


def w1_on_support_batch(x: np.ndarray, wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
    """:func:`w1_on_support` for many weightings at once: ``wa``, ``wb`` are (R, len(x)), each row a
    distribution (rows are normalised here; a row with no weight on one side gives NaN)."""
    ta = wa.sum(axis=1, keepdims=True)
    tb = wb.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = wa[:, :-1] / ta - wb[:, :-1] / tb
    np.cumsum(gap, axis=1, out=gap)
    out = np.abs(gap, out=gap) @ np.diff(x)
    out[(ta[:, 0] <= 0) | (tb[:, 0] <= 0)] = np.nan
    return out


def normalised_weights(weights: ArrayLike | None, n: int, name: str) -> np.ndarray:
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size != n:
        raise ValueError(f"{name} needs one weight per value ({n}), got {w.size}")
    if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"{name} must be finite, non-negative and not all zero")
    return w / w.sum()


def wasserstein1(
    u: ArrayLike, v: ArrayLike, u_weights: ArrayLike | None = None, v_weights: ArrayLike | None = None
) -> float:
    """Wasserstein-1 distance between two (weighted) samples of real numbers.

    Same value as ``scipy.stats.wasserstein_distance``.
    """
    a = np.asarray(u, dtype=np.float64).ravel()
    b = np.asarray(v, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("W1 needs at least one value in each sample")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("W1 needs finite values: drop NaN/inf scores first")
    wa = normalised_weights(u_weights, a.size, "u_weights")
    wb = normalised_weights(v_weights, b.size, "v_weights")
    x = np.concatenate([a, b])
    order = np.argsort(x, kind="stable")
    side_a = np.concatenate([wa, np.zeros(b.size)])[order]
    side_b = np.concatenate([np.zeros(a.size), wb])[order]
    return w1_on_support(x[order], side_a, side_b)


# --- the quantile form: two equal-weight samples, each sorted -------------------------------------


def wasserstein1_sorted(a: np.ndarray, b: np.ndarray) -> float:
    """Exact W1 between the empirical distributions of two samples already sorted ascending.

    ``W1 = ∫_0^1 |Q_a(u) - Q_b(u)| du`` with the quantile functions ``Q_a(u) = a_(ceil(u n))``. For
    equal sizes that is ``mean |a_(i) - b_(i)|``. Otherwise both are step functions with breakpoints
    at ``i/n`` and ``j/m``; in units of ``1/lcm(n, m)`` these are the integers ``i * lcm/n`` and
    ``j * lcm/m``, merged exactly (no breakpoint misplaced by round-off), and on each interval
    between consecutive breakpoints both quantile functions are constant. Memory is O(chunk), time
    O(n + m).
    """
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("W1 needs at least one value in each sample")
    if n == m:
        total = 0.0
        for s in range(0, n, CHUNK):
            total += float(np.abs(a[s : s + CHUNK].astype(np.float64) - b[s : s + CHUNK]).sum())
        return total / n
    if n < m:  # iterate over the larger sample so each chunk holds at most 2 x CHUNK breakpoints
        a, b, n, m = b, a, m, n
    g = math.gcd(n, m)
    step_a, step_b = m // g, n // g  # breakpoint spacing of a and of b, in units of 1/lcm
    lcm = n * step_a
    if step_a + step_b <= PERIOD_MAX:
        return _w1_periodic(a, b, g, step_a, step_b)
    if lcm >= 2**62:  # beyond int64 headroom: the (slower) CDF form, still exact
        return wasserstein1(a, b)
    total = 0.0
    for i0 in range(0, n, CHUNK):
        i1 = min(n, i0 + CHUNK)
        lo, hi = i0 * step_a, i1 * step_a
        ticks_a = np.arange(i0 + 1, i1 + 1, dtype=np.int64) * step_a
        ticks_b = np.arange(lo // step_b + 1, hi // step_b + 1, dtype=np.int64) * step_b
        # Two sorted runs: a stable sort merges them in linear time. A tick present in both leaves
        # an interval of width 0, which adds nothing.
        ticks = np.sort(np.concatenate([ticks_a, ticks_b]), kind="stable")
        widths = np.diff(ticks, prepend=lo).astype(np.float64)
        index_a = -(-ticks // step_a) - 1  # ceil(t / step_a) - 1: the value of Q_a on (t_prev, t]
        index_b = -(-ticks // step_b) - 1
        total += float(widths @ np.abs(a[index_a].astype(np.float64) - b[index_b]))
    return total / lcm


def _w1_periodic(a: np.ndarray, b: np.ndarray, g: int, step_a: int, step_b: int) -> float:
    """The same integral when the breakpoint pattern repeats: with g = gcd(n, m), n = g * step_b and
    m = g * step_a, so [0, 1] splits into g periods, each holding ``step_b`` steps of Q_a and
    ``step_a`` steps of Q_b laid out identically. Score tables of one dataset have n = sequences x
    heads, so g is at least the number of sequences and a period is short: the pattern (which index
    of a and of b, over what width) is merged once, and every period reads it off the two samples
    viewed as (g, step_b) and (g, step_a) arrays. No per-element sort or division."""
    ticks_a = np.arange(1, step_b + 1, dtype=np.int64) * step_a
    ticks_b = np.arange(1, step_a + 1, dtype=np.int64) * step_b
    ticks = np.sort(np.concatenate([ticks_a, ticks_b]), kind="stable")
    widths = np.diff(ticks, prepend=0).astype(np.float64)
    keep = widths > 0  # a tick shared by both (the period's end) leaves a zero-width interval
    ticks, widths = ticks[keep], widths[keep]
    index_a, index_b = -(-ticks // step_a) - 1, -(-ticks // step_b) - 1
    rows_a, rows_b = a.reshape(g, step_b), b.reshape(g, step_a)
    per_chunk = max(1, CHUNK // len(ticks))
    total = 0.0
    for p in range(0, g, per_chunk):
        block_a = rows_a[p : p + per_chunk][:, index_a].astype(np.float64)
        block_a -= rows_b[p : p + per_chunk][:, index_b]
        total += float((np.abs(block_a, out=block_a) @ widths).sum())
    return total / (g * step_a * step_b)
