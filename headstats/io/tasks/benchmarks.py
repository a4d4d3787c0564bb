"""The registered benchmarks: MMLU (letter and cloze), PIQA, WinoGrande, HellaSwag, ARC.

Templates, splits and few-shot counts follow lm-evaluation-harness's task configs (``mmlu/default``,
``mmlu/continuation``, ``piqa``, ``winogrande``, ``hellaswag``, ``arc``), so log-likelihoods agree
with lm-eval on the same model and questions.

Few-shot examples: MMLU takes the first 5 of each subject's dev split (lm-eval's ``first_n``).
Tasks whose shots lm-eval draws at random from a train split (WinoGrande) draw them here per
question, from ``np.random.default_rng([1234, question_id])``, so a question's prompt never depends
on which other questions run; the embedded data has no train split, so the shots come from the
evaluation split itself, never including the question (what lm-eval does when the few-shot and
evaluation splits coincide).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from headstats.io.tasks.base import Question, Task, register
from headstats.io.tasks.data import DataRoot

if TYPE_CHECKING:
    import datasets

FEWSHOT_SEED = 1234
LETTERS = ("A", "B", "C", "D")
MMLU_DATASET = "hails/mmlu_no_train"


def fewshot_indices(n_docs: int, k: int, question_id: int, *, exclude_self: bool) -> list[int]:
    """``k`` distinct document indices drawn for one question, reproducibly and independently of the
    other questions (``exclude_self``: never the question itself, when shots share its split)."""
    if k == 0:
        return []
    pool = n_docs - 1 if exclude_self else n_docs
    if pool < k:
        raise ValueError(f"{k} few-shot examples requested, but the few-shot split has only {pool} other documents")
    picks = np.random.default_rng([FEWSHOT_SEED, question_id]).choice(pool, size=k, replace=False)
    return [int(p) + int(exclude_self and p >= question_id) for p in picks]


# -- MMLU ------------------------------------------------------------------------------------------


def mmlu_letter_prompt(doc: dict) -> str:
    """lm-eval's MMLU ``doc_to_text`` (docs/design.md#benchmarks)."""
    c = doc["choices"]
    return f"{doc['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:"


def mmlu_cloze_prompt(doc: dict) -> str:
    """lm-eval's ``mmlu_continuation`` ``doc_to_text``: the question alone, the options not shown."""
    return f"Question: {doc['question'].strip()}\nAnswer:"


def subject_title(subject: str) -> str:
    return subject.replace("_", " ")


