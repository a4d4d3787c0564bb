"""Prompt formats: whether a BOS token comes first and whether the chat template is applied.

What the first token is changes what ``awft`` and ``ftvvn`` measure
(docs/concepts.md#padding-and-the-first-token), so the choice is explicit and recorded with every table. Formats:

``tokenizer`` (default)
    The tokenizer's own special-token behaviour, as lm-evaluation-harness does today without a chat
    template: ``tokenizer.encode(text)`` with its default ``add_special_tokens``, except that a text
    already starting with the BOS string gets no second one. Gemma's tokenizer adds BOS, SmolLM2's
    and Llama-2-style tokenizers differ: this format inherits whatever the model's tokenizer does.
``plain``
    No special tokens at all (``add_special_tokens=False``).
``bos``
    A BOS token first, always (and only one).
``chat``
    The tokenizer's chat template, few-shot examples as alternating user/assistant turns, the task
    header as the system turn, the question as the last user turn followed by the generation prompt:
    lm-eval's ``--apply_chat_template --fewshot_as_multiturn``. As in current lm-eval the target
    delimiter is dropped in chat contexts (the continuation is ``"A"``, not ``" A"``); special tokens
    as in ``tokenizer``.
``paper``
    What the study's runs used (lm-eval 0.4.5 defaults): no special tokens for base models (BOS for
    Gemma, which 0.4.5 forced), and for models whose name contains -Instruct, -SFT, -DPO or -chat the
    chat template with few-shot examples as multi-turn, keeping 0.4.5's target delimiter (" A").

Tokenisation follows lm-eval's ``_encode_pair``: trailing whitespace of a context moves to the front
of its continuation, the whole string is encoded once, and the continuation's tokens are the whole
encoding minus the first ``len(encode(context))`` tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from headstats.io.tasks.base import Question

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

PROMPT_FORMATS: dict[str, str] = {
    "tokenizer": "the tokenizer's own special tokens, no chat template (lm-eval's default today)",
    "plain": "no special tokens, no chat template",
    "bos": "a BOS token first, no chat template",
    "chat": "the chat template, few-shot examples as multi-turn (lm-eval --apply_chat_template --fewshot_as_multiturn)",
    "paper": "the study's lm-eval 0.4.5 setting: no BOS for base models, chat template for -Instruct/-SFT/-DPO/-chat",
}

SpecialTokens = Literal["tokenizer", "none", "bos"]

# The study applied the chat template when the model name contained one of these (its
# `should_apply_chat_template`); matched case-insensitively here.
CHAT_MODEL_MARKERS = ("-instruct", "-sft", "-dpo", "-chat")

# Embedded models are known by short names that hide whether they are chat models; the paper rule
# needs the original name. (One table, with the reason: the name is the study's only signal.)
EMBEDDED_ORIGINS = {
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gemma3-270m": "google/gemma-3-270m",
}


@dataclass(frozen=True)
class PromptFormat:
    """A resolved prompt format (``paper`` resolves to concrete settings for the model at hand)."""

    name: str  # as requested
    chat: bool
    special_tokens: SpecialTokens
    chat_target_delimiter: bool = False  # keep the " " before a chat continuation (lm-eval 0.4.5)

    def provenance(self) -> dict[str, object]:
        return {
            "prompt_format": self.name,
            "chat_template": self.chat,
            "special_tokens": self.special_tokens,
            "chat_target_delimiter": self.chat_target_delimiter,
        }


def original_model_name(model_name: str) -> str:
    """The name the paper rule looks at: an embedded model's original id, a converted checkpoint's
    recorded source, or the name / path itself."""
    if model_name in EMBEDDED_ORIGINS:
        return EMBEDDED_ORIGINS[model_name]
    source = Path(model_name).expanduser() / "HEADSTATS_SOURCE.json" if model_name else None
    if source is not None and source.is_file():
        try:
            recorded = json.loads(source.read_text()).get("model")
        except (OSError, json.JSONDecodeError):
            recorded = None
        if isinstance(recorded, str) and recorded:
            return recorded
    return model_name


def paper_uses_chat(model_name: str) -> bool:
    name = original_model_name(model_name).lower()
    return any(marker in name for marker in CHAT_MODEL_MARKERS)


def resolve_format(
    prompt_format: str | PromptFormat,
    tokenizer: PreTrainedTokenizerBase,
    *,
    model_name: str = "",
    model_type: str = "",
) -> PromptFormat:
    """Check ``prompt_format`` against the tokenizer and fix what ``paper`` means for this model."""
    if isinstance(prompt_format, PromptFormat):
        fmt = prompt_format
    elif prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt format {prompt_format!r}: choose from {', '.join(PROMPT_FORMATS)}")
    elif prompt_format == "paper":
        # a tokenizer read from its files names transformers' class (headstats.io.tokenizer_files)
        kind = getattr(tokenizer, "class_name", None) or type(tokenizer).__name__
        is_gemma = "gemma" in f"{model_type} {original_model_name(model_name)} {kind}".lower()
        # lm-eval 0.4.5 passed add_special_tokens=False, except for Gemma (add_bos_token forced on).
        fmt = PromptFormat("paper", paper_uses_chat(model_name), "bos" if is_gemma else "none", True)
    else:
        fmt = PromptFormat(
            prompt_format, prompt_format == "chat", {"plain": "none", "bos": "bos"}.get(prompt_format, "tokenizer")
        )
    if fmt.chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"prompt format {fmt.name!r} needs a chat template, and this tokenizer has none "
            f"({model_name or type(tokenizer).__name__}); use 'tokenizer', 'plain' or 'bos'"
        )
    if fmt.special_tokens == "bos" and tokenizer.bos_token_id is None:
        raise ValueError(
            f"prompt format {fmt.name!r} puts a BOS token first, and this tokenizer defines none; "
            "use 'tokenizer' or 'plain'"
        )
    return fmt


def _bos_prefix(tokenizer: PreTrainedTokenizerBase) -> str | None:
    # lm-eval's prefix token: BOS, else EOS; a text starting with it gets no added special tokens.
    token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return tokenizer.decode([token_id]) if token_id is not None else None


class PromptRenderer:
    """Renders :class:`Question` texts in one prompt format and tokenises them as lm-eval does."""

    def __init__(self, fmt: PromptFormat, tokenizer: PreTrainedTokenizerBase) -> None:
        self.format = fmt
        self.tokenizer = tokenizer
        self._prefix = _bos_prefix(tokenizer)
        self._encoded: dict[str, list[int]] = {}

    # -- text --------------------------------------------------------------------------------------

    def context(self, question: Question, choice: int) -> str:
        """The context string of one choice (shared by all choices unless the task scores partially)."""
        prompt = question.prompt(choice)
        if not self.format.chat:
            shots = "".join(p + question.target_delimiter + a + question.fewshot_delimiter for p, a in question.shots)
            return question.description + shots + prompt
        messages = [{"role": "system", "content": question.description}] if question.description else []
        for p, a in question.shots:
            messages += [{"role": "user", "content": p}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": prompt})
        return self.apply_chat_template(messages, add_generation_prompt=True)

    def continuation(self, question: Question, choice: int) -> str:
        keep = not self.format.chat or self.format.chat_target_delimiter
        return (question.target_delimiter if keep else "") + question.continuation(choice)

    def document(self, text: str) -> str:
        """A plain-text document: itself, or (``chat`` only) one user turn of the chat template."""
        if self.format.chat and self.format.name == "chat":
            return self.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=False)
        return text

    def apply_chat_template(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        import jinja2

        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except jinja2.exceptions.TemplateError:
            # Some templates refuse a system turn; lm-eval then drops it, and so do we.
            without_system = [m for m in messages if m["role"] != "system"]
            if len(without_system) == len(messages):
                raise
            return self.tokenizer.apply_chat_template(
                without_system, tokenize=False, add_generation_prompt=add_generation_prompt
            )

    # -- tokens ------------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        mode = self.format.special_tokens
        if mode == "tokenizer":
            if self._prefix and text.startswith(self._prefix):
                return self.tokenizer.encode(text, add_special_tokens=False)
            return self.tokenizer.encode(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if mode == "bos" and (not ids or ids[0] != self.tokenizer.bos_token_id):
            ids = [self.tokenizer.bos_token_id, *ids]
        return ids

    def _encode_cached(self, text: str) -> list[int]:
        # Contexts repeat across the choices of a question; long few-shot prompts are worth caching.
        ids = self._encoded.get(text)
        if ids is None:
            if len(self._encoded) > 64:
                self._encoded.clear()
            ids = self._encoded[text] = self.encode(text)
        return ids

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's split of context and continuation tokens (``TemplateLM._encode_pair``)."""
        if not context:
            raise ValueError("a context must not be empty")
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole = self.encode(context + continuation)
        context_ids = self._encode_cached(context)
        return context_ids, whole[len(context_ids) :]

    def requests(self, question: Question) -> list[tuple[list[int], list[int]]]:
        """(context tokens, continuation tokens) of every choice."""
        pairs = []
        for choice in range(question.n_choices):
            ctx, cont = self.encode_pair(self.context(question, choice), self.continuation(question, choice))
            if not cont:
                raise ValueError(
                    f"{question.task} question {question.question_id}, choice {choice}: the continuation has no "
                    "tokens of its own in this prompt format"
                )
            pairs.append((ctx, cont))
        return pairs

    def prompt_ids(self, question: Question, choice: int | None = None) -> list[int]:
        """Tokens of the context the model answers from (the gold choice's, by default), whole: for
        MMLU letters this is exactly the evaluator's one input per question (a chat template's
        generation prompt keeps its final newline, which lm-eval's split counts as continuation)."""
        return self.encode(self.context(question, question.gold if choice is None else choice))


def starts_with_bos(ids: list[int], tokenizer: PreTrainedTokenizerBase) -> bool:
    return bool(ids) and tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id
