"""The frontier's statistics (:mod:`headstats.stats.frontier`) give the committed frontier reports'
numbers from their committed results, and each reading against an independent count."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headstats.jobs.frontier import load_frontier
from headstats.report.frontier import family_size, read_points
from headstats.stats import frontier as fs

ROOT = Path(__file__).resolve().parents[1]
FRONTIERS = ("prune_embedded.toml", "prune_certify.toml")


@pytest.mark.parametrize("name", FRONTIERS)
def test_the_committed_frontier_tables_are_the_stats_modules_numbers(name: str) -> None:
    frontier = load_frontier(ROOT / "analyses" / name)
    spec, tables = frontier.prune, ROOT / frontier.report / "tables"
    points, speed, _ = read_points(ROOT / frontier.results)
    points = fs.add_family_bounds(fs.add_questions_to_certify(points, spec.max_drop), family_size(frontier))
    keys = ["model", "score", "share", "task"]
    accuracy = pd.read_csv(tables / "accuracy.csv").sort_values(keys).reset_index(drop=True)
    mine = points.sort_values(keys).reset_index(drop=True)
    assert mine[keys].astype(str).equals(accuracy[keys].astype(str))
    for column in ["n", "accuracy", "drop", "upper", "upper_fw", "lost", "gained", "mdd_80", "n_to_certify"]:
        np.testing.assert_allclose(mine[column].astype(float), accuracy[column].astype(float), rtol=1e-12)
    # no number of questions certifies a point whose observed drop reaches the tolerated one: an empty count, "never"
    notes = accuracy["n_to_certify_note"].fillna("")
    unpruned = mine["score"] == "none"
    assert mine["n_to_certify_note"].equals(notes) and (mine["n_to_certify"].isna() == ((notes != "") | unpruned)).all()
    ratios = fs.speedups(speed)
    committed = pd.read_csv(tables / "speed.csv")
    merged = committed.merge(ratios, on=["model", "score", "share", "batch"], suffixes=("", "_now"))
    assert len(merged) == len(committed)
    for column in ["prefill_speedup", "decode_speedup", "kv_ratio", "prefill_tok_s_unpruned"]:
        np.testing.assert_allclose(merged[column], merged[f"{column}_now"], rtol=1e-12)
    certified = fs.both_certified_shares(points, spec.max_drop / 100, spec.shares)
    wide = pd.read_csv(tables / "certified_shares.csv").set_index(["model", "score"])
    for r in certified.itertuples():
        assert wide.loc[(r.model, r.score), r.task] == r.certified_share
        assert wide.loc[(r.model, r.score), f"{r.task} fw"] == r.certified_share_fw


def test_task_drops_pair_the_answers_by_question_and_count_the_changes() -> None:
    base = pd.DataFrame({"task": "t", "question_id": [3, 1, 2, 0], "correct": [True, True, False, True]})
    # Answers in another order: question 3 lost, 2 gained, 1 and 0 unchanged.
    answers = pd.DataFrame({"task": "t", "question_id": [0, 1, 2, 3], "correct": [True, True, True, False]})
    (row,) = fs.task_drops(base, answers).to_dict("records")
    assert (row["n"], row["lost"], row["gained"], row["drop"], row["accuracy"]) == (4, 1, 1, 0.0, 0.75)
    assert row["upper"] > 0 and fs.baseline_rows(base)["accuracy"].tolist() == [0.75]


def test_the_certification_counts_leave_out_lucky_cells_from_the_range_to_size_a_rerun() -> None:
    table = pd.DataFrame(
        {
            "model": "m",
            "score": ["none", "a", "a", "a", "a"],
            "share": [0, 0.1, 0.2, 0.3, 0.3],
            "task": ["t", "t", "t", "t", "t"],
            "n": 50,
            "upper": [0, 0.005, 0.05, 0.2, 0.2],
            "lost": [0, 0, 3, 1, 1],
            "gained": [0, 0, 1, 4, 4],
            "n_to_certify": [np.nan, 10.0, 900.0, 40.0, 40.0],
            "n_to_certify_note": "",
        }
    )
    counts = fs.certification_counts(table, 0.01)
    assert (counts.certified, counts.cells, counts.need_low, counts.need_high, counts.beyond) == (1, 3, 900, 900, 0)
    assert counts.questions.to_dict() == {"t": 50}
