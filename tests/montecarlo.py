"""Monte Carlo error bounds for the simulation tests of levels and coverage."""

from __future__ import annotations

from scipy import stats as st


def binomial_band(n: int, rate: float, tail: float = 5e-4) -> tuple[int, int]:
    """Two-sided band of the number of successes in ``n`` independent draws at ``rate``: a count below
    the band or above it has probability at most ``tail`` each (99.9% for the default), so a test that
    asserts the band fails by chance about once in a thousand runs."""
    return int(st.binom.ppf(tail, n, rate)), int(st.binom.isf(tail, n, rate))
