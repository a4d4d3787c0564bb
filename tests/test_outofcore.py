"""Out-of-core statistics equal their in-memory definitions; synthetic tables keep
docs/design.md#table-layout.

The reference for every distance is ``scipy.stats.wasserstein_distance`` on the same rows read with
pandas, and the in-memory modules (:mod:`headstats.stats.distances`, :mod:`headstats.stats.overlap`)
on the frame :func:`headstats.io.store.read_scores` returns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import scipy.stats

from headstats.engine.scores import score_ids
from headstats.io import store
from headstats.stats import distances, overlap, tables
from headstats.stats import large as outofcore
from headstats.testing.synthetic import SyntheticModel, write_synthetic_scores

SCORE_IDS = score_ids()

MODELS = (
    SyntheticModel("base", 4, 6, 2),
    SyntheticModel("base-ft", 4, 6, 2, sink=0.1, scale=0.05),  # same shape: equal row counts
    SyntheticModel("wide", 5, 7, 7, sink=0.8, depth_tilt=1.5, scale=0.4),  # 35 heads: sizes coprime with 24
)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synthetic")
    write_synthetic_scores(root, MODELS, ("web", "mmlu"), n_sequences=61, rows_per_part=300, progress=False)
    # A model scored on one of the datasets only: distances must pool the datasets all models share.
    write_synthetic_scores(root, [SyntheticModel("solo", 3, 4, 4, sink=-0.5)], ("web",), n_sequences=23, progress=False)
    return root


@pytest.fixture(scope="module")
def frame(table: Path) -> pd.DataFrame:
    return store.read_scores(table)


# --- reading with pushdown -----------------------------------------------------------------------


def test_inventory_counts_rows_per_model_and_dataset_from_footers(table: Path, frame: pd.DataFrame) -> None:
    inv = outofcore.inventory(table).set_index(["model", "dataset"])["rows"]
    expected = frame.groupby(["model", "dataset"]).size()
    assert inv.sort_index().to_dict() == expected.sort_index().to_dict()


def test_read_columns_returns_exactly_one_models_rows(table: Path, frame: pd.DataFrame) -> None:
    cols = outofcore.read_columns(table, "wide", ["sample_id", "layer", "head", "ahon"], ["mmlu"])
    got = pd.DataFrame(cols).sort_values(["sample_id", "layer", "head"]).reset_index(drop=True)
    want = frame[(frame["model"] == "wide") & (frame["dataset"] == "mmlu")]
    want = want[["sample_id", "layer", "head", "ahon"]].sort_values(["sample_id", "layer", "head"])
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True))
    assert cols["ahon"].dtype == np.float32 and cols["layer"].dtype == np.int16


# --- the W1 matrix -------------------------------------------------------------------------------


def test_exact_distance_matrix_equals_scipy_and_the_in_memory_version(table: Path, frame: pd.DataFrame) -> None:
    models = ["base", "base-ft", "wide"]
    result = outofcore.distance_matrices_from_dataset(
        table, models, ["awft", "ahon_ln", "entropy"], depth_bins=3, progress=False
    )
    assert set(result["method"]) == {"exact"} and (result["error_bound"] == 0).all()
    assert len(result) == 3 * 3 * (1 + 3)  # pairs x scores x (all + 3 bins)
    for row in result.itertuples():
        a = frame[frame["model"] == row.model_a]
        b = frame[frame["model"] == row.model_b]
        if row.depth != tables.ALL_DEPTHS:
            label_a = np.asarray(tables.depth_labels(3))[tables.depth_bin(a["layer"], a["layer"].max() + 1, 3)]
            label_b = np.asarray(tables.depth_labels(3))[tables.depth_bin(b["layer"], b["layer"].max() + 1, 3)]
            a, b = a[label_a == row.depth], b[label_b == row.depth]
        assert (row.n_a, row.n_b) == (len(a), len(b))
        expected = scipy.stats.wasserstein_distance(a[row.score], b[row.score])
        assert row.w1 == pytest.approx(expected, rel=1e-10), row
    in_memory = distances.model_distance(
        frame, "base", "wide", ["ahon_ln"], depth_bins=3, n_boot=0, n_perm=0, n_split=0
    )
    ours = result[(result["model_a"] == "base") & (result["model_b"] == "wide") & (result["score"] == "ahon_ln")]
    np.testing.assert_allclose(ours["w1"].to_numpy(), in_memory["w1"].to_numpy(), rtol=1e-10)
    matrix = outofcore.as_matrix(result, "awft")
    assert list(matrix.index) == models and np.allclose(matrix.to_numpy(), matrix.to_numpy().T)
    assert (np.diag(matrix) == 0).all() and (matrix.to_numpy()[~np.eye(3, dtype=bool)] > 0).all()


def test_distances_pool_only_the_datasets_every_model_shares(table: Path, frame: pd.DataFrame) -> None:
    result = outofcore.distance_matrices_from_dataset(table, ["base", "solo"], ["avvn"], depth_bins=0, progress=False)
    web = frame[frame["dataset"] == "web"]
    expected = scipy.stats.wasserstein_distance(
        web[web["model"] == "base"]["avvn"], web[web["model"] == "solo"]["avvn"]
    )
    assert result["w1"].item() == pytest.approx(expected, rel=1e-10)
    assert result["n_a"].item() == 61 * 24
    with pytest.raises(ValueError, match="model 'solo' has no dataset mmlu"):
        outofcore.distance_matrices_from_dataset(table, ["base", "solo"], ["avvn"], datasets=["mmlu"], progress=False)


def test_summary_mode_stays_within_its_stated_error_bound(table: Path) -> None:
    kwargs = dict(score_ids=["awft", "ftvvn", "random"], depth_bins=2, progress=False)
    exact = outofcore.distance_matrices_from_dataset(table, MODELS_NAMES, method="exact", **kwargs)
    summary = outofcore.distance_matrices_from_dataset(
        table, MODELS_NAMES, method="summary", summary_size=8, chunk_rows=500, **kwargs
    )
    assert set(summary["method"]) == {"summary"}
    gap = (summary["w1"] - exact["w1"]).abs()
    assert (gap <= summary["error_bound"] + 1e-12).all()
    assert (summary["error_bound"] > 0).all() and gap.max() > 0  # an approximation, and it says so
    assert (summary[["n_a", "n_b"]].to_numpy() == exact[["n_a", "n_b"]].to_numpy()).all()
    # Larger summaries are tighter.
    fine = outofcore.distance_matrices_from_dataset(
        table, MODELS_NAMES, method="summary", summary_size=64, chunk_rows=500, **kwargs
    )
    assert fine["error_bound"].mean() < summary["error_bound"].mean()


MODELS_NAMES = [m.name for m in MODELS]


def test_auto_method_switches_to_the_summary_when_sorting_everything_would_not_fit(table: Path) -> None:
    small = outofcore.distance_matrices_from_dataset(
        table, MODELS_NAMES, ["awft"], depth_bins=0, memory_gb=1e-6, progress=False
    )
    large = outofcore.distance_matrices_from_dataset(
        table, MODELS_NAMES, ["awft"], depth_bins=0, memory_gb=1.0, progress=False
    )
    assert set(small["method"]) == {"summary"} and set(large["method"]) == {"exact"}


def test_missing_values_are_dropped_and_unknown_names_are_clear_errors(tmp_path: Path, table: Path) -> None:
    # A model collected without 'fhon': its files lack the column, which the dataset reads as nulls.
    root = tmp_path / "mixed"
    write_synthetic_scores(root, MODELS[:2], ("web",), n_sequences=10, progress=False)
    partition = root / "model=base-ft" / "dataset=web"
    for part in store.data_files(partition):
        t = pq.read_table(part)
        pq.write_table(t.drop_columns(["fhon"]), part)
    with pytest.raises(ValueError, match="model 'base-ft' has no values for 'fhon'"):
        outofcore.distance_matrices_from_dataset(root, score_ids=["fhon"], progress=False)
    result = outofcore.distance_matrices_from_dataset(root, depth_bins=0, progress=False)
    assert np.isnan(result.loc[result["score"] == "fhon", "w1"]).all()
    assert np.isfinite(result.loc[result["score"] == "ahon", "w1"]).all()
    with pytest.raises(ValueError, match=r"model\(s\) 'nope' not in the score table; it holds: base, base-ft, solo"):
        outofcore.distance_matrices_from_dataset(table, ["base", "nope"], progress=False)
    with pytest.raises(ValueError, match="unknown score id 'ahonn'"):
        outofcore.distance_matrices_from_dataset(table, ["base", "wide"], ["ahonn"], progress=False)
    with pytest.raises(store.StoreError, match="does not exist"):
        outofcore.open_scores(tmp_path / "absent")


# --- overlap -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pair", [("awft", "ahon_ln"), ("entropy", "random"), ("lthon_hn", "fhon")])
def test_overlap_equals_the_in_memory_version(table: Path, frame: pd.DataFrame, pair: tuple[str, str]) -> None:
    ours = outofcore.score_overlap_from_dataset(table, *pair, rates=(0.0, 0.05, 0.3), progress=False)
    theirs = overlap.score_overlap(frame, *pair, rates=(0.0, 0.05, 0.3))
    key = ["model", "dataset", "rate"]
    pd.testing.assert_frame_equal(
        ours.sort_values(key).reset_index(drop=True), theirs.sort_values(key).reset_index(drop=True), check_dtype=False
    )
    assert len(ours) == (3 * 2 + 1) * 3


# --- synthetic tables ----------------------------------------------------------------------------


def test_synthetic_table_has_the_spec_layout_and_consistent_normalised_scores(table: Path, frame: pd.DataFrame) -> None:
    schema = store.score_schema(SCORE_IDS)
    part = store.data_files(table / "model=wide" / "dataset=web")[0]
    assert pq.read_schema(part).remove_metadata() == schema
    assert all(
        pq.ParquetFile(p).metadata.num_rows <= 300 for p in store.data_files(table / "model=wide" / "dataset=web")
    )
    prov = json.loads((table / "model=wide" / "dataset=web" / store.PROVENANCE_FILE).read_text())
    assert prov["kind"] == "scores" and prov["synthetic"]["model"]["n_heads"] == 7 and "versions" in prov
    assert (table / "model=wide" / "dataset=web" / store.DONE_FILE).is_file()
    wide = frame[frame["model"] == "wide"]
    assert len(wide) == 2 * 61 * 35 and wide.groupby(["dataset", "sample_id"]).size().eq(35).all()
    assert (wide["kv_head"] == wide["head"]).all()  # 7 heads, 7 KV heads
    base = frame[frame["model"] == "base"]
    assert (base["kv_head"] == base["head"] // 3).all()
    layer_mean = base.groupby(["dataset", "sample_id", "layer"])["ahon"].transform("mean")
    np.testing.assert_allclose(base["ahon_ln"], base["ahon"] / layer_mean, rtol=1e-5)
    np.testing.assert_allclose(base["lthon_ln"], base["lthon"] / layer_mean, rtol=1e-5)
    np.testing.assert_allclose(base["lthon_hn"], base["lthon"] / base["ahon"], rtol=1e-6)
    assert base["awft"].between(0, 1).all() and base["random"].between(0, 1).all()
    # The study's structure: sinks (high awft) have small outputs.
    assert scipy.stats.spearmanr(base["awft"], base["ahon"]).statistic < -0.3


def test_synthetic_tables_are_reproducible_and_reused(tmp_path: Path, table: Path) -> None:
    again = write_synthetic_scores(tmp_path, MODELS[2:], ("mmlu",), n_sequences=61, rows_per_part=300, progress=False)
    assert not again["reused"].any()
    mine = store.read_scores(tmp_path).drop(columns=["model", "dataset"])
    theirs = store.read_scores(table, filter=(pads.field("model") == "wide") & (pads.field("dataset") == "mmlu"))
    pd.testing.assert_frame_equal(mine, theirs.drop(columns=["model", "dataset"]))
    reused = write_synthetic_scores(tmp_path, MODELS[2:], ("mmlu",), n_sequences=61, rows_per_part=300, progress=False)
    assert reused["reused"].all()
    with pytest.raises(store.StoreError, match="other settings"):
        write_synthetic_scores(tmp_path, MODELS[2:], ("mmlu",), n_sequences=62, rows_per_part=300, progress=False)
    with pytest.raises(ValueError, match="exactly one of rows"):
        write_synthetic_scores(tmp_path / "x", 2, progress=False)
    counted = write_synthetic_scores(tmp_path / "rows", 2, rows=10_000, progress=False)
    assert counted["rows"].sum() >= 10_000 and counted["rows"].sum() < 10_000 + 2 * 512
