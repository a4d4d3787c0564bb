"""How far each head moved (headstats.stats.heads): the simultaneous band against an independent
bootstrap, exact heads without an interval, the verdicts, the shift in the reference's IQR against a
direct computation, and the rule's family-wise error at the margin by simulation (printed), where each
head's own interval, the distribution rule applied head by head, fails."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstats.stats.compare import EQUIVALENT, MOVED, UNDETERMINED
from headstats.stats.heads import SE_FLOOR, head_margins, head_shifts, head_verdicts, shift_verdicts, simultaneous_band
from headstats.testing.head_margin import NOISES, family_error, power

ALPHA = 0.05


def _brute_critical(blocks: list[np.ndarray], n_boot: int, seed: int, alpha: float) -> float:
    """The band's critical value written out: each block's replicates drawn as the band draws them, every
    resample built by repeating its units, studentised with the floored standard error, one loop per
    replicate."""
    rng = np.random.default_rng(seed)
    largest = np.zeros(n_boot)
    for d in blocks:
        n = len(d)
        mean, se = d.mean(axis=0), d.std(axis=0, ddof=1) / np.sqrt(n)
        counts = rng.multinomial(n, np.full(n, 1 / n), size=n_boot)
        for b in range(n_boot):
            resample = np.repeat(d, counts[b], axis=0)
            se_b = np.maximum(resample.std(axis=0, ddof=1) / np.sqrt(n), SE_FLOOR * se)
            largest[b] = max(largest[b], np.max(np.abs(resample.mean(axis=0) - mean) / se_b))
    return float(np.quantile(largest, 1 - 2 * alpha))


def test_the_band_is_the_bootstrap_t_of_the_maximum_written_out() -> None:
    rng = np.random.default_rng(3)
    blocks = [rng.normal(0.2, 1.0, size=(12, 5)), rng.exponential(size=(9, 3))]
    bands, critical = simultaneous_band(blocks, alpha=ALPHA, n_boot=300, seed=11)
    assert critical == pytest.approx(_brute_critical(blocks, 300, 11, ALPHA), rel=1e-9)
    for d, band in zip(blocks, bands, strict=True):
        se = d.std(axis=0, ddof=1) / np.sqrt(len(d))
        np.testing.assert_allclose(band["mean"], d.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(band["low"], d.mean(axis=0) - critical * se, rtol=1e-12)
        np.testing.assert_allclose(band["high"], d.mean(axis=0) + critical * se, rtol=1e-12)
        assert not band["exact"].any()
    # one family: a block added with larger noise widens the critical value for every block
    _, wider = simultaneous_band([*blocks, rng.normal(size=(10, 40))], alpha=ALPHA, n_boot=300, seed=11)
    assert wider > critical


def test_a_head_the_same_on_every_text_is_exact_and_has_no_interval() -> None:
    rng = np.random.default_rng(0)
    varying = rng.normal(size=(20, 2))
    block = np.c_[varying, np.zeros(20), np.full(20, 0.3) + 1e-9 * rng.normal(size=20)]
    (band,), critical = simultaneous_band([block], alpha=ALPHA, n_boot=200, seed=1)
    assert list(band["exact"]) == [False, False, True, True]
    assert band.loc[2:, ["low", "high"]].isna().all().all() and band["low"][:2].notna().all()
    assert band["mean"][3] == pytest.approx(0.3)
    # the exact heads stay out of the maximum: the same critical value without them
    assert simultaneous_band([varying], alpha=ALPHA, n_boot=200, seed=1)[1] == critical
    # an exact shift is compared with the margin as it is
    verdicts = shift_verdicts(band["mean"], band["low"], band["high"], np.full(4, 0.2), band["exact"])
    assert list(verdicts[2:]) == [EQUIVALENT, MOVED]


@pytest.mark.parametrize(
    ("shift", "low", "high", "margin", "exact", "verdict"),
    [
        (0.5, 0.3, 0.7, 0.2, False, MOVED),
        (-0.5, -0.7, -0.3, 0.2, False, MOVED),  # beyond on the negative side
        (0.05, -0.1, 0.15, 0.2, False, EQUIVALENT),
        (0.15, 0.1, 0.25, 0.2, False, UNDETERMINED),
        (0.1, np.nan, np.nan, 0.2, False, UNDETERMINED),  # no interval
        (0.1, 0.0, 0.2, np.nan, False, UNDETERMINED),  # no margin
        (0.3, np.nan, np.nan, 0.2, True, MOVED),
        (0.2, np.nan, np.nan, 0.2, True, UNDETERMINED),  # exactly at the margin
    ],
)
def test_the_verdict_of_a_signed_shift(shift, low, high, margin, exact, verdict) -> None:
    assert shift_verdicts([shift], [low], [high], [margin], [exact])[0] == verdict


def _table(values: dict[str, np.ndarray], cluster: np.ndarray | None = None) -> pd.DataFrame:
    """Models' values (texts x heads, heads 0..H-1 of layers of 2) of one score ``ahon`` on one dataset."""
    frames = []
    for model, v in values.items():
        n_text, n_head = v.shape
        frame = pd.DataFrame(
            {
                "model": model,
                "dataset": "texts",
                "sample_id": np.repeat(np.arange(n_text), n_head),
                "layer": np.tile(np.arange(n_head) // 2, n_text),
                "head": np.tile(np.arange(n_head) % 2, n_text),
                "ahon": v.reshape(-1),
            }
        )
        if cluster is not None:
            frame["document"] = np.repeat(cluster, n_head)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def test_a_shift_is_the_paired_mean_difference_over_clusters_in_the_references_iqr() -> None:
    rng = np.random.default_rng(1)
    base = rng.gamma(2.0, size=(30, 6))
    tuned = base + np.array([0.0, 0.0, 0.8, 0.01, -0.8, 0.0]) + 0.05 * rng.normal(size=(30, 6))
    tuned[:, 0] = base[:, 0]  # an unchanged head
    documents = np.arange(30) // 3  # ten clusters of three texts
    cells = head_shifts(_table({"base": base, "tuned": tuned}, documents), "base", "tuned", ["texts"], ["ahon"], 0.3)
    iqr = np.subtract(*np.quantile(base, [0.75, 0.25]))
    by_cluster = (tuned - base).reshape(10, 3, 6).mean(axis=1)
    np.testing.assert_allclose(cells["shift_iqr"], by_cluster.mean(axis=0) / iqr, rtol=1e-10)
    assert (cells["n_units"] == 10).all() and (cells["cluster"] == "document").all()
    assert cells["exact"].tolist() == [True, False, False, False, False, False]
    assert cells.loc[0, "shift_iqr"] == 0 and np.isnan(cells.loc[0, "shift_iqr_low"])
    assert list(cells["verdict"]) == [EQUIVALENT, EQUIVALENT, MOVED, EQUIVALENT, MOVED, EQUIVALENT]
    assert (cells["family"] == 6).all() and (cells["critical"] > 0).all()
    heads = head_verdicts(cells)  # one score on one dataset: each head's verdict is its one cell's
    assert list(heads["verdict"]) == list(cells["verdict"]) and list(heads["layer"]) == [0, 0, 1, 1, 2, 2]
    assert list(heads["moved_on"]) == ["", "", "ahon (texts)", "", "ahon (texts)", ""]
    np.testing.assert_allclose(heads["largest_shift"], cells["shift_iqr"])


def test_a_heads_margin_is_its_own_format_change_shift_or_the_distribution_margin() -> None:
    shifts = pd.DataFrame(
        {"dataset": "d", "score": "ahon", "layer": [0, 0, 1], "head": [0, 1, 0], "format_shift": [0.02, 0.4, 0.1]}
    )
    margins = head_margins(shifts, pd.DataFrame({"dataset": ["d"], "score": ["ahon"], "margin": [0.1]}))
    assert list(margins["margin"]) == [0.1, 0.4, 0.1] and list(margins["margin_from"]) == [
        "distribution",
        "head",
        "distribution",
    ]


@pytest.mark.parametrize("noise", NOISES)
def test_the_per_head_rule_keeps_its_family_wise_level_at_the_margin(noise: str) -> None:
    """Every one of 24 heads at its margin (half at +margin, half at -margin), 40 units: the rule calls
    any of them "moved beyond the margin" at most alpha = 5% of the time plus three Monte Carlo standard
    errors, for normal, skewed and spiky differences (spiky ones far less: fewer replicates)."""
    reps = 300 if noise == "spiky" else 1000
    rate = family_error(40, 24, 0.1, reps, noise=noise, alpha=ALPHA, n_boot=400, seed=17)
    limit = ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / reps)
    print(f"\n{noise} differences, 40 units, 24 heads at the margin: 'moved beyond' family-wise {rate:.3f}")
    assert rate <= limit


def test_each_heads_own_interval_fails_the_family_wise_level() -> None:
    """The distribution rule applied head by head (each head's own 90% interval, no adjustment for the
    heads) calls some head at its margin "moved beyond" far more often than 5%; the rule finds a head
    that moved three margins."""
    wrong = family_error(40, 12, 0.1, 60, rule="per head", alpha=ALPHA, n_boot=300, seed=5)
    found = power(40, 24, 0.1, 0.3, 50, alpha=ALPHA, n_boot=300, seed=9)
    print(f"\neach head's own interval: 'moved beyond' family-wise {wrong:.3f}; a head at 3 margins found {found:.2f}")
    assert wrong > 0.25 and found >= 0.9
