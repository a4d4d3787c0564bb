"""Declarative analyses: analyses/*.toml parse, validate, and run collect -> ablate -> report."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

import headstats
from headstats.cli import main
from headstats.io import store
from headstats.jobs.analysis import load_analysis
from headstats.pipeline import run_analysis
from headstats.specs import Resources

ANALYSES = Path(__file__).parent.parent / "analyses"


@pytest.mark.parametrize("name", ["embedded", "finetuning", "scaling", "datasets", "finetuning_embedded"])
def test_shipped_analyses_are_valid(name: str) -> None:
    spec = load_analysis(ANALYSES / f"{name}.toml")
    assert spec.models and spec.ablate and spec.collect_datasets
    assert str(spec.report) == f"reports/{name.replace('_', '-')}"


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
        ('[models]\nnames = ["m"]\n[design]\nmargn = 0.1\n', r"\[design\].*unknown key.*margn"),
        ('[models]\nnames = ["m"]\n[design]\nseeds = [0, 1]\nmin_seeds = 2\n', "no margin given"),
        ('[models]\nnames = ["m"]\n[design]\nmargin = 0.1\nseeds = [0, 1]\n', "fewer than min_seeds = 6"),
        ('[models]\nnames = ["m"]\n[design]\nmargin = 0.1\nstage_ends = ["sft-40"]\n', "STAGE@STEP"),
    ],
)
def test_bad_analysis_files_are_refused_before_any_work(tmp_path: Path, text: str, message: str) -> None:
    """Through the file's kind: a [design] file is a fine-tuning study, checked by its own loader."""
    from headstats.studies import load_study

    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_study(path)


def test_the_fine_tuning_confirmation_reads_its_design_and_dry_runs_before_its_chains_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The pre-registered design loads through its kind (fine-tuning, marked by [design]) with every key
    checked, its [models] the checkpoints the design derives; an analysis loader refuses it, naming the
    command; its dry run counts every step and text of the checkpoints not trained yet instead of failing
    on the first (the file's chains moved to an empty folder here)."""
    from headstats.studies import load_study

    study = load_study(ANALYSES / "finetuning_confirm.toml")
    assert study.kind == "fine-tuning"
    spec, design = study.spec, study.spec.design
    assert len(design.seeds) == 12 and design.margin == 0.12
    assert design.stage_ends == ("sft@40", "dpo@30", "grpo@40") and spec.collect.limit == design.texts
    with pytest.raises(ValueError) as err:
        load_analysis(ANALYSES / "finetuning_confirm.toml")
    assert "top level: unknown key(s) design" in str(err.value) and str(err.value).endswith(
        f"a study file of another kind runs with headstats run {ANALYSES / 'finetuning_confirm.toml'} (its kind is "
        "read from its table)"
    )
    moved = tmp_path / "finetuning_confirm.toml"
    moved.write_text((ANALYSES / "finetuning_confirm.toml").read_text().replace(design.chains, str(tmp_path)))
    assert main(["run", "--dry-run", str(moved), "--stages", "train,collect"]) == 0
    out = capsys.readouterr().out
    assert out.count("(not trained yet)") == 3 * (1 + 3 * len(design.seeds))
    assert len(re.findall(r"^ *seed-\d+ +train ", out, flags=re.M)) == 3 * len(design.seeds)


def test_missing_analysis_file_is_a_clear_cli_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "analyses/nope.toml"]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_run_spec_overrides_the_files_loading_options_it_sets_and_checks_its_stages(tmp_path: Path) -> None:
    from headstats.jobs.analysis import merged_load
    from headstats.specs import RunSpec

    path = tmp_path / "a.toml"
    path.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n'
        '[models]\nnames = ["m"]\ndtype = "bfloat16"\ntrust_remote_code = true\n'
    )
    spec = load_analysis(path)
    assert merged_load(spec, RunSpec()) == spec.load
    # Options the run leaves at their defaults keep the file's (trust_remote_code is not turned off).
    load = merged_load(spec, RunSpec(dtype="float32", device="cpu"))
    assert (load.dtype, load.device, load.trust_remote_code) == ("float32", "cpu", True)
    with pytest.raises(ValueError, match="stage"):
        run_analysis(spec, stages=("collect", "bogus"))
    assert not (tmp_path / "results").exists()


