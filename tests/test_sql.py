"""DuckDB views over a results folder hold exactly the rows of read_scores / read_interventions."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("duckdb")

from families import tiny_decoder

import headstats
from headstats.io.sql import connect
from headstats.jobs.collect import collect_scores
from headstats.jobs.sweep import run_sweep


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, tokenizer) -> Path:
    """A results folder made with a tiny model: two score tables (several part files each) and a
    sweep (baseline + four points)."""
    root = tmp_path_factory.mktemp("results")
    data, tok = data_dir, tokenizer
    model = tiny_decoder("llama", len(tok))
    model.headstats_name = "tiny-llama"
    corpus = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Document number {i} is here."}) + "\n" for i in range(5)))
    collect_scores(model, tok, str(corpus), root, batch_size=2, rows_per_part=20, progress=False)
    collect_scores(model, tok, "mmlu", root, data_dir=str(data), batch_size=4, progress=False)
    run_sweep(
        model,
        "mmlu",
        tokenizer=tok,
        out=root,
        data_dir=str(data),
        scores="ahon_ln,random",
        targets=[0, 0.1, 0.5],
        progress=False,
    )
    return root


def count(con, sql: str) -> int:
    return int(con.sql(sql).fetchall()[0][0])


def test_views_hold_the_rows_of_the_readers(results: Path) -> None:
    con = connect(results)
    scores, interventions = headstats.read_scores(results), headstats.read_interventions(results)
    assert count(con, "SELECT count(*) FROM scores") == len(scores) > 0
    assert count(con, "SELECT count(*) FROM interventions") == len(interventions) > 0
    # Per table, and the values themselves.
    by_sql = con.sql("SELECT model, dataset, count(*) AS n, sum(ahon_ln) AS s FROM scores GROUP BY ALL").df()
    by_pandas = scores.groupby(["model", "dataset"]).agg(n=("layer", "size"), s=("ahon_ln", "sum")).reset_index()
    merged = by_sql.merge(by_pandas, on=["model", "dataset"], suffixes=("_sql", "_pd"))
    assert len(merged) == len(by_pandas) == 2
    assert (merged["n_sql"] == merged["n_pd"]).all()
    np.testing.assert_allclose(merged["s_sql"], merged["s_pd"], rtol=1e-6)
    per_task = con.sql("SELECT model, task, count(*) AS n, sum(correct::INT) AS c FROM interventions GROUP BY ALL").df()
    assert per_task["n"].tolist() == [len(interventions)]
    assert per_task["c"].tolist() == [int(interventions["correct"].sum())]


def test_a_sample_stored_twice_is_one_row_as_in_read_scores(results: Path, tmp_path: Path) -> None:
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    (partition,) = [p for p in copy.glob("model=*/dataset=docs-*")]
    first = sorted(partition.glob("part-*.parquet"))[0]
    shutil.copy(first, partition / "part-z-second-writer.parquet")  # a later part repeating samples
    con = connect(copy)
    assert (
        count(con, "SELECT count(*) FROM scores")
        == len(headstats.read_scores(copy))
        == len(headstats.read_scores(results))
    )
    assert count(con, "SELECT count(*) FROM (SELECT DISTINCT model, dataset, sample_id, layer, head FROM scores)") == (
        count(con, "SELECT count(*) FROM scores")
    )


def test_one_partition_and_an_empty_kind(results: Path) -> None:
    (partition,) = list(results.glob("model=*/task=mmlu"))
    con = connect(partition)
    assert count(con, "SELECT count(*) FROM interventions") == len(headstats.read_interventions(partition))
    assert count(con, "SELECT count(*) FROM scores") == 0  # a sweep folder holds no score table
    with pytest.raises(headstats.io.store.StoreError, match="does not exist"):
        connect(results / "missing")


def test_a_join_of_answers_and_prompt_scores_gives_what_pandas_gives(results: Path) -> None:
    """Each answer of the baseline and the ahon_ln points joined to its prompt's mean ahon_ln: the
    rows, answers and means of the same merge in pandas."""
    con = connect(results)
    frame = con.sql(
        "SELECT i.score, i.target, i.subject, i.question_id, i.correct, avg(s.ahon_ln) AS ahon_ln FROM interventions i "
        "JOIN scores s ON s.dataset = 'mmlu' AND s.subject = i.subject AND s.question_id = i.question_id "
        "WHERE i.score IS NULL OR i.score = 'ahon_ln' GROUP BY ALL ORDER BY i.score, i.target, i.subject, i.question_id"
    ).df()
    scores, rows = headstats.read_scores(results), headstats.read_interventions(results)
    prompts = scores[scores["dataset"] == "mmlu"].groupby(["subject", "question_id"])["ahon_ln"].mean()
    answers = rows[rows["score"].isna() | (rows["score"] == "ahon_ln")]
    expected = answers.merge(prompts.reset_index(), on=["subject", "question_id"]).sort_values(
        ["score", "target", "subject", "question_id"]
    )
    assert len(frame) == len(expected) == len(answers)  # every answer's prompt was scored
    keys = ["score", "subject", "question_id"]
    assert frame[keys].astype(str).values.tolist() == expected[keys].astype(str).values.tolist()
    np.testing.assert_allclose(frame["target"], expected["target"])
    assert frame["correct"].tolist() == expected["correct"].tolist()
    np.testing.assert_allclose(frame["ahon_ln"], expected["ahon_ln"], rtol=1e-6)
    assert frame["ahon_ln"].std() > 0  # the prompts' means differ: a join to the wrong prompt would show


# -- the documentation's queries -----------------------------------------------------------------------

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "tables.md"


def guide_queries() -> list[str]:
    """The SQL of the guide's "Query results with SQL" example, in order."""
    text = GUIDE.read_text()
    section = text[text.index("## Query results with SQL") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r'con\.sql\("""(.*?)"""\)', section, flags=re.S)


