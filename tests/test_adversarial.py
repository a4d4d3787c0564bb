"""What a careless or unlucky user does to the newest features, and what headstats answers: nothing of
theirs lost, nothing silently wrong, one line that names the file or option and what to do.

Each table holds one kind of case; every case asserts the exact message, or that the user's files are
unchanged."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headstats.io import store
from headstats.io.store import OutputFolderError

ROOT = Path(__file__).resolve().parents[1]
USER = "the user's own\n"


def cli_error(capsys, args: list[str]) -> str:
    """The one line a refused command prints (its exit status is not 0)."""
    from headstats.cli import main

    assert main(args) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines, "a refusal says why"
    return lines[-1]


# --- refused before any work: options, ranges, selections, files of the wrong kind ----------------


def _frontier_file(tmp: Path, shares: str) -> str:
    path = tmp / "frontier.toml"
    path.write_text(f'results = "r"\nreport = "rep"\n[models]\nnames = ["smollm2-135m"]\n[prune]\nshares = {shares}\n')
    return str(path)


def _confirm_copy(tmp: Path, old: str, new: str) -> str:
    text = (ROOT / "analyses" / "confirm.toml").read_text()
    assert old in text
    path = tmp / "confirm.toml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


def _comma_folder(tmp: Path) -> str:
    (tmp / "a,b").mkdir()
    return str(tmp / "a,b")


PRUNE = ["prune", "--model", "smollm2-135m"]
REFUSED: list[tuple[str, Callable[[Path], list[str]], Callable[[Path], str]]] = [
    (
        "max-drop given as a fraction",
        lambda t: [*PRUNE, "--certify", "piqa", "--max-drop", "0.02", "--out", str(t / "o")],
        lambda t: (
            "headstats: error: --max-drop: an accuracy drop is in points (1 = one point of accuracy), between "
            "0.1 and 50, not 0.02; for the fraction 0.02, give 2"
        ),
    ),
    (
        "max-drop beyond any sensible drop",
        lambda t: [*PRUNE, "--certify", "piqa", "--max-drop", "200", "--out", str(t / "o")],
        lambda t: (
            "headstats: error: --max-drop: an accuracy drop is in points (1 = one point of accuracy), between "
            "0.1 and 50, not 200"
        ),
    ),
    (
        "prune --out an existing file",
        lambda t: [*PRUNE, "--shares", "0.1", "--out", str(t / "afile")],
        lambda t: (
            f"headstats: error: --out {t / 'afile'} is a file, not a folder; give a new folder or one headstats wrote"
        ),
    ),
    (
        "an empty item in a list",
        lambda t: ["ablate", "--model", "smollm2-135m", "--task", "piqa", "--targets", "0.1,,0.2", "--out", str(t)],
        lambda t: (
            "headstats: error: headstats ablate: argument --targets: '0.1,,0.2' has an empty item: separate "
            "the items with single commas (see headstats ablate --help)"
        ),
    ),
    (
        "an empty selection of paths",
        lambda t: ["run", str(ROOT / "analyses" / "confirm.toml"), "--paths", ""],
        lambda t: (
            "headstats: error: headstats run: argument --paths: is empty: give at least one item (items are "
            "separated by commas) (see headstats run --help)"
        ),
    ),
    (
        "a comma inside a model path",
        lambda t: ["collect", "--model", _comma_folder(t), "--datasets", "wikipedia", "--out", str(t / "o")],
        lambda t: (
            f"headstats: error: headstats collect: argument --model: '{t / 'a,b'}' is a path holding a comma, "
            "and list items are separated by commas: give a path without one (see headstats collect --help)"
        ),
    ),
    (
        "run a folder",
        lambda t: ["run", str(t)],
        lambda t: (
            f"headstats: error: analysis file '{t}' is a folder: give a .toml file (see analyses/*.toml for examples)"
        ),
    ),
    (
        "a stage the file's kind does not have",
        lambda t: ["run", str(ROOT / "analyses" / "embedded.toml"), "--stages", "time", "--dry-run"],
        lambda t: (
            f"headstats: error: --stages: {(ROOT / 'analyses' / 'embedded.toml').as_posix()} is an analysis file, "
            "which has no time stage (its stages: collect, ablate, report)"
        ),
    ),
    (
        "frontier on a confirmation file",
        lambda t: ["frontier", str(ROOT / "analyses" / "confirm.toml")],
        lambda t: (
            f"headstats: error: {ROOT / 'analyses' / 'confirm.toml'} is a confirmation file (it has "
            f"[confirm]): run it with headstats run {ROOT / 'analyses' / 'confirm.toml'}"
        ),
    ),
    (
        "frontier --models outside the file's list",
        lambda t: ["frontier", str(ROOT / "analyses" / "prune_embedded.toml"), "--models", "qwen", "--dry-run"],
        lambda t: (
            f"headstats: error: --models: qwen is not in {ROOT / 'analyses' / 'prune_embedded.toml'} (it has "
            "smollm2-135m, gemma3-270m); add it to its [models] names or optional"
        ),
    ),
    (
        "frontier --paths, which it has none of",
        lambda t: ["frontier", str(ROOT / "analyses" / "prune_embedded.toml"), "--paths", "explicit-float32"],
        lambda t: (
            "headstats: error: --paths: chooses among a confirmation file's computation paths; "
            f"{ROOT / 'analyses' / 'prune_embedded.toml'} is a frontier file (it has none)"
        ),
    ),
    (
        "a frontier file with no shares",
        lambda t: ["frontier", _frontier_file(t, "[]"), "--dry-run"],
        lambda t: (
            f"headstats: error: {t / 'frontier.toml'}: [prune] shares: needs at least one share above 0 (0 is "
            "the unpruned baseline), e.g. [0.1, 0.2]"
        ),
    ),
    (
        "a frontier file with the baseline share only",
        lambda t: ["frontier", _frontier_file(t, "[0.0]"), "--dry-run"],
        lambda t: (
            f"headstats: error: {t / 'frontier.toml'}: [prune] shares: needs at least one share above 0 (0 is "
            "the unpruned baseline), e.g. [0.1, 0.2]"
        ),
    ),
    (
        "a confirmation's drop beyond any sensible drop",
        lambda t: ["run", _confirm_copy(t, "drop = 1.0", "drop = 60.0"), "--dry-run"],
        lambda t: (
            f"headstats: error: {t / 'confirm.toml'}: [confirm] drop: an accuracy drop is in points (1 = one "
            "point of accuracy), between 0.1 and 50, not 60"
        ),
    ),
    (
        "a claim at target 0",
        lambda t: ["run", _confirm_copy(t, "target = 0.02", "target = 0"), "--dry-run"],
        lambda t: (
            f"headstats: error: {t / 'confirm.toml'}: [[claims]] #4 target: a claim's target must be above 0 "
            "(target 0 zeroes no head: it is the baseline)"
        ),
    ),
]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_with_one_line(args, message, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text(USER)
    assert cli_error(capsys, args(tmp_path)) == message(tmp_path)
    assert (tmp_path / "afile").read_text() == USER
    assert not (tmp_path / "o").exists()  # nothing made for a refused command


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_an_out_that_cannot_be_created_says_so(tmp_path, capsys) -> None:
    from headstats.jobs.prune import check_model_folder

    with pytest.raises(OutputFolderError) as err:
        check_model_folder("/proc/headstats-test/x")
    assert str(err.value).startswith("--out /proc/headstats-test/x cannot be created (")
    assert str(err.value).endswith("); give a folder you can write")


def test_an_exclude_limit_beyond_the_task_names_the_option(data_dir) -> None:
    from headstats.io.tasks import load_task

    n = len(load_task("piqa", data_dir=str(data_dir)))
    with pytest.raises(ValueError) as err:
        load_task("piqa", exclude_limit=100000, data_dir=str(data_dir))
    assert str(err.value) == (
        f"exclude_limit (--exclude-limit) 100000 holds out every one of the {n} questions of 'piqa': "
        f"give fewer than {n}"
    )


# --- output folders: headstats writes only what its manifest lists, never through a link -----------


def _report(out: Path, tables: tuple[str, ...] = ("kept",)) -> Path:
    from headstats.report.writer import ReportWriter

    writer = ReportWriter(out, "t", dpi=20)
    for name in tables:
        writer.table(pd.DataFrame({"a": [1]}), name)
    return writer.write()


def _figure_report(out: Path) -> Path:
    from matplotlib.figure import Figure

    from headstats.report.writer import ReportWriter

    writer = ReportWriter(out, "t", dpi=20)
    fig = Figure()
    fig.subplots().plot([0, 1])
    writer.figure(fig, "curve", "a curve")
    return writer.write()


def _user_index(out: Path) -> list[Path]:
    out.mkdir()
    (out / "index.html").write_text(USER)
    return [out / "index.html"]


def _user_table_beside_a_build(out: Path) -> list[Path]:
    _report(out, ())  # a build that wrote no table
    (out / "tables").mkdir()
    (out / "tables" / "kept.csv").write_text(USER)
    return [out / "tables" / "kept.csv"]


def _linked_figures(out: Path) -> list[Path]:
    mine = out.parent / "my-figures"
    mine.mkdir()
    (mine / "curve.png").write_text(USER)
    out.mkdir()
    (out / "figures").symlink_to(mine, target_is_directory=True)
    return [mine / "curve.png"]


def _linked_figures_after_a_build(out: Path) -> list[Path]:
    _figure_report(out)
    shutil.rmtree(out / "figures")
    return _linked_figures_beside(out)


def _linked_figures_beside(out: Path) -> list[Path]:
    mine = out.parent / "my-figures"
    mine.mkdir()
    (mine / "curve.png").write_text(USER)
    (out / "figures").symlink_to(mine, target_is_directory=True)
    return [mine / "curve.png"]


FOLDERS: list[tuple[str, Callable[[Path], list[Path]], Callable[[Path], object], Callable[[Path], str]]] = [
    (
        "a report over the user's index.html",
        _user_index,
        _report,
        lambda out: (
            f"--out {out} holds 1 file(s) that headstats did not write (_manifest.json does not list them) "
            "where it would write: index.html; move them away or give another --out"
        ),
    ),
    (
        "a report over the user's table of the same name",
        _user_table_beside_a_build,
        _report,
        lambda out: (
            f"--out {out} holds 1 file(s) that headstats did not write (_manifest.json does not list them) "
            "where it would write: tables/kept.csv; move them away or give another --out"
        ),
    ),
    (
        "a report whose figures/ is a link to the user's folder",
        _linked_figures,
        _figure_report,
        lambda out: (
            f"--out {out}: figures is a link; headstats does not write through links: remove the link or "
            "give another --out"
        ),
    ),
    (
        "a rebuilt report whose figures/ became a link",
        _linked_figures_after_a_build,
        _figure_report,
        lambda out: (
            f"--out {out}: figures is a link; headstats does not write through links: remove the link or "
            "give another --out"
        ),
    ),
]


@pytest.mark.parametrize(("setup", "build", "message"), [c[1:] for c in FOLDERS], ids=[c[0] for c in FOLDERS])
def test_an_output_folder_never_loses_the_users_files(setup, build, message, tmp_path) -> None:
    out = tmp_path / "out"
    users = setup(out)
    with pytest.raises(OutputFolderError) as err:
        build(out)
    assert str(err.value) == message(out)
    assert all(p.read_text() == USER for p in users)


def test_a_report_rebuilt_beside_the_users_files_keeps_them(tmp_path) -> None:
    out = tmp_path / "out"
    _report(out, ("kept", "old"))
    (out / "notes.md").write_text(USER)
    (out / "tables" / "mine.csv").write_text(USER)
    _report(out, ("kept",))  # "old" is no longer produced: removed, being headstats' own
    assert (out / "notes.md").read_text() == USER and (out / "tables" / "mine.csv").read_text() == USER
    assert not (out / "tables" / "old.csv").exists() and (out / "tables" / "kept.csv").is_file()


# --- prune's --out: replaced in place, the user's files kept, nothing hidden left after a kill -----


def _pruned(heads: list[tuple[int, int]]):
    from families import tiny_model

    from headstats.engine.attention import register_attention
    from headstats.engine.prune import prune_heads

    register_attention()  # run alone, no earlier test has registered it
    model = tiny_model("llama", attn="headstats")
    prune_heads(model, heads)
    return model


def _save(out: Path, heads: list[tuple[int, int]]) -> Path:
    from headstats.jobs.prune import save_pruned

    return save_pruned(_pruned(heads), None, out, {"removed_heads": [list(h) for h in heads]})


def test_a_second_prune_replaces_its_own_files_and_keeps_the_users(tmp_path) -> None:
    out = tmp_path / "o"
    _save(out, [(0, 1)])
    first = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    (out / "README-mine.md").write_text(USER)
    (out / "eval").mkdir()
    (out / "eval" / "results.json").write_text(USER)
    _save(out, [(1, 0), (2, 3)])
    assert (out / "README-mine.md").read_text() == USER and (out / "eval" / "results.json").read_text() == USER
    assert json.loads((out / "pruning.json").read_text())["removed_heads"] == [[1, 0], [2, 3]]
    manifest = json.loads((out / "_manifest.json").read_text())["files"]
    assert sorted([*manifest, "_manifest.json"]) == first
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging folder left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # and no hidden copy beside it


@pytest.mark.parametrize(("umask", "files", "folders"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_a_pruned_folder_is_created_with_the_users_umask_and_the_help_says_so(
    umask: int, files: int, folders: int, tmp_path, capsys
) -> None:
    """Every file and folder of a pruned model, its manifest included, as the umask makes new ones:
    readable by others under 022, the user's alone under 077; ``headstats prune --help`` says so."""
    from headstats.cli import main

    before = os.umask(umask)
    try:
        out = _save(tmp_path / "o", [(0, 1)])
    finally:
        os.umask(before)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in [out, *out.rglob("*")]}
    assert "o/_manifest.json" in modes and "o/pruning.json" in modes
    assert modes == {name: folders if (tmp_path / name).is_dir() else files for name in modes}
    with pytest.raises(SystemExit):
        main(["prune", "--help"])
    assert "created with your umask: readable by others under the usual 022 (0644 and 0755), yours alone under 077" in (
        " ".join(capsys.readouterr().out.split())
    )


