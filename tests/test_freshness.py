"""A committed report is built from the analysis file and results beside it (issue 26): its
manifest records their content hashes, and a changed input makes the check fail."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headstats.report.freshness import check_report, recorded_inputs, report_inputs, results_digest
from headstats.studies.registry import load_study

ROOT = Path(__file__).resolve().parents[1]
# Studies whose results are committed (.gitignore lets their results folders in), so their reports can
# be checked on any checkout.
COMMITTED = (
    "study.toml",
    "study_fine.toml",
    "confirm.toml",
    "finetuning_confirm.toml",
    "prune_embedded.toml",
    "prune_certify.toml",
    "compare_embedded.toml",
    "finetuning_compare.toml",
    "prune_pooled.toml",
)


def _stale_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    results = tmp_path / "results"
    partition = results / "model=m" / "task=t"
    partition.mkdir(parents=True)
    pd.DataFrame({"question_id": np.arange(4), "correct": [True, False, True, True]}).to_parquet(
        partition / "baseline.parquet"
    )
    (partition / "_provenance.json").write_text(json.dumps({"settings": {"seed": 0}}))
    analysis = tmp_path / "a.toml"
    analysis.write_text('name = "a"\n[models]\nnames = ["m"]\n')
    report = tmp_path / "report"
    report.mkdir()
    inputs = report_inputs("results", {"n_boot": 10}, "a.toml")
    (report / "_manifest.json").write_text(json.dumps({"written_by": "headstats", "files": [], "inputs": inputs}))
    return results, analysis, report


def test_a_stale_report_fails_the_check(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a build records its paths as given, relative to where it ran
    results, analysis, report = _stale_setup(tmp_path)
    assert check_report(report, root=tmp_path) == []
    assert recorded_inputs(report)["results_digest"]["files"] == 2  # the table and its record
    # The analysis file gains a paragraph after the build: the report is older than it.
    analysis.write_text(analysis.read_text() + '[report_options]\nnotes = "a paragraph"\n')
    (problem,) = check_report(report, root=tmp_path)
    assert "is older than a.toml" in problem and "headstats run ANALYSIS --stages report" in problem
    # Rebuilt: fresh again; then a table changes, or one is added: older than its results.
    inputs = report_inputs("results", {"n_boot": 10}, "a.toml")
    (report / "_manifest.json").write_text(json.dumps({"files": [], "inputs": inputs}))
    assert check_report(report, root=tmp_path) == []
    partition = results / "model=m" / "task=t"
    pd.DataFrame({"question_id": np.arange(4), "correct": [True, True, True, True]}).to_parquet(
        partition / "point-ahon_ln-0.1.parquet"
    )
    (problem,) = check_report(report, root=tmp_path)
    assert "older than its results results" in problem
    # The same files elsewhere have the same digest (content, not place or time).
    (partition / "point-ahon_ln-0.1.parquet").unlink()
    assert check_report(report, root=tmp_path) == []
    assert results_digest(results) == recorded_inputs(report)["results_digest"]
    # A stopped pass's saved batches are read too (what is left to run): one saved since is a change.
    (partition / "_partial-point-ahon_ln-0.1.npz").write_bytes(b"saved batches")
    (problem,) = check_report(report, root=tmp_path)
    assert "older than its results results" in problem
    (partition / "_partial-point-ahon_ln-0.1.npz").unlink()
    # A fine-tuning seed's chain records are read too (its learning): a changed metrics.json is a change,
    # its training log is not an input.
    chain = results / "seed-0" / "_chain"
    chain.mkdir(parents=True)
    (chain / "train.log").write_text("step 1\n")
    assert check_report(report, root=tmp_path) == []
    (chain / "metrics.json").write_text('{"sft": {}}')
    (problem,) = check_report(report, root=tmp_path)
    assert "older than its results results" in problem
    (chain / "metrics.json").unlink()
    # A report built before inputs were recorded cannot be shown fresh.
    (report / "_manifest.json").write_text(json.dumps({"written_by": "headstats", "files": []}))
    (problem,) = check_report(report, root=tmp_path)
    assert "records no inputs" in problem


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_reports_are_built_from_their_current_analysis_file_and_results(name: str) -> None:
    path = ROOT / "analyses" / name
    spec = load_study(path).spec
    report = ROOT / spec.report
    assert report.is_dir() and (ROOT / spec.results).is_dir(), f"{name}: its report and results are committed"
    assert check_report(report, root=ROOT) == []
    assert recorded_inputs(report)["analysis"] == f"analyses/{name}"


def _infinite(cell: str) -> bool:
    try:
        return math.isinf(float(cell))
    except ValueError:
        return False


def test_no_committed_table_holds_an_infinity() -> None:
    """An infinity is no number a reader can use (pandas reads it as one, and every mean it enters is
    infinite): a table says why a value is missing instead (prune reports' ``n_to_certify_note``)."""
    tables = sorted((ROOT / "reports").glob("*/**/*.csv"))
    assert tables, "no committed table under reports/"
    found = []
    for table in tables:
        with table.open(newline="", encoding="utf-8") as handle:
            for i, row in enumerate(csv.reader(handle)):
                found += [f"{table.relative_to(ROOT)} row {i}: {c}" for c in row if _infinite(c)]
    assert found == [], found[:10]
