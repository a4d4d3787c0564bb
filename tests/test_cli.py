"""The command line: built from the specs, every bad input a one-line message and exit status 2 with
nothing written and no model loaded, registries listed from the registries themselves."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from headstats.cli import build_parser, main
from headstats.cli.options import spec_from_args
from headstats.engine import scores as S
from headstats.io import models, store
from headstats.specs import ReportSpec


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to load a model fails the test: validation must come first."""
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded before validation"))


def _one_line_error(capsys: pytest.CaptureFixture) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headstats: error: "), captured.err
    return lines[0]


def _analysis(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n'
        '[models]\nnames = ["smollm2-135m"]\n'
        '[collect]\ndatasets = ["mmlu"]\nlimit = 2\n'
        '[[ablate]]\ntask = "mmlu"\nlimit = 2\n' + extra
    )
    return path


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        # a typo'd key: the message names it and lists the allowed keys
        ("[report_options]\nn_bot = 3\n", ["n_bot", "allowed:", "n_boot", "n_perm", "depth_bins"]),
        ("[[ablate]]\ntask = 'piqa'\ntarget = [0.1]\n", ["[[ablate]] #2", "target", "allowed:", "targets"]),
        # a wrongly typed value: the message names the key and the type it needs
        ("[report_options]\nn_boot = 4.7\n", ["[report_options] n_boot", "expected an integer"]),
        ("[[ablate]]\ntask = 'piqa'\nlimit = 'four'\n", ["[[ablate]] #2 limit", "expected an integer"]),
        ("[[ablate]]\ntask = 'piqa'\nscores = 'ahon_ln'\n", ["#2 scores", "expected a list of strings"]),
    ],
)
def test_a_bad_analysis_file_is_refused_before_any_model_loads(
    tmp_path: Path, extra: str, names: list[str], no_model: None, capsys: pytest.CaptureFixture
) -> None:
    assert main(["run", str(_analysis(tmp_path, extra))]) == 2
    line = _one_line_error(capsys)
    for name in names:
        assert name in line, (name, line)
    assert not (tmp_path / "results").exists() and not (tmp_path / "report").exists()


def test_negative_targets_are_a_one_line_message(tmp_path: Path, no_model: None, capsys) -> None:
    out = tmp_path / "out"
    argv = ["ablate", "--model", "smollm2-135m", "--task", "mmlu", "--out", str(out), "--targets", "-0.1,0.1"]
    assert main(argv) == 2
    assert "--targets: target fraction -0.1 is outside [0, 1]" in _one_line_error(capsys)
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["collect", "ablate"])
def test_cuda_without_cuda_is_one_shared_check_before_any_work(
    command: str, tmp_path: Path, no_model: None, capsys
) -> None:
    out = tmp_path / "out"
    what = ["--dataset", "mmlu"] if command == "collect" else ["--task", "mmlu"]
    assert main([command, "--model", "smollm2-135m", *what, "--out", str(out), "--device", "cuda"]) == 2
    assert "--device: 'cuda' was asked for, but no CUDA device is available here" in _one_line_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["collect", "--dataset", "mmlu", "--out", "{out}"], "the following arguments are required: --model"),
        (
            ["collect", "--model", "m", "--dataset", "mmlu", "--out", "{out}", "--limit", "4.7"],
            "'4.7' is not an integer",
        ),
        (
            ["collect", "--model", "m", "--dataset", "mmlu", "--out", "{out}", "--limit", "0"],
            "--limit must be at least 1",
        ),
        (["collect", "--model", "m", "--dataset", "mmlu", "--out", "{out}", "--sample", "x"], "unknown sample method"),
        (["report", "{out}", "--out", "{out}/r", "--n-boot", "0"], "--n-boot must be at least 1"),
        (["report", "{out}", "--out", "{out}/r", "--bootstrap", "9"], "unrecognized arguments: --bootstrap"),
        (["report", "{out}", "--out", "{out}/r", "--rank-by", "auc"], "--rank-by: unknown curve area 'auc'"),
        (["list", "everything"], "unknown list 'everything'"),
        (["ablate", "--model", "m", "--task", "mmlu", "--out", "{out}", "--executor-param", "x"], "give KEY=VALUE"),
    ],
)
def test_bad_flags_are_one_line_messages_and_write_nothing(tmp_path: Path, argv, message, no_model, capsys) -> None:
    out = tmp_path / "out"
    assert main([a.format(out=out) for a in argv]) == 2
    assert message in _one_line_error(capsys)
    assert not out.exists()


