"""Declarative analyses: analyses/*.toml parse, validate, and run collect -> ablate -> report."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

import headstats
from headstats.cli import main
from headstats.jobs.analysis import load_analysis, run_analysis
from headstats.jobs.specs import Resources

ANALYSES = Path(__file__).parent.parent / "analyses"


@pytest.mark.parametrize("name", ["embedded", "finetuning", "scaling", "datasets"])
def test_shipped_analyses_are_valid(name: str) -> None:
    spec = load_analysis(ANALYSES / f"{name}.toml")
    assert spec.models and spec.ablate and spec.collect_datasets
    assert str(spec.report) == f"reports/{name}"


def test_the_embedded_analysis_runs_the_real_embedded_model_on_bundled_data() -> None:
    spec = load_analysis(ANALYSES / "embedded.toml")
    assert spec.selected_models() == ["smollm2-135m"]
    assert spec.selected_models(all_models=True) == ["smollm2-135m", "gemma3-270m"]
    assert {a.task for a in spec.ablate} == {"mmlu", "mmlu_cloze", "piqa"}
    assert "wikipedia" in spec.collect_datasets


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\n', "needs names"),
        ('[models]\nnames = ["m"]\n[collect]\ndatasets = ["mmlu"]\nlimt = 3\n', "unknown key.*limt"),
        ('[models]\nnames = ["m"]\n[[ablate]]\ntask = "nope"\n', "unknown task 'nope'"),
        (
            '[models]\nnames = ["m"]\n[[ablate]]\ntask = "mmlu"\ntargets = [0, 2]\n',
            r"target fraction 2 is outside \[0, 1\]",
        ),
        ('[models]\nnames = ["m"]\n[[ablate]]\ntask = "mmlu"\nscores = ["bogus"]\n', "unknown score id"),
        ('[models]\nnames = ["m"]\n[collect]\ndatasets = ["no-such.jsonl"]\n', "no-such.jsonl"),
        ("[models\n", "not valid TOML"),
    ],
)
def test_bad_analysis_files_are_refused_before_any_work(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_analysis(path)


def test_missing_analysis_file_is_a_clear_cli_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "analyses/nope.toml"]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with the embedded model's tokenizer, saved like any checkpoint."""
    path = tmp_path_factory.mktemp("tiny-analysis-model")
    tokenizer = AutoTokenizer.from_pretrained(headstats.io.assets.embedded_model("smollm2-135m"))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("launcher", [None, "debug"])
def test_an_analysis_runs_every_stage_resumes_and_reports(
    tiny_model_dir: Path, tmp_path: Path, launcher: str | None
) -> None:
    corpus = tmp_path / "notes.txt"
    corpus.write_text("First paragraph of text.\n\nSecond paragraph, a little longer than the first.\n\nThird.")
    spec_path = tmp_path / "tiny.toml"
    spec_path.write_text(
        f"""
name = "tiny"
results = "{tmp_path / "results"}"
report = "{tmp_path / "report"}"
[models]
names = ["{tiny_model_dir}"]
[collect]
datasets = ["{corpus}", "piqa"]
limit = 3
[[ablate]]
task = "piqa"
limit = 4
scores = ["ahon_ln", "random"]
targets = [0, 0.3]
[report_options]
n_boot = 20
n_perm = 20
"""
    )
    spec = load_analysis(spec_path)
    grid = Resources(launcher=launcher, folder=str(tmp_path / "grid")) if launcher else None
    index = run_analysis(spec, progress=False, resources=grid)
    assert index is not None and index.is_file() and (tmp_path / "report" / "summary.md").is_file()
    scores = headstats.read_scores(tmp_path / "results")
    datasets = {d.split("-")[0] for d in scores["dataset"]}  # a user file's name carries its content hash
    assert datasets == {"notes", "piqa"} and scores.groupby("dataset")["sample_id"].nunique().max() == 3
    rows = headstats.read_interventions(tmp_path / "results")
    assert set(rows["score"]) == {"baseline", "ahon_ln", "random"} and rows["question_id"].nunique() == 4
    # Running again redoes nothing: every part and point file is left as it was.
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*.parquet")}
    run_analysis(spec, progress=False, stages=("collect", "ablate"), resources=grid)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*.parquet")} == files