def _analysis_file(tmp_path: Path, model_dir: Path, body: str) -> Path:
    """A tiny analysis file: results and report under ``tmp_path``, the one model, then ``body``."""
    path = tmp_path / "tiny.toml"
    path.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n'
        f'[models]\nnames = ["{model_dir}"]\n{body}'
    )
    return path


@pytest.mark.parametrize("launcher", [None, "debug"])
def test_an_analysis_runs_every_stage_resumes_and_reports(
    tiny_llama_dir: Path, tmp_path: Path, launcher: str | None
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
names = ["{tiny_llama_dir}"]
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


def test_a_partial_run_reports_what_is_missing_and_how_long_each_pass_took(
    tiny_llama_dir: Path, tmp_path: Path
) -> None:
    from headstats.jobs.analysis import planned_points

    spec_path = _analysis_file(
        tmp_path,
        tiny_llama_dir,
        """
[[ablate]]
task = "piqa"
limit = 4
scores = ["ahon_ln", "random"]
targets = [0, 0.3]
[[ablate]]
task = "arc_easy"
limit = 3
scores = ["random"]
targets = [0.5]
[report_options]
n_boot = 20
n_perm = 20
notes = "The model body ran in float32.\\n\\nA second paragraph."
""",
    )
    spec = load_analysis(spec_path)
    planned = planned_points(spec, spec.models)
    assert len(planned) == 5 + 2 and set(planned["task"]) == {"piqa", "arc_easy"}
    run_analysis(spec, progress=False, stages=("ablate",))
    results = tmp_path / "results"
    (slug_dir,) = results.iterdir()
    shutil.rmtree(slug_dir / "task=arc_easy")  # as if the run had stopped before the second task
    (slug_dir / "task=piqa" / "point-random-0.3.parquet").unlink()  # ... and before the last point
    index = run_analysis(spec, progress=False, stages=("report",))
    assert index is not None
    done = pd.read_csv(tmp_path / "report" / "tables" / "completeness.csv").set_index("task")
    assert done.loc["piqa", ["points_planned", "points_finished", "status"]].tolist() == [5, 4, "partial"]
    assert done.loc["piqa", "missing"] == "random (1/2)"
    assert done.loc["arc_easy", ["points_finished", "status", "missing"]].tolist() == [
        0,
        "not started",
        "baseline (0/1), random (0/1)",
    ]
    page = index.read_text()
    assert "<strong>This report is partial</strong>: 4 of the 7 sweep points" in page
    # the file's notes go to the Methods and caveats appendix, a blank line in them starting a paragraph
    assert "Notes on this run</h3>\n<p>The model body ran in float32.</p>\n<p>A second paragraph.</p>" in page
    assert "float32.\n\nA second paragraph." in (tmp_path / "report" / "summary.md").read_text()
    # Run time: the passes' own records (baseline and ahon_ln @ 0.3 ran; the p = 0 points reused the baseline).
    files = sorted((slug_dir / "task=piqa").glob("*.parquet"))
    seconds = [store.file_provenance(f)["point"]["seconds"] for f in files]
    times = pd.read_csv(tmp_path / "report" / "tables" / "run_times.csv").iloc[0]
    assert (times["passes_timed"], times["reused_baseline"], times["untimed"]) == (2, 2, 0)
    assert times["hours"] == pytest.approx(sum(t for t in seconds if t is not None) / 3600, rel=1e-3)
    cpu = [store.file_provenance(f)["point"]["cpu_seconds"] for f in files]
    assert times["cpu_hours"] == pytest.approx(sum(t for t in cpu if t is not None) / 3600, rel=1e-3)
    assert 0 < times["cpu_hours"] <= times["hours"] * torch.get_num_threads() * 1.5
    assert f"{torch.get_num_threads()} threads" in times["machine"] and times["dtype"] == "float32"


def test_run_times_give_one_row_per_machine_and_dtype_of_a_resumed_sweep() -> None:
    from headstats.stats.coverage import run_times

    amd = {"cpu": "AMD EPYC", "cores": 2, "torch_threads": 2, "bf16_units": []}
    xeon = {"cpu": "Xeon", "cores": 2, "torch_threads": 2, "bf16_units": ["avx512_bf16", "amx_bf16"]}
    passes = pd.DataFrame(
        {
            "model": "m",
            "task": "piqa",
            "score": ["baseline", "a", "a", "b", "b"],
            "target": [0, 0.1, 0.2, 0.1, 0.2],
            "seconds": [600.0, 300.0, None, 60.0, 120.0],
            "cpu_seconds": [1000.0, 500.0, None, 100.0, 200.0],
            "timed": True,
            "untimed_batches": [0, 40, 0, 0, 0],  # a pass resumed from batches saved before times were kept
            "finished": ["t1", "t2", "t2", "t3", "t4"],
            "machine": [amd, amd, amd, xeon, xeon],
            "dtype": ["float32"] * 3 + ["bfloat16"] * 2,
        }
    )
    table = run_times(passes).set_index("dtype")
    assert len(table) == 2
    assert table.loc["float32", ["passes_timed", "reused_baseline", "last_finished"]].tolist() == [2, 1, "t2"]
    assert table["part_timed"].to_dict() == {"float32": 1, "bfloat16": 0}
    assert table.loc["float32", ["hours", "cpu_hours"]].tolist() == pytest.approx([900 / 3600, 1500 / 3600])
    assert table.loc["bfloat16", "min_per_pass"] == pytest.approx(1.5)
    assert table.loc["bfloat16", "machine"] == "Xeon, 2 cores, 2 threads (avx512_bf16, amx_bf16)"
    assert table.loc["float32", "machine"] == "AMD EPYC, 2 cores, 2 threads (no bf16 units)"


def test_dry_run_counts_the_work_writes_nothing_and_sees_what_is_done(
    tiny_llama_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from headstats.jobs import checkpoint
    from headstats.studies import dry_run, load_study

    spec_path = _analysis_file(
        tmp_path,
        tiny_llama_dir,
        """
[collect]
datasets = ["piqa"]
limit = 3
[[ablate]]
task = "piqa"
limit = 4
scores = ["ahon_ln", "awft", "random"]
targets = [0, 0.1, 0.3]
batch_size = 3
[report_options]
n_boot = 20
n_perm = 20
""",
    )
    assert main(["run", "--dry-run", str(spec_path)]) == 0
    out = capsys.readouterr().out
    assert "Nothing was written" in out and "estimated" in out
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.parquet"))
    spec = load_analysis(spec_path)
    study = load_study(spec_path)
    collect, ablate = dry_run(study).units
    assert (collect.stage, collect.items, collect.sequences, collect.passes_left) == ("collect", 3, 3, 1)
    # PIQA: two sequences per question (one per solution); the baseline pass (which also records the
    # calibration scores) plus 3 scores x 2 non-zero targets; p = 0 reuses the baseline.
    assert (ablate.items, ablate.sequences, ablate.passes_total, ablate.passes_left) == (4, 8, 7, 7)
    assert ablate.forwards_left == 3 * 7 and ablate.tokens_per_s > 0 and ablate.seconds_left > 0
    # The time is costed in computed tokens (padding included) of the run's own length-sorted batches.
    assert ablate.computed > ablate.tokens and "padding" in out
    assert ablate.seconds_left == pytest.approx(ablate.computed * 7 / ablate.tokens_per_s)

    # A run stopped after two of its first pass's three batches: the dry run counts what they saved.
    real_add = checkpoint.PassCheckpoint.add

    def add_then_stop(self, batch) -> None:
        real_add(self, batch)
        if self.n_sequences == 6:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "SAVE_EVERY", 3600.0)  # saved by the interrupt, not by the clock
        patch.setattr(checkpoint.PassCheckpoint, "add", add_then_stop)
        with pytest.raises(KeyboardInterrupt):
            run_analysis(spec, progress=False, stages=("ablate",))
    (ablate,) = [u for u in dry_run(study).units if u.stage == "ablate"]
    assert (ablate.passes_left, ablate.saved, ablate.forwards_left) == (7, 6, 3 * 7 - 2)
    assert ablate.seconds_left == pytest.approx(ablate.computed * (7 - 6 / 8) / ablate.tokens_per_s)
    assert main(["run", "--dry-run", str(spec_path)]) == 0 and "saved seq" in capsys.readouterr().out
    run_analysis(spec, progress=False, stages=("collect", "ablate"))
    collect, ablate = dry_run(study).units
    assert collect.passes_left == 0 and ablate.passes_left == 0 and collect.seconds_left == ablate.seconds_left == 0


def test_dry_run_loads_no_model_when_no_pass_is_left_and_explains_its_counts(
    tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import headstats.io.models as models
    from headstats.studies import dry_run, dryrun, load_study

    spec_path = _analysis_file(
        tmp_path,
        tiny_llama_dir,
        """
[[ablate]]
task = "piqa"
limit = 4
scores = ["ahon_ln", "awft", "random"]
targets = [0, 0.1, 0.3]
batch_size = 3
""",
    )
    spec = load_analysis(spec_path)
    run_analysis(spec, progress=False, stages=("ablate",))

    def no_loading(*args, **kwargs):
        raise AssertionError("the dry run loaded a model with no pass left")

    monkeypatch.setattr(models, "load_model", no_loading)
    monkeypatch.setattr(dryrun, "machine_load", lambda: (9.0, 2))  # measured as the dry run begins
    planned = dry_run(load_study(spec_path))
    (unit,) = planned.units
    assert planned.load_at_start == (9.0, 2) and "busy" not in planned.summary()  # nothing was probed
    # 3 scores x 3 targets planned: the baseline and the 6 points at p > 0 are passes; the 3 points at
    # p = 0 zero nothing and reuse the baseline's answers.
    assert (unit.passes_left, unit.passes_total, unit.reused) == (0, 7, 3)
    assert unit.passes_total - 1 + unit.reused == 3 * 3
    assert unit.sequences is None and unit.forwards_left == 0 and unit.seconds_left == 0
    assert main(["run", "--dry-run", str(spec_path)]) == 0
    out = capsys.readouterr()
    assert "0/7" in out.out and "scores x targets = passes - 1 + reuse" in out.out
    assert "no pass left: not loaded" in out.err


def test_a_dry_run_begun_on_a_busy_cpu_says_its_times_may_be_long_by_how_much(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from headstats.jobs import dryrun

    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 2.5, 2.0), raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert dryrun.machine_load() == (3.0, 2)
    busy = dryrun.DryRun([], "cpu", 8, load_at_start=(3.0, 2)).summary()
    # 2 cores shared with a load of 3: the probe had about 2 / 5 of the CPU
    assert "(load average 3.0 on 2 cores)" in busy and "up to about 2.5 times" in busy
    assert "busy" not in dryrun.DryRun([], "cpu", 8, load_at_start=(0.4, 2)).summary()  # 1.2 times: below 1.25
    assert "busy" in dryrun.DryRun([], "cpu", 8, load_at_start=(0.5, 2)).summary()
    assert "busy" not in dryrun.DryRun([], "cuda:0", 8, load_at_start=(3.0, 2)).summary()  # a GPU's probe
    assert "busy" not in dryrun.DryRun([], "cpu", 8).summary()  # no load average on this system

    def no_load_average():
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", no_load_average)
    assert dryrun.machine_load() is None


def test_the_total_names_the_work_nothing_timed_instead_of_counting_it_as_nothing() -> None:
    from headstats.jobs import dryrun

    def unit(left: int, seconds: float | None) -> dryrun.WorkUnit:
        return dryrun.WorkUnit("m", "train", "sft", 40, None, None, None, left, 1, 1, None, seconds=seconds)

    timed = dryrun.DryRun([unit(1, 90.0), unit(0, None)], "cpu", 8)
    assert timed.untimed == 0 and "estimated 2 min on cpu" in timed.summary()
    partly = dryrun.DryRun([unit(1, 90.0), unit(1, None), unit(1, None)], "cpu", 8)
    assert partly.untimed == 2
    assert "estimated 2 min plus 2 unit(s) with work left and no rate to time them (est. time -)" in partly.summary()
    assert list(partly.table()["est. time"]) == ["2 min", "-", "-"]


@pytest.mark.integration
def test_the_committed_study_results_resume_under_the_study_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """results/study/ is committed so that a fresh checkout resumes the powered study: every committed
    partition has the run key the study file plans now (a sweep refuses to resume under another) and
    the weights' fingerprint of the model it names, and every committed point is one the file plans."""
    from headstats.io.identity import directory_fingerprint
    from headstats.io.models import resolve_model_path
    from headstats.jobs.analysis import merged_load, planned_points

    monkeypatch.chdir(ANALYSES.parent)
    spec = load_analysis(ANALYSES / "study.toml")
    partitions, stray = store.find_partitions(spec.results)
    assert partitions and not stray
    planned = planned_points(spec, spec.models, merged_load(spec, None))  # raises where a run key differs
    keys = set(zip(planned["model"], planned["task"], planned["score"], planned["target"].round(6), strict=True))
    for partition in partitions:
        model = partition.provenance["model"]
        assert model in spec.models and partition.provenance["dtype"] == "bfloat16"
        assert partition.provenance["revision"] == directory_fingerprint(Path(resolve_model_path(model)))
        for path in store.data_files(partition.path):
            point = store.file_provenance(path)["point"]
            assert (partition.model, partition.name, point["score"], round(point["target"], 6)) in keys


def test_the_study_file_is_the_powered_study() -> None:
    spec = load_analysis(ANALYSES / "study.toml")
    assert spec.models == ["smollm2-135m", "gemma3-270m"]
    tasks = {a.task: a for a in spec.ablate}
    assert set(tasks) == {"piqa", "arc_easy", "hellaswag"}
    assert tasks["piqa"].limit is None and tasks["arc_easy"].limit is None and tasks["hellaswag"].limit == 2000
    for ablation in spec.ablate:
        assert set(ablation.scores) == {"ahon_ln", "awft", "entropy_ln", "avvn_ln", "random"}
        assert [round(t, 2) for t in ablation.targets] == [0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]


def test_the_fine_grid_reruns_the_studys_gemma_sweeps_below_its_first_target() -> None:
    """study_fine.toml asks the study's question on a finer grid: every setting of a run (task,
    sample, format, calibration, dtype, batch) is the study's. Only the attention kernel follows
    the score list (a sweep of `ahon_ln` alone runs the fused one), so in a bf16 body the
    baselines agree with the study's up to that path's noise, not answer for answer."""
    import dataclasses

    study, fine = (load_analysis(ANALYSES / f"{name}.toml") for name in ("study", "study_fine"))
    assert fine.models == ["gemma3-270m"] and fine.load == study.load
    assert fine.results != study.results and fine.report != study.report
    studied = {a.task: a for a in study.ablate}
    assert [a.task for a in fine.ablate] == ["arc_easy", "piqa", "hellaswag"]
    for ablation in fine.ablate:
        first = min(t for t in studied[ablation.task].targets if t > 0)
        assert 0 in ablation.targets and all(t < first for t in ablation.targets)
        same = dataclasses.replace(
            ablation, scores=studied[ablation.task].scores, targets=studied[ablation.task].targets
        )
        assert same == studied[ablation.task]