def test_a_prune_over_an_earlier_one_without_a_manifest_keeps_the_users_files(tmp_path) -> None:
    out = tmp_path / "o"
    _save(out, [(0, 1)])
    (out / "_manifest.json").unlink()  # what an earlier headstats left: pruning.json, no manifest
    (out / "README-mine.md").write_text(USER)
    _save(out, [(1, 1)])
    assert (out / "README-mine.md").read_text() == USER
    assert json.loads((out / "pruning.json").read_text())["removed_heads"] == [[1, 1]]


def test_a_prune_over_the_users_model_folder_is_refused(tmp_path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "config.json").write_text(USER)
    with pytest.raises(OutputFolderError) as err:
        _save(out, [(0, 1)])
    assert str(err.value) == (
        f"--out {out} holds 1 file(s) that headstats did not write (_manifest.json does not list them) where it "
        "would write: config.json; move them away or give another --out"
    )
    assert (out / "config.json").read_text() == USER
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_what_a_killed_prune_left_is_removed_by_the_next_one(tmp_path) -> None:
    out = tmp_path / "o"
    _save(out, [(0, 1)])
    staged = out / ".headstats-staging-0123"  # killed while staging inside --out
    staged.mkdir()
    (staged / "model.safetensors").write_bytes(b"half")
    legacy = tmp_path / ".o.ab12cd34"  # an earlier headstats' copy beside --out, killed while saving
    legacy.mkdir()
    (legacy / "config.json").write_text('{"headstats_pruning": {"removed_heads": []}}')
    theirs = tmp_path / ".o.keepmine"  # the user's, of a similar name: not ours
    theirs.mkdir()
    (theirs / "notes.txt").write_text(USER)
    _save(out, [(2, 2)])
    assert not staged.exists() and not legacy.exists()
    assert (theirs / "notes.txt").read_text() == USER


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda p: p.unlink(), "has no pruning.json (a prune that did not finish writing it?)"),
        (lambda p: p.write_text("{not json"), "has a damaged pruning.json (Expecting property name enclosed in "),
        (lambda p: p.write_text("[]"), "has a pruning.json without its removed_heads"),
    ],
    ids=["missing", "damaged", "not a record"],
)
def test_a_pruned_folder_without_its_record_says_what_it_needs(damage, why, tmp_path) -> None:
    import headstats
    from headstats.io.models import ModelLoadError

    out = _save(tmp_path / "o", [(0, 1)])
    damage(out / "pruning.json")
    with pytest.raises(ModelLoadError) as err:
        headstats.load_model(str(out), device="cpu")
    message = str(err.value)
    assert message.startswith(f"{out} is a pruned model folder that {why}")
    assert message.endswith(f"; a pruned model needs it whole: run headstats prune again with --out {out}")


