"""Which heads are inactive (headstats.stats.inactive): each head's share of texts on which a score calls
it inactive, against a computation written out independently, and its interval over texts at its
boundary (coverage simulated with clustered texts, where an interval that ignores the clusters fails)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headstats.stats.inactive import design_effects, effective_texts, inactive_heads, wilson_bounds


def _table(n_texts: int = 12, layers: int = 3, heads: int = 4, seed: int = 0, subjects: int | None = None):
    rng = np.random.default_rng(seed)
    rows = [
        {"sample_id": s, "layer": layer, "head": head, "ahon_ln": rng.gamma(4.0, 0.25), "awft": rng.uniform()}
        for s in range(n_texts)
        for layer in range(layers)
        for head in range(heads)
    ]
    frame = pd.DataFrame(rows)
    if subjects:
        frame["subject"] = "s" + (frame["sample_id"] % subjects).astype(str)
    return frame


def test_the_share_of_texts_per_head_is_the_count_written_out() -> None:
    frame = _table()
    pooled = np.sort(frame["ahon_ln"].to_numpy())
    # The type-4 quantile at p = 0.2, by hand: the empirical CDF (x_k, k/N) inverted linearly.
    n = len(pooled)
    k = 0.2 * n
    tau = pooled[int(np.floor(k)) - 1] + (k - np.floor(k)) * (pooled[int(np.floor(k))] - pooled[int(np.floor(k)) - 1])
    heads = inactive_heads(frame, "ahon_ln", share=0.2)
    assert heads["threshold"].iloc[0] == pytest.approx(tau)
    for layer in range(3):
        for head in range(4):
            mine = frame[(frame["layer"] == layer) & (frame["head"] == head)]
            row = heads[(heads["layer"] == layer) & (heads["head"] == head)].iloc[0]
            assert row["n_inactive"] == int((mine["ahon_ln"] < tau).sum())
            assert row["inactive_share"] == pytest.approx((mine["ahon_ln"] < tau).mean())
            assert row["mean_score"] == pytest.approx(mine["ahon_ln"].mean())
    # Ordered most often inactive first, then by the mean in the score's inactive direction; "above"
    # scores count values above the threshold.
    assert heads["inactive_share"].is_monotonic_decreasing
    for _, tied in heads.groupby("inactive_share"):
        assert tied["mean_score"].is_monotonic_increasing
    above = inactive_heads(frame, "awft", threshold=0.7)
    first = frame[(frame["layer"] == above["layer"].iloc[0]) & (frame["head"] == above["head"].iloc[0])]
    assert above["n_inactive"].iloc[0] == int((first["awft"] > 0.7).sum())
    for _, tied in above.groupby("inactive_share"):
        assert tied["mean_score"].is_monotonic_decreasing
    # Over all heads the share of inactive rows is the target, to one row.
    assert (heads["n_inactive"].sum() / len(frame)) == pytest.approx(0.2, abs=1 / len(frame))


def test_the_interval_without_clusters_is_scipys_wilson() -> None:
    from scipy.stats import binomtest

    heads = inactive_heads(_table(n_texts=20), "ahon_ln", share=0.15)
    assert (heads["cluster"] == "text").all() and (heads["design_effect"] == 1).all()
    for _, row in heads.iterrows():
        ci = binomtest(int(row["n_inactive"]), int(row["n_texts"])).proportion_ci(method="wilson")
        assert (row["low"], row["high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
    none = heads[heads["n_inactive"] == 0]
    assert len(none) and (none["high"] > 0.1).all()  # no inactive text is not a zero-width interval


def test_the_design_effect_is_the_cluster_robust_variance_over_the_binomial() -> None:
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(9), rng.integers(2, 7, size=9))
    y = (rng.uniform(size=len(clusters)) < np.repeat(rng.uniform(0.1, 0.9, size=9), np.bincount(clusters))).astype(
        float
    )
    deff, n_clusters = design_effects(y[:, None], clusters)
    # Independently: the variance of the mean from statsmodels' cluster-robust (sandwich) OLS on a constant,
    # with only the G / (G - 1) correction, over the binomial variance p (1 - p) / n.
    fit = sm.OLS(y, np.ones_like(y)).fit(
        cov_type="cluster", cov_kwds={"groups": clusters, "use_correction": False, "df_correction": False}
    )
    p, n = y.mean(), len(y)
    robust = fit.bse[0] ** 2 * n_clusters / (n_clusters - 1)
    assert n_clusters == 9
    assert deff[0] == pytest.approx(robust / (p * (1 - p) / n), rel=1e-10)


@pytest.mark.parametrize(
    ("true", "clusters", "size", "icc"),
    [(0.3, 8, 8, 0.3), (0.1, 8, 8, 0.3), (0.3, 4, 16, 0.3), (0.3, 4, 8, 0.5), (0.3, 30, 4, 0.3), (0.05, 8, 8, 0.1)],
)
def test_clustered_texts_widen_the_interval_and_it_covers_at_its_level(true, clusters, size, icc) -> None:
    """Simulated at the boundary that matters: a head inactive on a share of texts whose clusters
    (subjects) each have their own rate (beta-distributed, intraclass correlation ``icc``). The
    interval at the effective number of texts covers the true share in at least about 95% of draws;
    the same Wilson interval treating the texts as independent covers far less, so the clusters must
    be respected."""
    rng = np.random.default_rng(11)
    draws = 4000
    a, b = true * (1 / icc - 1), (1 - true) * (1 / icc - 1)
    rates = rng.beta(a, b, size=(draws, clusters))
    y = (rng.uniform(size=(draws, clusters, size)) < rates[..., None]).reshape(draws, -1).astype(float)
    deff, _ = design_effects(y.T, np.repeat(np.arange(clusters), size))
    share, n = y.mean(axis=1), clusters * size
    low, high = wilson_bounds(share, effective_texts(deff, n, clusters))
    covered = np.mean((low <= true) & (true <= high))
    naive_low, naive_high = wilson_bounds(share, np.full(draws, n))
    naive = np.mean((naive_low <= true) & (true <= naive_high))
    assert covered >= 0.94, covered
    assert naive < 0.92 and naive < covered - 0.04, naive


def test_a_table_with_subjects_resamples_by_subject_and_groups_by_model_and_dataset() -> None:
    frame = _table(n_texts=24, subjects=4)
    two = pd.concat([frame.assign(model="a", dataset="mmlu"), frame.assign(model="b", dataset="mmlu")])
    two.loc[two["model"] == "b", "ahon_ln"] *= 2  # thresholds are calibrated per model
    heads = inactive_heads(two, "ahon_ln", share=0.1)
    assert list(heads.columns[:4]) == ["model", "dataset", "layer", "head"]
    assert set(heads["cluster"]) == {"subject"} and set(heads["n_clusters"]) == {4}
    a, b = (heads[heads["model"] == m] for m in "ab")
    assert b["threshold"].iloc[0] == pytest.approx(2 * a["threshold"].iloc[0])
    assert a.set_index(["layer", "head"])["n_inactive"].equals(b.set_index(["layer", "head"])["n_inactive"])
    plain = inactive_heads(frame.drop(columns="subject"), "ahon_ln", share=0.1)
    merged = a.merge(plain, on=["layer", "head"], suffixes=("", "_plain"))
    assert (merged["inactive_share"] == merged["inactive_share_plain"]).all()
    # Never narrower than the independent-texts interval (the design effect is taken at 1 or more).
    assert ((merged["high"] - merged["low"]) >= (merged["high_plain"] - merged["low_plain"]) - 1e-12).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"score": "ahon_ln"}, "give either share= (a fraction of heads, e.g. 0.1) or threshold="),
        ({"score": "ahon_ln", "share": 0.1, "threshold": 0.5}, "give either share="),
        ({"score": "random", "share": 0.1}, "the random score calls heads inactive by chance"),
        ({"score": "ahon_ln", "share": 1.5}, "target fraction 1.5 is outside [0, 1]"),
        ({"score": "entropy", "share": 0.1}, "the score table has no entropy column(s)"),
        ({"score": "nope", "share": 0.1}, "unknown score"),
    ],
)
def test_bad_calls_say_what_to_give(kwargs: dict, message: str) -> None:
    with pytest.raises((ValueError, KeyError), match=None) as err:
        inactive_heads(_table(), **kwargs)
    assert message in str(err.value)


def test_a_table_missing_rows_of_a_text_is_refused() -> None:
    frame = _table()
    with pytest.raises(ValueError, match="the score table lacks 1 \\(text, head\\) rows"):
        inactive_heads(frame.iloc[1:], "ahon_ln", share=0.1)


def test_the_command_prints_what_the_function_returns(tmp_path, capsys) -> None:
    import io

    from headstats.cli import main
    from headstats.io.store import read_scores
    from headstats.testing.synthetic import synthetic_models, write_synthetic_scores

    write_synthetic_scores(tmp_path, synthetic_models(2), ("wiki",), n_sequences=12, progress=False)
    expected = inactive_heads(read_scores(tmp_path), "ahon_ln", share=0.1)
    assert main(["inactive", str(tmp_path), "--format", "csv"]) == 0
    printed = pd.read_csv(io.StringIO(capsys.readouterr().out))
    pd.testing.assert_frame_equal(printed, expected.reset_index(drop=True), check_dtype=False)
    model = expected["model"].iloc[0]
    assert (
        main(["inactive", str(tmp_path), "--model", model, "--top", "3", "--score", "awft", "--threshold", "0.5"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{model} / wiki: 12 texts; inactive when awft > 0.5"
    assert lines[1].split() == ["layer", "head", "inactive", "on", "(95%", "CI)", "texts", "mean", "awft"]
    assert len(lines) == 6 and lines[-1].startswith("  ... ")
    assert main(["inactive", str(tmp_path), "--share", "0.1", "--threshold", "0.5"]) == 2
    assert capsys.readouterr().err.strip() == "headstats: error: --threshold: give --share or --threshold, not both"
