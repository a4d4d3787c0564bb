"""How a seed study's distance rule (:mod:`headstats.stats.seed_margin`) behaves on data like a
study's own: a generator planted from real seeds, the rule's level at the margin, and the power of a
design with a given number of seeds and texts.

The generator (:class:`Planted`), per cell, from n0 real seeds' stage ends on the study's texts: the
**systematic field** ``S`` (texts x heads: the seeds' mean stage end minus the base) and the **seed
residual fields** ``R_s`` (each seed's stage end minus the seeds' mean, scaled by sqrt(n0 / (n0 - 1))
so that their spread is the seeds'). A simulated study draws its texts by resampling the real texts'
clusters with replacement, and each simulated seed as

    end = base + move * S + spread * sign * R_s,

``R_s`` one of the real residual fields drawn with replacement and ``sign`` a fair coin (the seeds'
scatter made symmetric about where they land together). ``move`` plants the systematic displacement
(1: the study's own) and ``spread`` the seeds' spread (1: the study's own). The quantity the rule
tests, theta = E d(base, end), is that of one simulated seed on simulated texts, computed by Monte
Carlo (:meth:`Planted.quantity`); :meth:`Planted.move_for` solves the ``move`` at which it equals a
given value (the margin), so the rule's error rates can be read at its boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from headstats.stats.seed_margin import (
    EQUIVALENT,
    MOVED_BEYOND_MARGIN,
    Cell,
    base_distances,
    estimate,
    t_power,
    verdict,
)
from headstats.stats.seeds import sign_flip_upper_bound


@dataclass(frozen=True)
class Planted:
    """A cell's generator planted from real seeds (see the module docstring)."""

    base: np.ndarray  # texts x heads
    systematic: np.ndarray  # texts x heads
    residuals: np.ndarray  # n0 x texts x heads
    clusters: np.ndarray  # cluster code per text
    iqr: float

    @classmethod
    def from_cell(cls, cell: Cell) -> Planted:
        n0 = cell.n_seeds
        if n0 < 2:
            raise ValueError("a planted generator needs at least 2 real seeds (their residuals are its seed spread)")
        mean = cell.ends.mean(axis=0)
        residuals = (cell.ends - mean) * math.sqrt(n0 / (n0 - 1))
        return cls(cell.base, mean - cell.base, residuals, np.asarray(cell.clusters), cell.iqr)

    def thinned(self, heads: int) -> Planted:
        """The same generator on every k-th head only, so that at most ``heads`` remain (a cheaper
        cell of the same kind, for simulations that need many replicates)."""
        step = max(1, math.ceil(self.base.shape[1] / heads))
        return Planted(
            self.base[:, ::step], self.systematic[:, ::step], self.residuals[:, :, ::step], self.clusters, self.iqr
        )

    def _texts(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Texts drawn by resampling the clusters with replacement, and each drawn text's cluster (a
        cluster drawn twice is two clusters of the new sample)."""
        _, codes = np.unique(self.clusters, return_inverse=True)
        n_clusters = int(codes.max()) + 1
        members = [np.flatnonzero(codes == c) for c in range(n_clusters)]
        drawn = [members[c] for c in rng.integers(0, n_clusters, n_clusters)]
        return np.concatenate(drawn), np.repeat(np.arange(n_clusters), [len(m) for m in drawn])

    def draw(self, n_seeds: int, rng: np.random.Generator, *, move: float = 1.0, spread: float = 1.0) -> Cell:
        """One simulated study's cell: ``n_seeds`` seeds on one resampled set of texts."""
        texts, clusters = self._texts(rng)
        base = self.base[texts]
        pick = rng.integers(0, len(self.residuals), n_seeds)
        signs = rng.choice([-1.0, 1.0], n_seeds)[:, None, None]
        ends = base[None] + move * self.systematic[texts][None] + spread * signs * self.residuals[pick][:, texts]
        return Cell(base, ends, clusters, self.iqr)

    def quantity(
        self, *, move: float = 1.0, spread: float = 1.0, draws: int = 400, seed: int = 0
    ) -> tuple[float, float]:
        """theta = E d(base, end) of one simulated seed on simulated texts: (Monte Carlo mean, its
        standard error) over ``draws`` draws of texts, each with one seed."""
        rng = np.random.default_rng(seed)
        values = np.array([base_distances(self.draw(1, rng, move=move, spread=spread))[0] for _ in range(draws)])
        return float(values.mean()), float(values.std(ddof=1) / math.sqrt(draws))

    def move_for(self, target: float, *, spread: float = 1.0, draws: int = 400, seed: int = 0) -> float:
        """The ``move`` >= 0 at which theta equals ``target`` (bisection on common random numbers);
        ValueError when the seeds' spread alone already puts theta above the target."""
        at_zero = self.quantity(move=0.0, spread=spread, draws=draws, seed=seed)[0]
        if at_zero >= target:
            raise ValueError(f"with no systematic move theta is already {at_zero:.3f} >= {target}: lower the spread")
        low, high = 0.0, 1.0
        while self.quantity(move=high, spread=spread, draws=draws, seed=seed)[0] < target:
            low, high = high, 2 * high
        for _ in range(30):
            mid = (low + high) / 2
            if self.quantity(move=mid, spread=spread, draws=draws, seed=seed)[0] < target:
                low = mid
            else:
                high = mid
            if high - low < 1e-3 * high:
                break
        return (low + high) / 2


def old_rule_equivalent(cell: Cell, margin: float, alpha: float) -> bool:
    """The contrast rule of :mod:`headstats.stats.seeds` on a cell: mean(delta) = mean d(base, end)
    minus mean d(end, end'), "equivalent" when its sign-flip upper bound lies below the margin."""
    d = base_distances(cell)
    q = np.sort(cell.ends.reshape(cell.n_seeds, -1), axis=1)
    n = cell.n_seeds
    pair = np.array([[np.abs(q[s] - q[t]).mean() / cell.iqr for t in range(n)] for s in range(n)])
    between = (pair.sum(axis=1)) / (n - 1)  # the diagonal is 0
    pairs_mean = pair[np.triu_indices(n, 1)].mean()
    delta = d - (2 * between - pairs_mean)
    return bool(sign_flip_upper_bound(delta, alpha) < margin)


def rule_rates(
    planted: Planted,
    *,
    n_seeds: int,
    margin: float,
    move: float,
    spread: float = 1.0,
    alpha: float = 0.05,
    reps: int = 200,
    n_text_boot: int = 30,
    seed: int = 0,
    old_rule: bool = False,
) -> dict[str, float]:
    """The share of ``reps`` simulated studies in which the distance rule says "moved beyond the
    margin" (one cell: no Holm) and "equivalent within the margin", and with ``old_rule`` the share
    in which the contrast rule says "equivalent"."""
    rng = np.random.default_rng(seed)
    beyond = equivalent = old = 0
    for r in range(reps):
        cell = planted.draw(n_seeds, rng, move=move, spread=spread)
        est = estimate(cell, n_text_boot=n_text_boot, seed=seed + r)
        call = verdict(est.p_above(margin), est.p_below(margin), alpha)
        beyond += call == MOVED_BEYOND_MARGIN
        equivalent += call == EQUIVALENT
        if old_rule:
            old += old_rule_equivalent(cell, margin, alpha)
    rates = {"beyond": beyond / reps, "equivalent": equivalent / reps}
    if old_rule:
        rates["old_equivalent"] = old / reps
    return rates


__all__ = ["Planted", "old_rule_equivalent", "rule_rates", "t_power"]  # t_power: seed_margin's, for the power script