# --- results identify themselves; damaged records are named ------------------------------------------


def test_a_point_file_copied_from_another_models_folder_is_refused(tmp_path) -> None:
    src = ROOT / "results" / "confirm" / "explicit-float32"
    partition = tmp_path / "model=smollm2-135m" / "task=hellaswag"
    shutil.copytree(src / "model=smollm2-135m" / "task=hellaswag", partition)
    assert len(store.read_interventions(tmp_path, columns=["question_id"])) == 7 * 3000
    stray = src / "model=gemma3-270m" / "task=hellaswag" / "point-ahon_ln-0.02.parquet"
    shutil.copy(stray, partition / stray.name)
    with pytest.raises(store.StoreError) as err:
        store.read_interventions(tmp_path)
    assert str(err.value) == (
        f"{partition / stray.name} records another run than its folder's (model: 'gemma3-270m' there, "
        "'smollm2-135m' in the folder; revision: 'sha256:5969895578967a30' there, 'sha256:37469e03d78203f9' in the "
        "folder): it belongs to another results folder; move it back there"
    )


def _frontier_results(tmp: Path) -> Path:
    shutil.copytree(ROOT / "results" / "prune-embedded", tmp / "r")
    return tmp / "r" / "model=smollm2-135m"


RECORDS: list[tuple[str, str, str, str]] = [
    ("run.json holding a list", "run.json", "[]", "a JSON object expected, not list"),
    ("a damaged point record", "points/baseline.json", "{", "not valid JSON: "),
]