@dataclass(frozen=True, repr=False)
class MMLUTask(Task):
    """MMLU, 5-shot from dev (first 5 per subject), micro-averaged over the selected questions.

    ``cloze=False``: the letter format of docs/design.md#benchmarks, " A".." D" scored after "Answer:". ``cloze=True``:
    lm-eval's ``mmlu_continuation`` ("rank classification"): "Question: ...\\nAnswer:" and each answer
    text scored as the continuation, shots answered with their answer text; ``correct_norm`` is the
    accuracy with log-likelihoods divided by the answer's length in characters (lm-eval's acc_norm).
    Question ids are indices within the subject's test split.
    """

    name: str
    cloze: bool
    summary: str
    num_fewshot: int = 5
    has_subjects: bool = True
    _offsets: dict = field(default_factory=dict, compare=False)

    @property
    def reports_norm(self) -> bool:  # type: ignore[override]
        return self.cloze

    def header(self, subject: str) -> str:
        kind = "questions" if self.cloze else "multiple choice questions"
        return f"The following are {kind} (with answers) about {subject_title(subject)}.\n\n"

    def subjects(self, data: DataRoot) -> list[str]:
        found = [s for s in data.subdirs(MMLU_DATASET) if data.has_split(f"{MMLU_DATASET}/{s}", "test")]
        if not found:
            raise ValueError(f"no MMLU subjects with a test split under {data.hf_dir / MMLU_DATASET}")
        return found

    def select_subjects(self, data: DataRoot, subjects: Sequence[str] | None) -> list[str]:
        available = self.subjects(data)
        if not subjects:
            return available
        by_key = {s.lower(): s for s in available}
        wanted = set()
        for name in subjects:
            key = name.strip().lower().replace(" ", "_")
            if key not in by_key:
                raise ValueError(f"unknown MMLU subject {name!r}: choose from {', '.join(available)}")
            wanted.add(by_key[key])
        return [s for s in available if s in wanted]  # alphabetical, like lm-eval's mmlu group

    def subject_offsets(self, data: DataRoot) -> dict[str, int]:
        """Where each subject starts in the all-subjects test set (subjects alphabetically, as in
        cais/mmlu's "all" config): the stable global index used for collection and random draws."""
        key = str(data.hf_dir)
        if key not in self._offsets:
            offsets, total = {}, 0
            for subject in self.subjects(data):
                offsets[subject] = total
                total += len(data.load_split(f"{MMLU_DATASET}/{subject}", "test"))
            self._offsets[key] = offsets
        return self._offsets[key]

    def count(self, data: DataRoot) -> int:
        return sum(len(data.load_split(f"{MMLU_DATASET}/{s}", "test")) for s in self.subjects(data))

    def iter_questions(
        self, data: DataRoot, *, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
    ) -> Iterator[Question]:
        offsets = self.subject_offsets(data)
        to_prompt = mmlu_cloze_prompt if self.cloze else mmlu_letter_prompt
        for subject in self.select_subjects(data, subjects):
            dev = data.rows(f"{MMLU_DATASET}/{subject}", "dev")
            if len(dev) < self.num_fewshot:
                raise ValueError(f"MMLU {subject}: dev split has {len(dev)} questions, {self.num_fewshot} needed")
            shot_docs = dev[: self.num_fewshot]
            answer = (lambda d: d["choices"][d["answer"]]) if self.cloze else (lambda d: LETTERS[d["answer"]])
            shots = tuple((to_prompt(d), answer(d)) for d in shot_docs)
            test = data.rows(f"{MMLU_DATASET}/{subject}", "test")
            n = len(test) if limit_per_subject is None else min(limit_per_subject, len(test))
            for i in range(n):
                doc = test[i]
                choices = tuple(doc["choices"])
                yield Question(
                    task=self.name,
                    question_id=i,
                    subject=subject,
                    gold=int(doc["answer"]),
                    prompts=(to_prompt(doc),),
                    continuations=choices if self.cloze else LETTERS,
                    choice_texts=choices if self.cloze else LETTERS,
                    description=self.header(subject),
                    shots=shots,
                    sample_key=offsets[subject] + i,
                )


# -- tasks with one split and no subjects ------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class ChoiceTask(Task):
    """A context and one continuation per choice (the choice's text), scored by log-likelihood;
    ``correct_norm`` divides each log-likelihood by its choice's length in characters (acc_norm)."""

    name: str
    summary: str
    dataset: str  # path under hf_datasets/, e.g. "piqa/plain_text"
    split: str
    doc_to_text: Callable[[dict], str]
    doc_to_choices: Callable[[dict], list[str]]
    doc_to_gold: Callable[[dict], int]
    num_fewshot: int = 0
    fewshot_split: str = "train"  # used when the data has it; else shots come from `split`, never the question
    reports_norm: bool = True
    doc_to_document: Callable[[dict], str] | None = None  # the question's source document (a cluster)

    def docs(self, data: DataRoot) -> datasets.Dataset:
        return data.load_split(self.dataset, self.split)

    def count(self, data: DataRoot) -> int:
        return len(self.docs(data))

    def fewshot_source(self, data: DataRoot) -> tuple[list[dict], bool]:
        """The rows shots are drawn from, and whether they are the evaluated split itself."""
        if self.num_fewshot and data.has_split(self.dataset, self.fewshot_split):
            return data.rows(self.dataset, self.fewshot_split), False
        return data.rows(self.dataset, self.split), True

    def shots(self, data: DataRoot, question_id: int) -> tuple[tuple[str, str], ...]:
        if not self.num_fewshot:
            return ()
        source, same_split = self.fewshot_source(data)
        picks = fewshot_indices(len(source), self.num_fewshot, question_id, exclude_self=same_split)
        return tuple(self.shot(source[i]) for i in picks)

    def shot(self, doc: dict) -> tuple[str, str]:
        return self.doc_to_text(doc), self.doc_to_choices(doc)[self.doc_to_gold(doc)]

    def question(self, doc: dict, question_id: int, shots: tuple[tuple[str, str], ...]) -> Question:
        choices = tuple(self.doc_to_choices(doc))
        return Question(
            task=self.name,
            question_id=question_id,
            subject=None,
            gold=self.doc_to_gold(doc),
            prompts=(self.doc_to_text(doc),),
            continuations=choices,
            choice_texts=choices,
            shots=shots,
            document=self.doc_to_document(doc) if self.doc_to_document else None,
        )

    def iter_questions(
        self, data: DataRoot, *, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
    ) -> Iterator[Question]:
        for i, doc in enumerate(data.rows(self.dataset, self.split)):
            yield self.question(doc, i, self.shots(data, i))