def test_list_prints_each_registry_one_line_per_entry(capsys: pytest.CaptureFixture) -> None:
    from headstats.io.assets import EMBEDDED_MODELS
    from headstats.io.tasks import COLLECTION_DATASETS, TASKS

    registered = S.Score("max_weight_cli", "maximum attention weight", "above", stat=S.SCORES["awft"].stat, pool="mean")
    S.register(registered)
    try:
        assert main(["list", "scores"]) == 0
        lines = capsys.readouterr().out.splitlines()
    finally:
        del S.SCORES["max_weight_cli"]
    assert [line.split()[0] for line in lines] == [*S.SCORES, "max_weight_cli"]
    assert "maximum attention weight" in lines[-1] and "inactive when above" in lines[-1]
    for what, names in (("tasks", TASKS), ("datasets", COLLECTION_DATASETS), ("models", EMBEDDED_MODELS)):
        assert main(["list", what]) == 0
        assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(names)


def test_help_lists_registered_names() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]
    collect_help = sub.choices["collect"].format_help()
    ablate_help = sub.choices["ablate"].format_help()
    assert "ahon_ln" in collect_help and "wikipedia" in collect_help and "paper" in collect_help
    assert "mmlu_cloze" in ablate_help and "arc_challenge" in ablate_help


def _write_results(root: Path) -> None:
    rng = np.random.default_rng(0)
    base = rng.random(40) < 0.6
    for score, target, correct, zeroed in (
        ("baseline", 0.0, base, 0),
        ("ahon_ln", 0.1, base & (rng.random(40) < 0.9), 5),
    ):
        rows = pd.DataFrame(
            {
                "subject": pd.Series([None] * 40, dtype=object),
                "question_id": np.arange(40, dtype="int64"),
                "score": score,
                "target": target,
                "threshold": np.nan if score == "baseline" else 0.2,
                "correct": correct,
                "correct_norm": pd.Series([pd.NA] * 40, dtype="boolean"),
                "gold_loglik": rng.normal(size=40),
                "pred": np.zeros(40, dtype="int16"),
                "n_choices": np.full(40, 2, dtype="int16"),
                "n_zeroed": np.full(40, float(zeroed)),
                "n_heads": np.full(40, 50, dtype="int32"),
            }
        )
        name = "baseline.parquet" if score == "baseline" else f"point-{score}-{target:g}.parquet"
        store.write_parquet_atomic(pa.Table.from_pandas(rows, preserve_index=False), root / "model=m" / "task=t" / name)