@pytest.mark.parametrize(("name", "content", "why"), [c[1:] for c in RECORDS], ids=[c[0] for c in RECORDS])
def test_a_damaged_frontier_record_is_named(name, content, why, tmp_path) -> None:
    from headstats.report.frontier import read_points

    root = _frontier_results(tmp_path)
    (root / name).write_text(content)
    with pytest.raises(store.StoreError) as err:
        read_points(tmp_path / "r")
    message = str(err.value)
    assert message.startswith(f"{root / name} is damaged ({why}")
    assert message.endswith("; delete it (and its point's .parquet) and run the frontier again to remake it")


@pytest.mark.parametrize("name", ["prune_embedded", "prune_certify"])
def test_the_committed_frontiers_still_resume_in_points(name: str) -> None:
    """Drops are in points now (``max_drop = 1.0``); the committed folders recorded 0.01, a fraction,
    which decides nothing a point holds: they resume as they are."""
    from headstats.jobs import frontier as F

    frontier = F.load_frontier(ROOT / "analyses" / f"{name}.toml")
    assert frontier.prune.max_drop == 1.0
    for model in frontier.model_names(all_models=True):
        root = F.model_root(frontier, model)
        if (root / "run.json").is_file():
            before = (root / "run.json").read_bytes()
            F.check_run_record(frontier, root, {"cpu": "any"})
            assert (root / "run.json").read_bytes() == before


# --- a study file edited after its run is never half-followed ----------------------------------------


def _frontier_copy(tmp: Path, edit: tuple[str, str] | None = None) -> tuple[Path, Path]:
    """analyses/prune_embedded.toml's SmolLM2 frontier with its committed points, in ``tmp``: the file
    (``edit`` applied), whose model is a folder named like the committed one (only its config: nothing
    loads), and the model's results folder."""
    model = tmp / "models" / "smollm2-135m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    shutil.copytree(ROOT / "results" / "prune-embedded" / "model=smollm2-135m", tmp / "r" / "model=smollm2-135m")
    text = (ROOT / "analyses" / "prune_embedded.toml").read_text()
    text = text.replace('names = ["smollm2-135m", "gemma3-270m"]', f"names = [{json.dumps(str(model))}]")
    text = text.replace('results = "results/prune-embedded"', f'results = "{tmp / "r"}"')
    text = text.replace('report = "reports/prune-embedded"', f'report = "{tmp / "rep"}"')
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit, 1)
    path = tmp / "frontier.toml"
    path.write_text(text)
    return path, tmp / "r" / "model=smollm2-135m"


FRONTIER_EDITS = [
    ("limit raised", ("limit = 20", "limit = 30"), "prune.limit: 20 there, 30 now"),
    ("a task added", ('tasks = ["piqa", "arc_easy"]', 'tasks = ["piqa", "arc_easy", "hellaswag"]'), "prune.tasks: "),
    ("calibration_limit", ("calibration_limit = 64", "calibration_limit = 32"), "prune.calibration_limit: 64 there"),
    ("the dtype", ('dtype = "float32"', 'dtype = "bfloat16"'), 'load.dtype: "float32" there, "bfloat16" now'),
]


def test_a_frontier_states_the_settings_its_points_were_run_with(tmp_path) -> None:
    from headstats.studies import run_study

    path, _ = _frontier_copy(tmp_path)
    index = run_study(path, stages=("report",), progress=False)
    summary = (index.parent / "summary.md").read_text()
    assert "Every point was run with these settings (each model's `run.json`; a file whose settings changed" in summary
    assert "`limit = 20`, " in summary and '`tasks = ["piqa", "arc_easy"]`' in summary


