"""`headstats report` builds from a results directory alone, and says clearly what is wrong with one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from families import tiny_model
from scipy import stats as st

import headstats
from headstats import cli, score_sequences
from headstats.io import store
from headstats.report import writer as report


def write_score_table(root: Path, model: str, dataset: str, frame: pd.DataFrame, **prov: object) -> Path:
    """What ``headstats collect`` leaves behind: a part file and the provenance sidecar."""
    part = store.partition_dir(root, model=model, dataset=dataset)
    provenance = store.make_provenance(kind="scores", model=model, dataset=dataset, dtype="float32", device="cpu")
    provenance.update(prov)
    store.write_parquet_atomic(
        pa.Table.from_pandas(frame, preserve_index=False), part / "part-00000.parquet", provenance
    )
    store.write_json_atomic(provenance, part / store.PROVENANCE_FILE)
    return part


def write_interventions(root: Path, model: str, rng: np.random.Generator) -> None:
    """Per-question rows in the layout of ``headstats ablate``: a baseline and three scores whose
    accuracy falls at different rates as more heads are zeroed."""
    part = store.partition_dir(root, model=model, task="mmlu")
    provenance = store.make_provenance(kind="interventions", model=model, task="mmlu", dtype="float32", device="cpu")
    n_q, n_heads = 200, 8
    difficulty = rng.random(n_q)

    def rows(score: str, target: float, accuracy: float) -> pa.Table:
        correct = difficulty < accuracy
        return pa.Table.from_pandas(pd.DataFrame({
            "subject": np.where(np.arange(n_q) % 2, "anatomy", "virology"), "question_id": np.arange(n_q),
            "score": score, "target": target, "threshold": target, "correct": correct, "correct_norm": correct,
            "gold_loglik": -rng.random(n_q), "pred": rng.integers(0, 4, n_q), "n_choices": 4,
            "n_zeroed": rng.binomial(n_heads, target, n_q), "n_heads": n_heads,
        }))  # fmt: skip

    store.write_parquet_atomic(rows("baseline", 0.0, 0.6), part / "baseline.parquet", provenance)
    for score, slope in (("ahon_ln", 0.1), ("awft", 0.5), ("random", 1.2)):
        for target in (0.0, 0.1, 0.2, 0.3):
            store.write_parquet_atomic(
                rows(score, target, 0.6 - slope * target), part / f"point-{score}-{target:g}.parquet", provenance
            )
    store.write_json_atomic(provenance, part / store.PROVENANCE_FILE)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Score tables of a tiny random Llama and a perturbed copy ("tuned"), on two kinds of token
    sequences, plus intervention results: what a small analysis leaves in a results directory."""
    root = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(0)
    texts = {
        "wide": [list(rng.integers(3, 128, rng.integers(6, 16))) for _ in range(10)],
        "narrow": [list(rng.integers(3, 40, rng.integers(6, 16))) for _ in range(10)],
    }
    base = tiny_model("llama", seed=0, attn="sdpa")
    tuned = tiny_model("llama", seed=0, attn="sdpa")
    with torch.no_grad():
        for p in tuned.parameters():
            p.add_(0.05 * torch.randn_like(p))
    write_score_table(root / "scores", "base", "wide", score_sequences(base, texts["wide"]))
    write_score_table(root / "scores", "base", "narrow", score_sequences(base, texts["narrow"]))
    write_score_table(root / "scores", "tuned", "wide", score_sequences(tuned, texts["wide"]))
    write_interventions(root / "ablations", "base", rng)
    write_interventions(root / "ablations", "tuned", rng)
    return root


@pytest.fixture(scope="module")
def built(results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "r"
    mp = pytest.MonkeyPatch()

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report loaded a model")

    # The contract: a report is built from the tables alone.
    mp.setattr(headstats, "load_model", no_model)
    mp.setattr("headstats.io.models.load_model", no_model)
    mp.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_model)
    try:
        report.build_report(results, out, n_boot=20, n_perm=20, n_split=4, dpi=40, progress=False)
    finally:
        mp.undo()
    return out


