"""Collection: streamed, resumable Parquet score tables (docs/design.md#table-layout), `headstats collect`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from families import tiny_model

import headstats
from headstats.cli import main
from headstats.engine.scores import score_ids
from headstats.io import fingerprint, store
from headstats.jobs import collect as collect_module
from headstats.stats import tables

SCORE_IDS = score_ids()

try:
    from test_tasks import make_tokenizer
except ImportError:  # tests/ imported as a package
    from tests.test_tasks import make_tokenizer

TEXTS = [
    "Attention heads that attend to the first token do little.",
    "The cat sat on the mat and looked at the dog.",
    "Scores are computed in one pass over the sequence.",
    "Inactive heads can be zeroed without hurting accuracy much.",
    "A short one.",
    "Padding must not change any score of any sequence in the batch.",
    "Layer-normalised head output norms are the most reliable score.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    path = tmp_path_factory.mktemp("tiny-llama")
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(TEXTS))
    return path


def _load(model_dir: Path):
    return headstats.load_model(str(model_dir), device="cpu")


def test_collected_table_equals_scoring_the_same_sequences(model_dir: Path, corpus: Path, tmp_path: Path) -> None:
    model, tokenizer = _load(model_dir)
    result = collect_module.collect_scores(model, tokenizer, str(corpus), tmp_path / "out", batch_size=3)
    # A user file's partition is named by its stem and the first 8 hex digits of its content hash.
    digest = fingerprint.file_digest(corpus).removeprefix("sha256:")
    assert result.n_samples == len(TEXTS) and result.partition.name == f"dataset=notes-{digest[:8]}"
    table = headstats.read_scores(tmp_path / "out")
    assert set(table["model"]) == {model_dir.name} and set(table["dataset"]) == {f"notes-{digest[:8]}"}
    assert len(table) == len(TEXTS) * 3 * 4 and not table.duplicated(["sample_id", "layer", "head"]).any()
    assert [str(table[c].dtype) for c in ("sample_id", "layer", "head", "kv_head", "n_tokens")] == [
        "int64",
        "int16",
        "int16",
        "int16",
        "int32",
    ]
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    expected = headstats.score_sequences(model, ids, batch_size=2, padding_side="left")
    got = table.sort_values(["sample_id", "layer", "head"]).reset_index(drop=True)
    non_random = [s for s in SCORE_IDS if s != "random"]
    pd.testing.assert_frame_equal(got[non_random], expected[non_random], rtol=1e-5, atol=1e-6)
    provenance = store.read_provenance(result.partition)
    assert provenance["prompt_format"] == "tokenizer" and provenance["dataset"] == f"notes-{digest[:8]}"
    assert provenance["dataset_identity"]["sha256"] == digest
    assert provenance["dtype"] == "float32" and "torch" in provenance["versions"]  # as --dtype spells it
    assert (result.partition / store.DONE_FILE).is_file()


def test_an_interrupted_collection_resumes_without_duplicates_or_partial_files(
    model_dir: Path, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = _load(model_dir)
    clean = collect_module.collect_scores(model, tokenizer, str(corpus), tmp_path / "clean", batch_size=2)
    real = collect_module.iter_score_tables

    def dies_after_two_batches(*args, **kwargs):
        for i, table in enumerate(real(*args, **kwargs)):
            if i == 2:
                raise KeyboardInterrupt
            yield table

    monkeypatch.setattr(collect_module, "iter_score_tables", dies_after_two_batches)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        # rows_per_part=1 closes a part after every batch, so two whole parts survive the interruption.
        collect_module.collect_scores(model, tokenizer, str(corpus), out, batch_size=2, rows_per_part=1)
    partition = next(out.glob("model=*/dataset=notes-*"))
    assert len(store.data_files(partition)) == 2
    assert not list(partition.glob(".*tmp")) and not (partition / store.DONE_FILE).exists()
    monkeypatch.setattr(collect_module, "iter_score_tables", real)
    resumed = collect_module.collect_scores(model, tokenizer, str(corpus), out, batch_size=2)
    assert resumed.n_new == len(TEXTS) - 4 and resumed.n_samples == len(TEXTS)
    key = ["sample_id", "layer", "head"]
    a = headstats.read_scores(out).sort_values(key).reset_index(drop=True)
    b = headstats.read_scores(tmp_path / "clean").sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, rtol=1e-5, atol=1e-6)
    again = collect_module.collect_scores(model, tokenizer, str(corpus), out, batch_size=2)
    assert again.n_new == 0 and clean.n_samples == again.n_samples


def test_sigterm_during_a_one_part_collection_keeps_its_written_batches_and_the_resume_equals_a_clean_run(
    model_dir: Path, tmp_path: Path
) -> None:
    """A collection short enough to write one part file (the first closes after a minute) is stopped
    by SIGTERM right after its first batch is written (`-v` logs each): the batches written are kept
    in a whole part, and the same command run again scores only the rest, giving the table an
    uninterrupted run gives. Many one-sequence batches leave the signal seconds to arrive in."""
    import signal
    import subprocess
    import sys

    texts = [f"{TEXTS[i % len(TEXTS)]} Number {i}." for i in range(500)]
    corpus = tmp_path / "many.txt"
    corpus.write_text("\n\n".join(texts))
    argv = ["collect", "--model", str(model_dir), "--dataset", str(corpus), "--out", str(tmp_path / "out")]
    argv += ["--batch-size", "1", "--device", "cpu", "--no-progress"]
    # SIGTERM unblocked in the child whatever the test runner's signal mask is.
    code = (
        "import signal, sys\nsignal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})\n"
        f"from headstats.cli import main\nsys.exit(main(['-v', *{argv!r}]))"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    seen = []
    assert child.stderr is not None
    for line in child.stderr:
        seen.append(line)
        if "a batch of 1 sequences written" in line:
            child.send_signal(signal.SIGTERM)
            break
    rest = child.communicate(timeout=300)[1]
    assert child.returncode == 143, "".join(seen) + rest
    assert rest.strip().splitlines()[-1].startswith("headstats: terminated; what finished is kept")

    partition = next((tmp_path / "out").glob("model=*/dataset=many-*"))
    kept = store.stored_sample_ids(partition)
    assert len(store.data_files(partition)) == 1 and 0 < len(kept) < len(texts)
    assert not list(partition.glob(".*tmp")) and not (partition / store.DONE_FILE).exists()
    assert (partition / store.PROVENANCE_FILE).is_file()

    assert main(argv) == 0
    assert (partition / store.DONE_FILE).is_file() and len(store.data_files(partition)) == 2
    model, tokenizer = _load(model_dir)
    clean = collect_module.collect_scores(model, tokenizer, str(corpus), tmp_path / "clean", batch_size=1)
    assert clean.n_samples == len(texts)
    key = ["sample_id", "layer", "head"]
    resumed = headstats.read_scores(tmp_path / "out").sort_values(key).reset_index(drop=True)
    uninterrupted = headstats.read_scores(tmp_path / "clean").sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(resumed, uninterrupted, rtol=1e-5, atol=1e-6)


def test_resuming_with_other_settings_is_refused(model_dir: Path, corpus: Path, tmp_path: Path) -> None:
    model, tokenizer = _load(model_dir)
    collect_module.collect_scores(model, tokenizer, str(corpus), tmp_path, limit=2)
    with pytest.raises(store.StoreError, match=r"other settings.*max_length"):
        collect_module.collect_scores(model, tokenizer, str(corpus), tmp_path, limit=2, max_length=5)


def test_random_baselines_of_different_datasets_are_independent(model_dir: Path, tmp_path: Path) -> None:
    model, tokenizer = _load(model_dir)
    names = []
    for name in ("first", "second"):
        (tmp_path / f"{name}.txt").write_text("\n\n".join(TEXTS))
        result = collect_module.collect_scores(model, tokenizer, str(tmp_path / f"{name}.txt"), tmp_path / "out")
        names.append(result.partition.name.removeprefix("dataset="))
    table = headstats.read_scores(tmp_path / "out").sort_values(["dataset", "sample_id", "layer", "head"])
    first, second = (table[table.dataset == d]["random"].to_numpy() for d in names)
    assert (first != second).mean() > 0.99
    assert (
        table[table.dataset == names[0]]["ahon"].to_numpy() == table[table.dataset == names[1]]["ahon"].to_numpy()
    ).all()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no-such-model"], "model 'no-such-model' not found"),
        (["--dataset", "nonsense"], "unknown dataset 'nonsense'"),
        (["--dataset", "{empty}"], "empty.txt: the file holds no text"),
        (["--scores", "ahon,bogus"], "unknown score id 'bogus'"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--out", "{file}/sub"], "not writable"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    args: list[str], message: str, model_dir: Path, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    base = {"--model": str(model_dir), "--dataset": str(corpus), "--out": str(tmp_path / "out")}
    given = dict(zip(args[::2], args[1::2], strict=True))
    given = {k: v.format(empty=empty, file=blocker) for k, v in given.items()}
    argv = ["collect"] + [x for kv in {**base, **given}.items() for x in kv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not list((tmp_path / "out").rglob("*.parquet")) if (tmp_path / "out").exists() else True


def test_unsupported_architecture_is_a_clear_cli_error(tmp_path: Path, tokenizer, capsys) -> None:
    from inline_model import InlineConfig, InlineForCausalLM

    InlineForCausalLM(InlineConfig(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "inline")
    tokenizer.save_pretrained(tmp_path / "inline")
    (tmp_path / "t.txt").write_text("some text")
    code = main(
        [
            "collect",
            "--model",
            str(tmp_path / "inline"),
            "--dataset",
            str(tmp_path / "t.txt"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2 and "AttentionInterface" in capsys.readouterr().err


@pytest.mark.integration
def test_collect_command_on_the_embedded_model_and_real_mmlu(tmp_path: Path) -> None:
    # The first 8 questions in file order (one subject's short prompts) keep this real-model run quick;
    # the random, stratified default is tested in test_robustness on a tiny model.
    argv = [
        "collect",
        "--model",
        "smollm2-135m",
        "--dataset",
        "mmlu",
        "--limit",
        "8",
        "--sample",
        "first",
        "--batch-size",
        "4",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    table = headstats.read_scores(tmp_path)
    assert len(table) == 8 * 30 * 9 and set(table["dataset"]) == {"mmlu"} and set(table["model"]) == {"smollm2-135m"}
    assert table["n_tokens"].min() > 200  # 5-shot prompts
    sidecar = json.loads(next(tmp_path.rglob(store.PROVENANCE_FILE)).read_text())
    assert sidecar["model"] == "smollm2-135m" and sidecar["revision"].startswith("sha256:")
    assert torch.isfinite(torch.tensor(table[list(SCORE_IDS)].to_numpy())).all()


def test_hellaswag_score_tables_carry_their_source_documents_as_clusters(tmp_path: Path) -> None:
    """Two of the fixture's three HellaSwag contexts come from one video: the score table names each
    sequence's document, and distances, noise floors and the report resample documents."""
    try:
        from test_tasks import build_data_dir
    except ImportError:
        from tests.test_tasks import build_data_dir
    from headstats.report.sections.context import Context
    from headstats.stats import distances
    from headstats.stats.coverage import score_samples

    data = build_data_dir(tmp_path / "data")
    tok = make_tokenizer(adds_bos=False)
    for family in ("llama", "gpt2"):
        model = tiny_model(family)
        model.resize_token_embeddings(len(tok))
        headstats.collect_scores(model, tok, "hellaswag", tmp_path / "out", data_dir=data, scores="ahon,awft")
    table = headstats.read_scores(tmp_path / "out")
    by_sample = table.drop_duplicates(["model", "sample_id"]).sort_values(["model", "question_id"])
    assert by_sample["document"].tolist() == ["activitynet~v_a", "activitynet~v_a", "wikihow~7"] * 2
    assert tables.cluster_column(table) == "document"
    floor = distances.noise_floor(table, table["model"].iloc[0], depth_bins=0, n_split=4)
    assert floor["cluster"].eq("document").all() and floor["n_clusters"].eq(2).all()
    shown = score_samples(Context(tmp_path / "out").scores)
    assert shown["cluster"].eq("document").all() and shown["n_clusters"].eq(2).all()