@pytest.mark.parametrize(("edit", "said"), [c[1:] for c in FRONTIER_EDITS], ids=[c[0] for c in FRONTIER_EDITS])
def test_a_frontier_edited_after_its_points_ran_is_refused_naming_the_setting(edit, said, tmp_path, capsys) -> None:
    """The file's settings changed after every point ran: neither a run (which skipped the finished
    points and rebuilt the report on the old ones) nor the report stage goes on; both name the setting."""
    path, root = _frontier_copy(tmp_path, edit)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    expected = f"headstats: error: {root} holds frontier points run with other settings ({said}"
    for stages in ("collect,ablate,report", "report", "time"):
        line = cli_error(capsys, ["frontier", str(path), "--stages", stages, "-q"])
        assert line.startswith(expected), line
        assert line.endswith(
            f"): restore those settings in {path}, or give it another results folder (results = ...) to run its points "
            "under the new ones"
        )
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "rep").exists()


# --- pre-registration holds ---------------------------------------------------------------------------


def _confirmation(tmp: Path, edit: tuple[str, str] | None = None) -> Path:
    text = (ROOT / "analyses" / "confirm.toml").read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit, 1)
    text = text.replace('results = "results/confirm"', f'results = "{tmp / "results"}"')
    text = text.replace('report = "reports/confirm"', f'report = "{tmp / "report"}"')
    shutil.copytree(ROOT / "results" / "confirm", tmp / "results", dirs_exist_ok=True)
    path = tmp / "confirm.toml"
    path.write_text(text)
    return path


def _abstract(report: Path) -> str:
    md = (report / "summary.md").read_text()
    return md.split("\n\n")[1]


AMENDED = [
    ("drop", ("drop = 1.0", "drop = 2.0"), "drop: 1.0 -> 2.0"),
    ("confidence", ("confidence = 0.95", "confidence = 0.8"), "confidence: 0.95 -> 0.8"),
    (
        "a claim's target",
        ("target = 0.02", "target = 0.03"),
        "claim gemma3-270m ahon_ln@0.02 withdrawn; claim gemma3-270m ahon_ln@0.03 added",
    ),
    ("the metric", ('task = "hellaswag"', 'task = "hellaswag"\nmetric = "correct_norm"'), 'metric: "correct" -> '),
]


@pytest.mark.parametrize(("edit", "said"), [c[1:] for c in AMENDED], ids=[c[0] for c in AMENDED])
def test_a_confirmation_edited_after_its_results_is_an_amendment(edit, said, tmp_path) -> None:
    from headstats.jobs.confirm import load_confirmation, register
    from headstats.options import SpecError
    from headstats.report.confirm import PLAIN_QUESTION, write_confirmation

    plan = load_confirmation(_confirmation(tmp_path, edit))
    abstract = _abstract(Path(write_confirmation(plan)).parent)
    assert abstract.removeprefix(PLAIN_QUESTION + " ").startswith("**Amended after results, not pre-registered**: ")
    assert said in abstract
    assert "stated before this run and amended after it" in abstract
    assert "## The claims as amended after the run" in (plan.report / "summary.md").read_text()
    with pytest.raises(SpecError) as err:  # and no pass runs under the changed file
        register(plan)
    assert str(err.value).startswith(f"{plan.path.as_posix()} changed since its first run (")
    assert str(err.value).endswith(
        "): a confirmation's claims and rule are fixed before it runs; restore them, or give the changed file its "
        "own results folder"
    )


def test_an_unchanged_confirmation_is_pre_registered_and_one_without_a_record_says_so(tmp_path) -> None:
    from headstats.jobs.confirm import REGISTRATION_FILE, load_confirmation, register
    from headstats.report.confirm import PLAIN_QUESTION, write_confirmation

    plan = load_confirmation(_confirmation(tmp_path))
    register(plan)  # the same keys: nothing changes
    abstract = _abstract(Path(write_confirmation(plan)).parent)
    assert abstract.startswith(PLAIN_QUESTION + " 4 of the study's certified zeroing shares (claims), stated before")
    assert "## The claims as stated before the run" in (plan.report / "summary.md").read_text()
    (plan.results / REGISTRATION_FILE).unlink()
    abstract = _abstract(Path(write_confirmation(plan)).parent)
    assert abstract.removeprefix(PLAIN_QUESTION + " ").startswith(
        f"**No pre-registration record** (`<local>/results/{REGISTRATION_FILE}` is missing): the rule "
        "below is the file's current one, which nothing shows predates the results. "
    )


def test_the_committed_confirmation_records_what_it_decided_on() -> None:
    from headstats.jobs.confirm import amendments, load_confirmation, registration

    plan = load_confirmation(ROOT / "analyses" / "confirm.toml")
    assert amendments(plan) == []
    keys = registration(plan)["keys"]
    assert keys["metric"] == "correct" and keys["drop"] == 1.0 and keys["confidence"] == 0.95
    assert [c["target"] for c in keys["claims"]] == [0.05, 0.05, 0.05, 0.02]


# --- a pass killed after a batch save resumes to the numbers of one never stopped --------------------

CHILD = """
import sys, time, torch
import headstats
from headstats.jobs.sweep import run_sweep

model, tokenizer = headstats.load_model(sys.argv[1], device="cpu", dtype="float32")
# Slow enough for the parent to kill it part way: a real process, killed by SIGKILL.
model.register_forward_pre_hook(lambda module, args: time.sleep(0.15))
run_sweep(model, tokenizer=tokenizer, out=sys.argv[2], task="hellaswag", scores="ahon_ln", targets=[0.3], limit=6,
          batch_size=4, progress=False)
"""