@dataclass(frozen=True, repr=False)
class PartialChoiceTask(ChoiceTask):
    """Partial scoring (WinoGrande): each choice fills the blank, giving one context per choice, and
    the text after the blank, shared by all choices, is the continuation scored."""

    doc_to_contexts: Callable[[dict], list[str]] = lambda doc: []
    doc_to_shared_continuation: Callable[[dict], str] = lambda doc: ""
    reports_norm: bool = False

    def shot(self, doc: dict) -> tuple[str, str]:
        return self.doc_to_contexts(doc)[self.doc_to_gold(doc)], self.doc_to_shared_continuation(doc)

    def question(self, doc: dict, question_id: int, shots: tuple[tuple[str, str], ...]) -> Question:
        contexts = tuple(self.doc_to_contexts(doc))
        return Question(
            task=self.name,
            question_id=question_id,
            subject=None,
            gold=self.doc_to_gold(doc),
            prompts=contexts,
            continuations=(self.doc_to_shared_continuation(doc),),
            choice_texts=contexts,
            shots=shots,
        )


def hellaswag_preprocess(text: str) -> str:
    """lm-eval's HellaSwag cleaning (WikiHow's bracketed artefacts)."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag_query(doc: dict) -> str:
    return hellaswag_preprocess(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())


def winogrande_blank(doc: dict) -> int:
    return doc["sentence"].index("_")


def arc_gold(doc: dict) -> int:
    return doc["choices"]["label"].index(doc["answerKey"])


register(MMLUTask("mmlu", cloze=False, summary="MMLU, 57 subjects, letter format, 5-shot from dev"))
register(MMLUTask("mmlu_cloze", cloze=True, summary="MMLU, each answer text scored (lm-eval mmlu_continuation)"))
register(
    ChoiceTask(
        "piqa",
        "PIQA physical commonsense, 0-shot",
        "piqa/plain_text",
        "validation",
        doc_to_text=lambda d: f"Question: {d['goal']}\nAnswer:",
        doc_to_choices=lambda d: [d["sol1"], d["sol2"]],
        doc_to_gold=lambda d: int(d["label"]),
    )
)
register(
    PartialChoiceTask(
        "winogrande",
        "WinoGrande (xl), 5-shot, partial scoring",
        "winogrande/winogrande_xl",
        "validation",
        doc_to_text=lambda d: d["sentence"],
        doc_to_choices=lambda d: [d["option1"], d["option2"]],
        doc_to_gold=lambda d: {"1": 0, "2": 1}[d["answer"]],
        num_fewshot=5,
        doc_to_contexts=lambda d: [d["sentence"][: winogrande_blank(d)] + o for o in (d["option1"], d["option2"])],
        doc_to_shared_continuation=lambda d: d["sentence"][winogrande_blank(d) + 1 :].strip(),
    )
)
register(
    ChoiceTask(
        "hellaswag",
        "HellaSwag, 0-shot, full endings scored",
        "hellaswag/none",
        "validation",
        doc_to_text=hellaswag_query,
        doc_to_choices=lambda d: [hellaswag_preprocess(e) for e in d["endings"]],
        doc_to_gold=lambda d: int(d["label"]),
        # 10,042 contexts from 8,407 ActivityNet videos and WikiHow articles (up to 10 from one).
        doc_to_document=lambda d: d.get("source_id"),
    )
)
for _name, _config in (("arc_easy", "ARC-Easy"), ("arc_challenge", "ARC-Challenge")):
    register(
        ChoiceTask(
            _name,
            f"{_config}, 0-shot, full answers scored",
            f"ai2_arc/{_config}",
            "validation",
            doc_to_text=lambda d: f"Question: {d['question']}\nAnswer:",
            doc_to_choices=lambda d: list(d["choices"]["text"]),
            doc_to_gold=arc_gold,
        )
    )
register(
    ChoiceTask(
        "openbookqa",
        "OpenBookQA (main), 0-shot, full answers scored",
        "openbookqa/main",
        "validation",
        doc_to_text=lambda d: d["question_stem"],
        doc_to_choices=lambda d: list(d["choices"]["text"]),
        doc_to_gold=lambda d: d["choices"]["label"].index(d["answerKey"].lstrip()),
    )
)
