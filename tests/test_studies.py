"""Study kinds (headstats.studies): every committed study file is loaded, planned and dry-run through
its kind, one code path for all of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from headstats.cli import main
from headstats.studies import STUDY_KINDS, kind_of, load_study, plan_study

ROOT = Path(__file__).parent.parent
COMMITTED = sorted(p.name for p in (ROOT / "analyses").glob("*.toml"))
# The kind each committed file is, by the table it has (none: an analysis).
FINISHED = ("prune_embedded.toml", "prune_certify.toml")  # prune_pooled.toml's points are committed as they finish


def test_a_file_with_the_tables_of_two_kinds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.toml"
    path.write_text('[models]\nnames = ["m"]\n[prune]\nscores = ["ahon_ln"]\n[compare]\nmodels = ["a", "b"]\n')
    with pytest.raises(ValueError, match=r"two study kinds, \[compare\] \(comparison\) and \[prune\] \(frontier\)"):
        kind_of(path)


@pytest.mark.integration  # the files name the embedded models (their paths are resolved; no weights load)
@pytest.mark.parametrize("name", COMMITTED)
def test_every_committed_study_file_plans_its_units_without_loading_a_model(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The planner counts each unit from the file and the results folder alone: per model the file's
    collections and sweeps (a sweep's passes and reused points make up its scores x targets), per
    model a frontier's points (a dry-run row per task), per path a confirmation's sweeps, per model and dataset a
    comparison's collections. Where nothing needs a model, ``headstats run --dry-run`` says so without
    loading one."""
    import headstats.io.models as models

    def no_loading(*args, **kwargs):
        raise AssertionError(f"{name}: the dry run loaded a model")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(models, "load_model", no_loading)
    path = Path("analyses") / name
    kind = kind_of(path)
    assert kind.section is None or kind.section in tomllib.loads(path.read_text())  # its own table marks it
    study = load_study(path)
    units = plan_study(study, stages=kind.stages)
    here = [u for u in units if not u.absent and u.missing is None]
    spec = study.spec
    if kind.name == "analysis":
        models_here = list(dict.fromkeys(u.model for u in here))
        assert [u.what for u in here if u.stage == "collect"] == spec.collect_datasets * len(models_here)
        sweeps = [u for u in here if u.stage == "ablate"]
        assert [u.what for u in sweeps] == [a.task for a in spec.ablate] * len(models_here)
        for unit, ablation in zip(sweeps, spec.ablate * len(models_here), strict=True):
            assert unit.total - 1 + unit.counted.reused == len(ablation.scores) * len(ablation.targets)
    elif kind.name == "frontier":
        prune = spec.prune
        points = 1 + len(prune.scores) * len([s for s in prune.shares if s > 0]) * len(prune.units)
        sweeps = [u for u in here if u.stage == "ablate"]  # a point answers every task: one unit, a row per task
        assert [(u.what, u.total) for u in sweeps] == [(", ".join(prune.tasks), points)] * len(spec.models.names)
        assert all([row.what for row in u.counted] == list(prune.tasks) for u in sweeps)
        assert all(0 <= u.left <= u.total for u in sweeps)
        if name in FINISHED:
            assert all(u.left == 0 for u in sweeps), "the committed frontier points are all there"
        timed = [u for u in here if u.stage == "time"]  # the finished points, timed again without a model
        assert all(u.total <= points and u.load is None for u in timed)
        assert all(u.total == points for u in timed) or name not in FINISHED
    elif kind.name == "confirmation":
        from headstats.jobs.confirm import expand

        assert len(here) == len(expand(spec)) and all(u.stage == "ablate" for u in here)
        assert all(u.done for u in here), "every committed path's sweep is finished"
    elif kind.name == "fine-tuning":  # its chains train outside the repository: here or not, every unit counted
        design = spec.design
        assert [u.stage for u in units].count("train") == len(design.seeds) * len(design.stage_ends)
        collections = [u for u in units if u.stage == "collect"]
        assert len(collections) == (1 + len(design.seeds) * len(design.stage_ends)) * len(spec.datasets)
        assert all(u.load is None and 0 <= u.left <= u.total == design.texts for u in units if u.stage == "collect")
    elif kind.name == "skipping":  # one unit per model and task, counted in items
        adaptive = spec.adaptive
        assert [(u.model, u.what, u.total) for u in here] == [
            (m, t, n) for m in spec.model_names() for t, n in zip(adaptive.tasks, adaptive.limits, strict=True)
        ]
        assert all(0 <= u.left <= u.total and u.load is not None for u in here)
    else:
        from headstats.jobs.compare import all_models

        compared = spec.spec
        present = [m for m in all_models(compared) if any(u.model == m for u in here)]  # checkpoints may be absent
        reference = len(compared.data) if compared.models[0] in present else 0
        assert len(here) == len(present) * len(compared.data) + reference
        assert all(u.left is None for u in here)  # a collection is counted on its loaded model
    if all(u.done or u.load is None for u in here):  # then the dry run loads nothing
        stages = ",".join(s for s in kind.stages if s != "collect")
        assert main(["run", str(path), "--dry-run", "--stages", stages]) == 0
        assert "Nothing was written" in capsys.readouterr().out


