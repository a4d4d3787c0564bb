"""The bad-input suite (with tests/test_robustness.py): one row per case a new user or a fault can
bring, with the command, its exit status and the fragment its one-line message must hold, or the
files that must still be there. Every command runs in process (``headstats.cli.main``) on a tiny
random Llama (the embedded SmolLM2 tokenizer) and files made in ``tmp_path``; a row that must fail
before any model loads fails the test if a model's weights are read."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
from families import tiny_llama, tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

import headstats
from headstats.cli import main
from headstats.engine.scores import SCORES, Score, register
from headstats.io import model_paths, store
from headstats.io.tasks import TASKS
from headstats.io.tasks import base as task_base
from headstats.jobs.analysis import load_analysis
from headstats.report import paper as paper_module
from headstats.report import sections as report_sections

TEXTS = ["The first note of the folder.", "A second note.", "And a third one.", "A fourth.", "The fifth."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """A tiny random Llama with the synthetic tokenizer, saved like any checkpoint: byte-level, so it
    reads any text, the real tasks' included."""
    path = tmp_path_factory.mktemp("tiny") / "tiny"
    tiny_llama(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@dataclass
class Env:
    """What a row works with: its own folder and the tiny checkpoint."""

    tmp: Path
    model: Path

    def file(self, name: str, content: str | bytes) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def jsonl(self, name: str, rows: list[dict]) -> str:
        return self.file(name, "".join(json.dumps(r) + "\n" for r in rows))

    def docs(self) -> str:
        return self.jsonl("docs.jsonl", [{"text": t} for t in TEXTS])

    def collect(self, dataset: str, out: str, *extra: str) -> list[str]:
        return ["collect", "--model", str(self.model), "--dataset", dataset, "--out", out, "-q", *extra]


# -- what some rows prepare ------------------------------------------------------------------------------


def user_files(env: Env, folder: str) -> None:
    """A user's own files in a report folder, and what an earlier build there left in its manifest."""
    env.file(f"{folder}/tables/my_thesis_results.csv", "mine\n")
    env.file(f"{folder}/notes.txt", "mine\n")


def report_command(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from headstats.testing.synthetic import write_synthetic_scores

    write_synthetic_scores(env.tmp / "results", models=2, n_sequences=4, progress=False)
    user_files(env, "report")
    monkeypatch.setattr(report_sections, "SECTIONS", {})  # the sections' statistics are not what is tested
    return ["report", str(env.tmp / "results"), "--out", str(env.tmp / "report"), "-q"]


def paper_command(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    user_files(env, "paper")
    monkeypatch.setattr(paper_module, "add_curve_sections", lambda *args, **kwargs: None)
    return ["paper", "--out", str(env.tmp / "paper"), "-q"]


def changed_calibration(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A sweep calibrated on a score-table folder, then that folder grows, then the sweep resumes."""
    cal, docs = str(env.tmp / "cal"), env.docs()
    ablate = ["ablate", "--model", str(env.model), "--task", "piqa", "--limit", "1", "--scores", "ahon_ln"]
    ablate += ["--calibration", cal, "--out", str(env.tmp / "out"), "-q"]
    assert main(env.collect(docs, cal, "--limit", "2")) == 0
    assert main([*ablate, "--targets", "0.5"]) == 0
    assert main(env.collect(docs, cal, "--limit", "4")) == 0
    return [*ablate, "--targets", "0.25,0.5"]


def grown_collect(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    assert main(env.collect(env.docs(), str(env.tmp / "out"), "--limit", "2")) == 0
    return env.collect(env.docs(), str(env.tmp / "out"), "--limit", "4")


def provenance_limit_is_4(env: Env) -> None:
    (partition,) = store.find_partitions(env.tmp / "out")[0]
    assert json.loads((partition.path / store.PROVENANCE_FILE).read_text())["limit"] == 4


def two_partitions(env: Env) -> None:
    assert sorted(p.name.split("-")[0] for p in store.find_partitions(env.tmp / "out")[0]) == ["a", "b"]


def sharded(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    path = env.tmp / "sharded"
    model = LlamaForCausalLM.from_pretrained(env.model)  # headstats loads through AutoModelForCausalLM
    model.save_pretrained(path, max_shard_size="150KB")
    AutoTokenizer.from_pretrained(env.model).save_pretrained(path)
    shards = sorted(path.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    return ["collect", "--model", str(path), "--dataset", env.docs(), "--out", str(env.tmp / "out"), "-q"]


def offline(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from huggingface_hub import constants

    def unreachable(*args: object, **kwargs: object) -> socket.socket:
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(model_paths, "_HUB", {})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # restored after the row
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    return ["collect", "--model", "no-such-model-here", "--dataset", env.docs(), "--out", str(env.tmp / "out")]


def bundled_tasks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm-eval's command line indexes only headstats' bundled tasks, not lm-eval's thousands of its
    own: a refusal of the model comes before any task is read, so the row's outcome is the same."""
    pytest.importorskip("lm_eval")
    import headstats.lmeval as lmeval

    monkeypatch.setattr(lmeval, "task_manager", functools.partial(lmeval.task_manager, include_defaults=False))


def pickled(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    bundled_tasks_only(monkeypatch)
    from safetensors.torch import load_file

    path = env.tmp / "pickled"
    AutoTokenizer.from_pretrained(env.model).save_pretrained(path)
    (path / "config.json").write_text((env.model / "config.json").read_text())
    state = load_file(env.model / "model.safetensors")
    torch.save({**state, "extra": Path("x")}, path / "pytorch_model.bin")  # not plain tensors
    return ["lm-eval", "--model", "headstats", "--model_args", f"pretrained={path}", "--tasks", "piqa", "--limit", "1"]


def cuda_missing(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    bundled_tasks_only(monkeypatch)
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args = ["--model", "headstats", "--model_args", f"pretrained={env.model}", "--tasks", "piqa", "--limit", "1"]
    return ["lm-eval", *args, "--device", "cuda"]


def reused_ablation(env: Env) -> None:
    model = tiny_model("llama")
    context = headstats.ablate_heads(model, score="random", threshold=0.5, seed=0)
    ids = torch.randint(0, 100, (2, 6))
    fractions = []
    for _ in range(2):
        with context as ablation:
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        fractions.append(ablation.realised_fraction())
    assert fractions[0] == fractions[1] and 0 < fractions[0] < 1
    assert model.config._attn_implementation == "eager"


def score_texts_none(env: Env) -> None:
    model, tokenizer = headstats.load_model(str(env.model), device="cpu")
    headstats.score_texts(model, tokenizer, None)


def negative_awft(env: Env) -> None:
    with headstats.ablate_heads(tiny_model("llama"), score="awft", threshold=-1):
        pass


# -- the table ------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One bad input. ``argv``: a command line (given the row's :class:`Env`; a function of the env and
    monkeypatch when it prepares something first), or ``call``: a Python call. ``code``: the exit
    status, the exception a call raises, or None for a call that must work. ``message``: a fragment
    of the one-line error, of a warning (``warns``) or of stdout. ``keeps``: files (under the row's
    folder) that must still exist; ``check``: what else must hold afterwards. ``loads``: whether a
    model's weights may be read (else reading them fails the row). ``bundled_data``: the row reads the
    bundled benchmark data (the row is an integration test)."""

    id: str
    argv: Callable[..., list[str]] | None = None
    call: Callable[[Env], object] | None = None
    code: int | type[BaseException] | None = 2
    message: str = ""
    warns: bool = False
    keeps: tuple[str, ...] = ()
    check: Callable[[Env], None] | None = None
    loads: bool = False
    bundled_data: bool = False


CASES = [
    # data lost
    Case(
        "report keeps a user's files",
        report_command,
        code=0,
        warns=True,
        message="2 file(s) that no headstats",
        keeps=("report/tables/my_thesis_results.csv", "report/notes.txt", "report/_manifest.json"),
    ),
    Case(
        "paper keeps a user's files",
        paper_command,
        code=0,
        warns=True,
        message="tables/my_thesis_results.csv",
        keeps=("paper/tables/my_thesis_results.csv", "paper/notes.txt", "paper/table2.csv"),
    ),
    # silently wrong
    Case(
        "a changed calibration folder is refused",
        changed_calibration,
        loads=True,
        bundled_data=True,
        message="changed since the points",
    ),
    Case(
        "an unknown --reference",
        lambda env, mp: [*report_command(env, mp), "--reference", "nosuchmodel"],
        message="--reference 'nosuchmodel' is not a model of",
    ),
    Case(
        "an analysis name that escapes",
        lambda env, mp: ["run", env.file("a.toml", 'name = "../../x"\n')],
        message="name '../../x' holds a path separator",
    ),
    Case(
        "a score id that escapes",
        call=lambda env: register(Score("../x", "escapes", "below")),
        code=ValueError,
        message="score id '../x' holds a path separator",
    ),
    Case("provenance follows a grown collect", grown_collect, code=0, loads=True, check=provenance_limit_is_4),
    # tracebacks in lm-eval
    Case("lm-eval: pickled .bin weights", pickled, loads=True, message="holds a pickle that is not plain tensors"),
    Case("lm-eval: --device cuda without CUDA", cuda_missing, message="no CUDA device is available here"),
    # messages
    Case(
        "--dataset ''",
        lambda env, mp: env.collect("", str(env.tmp / "out")),
        message="argument --dataset: is empty: give at least one item",
    ),
    Case(
        "--dataset ','",
        lambda env, mp: env.collect(",", str(env.tmp / "out")),
        message="argument --dataset: is empty: give at least one item",
    ),
    Case("collect --out ''", lambda env, mp: env.collect(env.docs(), ""), message="--out is empty"),
    Case(
        "--seed -5",
        lambda env, mp: env.collect(env.docs(), str(env.tmp / "out"), "--seed", "-5"),
        message="--seed must be at least 0, not -5",
    ),
    Case(
        "--calibration nonsense",
        lambda env, mp: [
            "ablate",
            "--model",
            str(env.model),
            "--task",
            "piqa",
            "--calibration",
            "nonsense",
            "--out",
            str(env.tmp / "out"),
        ],
        message="give eval (the scores of the evaluation prompts themselves, the study's choice), a folder of "
        "score tables",
    ),
    Case(
        "report --contrast MISSING",
        lambda env, mp: [*report_command(env, mp), "--contrast", str(env.tmp / "MISSING")],
        message="holds no score tables (no such folder)",
    ),
    Case("headstats list without an argument", lambda env, mp: ["list"], code=0, message="models:\n  smollm2-135m"),
    Case(
        "a non-UTF-8 analysis file",
        lambda env, mp: ["run", env.file("latin1.toml", b'name = "caf\xe9"\n')],
        message="latin1.toml: not UTF-8 text (byte 11)",
    ),
    Case(
        "an empty .jsonl",
        lambda env, mp: env.collect(env.file("empty.jsonl", ""), str(env.tmp / "out")),
        message="empty.jsonl: the file holds no rows",
    ),
    Case(
        "an empty Parquet file",
        lambda env, mp: env.collect(empty_parquet(env), str(env.tmp / "out")),
        message="empty.parquet: the file holds no rows",
    ),
    Case(
        '{"text": 12345}',
        lambda env, mp: env.collect(env.jsonl("n.jsonl", [{"text": 12345}]), str(env.tmp / "out")),
        message="no text documents in column 'text' (of its 1 row(s): 1 not a string (e.g. row 1: 12345))",
    ),
    Case(
        "a folder as --dataset",
        lambda env, mp: env.collect(str(env.tmp), str(env.tmp / "out")),
        message="is a folder, not a file",
    ),
    Case(
        "two --dataset flags are merged",
        lambda env, mp: [
            *env.collect(env.jsonl("a.jsonl", [{"text": "one"}]), str(env.tmp / "out")),
            "--dataset",
            env.jsonl("b.jsonl", [{"text": "two"}]),
        ],
        code=0,
        loads=True,
        check=two_partitions,
    ),
    Case("a missing safetensors shard", sharded, message="listed in model.safetensors.index.json are missing"),
    Case(
        "score_texts(model, tok, None)",
        call=score_texts_none,
        code=ValueError,
        loads=True,
        message="score_texts takes a list of texts, not NoneType",
    ),
    Case("one ablate_heads(...) in two with blocks", call=reused_ablation, code=None, loads=True),
    Case(
        "an unknown model offline, at once",
        offline,
        message="not in the local Hugging Face cache and the Hub is not reachable",
    ),
    Case(
        "a negative awft threshold",
        call=negative_awft,
        code=ValueError,
        message="threshold -1.0 of 'awft' is outside the values the score takes [0, 1], so it zeroes every head",
    ),
    Case(
        "rows with a null text are counted",
        lambda env, mp: env.collect(
            env.jsonl("nulls.jsonl", [{"text": None}, {"text": "ok"}, {"text": ""}]), str(env.tmp / "out")
        ),
        code=0,
        loads=True,
        warns=True,
        message="2 of 3 rows skipped, with no text in 'text': 2 null or empty",
    ),
]


def empty_parquet(env: Env) -> str:
    path = env.tmp / "empty.parquet"
    pd.DataFrame({"text": pd.Series([], dtype=str)}).to_parquet(path)
    return str(path)


class WeightsRead(AssertionError):
    pass


def without_logging_errors(err: str) -> str:
    """stderr without the "--- Logging error ---" reports of a library's log handler that still
    writes to the stream an earlier row's capture closed (a test artefact, not the command's output)."""
    return re.sub(r"--- Logging error ---\n.*?\nArguments: [^\n]*\n", "", err, flags=re.DOTALL)


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.id, marks=[pytest.mark.integration] if c.bundled_data else []) for c in CASES]
)
def test_bad_input(case: Case, checkpoint: Path, tmp_path: Path, monkeypatch, capsys, caplog) -> None:
    env = Env(tmp_path, checkpoint)
    if not case.loads:

        def no_weights(*args: object, **kwargs: object) -> None:
            raise WeightsRead("a model's weights were read before the input was refused")

        monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_weights)
    with caplog.at_level(logging.INFO, logger="headstats"):
        if case.call is not None:
            if isinstance(case.code, type):
                with pytest.raises(case.code) as err:
                    case.call(env)
                assert case.message in str(err.value) and "\n" not in str(err.value), str(err.value)
            else:
                case.call(env)
        else:
            assert case.argv is not None
            argv = case.argv(env, monkeypatch)
            capsys.readouterr()
            code = main(argv)
            out, err = capsys.readouterr()
            assert code == case.code, (code, err[-2000:])
            assert "Traceback" not in without_logging_errors(err)
            if case.code != 0:
                last = err.strip().splitlines()[-1]
                assert last.startswith("headstats: error:") and case.message in last, last
            elif case.warns:
                warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
                assert len(warnings) == 1 and case.message in warnings[0], warnings
            else:
                assert case.message in out
    for rel in case.keeps:
        assert (tmp_path / rel).is_file(), rel
    if case.check is not None:
        case.check(env)


# -- names never become paths unchecked ---------------------------------------------------------------------

BAD_NAMES = ["../escape", "/tmp/absolute", "nul\0byte"]


def register_task(name: str) -> None:
    task_base.register(dataclasses.replace(TASKS["piqa"], name=name))


NAME_CHECKS: dict[str, Callable[[str, Path], object]] = {
    "score id (register)": lambda name, tmp: register(Score(name, "a score", "below")),
    "task name (register)": lambda name, tmp: register_task(name),
    "dataset partition": lambda name, tmp: store.table_dir(tmp, "scores", "model", name),
    "model partition": lambda name, tmp: store.partition_dir(tmp, model=name, task="piqa"),
    "sweep point file": lambda name, tmp: store.point_file_name(name, 0.1),
    "analysis name": lambda name, tmp: load_analysis(
        (tmp / "a.toml").write_text(f"name = {json.dumps(name)}\n") and tmp / "a.toml"
    ),
}


@pytest.mark.parametrize("bad", BAD_NAMES, ids=["parent", "absolute", "nul"])
@pytest.mark.parametrize("where", list(NAME_CHECKS))
def test_a_name_that_would_leave_its_folder_is_refused(where: str, bad: str, tmp_path: Path) -> None:
    before = set(SCORES), set(TASKS)
    with pytest.raises(ValueError, match="it becomes part of a file name") as err:
        NAME_CHECKS[where](bad, tmp_path)
    assert "\n" not in str(err.value)
    assert (set(SCORES), set(TASKS)) == before  # nothing was registered
    assert not list(tmp_path.rglob("*=*"))  # and no folder made