def test_summary_command_prints_points_and_curves(tmp_path: Path, capsys) -> None:
    _write_results(tmp_path)
    assert main(["summary", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "per point (correct" in printed and "ahon_ln" in printed and "per curve" in printed


def _summaries(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    from headstats.stats.summary import summarize_curves, summarize_interventions

    rows = store.read_interventions(root)
    points = summarize_interventions(rows)
    return points, summarize_curves(rows, points)


def test_summary_table_fits_120_columns_and_csv_json_carry_every_column(tmp_path: Path, capsys) -> None:
    import io
    import json
    import shutil

    _write_results(tmp_path)
    long_name = "model=" + "a-fine-tuned-checkpoint-with-a-long-name-" * 3  # a chain's checkpoint slug
    shutil.copytree(tmp_path / "model=m", tmp_path / long_name)
    points, curves = _summaries(tmp_path)

    assert main(["summary", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert max(map(len, table.splitlines())) <= 120
    assert table.count("ahon_ln") == 4  # a point row and a curve row for each of the two models
    assert "baseline" in table and "per curve" in table

    assert main(["summary", str(tmp_path), "--format", "csv", "--table", "points"]) == 0
    pd.testing.assert_frame_equal(
        pd.read_csv(io.StringIO(capsys.readouterr().out)), points, check_dtype=False, check_exact=False, rtol=1e-12
    )
    assert main(["summary", str(tmp_path), "--format", "csv", "--table", "curves"]) == 0
    assert pd.read_csv(io.StringIO(capsys.readouterr().out)).columns.tolist() == curves.columns.tolist()

    assert main(["summary", str(tmp_path), "--format", "json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["metric"] == "correct" and len(parsed["points"]) == len(points) and len(parsed["curves"]) == 2
    np.testing.assert_allclose([p["accuracy"] for p in parsed["points"]], points["accuracy"], rtol=1e-12)
    assert [p["drop_upper"] is None for p in parsed["points"]] == points["drop_upper"].isna().tolist()  # NaN: null

    assert main(["summary", str(tmp_path), "--format", "csv"]) == 2
    assert capsys.readouterr().err.strip() == (
        "headstats: error: --format: csv holds one table: add --table points or --table curves"
    )


@pytest.mark.parametrize("argv", [["--help"], ["list"], ["summary", "--help"]])
def test_quick_commands_import_no_torch_transformers_or_datasets(argv: list[str]) -> None:
    """What keeps `headstats --help`, `list` and `summary` quick (benchmarks/bench_cli.py times them):
    the command line reaches the registries without the heavy libraries."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom headstats.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'scipy') if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_messages_carry_the_headstats_prefix_once(tmp_path: Path, capsys, monkeypatch) -> None:
    import headstats.cli as cli

    cli.configure_logging(False)  # as main() does: this test must not depend on one that ran before
    logging.getLogger("headstats").info("headstats: already prefixed")
    logging.getLogger("headstats.lmeval").info("plain")
    err = capsys.readouterr().err
    assert "headstats: already prefixed" in err and "headstats: headstats:" not in err

    def fail(args) -> int:
        raise ValueError("headstats: generation under head zeroing is not defined")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["list"].set_defaults(func=fail)
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err == "headstats: error: generation under head zeroing is not defined\n"


@pytest.mark.parametrize(
    ("sig", "code", "word"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_sigterm_stops_a_command_as_an_interrupt_does_so_it_saves_what_finished(
    sig: int, code: int, word: str, capsys, monkeypatch
) -> None:
    import headstats.cli as cli

    saved = []

    def long_run(args) -> int:
        try:
            os.kill(os.getpid(), sig)  # a scheduler's time limit (SIGTERM), or Ctrl-C
            time.sleep(5)
            return 0
        finally:
            saved.append("the checkpoints' finally blocks ran")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["list"].set_defaults(func=long_run)
    before = signal.getsignal(signal.SIGTERM)
    # Ctrl-C as an interactive Python receives it: a test process may have inherited SIGINT ignored
    # (started in the background by a non-interactive shell) or blocked, which is not the CLI's to undo.
    interactive = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    try:
        assert cli.main(["list"]) == code and saved
    finally:
        signal.signal(signal.SIGINT, interactive)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert capsys.readouterr().err.startswith(
        f"headstats: {word}; what finished is kept (a collection's written batches"
    )
    assert signal.getsignal(signal.SIGTERM) is before  # the handler goes with the command


def test_quiet_silences_messages_and_progress(tmp_path: Path) -> None:
    args = build_parser().parse_args(["report", str(tmp_path), "--out", str(tmp_path / "r"), "--n-boot", "50"])
    spec = spec_from_args(args, ReportSpec)
    assert spec.n_boot == 50 and spec.progress
    quiet = build_parser().parse_args(["report", str(tmp_path), "--out", "r", "--n-boot", "7", "--quiet"])
    assert spec_from_args(quiet, ReportSpec).progress is False and spec_from_args(quiet, ReportSpec).n_boot == 7
    assert main(["--quiet", "list", "tasks"]) == 0
    assert logging.getLogger("headstats").getEffectiveLevel() == logging.WARNING
    assert main(["list", "tasks"]) == 0
    assert logging.getLogger("headstats").getEffectiveLevel() == logging.INFO


def test_the_package_declares_its_types() -> None:
    import headstats

    assert (Path(headstats.__file__).parent / "py.typed").is_file()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    from families import tiny_model

    path = tmp_path_factory.mktemp("tiny-llama")
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_a_real_run_says_first_what_it_runs_where_it_writes_and_for_how_long(
    tiny_model_dir: Path, tmp_path: Path, capsys
) -> None:
    """Before any pass, a run states its units, the folders it writes and the dry run's estimate (from recorded
    speeds: no second load); run again, it says that nothing is left to compute."""
    corpus = tmp_path / "notes.txt"
    corpus.write_text("One short text.\n\nA second text, a little longer than the first.\n\nThe third.")
    analysis = tmp_path / "tiny.toml"
    results = tmp_path / "results"
    analysis.write_text(
        f'results = "{results}"\nreport = "{tmp_path / "report"}"\n'
        f'[models]\nnames = ["{tiny_model_dir}"]\n[collect]\ndatasets = ["{corpus}"]\n'
    )
    argv = ["run", str(analysis), "--device", "cpu", "--stages", "collect"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith(f"headstats: running {analysis}: ")]
    assert f"1 unit(s) with work left ({tiny_model_dir} collect {corpus}: 1 pass(es)" in line, line
    assert f"it writes {results} (results: score tables, sweep points);" in line and "(the report)" not in line, line
    assert "estimated" in line and "speeds from " in line, line
    assert err.index(line) < err.index("loading"), err  # said before the model loads
    assert main(argv) == 0
    assert f"headstats: running {analysis}: nothing left to compute" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "progress", "debug"),
    [(["-v"], True, True), (["run", "-v"], True, True), ([], True, False), (["-q"], False, False)],
)
def test_verbosity_flags_choose_what_a_dry_run_says_while_it_works(
    flags: list[str], progress: bool, debug: bool, tiny_model_dir: Path, tmp_path: Path, capsys
) -> None:
    """A dry run that measures (--probe) says which unit it is timing (one line per unit: its probe's
    passes are most of its time); -v adds each probe's timing, -q leaves only warnings. Without
    --probe it reads the model's configuration and tokenizer only, and says so."""
    corpus = tmp_path / "notes.txt"
    corpus.write_text("One short text.\n\nA second text, a little longer than the first.\n\nThe third.")
    analysis = tmp_path / "tiny.toml"
    analysis.write_text(
        f'results = "{tmp_path / "results"}"\nreport = "{tmp_path / "report"}"\n'
        f'[models]\nnames = ["{tiny_model_dir}"]\n[collect]\ndatasets = ["{corpus}"]\n'
    )
    argv = ["run", str(analysis), "--dry-run", "--device", "cpu", "--probe"]
    argv = [*flags, *argv[1:]] if flags[:1] == ["run"] else [*flags, *argv]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert (f"1/1 collect {corpus}: preparing its sequences, timing 8 of them" in err) == progress, err
    assert ("] loading (dry run)" in err) == progress
    assert ("probe: 3 items" in err) == debug and (f"loaded from {tiny_model_dir}" in err) == debug
    assert main([a for a in argv if a != "--probe"]) == 0
    err = capsys.readouterr().err
    assert ("] reading its configuration and tokenizer (no weights)" in err) == progress
    assert "loading" not in err and "probe:" not in err
    assert not (tmp_path / "results").exists()


def test_quiet_and_verbose_together_are_refused(capsys) -> None:
    assert main(["-q", "list", "-v"]) == 2
    assert _one_line_error(capsys) == "headstats: error: give -q (quiet) or -v (verbose), not both"


def _command_parsers() -> dict:
    import argparse

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: parser for name, parser in sub.choices.items() if name != "lm-eval"}


def test_each_command_help_lists_its_options_in_sections_with_two_examples() -> None:
    """Sections come from the options' groups in the specs, in one order; the usage line names only
    what must be given; two example command lines end each help, kept whole."""
    import dataclasses

    from headstats.options import group_of
    from headstats.specs import HELP_GROUPS, CollectSection, ModelsSection, Output

    expected_collect = ["what to run", "data", "model loading", "resources", "output"]
    for name, parser in _command_parsers().items():
        text = parser.format_help()
        titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
        sections = [t for t in titles if t in HELP_GROUPS]
        assert sections == sorted(sections, key=HELP_GROUPS.index), (name, sections)
        assert titles[-2:] == ["general options", "examples"], (name, titles)
        lines = text.split("examples:\n")[1].splitlines()
        assert len(lines) == 2 and all(f"{line} ".startswith(f"  headstats {name} ") for line in lines), (name, lines)
        assert text.startswith(f"usage: headstats {name} ") and "[options]" in text.splitlines()[0]
        if name == "collect":
            assert sections[: len(expected_collect)] == expected_collect
            assert text.splitlines()[0] == "usage: headstats collect --model MODELS --dataset NAMES --out OUT [options]"
    # where a flag is listed is where its field's group says
    collect = _command_parsers()["collect"]
    by_flag = {}
    for group in collect._action_groups:
        for action in group._group_actions:
            by_flag.update(dict.fromkeys(action.option_strings, group.title))
    fields = {f.name: (f, spec) for spec in (ModelsSection, CollectSection, Output) for f in dataclasses.fields(spec)}
    for flag, field in (("--model", "names"), ("--dataset", "datasets"), ("--limit", "limit"), ("--out", "out")):
        assert by_flag[flag] == group_of(*fields[field])
    assert (by_flag["--model"], by_flag["--limit"], by_flag["--batch-size"], by_flag["--dtype"]) == (
        "what to run",
        "data",
        "resources",
        "model loading",
    )


def test_every_help_example_is_a_command_line_the_parser_and_the_specs_accept(capsys) -> None:
    """Each example parses, and every spec its command declares builds from it (the checks a run
    makes before it loads a model); those of `headstats list` run as written."""
    import shlex

    from headstats import options, specs

    spec_classes = [s for s in vars(specs).values() if isinstance(s, type) and issubclass(s, options.Spec)]
    for name, parser in _command_parsers().items():
        dests = {action.dest for action in parser._actions}
        declared = [s for s in spec_classes if {f.name for f in s.options(where="cli")} <= dests]
        for line in parser.format_help().split("examples:\n")[1].splitlines():
            argv = shlex.split(line.split(" > ")[0])[1:]
            args = build_parser().parse_args(argv)
            for spec in declared:
                spec_from_args(args, spec)
            if name == "list":
                assert main(argv) == 0, line
    assert "ahon_ln" in capsys.readouterr().out


def test_the_dataset_help_states_how_a_txt_file_is_split() -> None:
    text = " ".join(_command_parsers()["collect"].format_help().split())
    assert "a .txt file, split into texts at blank lines (single newlines stay inside a text)" in text


def test_each_command_help_speaks_of_its_own_work_first_and_in_its_own_terms() -> None:
    """A command's options that no shared group holds are listed first ("compare options"), and no option's
    help describes what other commands do (the shared --out once named the outputs of collect, ablate,
    report, paper, prune and finetune in every command; --limit spoke of collection and ablation in
    compare). Naming another command as the source of an input ("headstats collect output") is fine. A
    default never contradicts its text (--max-length read "unset: no truncation" beside "default: 2048")."""
    import re

    parsers = _command_parsers()
    jobs = ("collect", "ablate", "prune", "finetune", "frontier")
    for name, parser in parsers.items():
        for action in parser._actions:
            text = " ".join((action.help or "").split())
            if text == "==SUPPRESS==":
                continue
            told = re.sub(r"\((?:one of|default): [^)]*\)", "", text)  # the registry's names (stages) may be commands'
            for other in parsers:
                if other == name:
                    continue
                as_role = re.search(rf"\((?:[\w-]+, )*{other}[,;)]", told)
                bare = other in jobs and re.search(rf"(?<!headstats )\b{other}\b", told)
                assert not as_role and not bare, (name, action.option_strings, other, text)
            if "(default: " in text or "; default: " in text:
                assert "unset" not in text.split("default: ")[0], (name, action.option_strings, text)
    compare = parsers["compare"].format_help()
    titles = [line[:-1] for line in compare.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles[0] == "compare options"
    own = compare.split("compare options:\n")[1].split("\n\n")[0]
    for flag in ("--data", "--margin", "--alpha", "--series", "--replicates"):
        assert f"  {flag} " in own, flag
    general = compare.split("general options:\n")[1].split("\n\n")[0]
    assert {line.split()[0] for line in general.splitlines() if line.startswith("  -")} == {"-h,", "-q,", "-v,"}
    assert "compare options" not in parsers["collect"].format_help()  # every collect option is a shared group's
