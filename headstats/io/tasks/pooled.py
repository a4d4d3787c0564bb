"""A pooled held-out task: questions of several benchmarks that no study, calibration or training set
of this repository has seen, large enough to certify a pruned model within one point.

``heldout_pool`` (3,000 questions) is every ARC-Challenge and OpenBookQA validation question (no study
file, calibration or training set uses either) and a seeded random sample of 2,201 HellaSwag
validation questions from the part nothing else touches: not among the first 4,000 rows (the
fine-tuning recipes' DPO material), not in the powered study's sample (2,000, seed 0) nor in the
confirmation's (3,000 of the rest, seed 1), and from no source document (video or article) any of
those drew from. PIQA and ARC-Easy are absent: the powered study evaluated every validation
question of both. ``tests/test_pooled_task.py`` proves the disjointness from what the study files in
``analyses/`` declare.

Each question keeps its source task's prompt and choices; its ``subject`` names that task, and its
``question_id`` is its position in the pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from headstats.io.tasks.base import Question, Task, get_task, load_task, question_fingerprint, register, select_sample
from headstats.io.tasks.data import DataRoot


@dataclass(frozen=True)
class PoolPart:
    """The questions one source task gives a pool: its validation questions after ``skip_first`` rows
    (a training set's fixed leading part), outside every sample in ``exclude`` (:func:`load_task`
    options) and their source documents, then a seeded random sample of ``limit`` (None: all)."""

    task: str
    limit: int | None = None
    seed: int = 0
    skip_first: int = 0
    exclude: tuple[dict, ...] = field(default_factory=tuple)

    def questions(self, data: DataRoot) -> list[Question]:
        source = list(get_task(self.task).iter_questions(data))
        taken: list[Question] = source[: self.skip_first]
        for options in self.exclude:
            data_dir = None if data.embedded else data.root
            taken.extend(load_task(self.task, data_dir=data_dir, **options).questions)
        prints = {question_fingerprint(q) for q in taken}
        documents = {q.document for q in taken if q.document is not None}
        rest = [
            q
            for q in source[self.skip_first :]
            if question_fingerprint(q) not in prints and (q.document is None or q.document not in documents)
        ]
        if self.limit is not None and self.limit > len(rest):
            raise ValueError(f"{self.task}: {self.limit} pooled questions wanted, {len(rest)} are held out")
        chosen = select_sample([None] * len(rest), self.limit, sample="random", seed=self.seed)
        return [rest[i] for i in chosen]


@dataclass(frozen=True, repr=False)
class PooledTask(Task):
    """Questions of several tasks as one task (:class:`PoolPart` each), scored as their tasks score them."""

    name: str
    summary: str
    parts: tuple[PoolPart, ...]
    reports_norm: bool = True

    def iter_questions(
        self, data: DataRoot, *, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
    ) -> Iterator[Question]:
        index = 0
        for part in self.parts:
            for question in part.questions(data):
                yield dataclasses.replace(
                    question, task=self.name, question_id=index, subject=part.task, sample_key=index
                )
                index += 1


# The samples other files draw from HellaSwag (analyses/study.toml, analyses/confirm.toml).
STUDY_HELLASWAG = {"limit": 2000, "sample": "random", "seed": 0}
CONFIRM_HELLASWAG = {"limit": 3000, "sample": "random", "seed": 1, "exclude_limit": 2000, "exclude_seed": 0}
DPO_HELLASWAG_ROWS = 4000  # headstats.jobs.finetune.recipe: hellaswag_rows

register(
    PooledTask(
        "heldout_pool",
        "3,000 questions no study saw: ARC-Challenge, OpenBookQA and a held-out part of HellaSwag, 0-shot",
        (
            PoolPart("arc_challenge"),
            PoolPart("openbookqa"),
            PoolPart(
                "hellaswag",
                limit=2201,
                seed=49,
                skip_first=DPO_HELLASWAG_ROWS,
                exclude=(STUDY_HELLASWAG, CONFIRM_HELLASWAG),
            ),
        ),
    )
)