# finetuning_confirm.toml's checkpoints are written by a training run outside the repository, as its
# seeds finish: its dry run is tested with its chains moved to an empty folder (test_analysis.py).
OUTSIDE = ("finetuning_confirm.toml",)


@pytest.mark.integration  # loads the embedded models and times a probe of each unit
@pytest.mark.parametrize("name", [name for name in COMMITTED if name not in OUTSIDE])
def test_every_committed_study_file_dry_runs_with_every_stage(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(ROOT)
    before = sorted(p for p in (ROOT / "results").rglob("*") if p.is_file())
    assert main(["-q", "run", f"analyses/{name}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Nothing was written" in out and "estimated" in out
    assert sorted(p for p in (ROOT / "results").rglob("*") if p.is_file()) == before


def test_the_frontier_command_is_run_for_frontier_files_only(capsys: pytest.CaptureFixture) -> None:
    confirm = ROOT / "analyses" / "confirm.toml"
    assert main(["frontier", str(confirm), "--dry-run"]) == 2
    assert f"{confirm} is a confirmation file (it has [confirm]): run it with headstats run {confirm}" in (
        capsys.readouterr().err
    )


def test_the_runner_runs_each_unit_with_work_left_once_and_the_report_after_all(
    tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_study`` is one loop over the planned units: the kind's ``run`` is called once per unit
    with work left, never for a unit with nothing left, and the report comes after every unit."""
    from dataclasses import replace

    from headstats.studies import run_study

    path = tmp_path / "tiny.toml"
    path.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n'
        f'[models]\nnames = ["{tiny_llama_dir}"]\n[collect]\ndatasets = ["piqa"]\nlimit = 3\n'
        '[[ablate]]\ntask = "piqa"\nlimit = 4\nscores = ["random"]\ntargets = [0, 0.5]\n'
        '[[ablate]]\ntask = "arc_easy"\nlimit = 3\nscores = ["random"]\ntargets = [0.5]\n'
        "[report_options]\nn_boot = 20\nn_perm = 20\n"
    )
    kind = STUDY_KINDS["analysis"]
    events: list[tuple[str, ...]] = []

    def run(unit, session):
        events.append((unit.stage, unit.what, unit.left))
        return kind.run(unit, session)

    def report(study, run, *, progress=True):
        events.append(("report",))
        return kind.report(study, run, progress=progress)

    monkeypatch.setitem(STUDY_KINDS, "analysis", replace(kind, run=run, report=report))

    # Nothing run yet: every unit once (a sweep's passes counted from the results folder), the report last.
    index = run_study(path, progress=False)
    assert index is not None and index.is_file()
    assert events == [("collect", "piqa", None), ("ablate", "piqa", 2), ("ablate", "arc_easy", 2), ("report",)]

    # A stopped sweep: only its unit runs again; the finished sweep is not run.
    (point,) = (tmp_path / "results").rglob("task=arc_easy/point-random-0.5.parquet")
    point.unlink()
    events.clear()
    run_study(path, progress=False, stages=("ablate", "report"))
    assert events == [("ablate", "arc_easy", 1), ("report",)] and point.is_file()

    # Everything done: no unit runs, the report is rebuilt.
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*.parquet")}
    events.clear()
    run_study(path, progress=False, stages=("ablate", "report"))
    assert events == [("report",)]
    # A collection's texts are counted on its loaded model, so with every stage its unit runs and adds nothing.
    events.clear()
    run_study(path, progress=False)
    assert events == [("collect", "piqa", None), ("report",)]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*.parquet")} == files