@pytest.mark.integration  # the bundled HellaSwag questions and the SmolLM2 tokenizer
def test_a_pass_killed_after_a_batch_save_resumes_like_one_never_stopped(tiny_llama_dir, tmp_path) -> None:
    import headstats
    from headstats.jobs.checkpoint import SAVE_EVERY_VARIABLE
    from headstats.jobs.sweep import run_sweep

    sweep = dict(task="hellaswag", scores="ahon_ln", targets=[0.3], limit=6, batch_size=4, progress=False)
    env = {**os.environ, SAVE_EVERY_VARIABLE: "0", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "killed"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_llama_dir), str(out)], env=env)
    try:
        deadline = time.time() + 300
        saved = []
        while not saved and time.time() < deadline and child.poll() is None:
            saved = [p for p in out.rglob(f"{store.PARTIAL_PREFIX}*.npz") if store.partial_sequences(p) > 0]
            time.sleep(0.02)
        assert saved, "the pass saved a batch before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    partition = saved[0].parent
    assert child.returncode == -signal.SIGKILL
    assert store.partial_sequences(saved[0]) > 0
    finished_name = saved[0].name.removeprefix(store.PARTIAL_PREFIX).replace(".npz", ".parquet")
    assert not (partition / finished_name).exists()  # killed inside the pass, after its save

    model, tokenizer = headstats.load_model(str(tiny_llama_dir), device="cpu", dtype="float32")
    resumed = run_sweep(model, tokenizer=tokenizer, out=out, **sweep)
    reference = run_sweep(model, tokenizer=tokenizer, out=tmp_path / "whole", **sweep)
    names = sorted(p.name for p in reference.glob("*.parquet"))
    assert names == sorted(p.name for p in resumed.glob("*.parquet")) and finished_name in names
    for name in names:
        a = store.read_table(resumed / name).to_pandas()
        b = store.read_table(reference / name).to_pandas()
        pd.testing.assert_frame_equal(a, b)
    assert not list(resumed.glob(f"{store.PARTIAL_PREFIX}*"))
    assert np.isfinite(store.read_table(resumed / names[0]).to_pandas()["gold_loglik"]).all()


# --- no local paths in what is written ----------------------------------------------------------------


def test_a_report_of_results_outside_home_names_no_local_folder(tmp_path, capsys) -> None:
    """Results and report in a folder outside the cache and home (``/data/...``; here the test's
    temporary folder): the report names them ``<local>/<name>``, never by their absolute path; and
    a user's index.html in its --out survives the command unchanged."""
    from headstats.cli import main
    from headstats.testing.synthetic import write_synthetic_scores

    assert not tmp_path.is_relative_to(Path.home())
    write_synthetic_scores(tmp_path / "r", models=2, n_sequences=16, progress=False)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "index.html").write_text(USER)
    assert main(["report", str(tmp_path / "r"), "--out", str(tmp_path / "mine")]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"headstats: error: --out {tmp_path / 'mine'} holds 1 file(s) that headstats did not write (_manifest.json "
        "does not list them) where it would write: index.html; move them away or give another --out"
    )
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["index.html"]
    assert (tmp_path / "mine" / "index.html").read_text() == USER
    assert main(["report", str(tmp_path / "r"), "--out", str(tmp_path / "rep")]) == 0
    for name in ("index.html", "summary.md"):
        text = (tmp_path / "rep" / name).read_text()
        assert str(tmp_path) not in text
        assert "headstats report &lt;local&gt;/r --out &lt;local&gt;/rep" in text or (
            "headstats report <local>/r --out <local>/rep" in text
        )


# --- no report kind writes the building user's home or temporary folder ---------------------------------


def _copy_study(tmp: Path, analysis: str, results: str, edits: dict[str, str] | None = None) -> Path:
    """The committed ``analysis`` file with its committed ``results``, in folders of a user's temporary
    home: the results outside it (``tmp/data``), the report inside it (``~/reports``), the file outside."""
    text = (ROOT / "analyses" / f"{analysis}.toml").read_text()
    name = Path(results).name
    shutil.copytree(ROOT / results, tmp / "data" / name)
    for old, new in (edits or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    folders = f'results = "{tmp / "data" / name}"\nreport = "{Path.home() / "reports" / name}"\n'
    text = folders + "\n".join(line for line in text.splitlines() if not line.startswith(("results =", "report =")))
    path = tmp / "studies" / f"{analysis}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _stand_ins(tmp: Path, names: list[str]) -> str:
    """Model folders named like the committed models (their config alone: no report loads a model)."""
    folders = []
    for name in names:
        (tmp / "models" / name).mkdir(parents=True, exist_ok=True)
        (tmp / "models" / name / "config.json").write_text("{}")
        folders.append(str(tmp / "models" / name))
    return json.dumps(folders)


def _seed_study(tmp: Path) -> Path:
    from test_finetune_study import study_file, synthetic_seeds

    path = study_file(
        tmp, chains=tmp / "chains", seeds=[0, 1, 2], stage_ends=["sft@2", "dpo@2"], recipe_hash="abc", base="tiny",
        dataset="texts",
    )  # fmt: skip
    synthetic_seeds(tmp / "results", 3, ["sft", "dpo"])
    text = path.read_text().replace(str(tmp / "report"), str(Path.home() / "reports" / "seeds"))
    path.write_text(text)
    return path


SMALL = [("ref", 2, 4, 2, 0.0), ("other", 2, 4, 2, 0.3)]  # synthetic models: name, layers, heads, KV heads, sink


def _small(names: tuple[str, ...] = ("ref", "other")):
    from headstats.testing.synthetic import SyntheticModel

    return [SyntheticModel(n, layers, heads, kv, sink=sink) for n, layers, heads, kv, sink in SMALL if n in names]


def _comparison(tmp: Path) -> Path:
    """A comparison of two model folders (stand-ins) from synthetic tables, recorded as collected from
    those folders; the reference's format-change table another draw."""
    from headstats.testing.synthetic import write_synthetic_scores

    results = tmp / "data" / "compare"
    write_synthetic_scores(results / "compared", _small(), ["wikipedia"], n_sequences=12, progress=False)
    write_synthetic_scores(results / "format-change", _small(("ref",)), ["wikipedia"], n_sequences=12, seed=1)
    for sidecar in results.rglob(store.PROVENANCE_FILE):
        record = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps({**record, "model": f"<local>/{record['model']}"}))
    path = tmp / "studies" / "compare.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f'results = "{results}"\nreport = "{Path.home() / "reports" / "compare"}"\n[compare]\n'
        f'models = {_stand_ins(tmp, ["ref", "other"])}\ndata = ["wikipedia"]\nlimit = 12\nn_resamples = 20\n'
        "head_permutations = 19\n"
    )
    return path