def test_report_is_self_contained_and_lists_every_table(results: Path, built: Path) -> None:
    page = (built / "index.html").read_text()
    # figures are embedded, never linked as images
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', page)) >= 15
    assert not re.search(r'<img [^>]*src="(?!data:)', page)
    for partition in ("scores/model=base/dataset=wide", "scores/model=base/dataset=narrow",
                      "scores/model=tuned/dataset=wide", "ablations/model=base/task=mmlu"):  # fmt: skip
        assert partition in page  # the provenance of every table used
    for section in ("Between models: Wasserstein-1", "Across datasets", "Interventions: task", "within 1 point"):
        assert section in page
    md = (built / "summary.md").read_text()
    for link in re.findall(r"\]\((figures/[^)]+\.png)\)", md):
        assert (built / link).stat().st_size > 1000
    assert list((built / "figures").glob("*.svg"))


def test_report_numbers_match_independent_computations(results: Path, built: Path) -> None:
    scores = store.read_scores(results / "scores")
    w1 = pd.read_csv(built / "tables" / "w1_overall.csv")
    row = w1[(w1["score"] == "ahon") & (w1["model_a"] == "base") & (w1["model_b"] == "tuned")].iloc[0]
    wide = scores[scores["dataset"] == "wide"]  # the only dataset both models were scored on
    expected = st.wasserstein_distance(
        wide.loc[wide["model"] == "base", "ahon"], wide.loc[wide["model"] == "tuned", "ahon"]
    )
    assert row["w1"] == pytest.approx(expected, rel=1e-6)
    assert row["design"] == "paired" and row["n_seq_a"] == 10

    rows = store.read_interventions(results / "ablations")
    points = pd.read_csv(built / "tables" / "mmlu_points.csv")
    got = points[(points["model"] == "tuned") & (points["score"] == "awft") & (points["target"] == 0.2)].iloc[0]
    sel = rows[(rows["model"] == "tuned") & (rows["score"] == "awft") & (rows["target"] == 0.2)]
    assert got["accuracy"] == pytest.approx(100 * sel["correct"].mean())
    assert got["realised_pct"] == pytest.approx(100 * (sel["n_zeroed"] / sel["n_heads"]).mean())
    within = pd.read_csv(built / "tables" / "mmlu_within_one_point.csv", index_col=0)
    assert within.shape == (2, 3)


def test_bad_results_directories_give_clear_errors(results: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(store.StoreError, match="no score or intervention tables"):
        report.build_report(empty, tmp_path / "out", progress=False)
    with pytest.raises(store.StoreError, match="does not exist"):
        report.build_report(tmp_path / "missing", tmp_path / "out", progress=False)

    mixed = tmp_path / "mixed"
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide")
    write_score_table(mixed, "a", "wide", frame)
    write_score_table(mixed, "b", "wide", frame, schema_version="0")
    with pytest.raises(store.StoreError, match="different schema versions"):
        report.build_report(mixed, tmp_path / "out", progress=False)

    twice = tmp_path / "twice"
    write_score_table(twice / "run1", "a", "wide", frame)
    write_score_table(twice / "run2", "a", "wide", frame)
    with pytest.raises(store.StoreError, match="two scores tables for model 'a'"):
        report.build_report(twice, tmp_path / "out", progress=False)

    with pytest.raises(ValueError, match="rank_by must be one of"):
        report.build_report(results, tmp_path / "out", rank_by="auc", progress=False)

    # the command line turns these into one readable line and exit status 2
    assert cli.main(["report", str(empty), "--out", str(tmp_path / "out")]) == 2


def test_report_notes_files_outside_the_layout(results: Path, tmp_path: Path) -> None:
    root = tmp_path / "one"
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide")
    write_score_table(root, "a", "wide", frame)
    store.write_parquet_atomic(pa.table({"x": [1]}), root / "stray.parquet")
    parts, stray = report.find_partitions(root)
    assert [(p.kind, p.model, p.name) for p in parts] == [("scores", "a", "wide")]
    assert stray == [root / "stray.parquet"]
    assert json.loads((root / "model=a" / "dataset=wide" / store.PROVENANCE_FILE).read_text())["model"] == "a"
    assert parts[0].provenance["model"] == "a"
