"""The token sequences a multiple-choice evaluation reads, planned from the tokenizer and the model's
configuration alone (no torch): one sequence per question where every choice shares the context and
all but the last continuation token, else one per (question, choice), too-long inputs cut from the
left as lm-eval cuts them. :mod:`headstats.jobs.evaluate` runs them; a dry run counts and costs them
without a model (:mod:`headstats.jobs.dryrun_units`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headstats.io.tasks import PromptFormat, PromptRenderer, Question, resolve_format

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class ScoringSequence:
    """One input the model reads: the last ``n_read`` positions predict each choice's targets."""

    question: int  # index into the evaluated questions
    choices: list[int]
    targets: list[list[int]]  # per choice, the n_read tokens predicted at the last n_read positions
    input_ids: list[int]

    @property
    def n_read(self) -> int:
        return len(self.targets[0])


def model_max_length(model: PreTrainedModel) -> int | None:
    """The longest input the model's positions allow (lm-eval reads the same config fields)."""
    config = model.config.get_text_config()
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def plan_sequences(
    renderer: PromptRenderer,
    questions: Sequence[Question],
    *,
    one_pass_per_question: bool = True,
    max_length: int | None = None,
) -> list[ScoringSequence]:
    """Token sequences for ``questions``: one per question where every choice shares the context and
    all but the last continuation token (lm-eval's grouping of one-token continuations), else one per
    (question, choice). Inputs longer than ``max_length`` keep their last ``max_length`` tokens."""
    planned: list[ScoringSequence] = []
    for qi, question in enumerate(questions):
        pairs = renderer.requests(question)
        shared = {tuple(ctx + cont[:-1]) for ctx, cont in pairs}
        same_length = len({len(cont) for _, cont in pairs}) == 1
        if one_pass_per_question and len(shared) == 1 and same_length:
            ctx, cont = pairs[0]
            groups = [(list(range(len(pairs))), ctx + cont[:-1])]
        else:
            groups = [([i], ctx + cont[:-1]) for i, (ctx, cont) in enumerate(pairs)]
        for choices, input_ids in groups:
            targets = [pairs[i][1] for i in choices]
            if max_length is not None and len(input_ids) > max_length:
                if len(targets[0]) > max_length:
                    raise ValueError(
                        f"{question.task} question {question.question_id}: the continuation ({len(targets[0])} tokens) "
                        f"is longer than the model's {max_length} positions"
                    )
                input_ids = input_ids[-max_length:]
            planned.append(ScoringSequence(qi, choices, targets, input_ids))
    return planned


def model_sequences(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: Sequence[Question],
    prompt_format: str | PromptFormat = "tokenizer",
    *,
    one_pass_per_question: bool = True,
) -> list[ScoringSequence]:
    """:func:`plan_sequences` for ``model``: its prompt format and its longest input."""
    renderer = PromptRenderer(format_for_model(prompt_format, model, tokenizer), tokenizer)
    return plan_sequences(
        renderer, questions, one_pass_per_question=one_pass_per_question, max_length=model_max_length(model)
    )


def model_name(model: PreTrainedModel) -> str:
    return str(getattr(model, "headstats_name", None) or model.config.name_or_path or "")


def format_for_model(
    prompt_format: str | PromptFormat, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> PromptFormat:
    """The prompt format resolved for this model (``paper`` depends on its name and family)."""
    model_type = str(model.config.get_text_config().model_type)
    return resolve_format(prompt_format, tokenizer, model_name=model_name(model), model_type=model_type)


__all__ = [
    "ScoringSequence",
    "format_for_model",
    "model_max_length",
    "model_name",
    "model_sequences",
    "plan_sequences",
]