def _analysis(tmp: Path) -> Path:
    from headstats.testing.synthetic import write_synthetic_scores

    write_synthetic_scores(tmp / "data" / "synthetic", _small(), n_sequences=16, progress=False)
    path = tmp / "studies" / "synthetic.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f'results = "{tmp / "data" / "synthetic"}"\nreport = "{Path.home() / "reports" / "synthetic"}"\n'
        '[models]\nnames = ["m"]\n'
    )
    return path


# Per study kind (and the paired frontier report), a file of it with results outside the home and its report
# inside it; built from committed or synthetic results, with no model loaded.
REPORT_STUDIES: dict[str, Callable[[Path], Path]] = {
    "analysis": _analysis,
    "confirmation": lambda t: _copy_study(t, "confirm", "results/confirm"),
    "frontier": lambda t: _copy_study(
        t, "prune_embedded", "results/prune-embedded",
        {'names = ["smollm2-135m", "gemma3-270m"]': f"names = {_stand_ins(t, ['smollm2-135m', 'gemma3-270m'])}"},
    ),
    "frontier (paired)": lambda t: _copy_study(
        t, "prune_pooled", "results/prune-pooled",
        {
            'names = ["smollm2-135m"]': f"names = {_stand_ins(t, ['smollm2-135m'])}",
            'optional = ["gemma3-270m"]': f"optional = {_stand_ins(t, ['gemma3-270m'])}",
        },
    ),
    "comparison": _comparison,
    "fine-tuning": _seed_study,
    "skipping": lambda t: _copy_study(t, "adaptive_embedded", "results/adaptive-embedded"),
}  # fmt: skip


def _no_local_folder(tmp: Path, out: Path) -> None:
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written and any(p.name == "index.html" for p in written)
    for local in {str(tmp), str(tmp.resolve()), str(Path.home())}:
        for path in written:
            assert local.encode() not in path.read_bytes(), f"{path} names {local}"