def test_the_guides_queries_give_what_pandas_gives_and_say_something(results: Path) -> None:
    per_layer, lowest, per_point, joined = (connect(results).sql(q).df() for q in guide_queries())
    scores, rows = headstats.read_scores(results), headstats.read_interventions(results)

    expected = scores.groupby(["model", "dataset", "layer"]).agg(
        ahon=("ahon", "mean"), sequences=("sample_id", "nunique")
    )
    got = per_layer.set_index(["model", "dataset", "layer"]).sort_index()
    np.testing.assert_allclose(got["ahon"], expected["ahon"], rtol=1e-6)
    assert got["sequences"].tolist() == expected["sequences"].tolist()
    # Raw norms differ between layers; the layer mean of an _ln score would be 1 everywhere.
    assert got.groupby(level=[0, 1])["ahon"].std().min() > 0.01
    np.testing.assert_allclose(scores.groupby(["model", "dataset", "layer"])["ahon_ln"].mean(), 1.0, rtol=1e-5)

    by_head = scores.groupby(["model", "dataset", "layer", "head"])["ahon_ln"].mean().reset_index()
    expected = (
        by_head.sort_values(["model", "dataset", "ahon_ln", "layer", "head"])
        .groupby(["model", "dataset"])
        .head(5)
        .reset_index(drop=True)
    )
    assert lowest[["model", "dataset", "layer", "head"]].astype(str).values.tolist() == (
        expected[["model", "dataset", "layer", "head"]].astype(str).values.tolist()
    )
    np.testing.assert_allclose(lowest["ahon_ln"], expected["ahon_ln"], rtol=1e-6)
    # Across heads _ln tells them apart (its layer mean is 1): the selected heads lie below the rest.
    assert lowest.groupby(["model", "dataset"])["ahon_ln"].min().max() < 0.95
    assert by_head.groupby(["model", "dataset"])["ahon_ln"].std().min() > 0.02

    rows = rows.assign(zeroed=rows["n_zeroed"] / rows["n_heads"])
    points = rows.groupby(["model", "task", "score", "target"], dropna=False)
    expected = points.agg(accuracy=("correct", "mean"), zeroed=("zeroed", "mean"), questions=("correct", "size"))
    got = per_point.set_index(["model", "task", "score", "target"])
    got = got.loc[expected.index]  # same points, in pandas' order (NULL score = the baseline)
    assert len(per_point) == len(expected) == 1 + 2 * 3  # the baseline + 2 scores x 3 targets
    np.testing.assert_allclose(got[["accuracy", "zeroed"]], expected[["accuracy", "zeroed"]], rtol=1e-9)
    assert got["questions"].tolist() == expected["questions"].tolist()
    assert got["zeroed"].max() > 0.1  # a point that zeroes heads

    prompts = scores[scores["dataset"] == "mmlu"]
    prompt_min = prompts.groupby(["model", "subject", "question_id"])["ahon_ln"].min().rename("min_ahon_ln")
    point = rows[(rows["score"] == "ahon_ln") & (rows["target"] == 0.1)]
    expected = point.merge(prompt_min.reset_index(), on=["model", "subject", "question_id"]).sort_values(
        ["subject", "question_id"]
    )
    assert len(joined) == len(expected) == len(point) > 0
    assert joined["question_id"].tolist() == expected["question_id"].tolist()
    assert joined["correct"].tolist() == expected["correct"].tolist()
    np.testing.assert_allclose(joined["min_ahon_ln"], expected["min_ahon_ln"], rtol=1e-7)
    assert joined["min_ahon_ln"].max() < 1 and joined["min_ahon_ln"].std() > 0  # below the layer mean, per prompt
