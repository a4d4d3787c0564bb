"""Nothing silently wrong (issue 14): inputs identified by content, one writer per results folder,
damage detected, and every failure a one-line message with nothing written."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from families import tiny_llama, tiny_model

import headstats
from headstats.cli import main
from headstats.io import store
from headstats.io.tasks import collection_source
from headstats.jobs import collect as collect_module

TEXTS_A = ["The first folder holds this note.", "A second note of the first folder.", "And a third one."]
TEXTS_B = ["Another folder, another file of the same name.", "Its notes differ.", "Entirely."]
KEY = ["sample_id", "layer", "head"]


def save(path: Path, tokenizer, family: str = "llama", seed: int = 0) -> Path:
    model = tiny_model(family, seed=seed)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    return save(tmp_path_factory.mktemp("tiny-llama"), tokenizer)


def jsonl(path: Path, texts: list[str], column: str = "text", **extra: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{column: t, **{k: v[i] for k, v in extra.items()}} for i, t in enumerate(texts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_line_error(capsys: pytest.CaptureFixture) -> str:
    """The command's message: one line (transformers' own weight-loading bar aside), no traceback."""
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(err) == 1 and err[0].startswith("headstats: error:"), err
    return err[0]


def collect(model_dir: Path, dataset: Path | str, out: Path, **options):
    model, tokenizer = headstats.load_model(str(model_dir), device="cpu")
    return collect_module.collect_scores(model, tokenizer, str(dataset), out, progress=False, **options)


# -- 1. same file name, different file ------------------------------------------------------------------


def test_same_name_files_never_share_a_partition(model_dir: Path, tmp_path: Path, capsys) -> None:
    a = jsonl(tmp_path / "files" / "a" / "docs.jsonl", TEXTS_A, body=TEXTS_B)
    b = jsonl(tmp_path / "files" / "b" / "docs.jsonl", TEXTS_B)
    alone = {}
    for name, path in (("a", a), ("b", b)):
        collect(model_dir, path, tmp_path / f"only-{name}")
        alone[name] = headstats.read_scores(tmp_path / f"only-{name}").drop(columns="dataset").sort_values(KEY)
    # Both files into one folder, one after the other and in one command: two partitions, own scores
    # (a partition names its file by content: the sha256 of its dataset identity, not a local path).
    sha_a = store.scan_provenance(tmp_path / "only-a")[0]["dataset_identity"]["sha256"]
    capsys.readouterr()
    for out, runs in ((tmp_path / "one-by-one", [str(a), str(b)]), (tmp_path / "one-command", [f"{a},{b}"])):
        for dataset in runs:
            assert main(["collect", "--model", str(model_dir), "--dataset", dataset, "--out", str(out), "-q"]) == 0
        table = headstats.read_scores(out)
        assert table["dataset"].nunique() == 2 and all(d.startswith("docs-") for d in table["dataset"].unique())
        for part in store.find_partitions(out)[0]:
            name = "a" if part.provenance["dataset_identity"]["sha256"] == sha_a else "b"
            got = headstats.read_scores(part.path).drop(columns="dataset").sort_values(KEY)
            pd.testing.assert_frame_equal(got.reset_index(drop=True), alone[name].reset_index(drop=True))
    # The same file read through another column is other data: refused, and the scores stay a's.
    with pytest.raises(store.StoreError, match=r"different run.*text_column"):
        collect(model_dir, a, tmp_path / "only-a", text_column="body")
    prov = store.scan_provenance(tmp_path / "only-a")[0]
    assert len(prov["dataset_identity"]["sha256"]) == 64 and prov["dataset_identity"]["text_column"] == "text"


# -- 2. two writers, one folder ---------------------------------------------------------------------------


def test_two_concurrent_collects_leave_one_row_per_sample_layer_head(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = jsonl(tmp_path / "notes.jsonl", TEXTS_A + TEXTS_B)
    real = collect_module.iter_score_tables

    def slow(*args, **kwargs):
        for table in real(*args, **kwargs):
            time.sleep(0.3)  # both runs are surely inside the partition at the same time
            yield table

    monkeypatch.setattr(collect_module, "iter_score_tables", slow)
    out, start, outcomes = tmp_path / "out", threading.Barrier(2), []
    # Loaded here, one after the other: transformers' loading switches process-wide torch modes.
    loaded = [headstats.load_model(str(model_dir), device="cpu") for _ in range(2)]

    def run(model, tokenizer) -> None:
        start.wait()
        try:
            options = dict(batch_size=1, rows_per_part=1, progress=False)
            outcomes.append(collect_module.collect_scores(model, tokenizer, str(corpus), out, **options))
        except store.PartitionBusy as err:
            outcomes.append(err)

    threads = [threading.Thread(target=run, args=pair) for pair in loaded]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy = [o for o in outcomes if isinstance(o, store.PartitionBusy)]
    assert len(busy) == 1 and "being written by another headstats run" in str(busy[0])
    table = headstats.read_scores(out)
    assert not table.duplicated(KEY).any() and len(table) == 6 * 3 * 4
    again = collect(model_dir, corpus, out)
    assert again.n_new == 0 and len(headstats.read_scores(out)) == 6 * 3 * 4


# -- 3. a checkpoint overwritten in place -------------------------------------------------------------------


def test_an_overwritten_checkpoint_is_refused_on_resume(tokenizer, tmp_path: Path) -> None:
    checkpoint = save(tmp_path / "ckpt", tokenizer, seed=0)
    corpus = jsonl(tmp_path / "notes.jsonl", TEXTS_A + TEXTS_B)
    collect(checkpoint, corpus, tmp_path / "out", limit=2)
    save(checkpoint, tokenizer, seed=1)  # other weights, same shapes, same path
    with pytest.raises(store.StoreError, match=r"different run.*revision"):
        collect(checkpoint, corpus, tmp_path / "out", limit=4)
    assert len(headstats.read_scores(tmp_path / "out")) == 2 * 3 * 4


def test_an_overwritten_checkpoint_is_refused_when_a_sweep_resumes(smollm2_tokenizer, tmp_path: Path) -> None:
    from headstats.jobs.sweep import run_sweep

    tokenizer = smollm2_tokenizer
    checkpoint = tmp_path / "ckpt"
    for seed in (0, 1):
        tiny_llama(len(tokenizer), seed=seed).save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
        sweep = dict(scores="random", limit=1, out=tmp_path / "out", device="cpu", progress=False)
        if seed == 0:
            partition = run_sweep(str(checkpoint), "piqa", targets=[0.5], **sweep)
            finished = sorted(p.name for p in partition.glob("*.parquet"))
        else:
            with pytest.raises(store.StoreError, match=r"different run.*revision"):
                run_sweep(str(checkpoint), "piqa", targets=[0.25, 0.5], **sweep)
    assert sorted(p.name for p in partition.glob("*.parquet")) == finished


# -- 4. damage goes unnoticed ---------------------------------------------------------------------------------


def test_a_flipped_byte_in_a_part_file_is_an_error_naming_the_file(model_dir: Path, tmp_path: Path, capsys) -> None:
    corpus = jsonl(tmp_path / "notes.jsonl", TEXTS_A + TEXTS_B)
    out = tmp_path / "out"
    collect(model_dir, corpus, out)
    part = store.data_files(store.find_partitions(out)[0][0].path)[0]
    column = pq.read_metadata(part).row_group(0).column(pq.read_schema(part).names.index("ahon"))
    data = bytearray(part.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x04
    part.write_bytes(bytes(data))
    with pytest.raises(store.StoreError, match=rf"{part} is damaged.*delete that file"):
        headstats.read_scores(out)
    sample_ids = pq.read_metadata(part).row_group(0).column(0)
    data[sample_ids.data_page_offset + sample_ids.total_compressed_size // 2] ^= 0x04
    part.write_bytes(bytes(data))
    capsys.readouterr()
    code = main(["collect", "--model", str(model_dir), "--dataset", str(corpus), "--out", str(out), "-q"])  # resume
    assert code == 2 and f"{part} is damaged" in one_line_error(capsys)


def test_a_truncated_sweep_point_is_computed_again(smollm2_tiny_llama, smollm2_tokenizer, tmp_path: Path) -> None:
    from headstats.jobs.sweep import run_sweep

    tokenizer = smollm2_tokenizer
    model = smollm2_tiny_llama("tiny")
    sweep = dict(tokenizer=tokenizer, scores="ahon_ln", targets=[0.5], limit=2, out=tmp_path, progress=False)
    partition = run_sweep(model, "piqa", **sweep)
    point = partition / "point-ahon_ln-0.5.parquet"
    whole = headstats.read_interventions(tmp_path).sort_values(["score", "question_id"]).reset_index(drop=True)
    point.write_bytes(point.read_bytes()[: point.stat().st_size // 2])
    run_sweep(model, "piqa", **sweep)
    again = headstats.read_interventions(tmp_path).sort_values(["score", "question_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(again, whole)
    (partition / store.CALIBRATION_FILE).write_text('{"thresholds": ')
    point.unlink()
    with pytest.raises(store.StoreError, match=rf"{store.CALIBRATION_FILE} is damaged.*delete it"):
        run_sweep(model, "piqa", **sweep)
    (partition / store.PROVENANCE_FILE).write_text("{")
    with pytest.raises(store.StoreError, match=rf"{store.PROVENANCE_FILE} is damaged.*delete it"):
        run_sweep(model, "piqa", **sweep)


# -- 5. a failed first run blocks the folder ---------------------------------------------------------------


def test_a_failed_first_run_leaves_a_folder_the_corrected_command_accepts(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    corpus = jsonl(tmp_path / "notes.jsonl", TEXTS_A)
    out = tmp_path / "out"
    argv = ["collect", "--model", str(model_dir), "--dataset", str(corpus), "--out", str(out)]
    real = collect_module.iter_score_tables

    def crashes(*args, **kwargs):
        yield from ()
        raise RuntimeError("out of memory")

    monkeypatch.setattr(collect_module, "iter_score_tables", crashes)
    assert main([*argv, "--max-length", "8"]) != 0
    capsys.readouterr()
    assert not list(out.rglob("*")) if out.exists() else True
    monkeypatch.setattr(collect_module, "iter_score_tables", real)
    # What an older headstats left: a provenance record of other settings and no data.
    partition = store.table_dir(out, "scores", model_dir.name, collection_source(str(corpus)).name)
    partition.mkdir(parents=True)
    (partition / store.PROVENANCE_FILE).write_text(json.dumps({"settings": {"max_length": 8}}))
    (partition / ".part-0123.parquet.tmp").write_bytes(b"killed mid-write")
    assert main([*argv, "--max-length", "64"]) == 0
    assert store.read_provenance(partition)["settings"]["max_length"] == 64
    assert not list(partition.glob(".*")) and len(headstats.read_scores(out)) == 3 * 3 * 4


# -- tracebacks that are messages now ------------------------------------------------------------------------


def test_score_texts_refuses_an_empty_list_a_bare_string_and_unknown_token_ids(model_dir: Path) -> None:
    model, tokenizer = headstats.load_model(str(model_dir), device="cpu")
    cases = [
        (lambda: headstats.score_texts(model, tokenizer, []), "no texts to score"),
        (lambda: headstats.score_texts(model, tokenizer, "a string"), r"not one string: use score_texts\(model"),
        (lambda: headstats.score_texts(model, tokenizer, ["fine", ""]), "text 1 is empty"),
        (lambda: headstats.score_sequences(model, []), "no sequences to score"),
        (lambda: headstats.score_sequences(model, [[1, 2], [3, 10**6]]), r"token id 1000000, outside the model's"),
        (lambda: headstats.score_sequences(model, [[1, 2], []]), "sequence 1 is empty"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert "\n" not in str(err.value)


def test_gpt2_positions_cap_the_default_max_length_and_say_so(tokenizer, tmp_path: Path, caplog) -> None:
    gpt2 = save(tmp_path / "gpt2", tokenizer, family="gpt2")  # 256 learned positions
    long_text = " ".join(["the cat sat on the mat and looked at the dog"] * 80)
    corpus = jsonl(tmp_path / "long.jsonl", [long_text, "short"])
    with caplog.at_level(logging.WARNING, logger="headstats"):
        assert main(["collect", "--model", str(gpt2), "--dataset", str(corpus), "--out", str(tmp_path / "out")]) == 0
    assert any("256 learned positions" in r.getMessage() for r in caplog.records)
    table = headstats.read_scores(tmp_path / "out")
    assert table["n_tokens"].max() == 256
    assert store.scan_provenance(tmp_path / "out")[0]["max_length"] == 256


def test_an_unknown_model_leaves_no_output_folder(tmp_path: Path, capsys) -> None:
    corpus = jsonl(tmp_path / "notes.jsonl", TEXTS_A)
    out = tmp_path / "new" / "out"
    assert main(["collect", "--model", "no-such-model", "--dataset", str(corpus), "--out", str(out)]) == 2
    assert "model 'no-such-model' not found" in one_line_error(capsys)
    assert not (tmp_path / "new").exists()


# -- samples: limit draws a seeded, stratified random sample --------------------------------------------------


@pytest.mark.integration
def test_collect_mmlu_limit_57_covers_the_subjects_and_repeats_its_sample(smollm2_tokenizer, tmp_path: Path) -> None:
    from headstats.io.tasks import load_task

    tokenizer = smollm2_tokenizer
    tiny_llama(
        len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    ).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    argv = [
        "collect",
        "--model",
        str(tmp_path / "tiny"),
        "--dataset",
        "mmlu",
        "--limit",
        "57",
        "--batch-size",
        "8",
        "--max-length",
        "256",
        "--scores",
        "ahon,random",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    table = headstats.read_scores(tmp_path / "out")
    samples = table.drop_duplicates("sample_id")
    assert len(samples) == 57 and samples["subject"].nunique() >= 50
    prov = store.scan_provenance(tmp_path / "out")[0]
    assert prov["sample"] == "random" and prov["seed"] == 0 and prov["limit"] == 57
    # The question keys join the tables of an ablation of the same sample.
    questions = load_task("mmlu", limit=57, sample="random", seed=0).questions
    assert sorted(zip(samples["subject"], samples["question_id"], strict=True)) == sorted(
        (q.subject, q.question_id) for q in questions
    )
    assert main(argv) == 0  # the same sample again: nothing new
    assert len(headstats.read_scores(tmp_path / "out")) == len(table)