@pytest.fixture
def temporary_home(tmp_path: Path, monkeypatch) -> Path:
    """The user's home moved into ``tmp_path`` (the cache stays where it is)."""
    from headstats.io.assets import cache_dir

    monkeypatch.setenv("HEADSTATS_CACHE", str(cache_dir()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path


def test_every_report_kind_is_listed_below() -> None:
    from headstats.studies.registry import STUDY_KINDS

    assert {name.split(" (")[0] for name in REPORT_STUDIES} == set(STUDY_KINDS)


@pytest.mark.parametrize("kind", list(REPORT_STUDIES))
def test_no_report_kind_writes_the_home_or_temporary_folder(kind: str, temporary_home: Path) -> None:
    """Each kind's report built from folders under a temporary home and folder (results outside the home,
    the report inside it, the study file and model folders outside): no written file names either."""
    from headstats.specs import RunSpec
    from headstats.studies import load_study
    from headstats.studies.registry import STUDY_KINDS

    path = REPORT_STUDIES[kind](temporary_home)
    study = load_study(path)
    index = STUDY_KINDS[study.kind].report(study, RunSpec(), progress=False)
    assert index.parent.is_relative_to(Path.home())
    _no_local_folder(temporary_home, index.parent)


def test_headstats_report_writes_no_home_or_temporary_folder(temporary_home: Path) -> None:
    """``headstats report`` (the analysis report without a file; ``headstats paper``, which reads only
    the bundled curves, is checked in tests/test_paper.py)."""
    from headstats.cli import main
    from headstats.testing.synthetic import write_synthetic_scores

    out = Path.home() / "reports" / "report"
    write_synthetic_scores(temporary_home / "r", _small(), n_sequences=16, progress=False)
    assert main(["report", str(temporary_home / "r"), "--out", str(out), "-q"]) == 0
    _no_local_folder(temporary_home, out)


def test_a_folder_outside_home_is_recorded_by_its_name_alone() -> None:
    from headstats.io.assets import portable_name

    assert portable_name("/data/models/my-model") == "<local>/my-model"
    assert portable_name("smollm2-135m") == "smollm2-135m" and portable_name("org/model") == "org/model"
    assert portable_name(Path.home() / "models" / "m") == "~/models/m"


# --- no local paths, for a model in a folder outside the cache and home --------------------------------


@pytest.fixture
def elsewhere(tmp_path, monkeypatch, tokenizer) -> Path:
    """A tiny random model and a text file in ``tmp_path/data`` (``/data/...`` on a user's machine),
    with the home folder and the cache moved into ``tmp_path`` so that ``data`` lies outside both."""
    from families import tiny_llama

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HEADSTATS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "data" / "my-model"
    tiny_llama(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    texts = "\n\n".join(f"The cat number {i} sat on the mat and looked at the dog." for i in range(12))
    (tmp_path / "data" / "texts.txt").write_text(texts)
    return tmp_path


def _collect(root: Path, model: Path | None = None, limit: int = 12) -> list[str]:
    model = model or root / "data" / "my-model"
    dataset = str(root / "data" / "texts.txt")
    return ["collect", "--model", str(model), "--dataset", dataset, "--out", str(root / "res"), "--limit", str(limit)]


PORTABLE = [  # (case, the commands run in turn, given the folder they work in)
    ("collect", lambda r: [_collect(r)]),
    ("collect then report", lambda r: [_collect(r), ["report", str(r / "res"), "--out", str(r / "rep")]]),
    (
        "prune",
        lambda r: [
            [
                *("prune", "--model", str(r / "data" / "my-model"), "--share", "0.25"),
                *("--calibration", str(r / "data" / "texts.txt"), "--calibration-limit", "8"),
                *("--out", str(r / "pruned")),
            ]
        ],
    ),
]


def _written(root: Path) -> list[Path]:
    """Every file the commands wrote: all of ``root`` but the inputs, the home folder and the cache."""
    inputs = {root / "data", root / "home", root / "cache"}
    return [p for p in root.rglob("*") if p.is_file() and not any(p.is_relative_to(i) for i in inputs)]


@pytest.mark.parametrize("commands", [c[1] for c in PORTABLE], ids=[c[0] for c in PORTABLE])
def test_what_is_written_for_a_model_elsewhere_names_no_local_path(commands, elsewhere, capsys) -> None:
    """Results, Parquet metadata, reports, manifests and ``pruning.json`` of a model in a folder
    outside home and cache name it ``<local>/my-model`` (its weights by content hash), never by path."""
    import pyarrow.parquet as pq

    from headstats.cli import main

    for args in commands(elsewhere):
        assert main([*args, "--no-progress"] if args[0] == "collect" else args) == 0, capsys.readouterr().err
    written = _written(elsewhere)
    assert written
    local = {str(elsewhere), str(elsewhere.resolve())}
    for path in written:
        assert not any(text.encode() in path.read_bytes() for text in local), path
    parquet = [p for p in written if p.suffix == ".parquet"]
    for path in parquet:
        metadata = pq.read_schema(path).metadata or {}
        text = b"".join([*metadata.keys(), *metadata.values()]).decode()
        assert not any(t in text for t in local), path
        assert '"model": "<local>/my-model"' in text and '"revision": "sha256:' in text
    if (elsewhere / "pruned").exists():
        record = json.loads((elsewhere / "pruned" / "pruning.json").read_text())
        assert record["model"] == "<local>/my-model"
    assert parquet or (elsewhere / "pruned").exists()


def test_a_model_folder_moved_keeps_its_results(elsewhere) -> None:
    """The resume key names a local folder by its name and content hash: the same folder moved
    elsewhere extends the same table rather than being refused or starting another."""
    from headstats.cli import main

    assert main([*_collect(elsewhere, limit=6), "--no-progress"]) == 0
    moved = elsewhere / "moved" / "deeper" / "my-model"
    moved.parent.mkdir(parents=True)
    shutil.move(elsewhere / "data" / "my-model", moved)
    assert main([*_collect(elsewhere, moved, limit=12), "--no-progress"]) == 0
    (partition,) = [p.parent for p in (elsewhere / "res").rglob(store.DONE_FILE)]
    assert partition.parent.name == "model=my-model"
    rows = store.read_table(partition).to_pandas()
    assert rows["sample_id"].nunique() == 12 and not rows.duplicated(["sample_id", "layer", "head"]).any()


def test_a_report_of_results_elsewhere_is_fresh_and_moves_with_them(elsewhere, capsys) -> None:
    """A report built from absolute paths records them relative to its own folder: the freshness
    check finds its results, before and after both folders move together."""
    from headstats.cli import main
    from headstats.report.freshness import check_report, recorded_inputs

    assert main([*_collect(elsewhere), "--no-progress"]) == 0
    assert main(["report", str(elsewhere / "res"), "--out", str(elsewhere / "out" / "rep")]) == 0
    assert recorded_inputs(elsewhere / "out" / "rep")["results"] == "../../res"
    assert check_report(elsewhere / "out" / "rep") == []
    shutil.move(elsewhere / "out", elsewhere / "moved" / "out")
    shutil.move(elsewhere / "res", elsewhere / "moved" / "res")
    rebuilt = check_report(elsewhere / "moved" / "out" / "rep")
    assert rebuilt == [], rebuilt


@pytest.mark.parametrize(
    ("recorded", "read"),
    [
        ("/data/models/my-model", "<local>/my-model"),  # the path an earlier version recorded
        ("~/models/my-model", "<local>/my-model"),
        ("$HEADSTATS_CACHE/chains/c/sft/step-00015", "<local>/step-00015"),
        ("<local>/my-model", "<local>/my-model"),
        ("smollm2-135m", "smollm2-135m"),  # an embedded name
        ("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M"),  # a Hub id
        ("smollm2-135m@bfloat16", "smollm2-135m@bfloat16"),
    ],
)
def test_a_stored_model_name_reads_by_folder_name(recorded, read) -> None:
    """A stored resume key's model reads as results record it now, so results recorded with the
    folder's path still resume, and embedded names and Hub ids stay as they were."""
    from headstats.jobs.resume import recorded_key

    assert recorded_key({"model": recorded, "data_dir": "/data/olmo"}, {}) == {
        "model": read,
        "data_dir": "<local>/olmo",
    }
