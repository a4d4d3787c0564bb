"""Collection sources read through `datasets`: every local format, Hub dataset specs, content
identity (same name, different file -> different partition), and clear errors."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headstats.io.tasks import collection_source
from headstats.io.tasks.collection import parse_hub_dataset

try:
    from test_tasks import make_tokenizer
except ImportError:  # pragma: no cover
    from tests.test_tasks import make_tokenizer

DOCS = ["First document.", "", "Second one,\nwith two lines.", "Third."]
KEPT = [0, 2, 3]  # the empty row is skipped, its index not reused


def write(path: Path, fmt: str, column: str = "text") -> Path:
    rows = [{"id": i, column: d} for i, d in enumerate(DOCS)]
    if fmt in ("jsonl", "jsonl.gz"):
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if fmt.endswith("gz"):
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            path.write_text(text, encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["id", column])
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "txt":  # paragraphs; extra blank lines do not make empty documents
        path.write_text("First document.\n\n\nSecond one,\nwith two lines.\n\nThird.\n", encoding="utf-8")
    return path


def decoded(source) -> list[tuple[int, str]]:
    tok = make_tokenizer(adds_bos=False)
    return [(sid, tok.decode(ids)) for sid, ids in source.iter_sequences(tok, prompt_format="plain")]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "jsonl.gz", "parquet", "csv"])
def test_column_formats_yield_the_documents_with_row_ids(tmp_path: Path, fmt: str) -> None:
    source = collection_source(write(tmp_path / f"docs.{fmt}", fmt))
    assert decoded(source) == [(i, DOCS[i]) for i in KEPT]
    assert len(source) == 3 and source.name.startswith("docs-")
    assert source.identity["text_column"] == "text" and len(source.identity["sha256"]) == 64


def test_text_column_is_configurable(tmp_path: Path) -> None:
    path = write(tmp_path / "notes.parquet", "parquet", column="body")
    assert decoded(collection_source(path, text_column="body")) == [(i, DOCS[i]) for i in KEPT]


def test_txt_is_one_document_per_paragraph(tmp_path: Path) -> None:
    source = collection_source(write(tmp_path / "essay.txt", "txt"))
    assert decoded(source) == [(0, DOCS[0]), (1, DOCS[2]), (2, DOCS[3])]
    assert source.identity["text_column"] is None  # a text file has no columns


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_a_missing_text_column_names_the_columns_present(tmp_path: Path, fmt: str) -> None:
    path = write(tmp_path / f"docs.{fmt}", fmt, column="body")
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: id, body\); pass text_column=") as err:
        collection_source(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("name", "content", "line"),
    [
        ("latin1.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n', 2),
        ("latin1.txt", b"hello\n\nwor\xffld\n", 3),
        ("latin1.csv", b"text\nfine\nna\xefve\n", 3),
    ],
)
def test_non_utf8_input_names_the_file_and_line(tmp_path: Path, name: str, content: bytes, line: int) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"line {line} is not UTF-8") as err:
        list(collection_source(path).iter_sequences(make_tokenizer(adds_bos=False)))
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_broken_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl: line 2 is not valid JSON"):
        collection_source(path)


def test_same_file_name_in_two_folders_gets_two_partitions(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write(tmp_path / "a" / "docs.jsonl", "jsonl")
    b = tmp_path / "b" / "docs.jsonl"
    b.write_text(json.dumps({"text": "Another corpus."}) + "\n")
    first, second = collection_source(a), collection_source(b)
    assert first.name != second.name and first.identity != second.identity
    assert first.name.startswith("docs-") and second.name.startswith("docs-")
    # The same bytes elsewhere are the same data: same identity, same partition.
    copy = tmp_path / "c" / "docs.jsonl"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    assert (collection_source(copy).name, collection_source(copy).identity) == (first.name, first.identity)
    # Another column of the same file is other data.
    two = tmp_path / "two.jsonl"
    two.write_text(json.dumps({"text": "Body.", "title": "Title."}) + "\n")
    assert collection_source(two, text_column="title").identity != collection_source(two).identity


def test_unsupported_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(ValueError, match="unsupported type"):
        collection_source(tmp_path / "t.xlsx")
    with pytest.raises(ValueError, match=r"does not exist: give an existing \.jsonl"):
        collection_source(tmp_path / "missing.jsonl")


# -- Hub datasets (no network here: the spec, and the message when the Hub cannot be reached) -------


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("hf:HuggingFaceFW/fineweb-edu:sample-10BT:train", ("HuggingFaceFW/fineweb-edu", "sample-10BT", "train")),
        ("hf:HuggingFaceFW/fineweb-edu:sample-10BT", ("HuggingFaceFW/fineweb-edu", "sample-10BT", "train")),
        ("hf:allenai/c4::validation", ("allenai/c4", None, "validation")),
        ("hf:wikitext", ("wikitext", None, "train")),
    ],
)
def test_hub_dataset_specs(spec: str, parsed: tuple) -> None:
    assert parse_hub_dataset(spec) == parsed


@pytest.mark.parametrize("spec", ["hf:", "hf:a/b/c", "hf:a/b:c:d:e", "hf:/x"])
def test_malformed_hub_specs_show_the_form(spec: str) -> None:
    with pytest.raises(ValueError, match="OWNER/NAME:CONFIG:SPLIT"):
        collection_source(spec)


def test_an_unreachable_hub_dataset_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="cannot read the dataset from the Hugging Face Hub") as err:
        collection_source("hf:HuggingFaceFW/fineweb-edu:sample-10BT:train", text_column="text")
    message = str(err.value)
    assert message.startswith("hf:HuggingFaceFW/fineweb-edu:sample-10BT:train:") and "local file" in message
