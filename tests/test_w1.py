"""The Wasserstein-1 kernels (:mod:`headstats.stats.w1`) equal ``scipy.stats.wasserstein_distance``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from headstats.stats import w1

# --- exact W1 on sorted samples ------------------------------------------------------------------


SIZES = [(1, 1), (7, 7), (1, 9), (9, 1), (6, 4), (1000, 333), (24 * 61, 35 * 61), (4097, 4096), (12345, 6789)]


@pytest.mark.parametrize("periodic", [True, False], ids=["periodic-pattern", "chunked-merge"])
@pytest.mark.parametrize("n, m", SIZES)
def test_sorted_w1_equals_scipy_for_equal_and_unequal_sizes(
    n: int, m: int, periodic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not periodic:  # the general merge, used when the breakpoint pattern does not repeat shortly
        monkeypatch.setattr(w1, "PERIOD_MAX", 0)
    rng = np.random.default_rng([n, m])
    a = rng.standard_normal(n).astype(np.float32)
    b = (1.3 * rng.standard_normal(m) + 0.2).astype(np.float32)
    expected = scipy.stats.wasserstein_distance(a, b)
    assert w1.wasserstein1_sorted(np.sort(a), np.sort(b)) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("period_max", [0, 4096])
def test_sorted_w1_handles_ties_and_chunk_boundaries(period_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    a = np.sort(rng.integers(0, 5, 1001).astype(np.float32))  # heavy ties
    b = np.sort(rng.integers(1, 4, 390).astype(np.float32))
    expected = scipy.stats.wasserstein_distance(a, b)
    monkeypatch.setattr(w1, "PERIOD_MAX", period_max)
    monkeypatch.setattr(w1, "CHUNK", 17)  # many chunks, ticks shared across chunk edges
    assert w1.wasserstein1_sorted(a, b) == pytest.approx(expected, rel=1e-12)
    assert w1.wasserstein1_sorted(b, a) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="at least one value"):
        w1.wasserstein1_sorted(a, a[:0])


def test_support_kernel_batch_equals_one_at_a_time_and_scipy() -> None:
    rng = np.random.default_rng(4)
    x = np.sort(rng.normal(size=50))
    wa, wb = rng.random((7, 50)), rng.random((7, 50))
    wa[:, :10] = 0  # weights may vanish on parts of the support
    got = w1.w1_on_support_batch(x, wa, wb)
    for r in range(7):
        assert got[r] == pytest.approx(w1.w1_on_support(x, wa[r] / wa[r].sum(), wb[r] / wb[r].sum()), rel=1e-12)
        assert got[r] == pytest.approx(scipy.stats.wasserstein_distance(x, x, wa[r], wb[r]), rel=1e-9)
    empty = w1.w1_on_support_batch(x, np.zeros((1, 50)), wb[:1])
    assert np.isnan(empty).all()
