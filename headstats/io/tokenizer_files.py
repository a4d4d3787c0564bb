"""A tokenizer read from its files with the ``tokenizers`` library, without transformers: the part of
transformers' tokenizer the planners use (:meth:`FileTokenizer.encode`, ``decode``, the BOS and EOS
tokens, the chat template), so that a dry run counts a model's tokens in well under a second.

transformers' fast tokenizers run the same ``tokenizer.json`` through the same library (their special
tokens are added by its post-processor), and render chat templates with the same Jinja2 settings
(:func:`render_chat`), so the counts are the same; a folder without ``tokenizer.json`` (a
sentencepiece model only) is not read here (:class:`NoTokenizerFile`), and the caller uses
transformers' tokenizer instead.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path

TOKENIZER_FILE = "tokenizer.json"
# transformers' named special tokens (a chat template may read each by name).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class NoTokenizerFile(ValueError):
    """A folder whose tokenizer this module cannot read, and why."""


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: the string, or an AddedToken's ``content``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(folder: Path, config: dict) -> str | None:
    """The default chat template, where transformers finds it: ``chat_template.jinja`` before the
    tokenizer configuration's ``chat_template`` (or ``chat_template.json``'s). Several named templates
    are not read here (transformers picks among them)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        if (folder / "additional_chat_templates").is_dir():
            raise NoTokenizerFile(f"{folder} has several named chat templates")
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template") or _read_json(folder / "chat_template.json").get("chat_template")
    if template is None or isinstance(template, str):
        return template
    raise NoTokenizerFile(f"{folder} has several named chat templates")


@functools.cache
def compiled_chat(template: str):
    """``template`` compiled as transformers compiles a chat template: a sandboxed Jinja2 environment
    with ``trim_blocks`` and ``lstrip_blocks``, loop controls, a ``tojson`` that does not escape HTML,
    and ``raise_exception`` and ``strftime_now``."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env.from_string(template)


def render_chat(template: str, messages: list[dict[str, str]], **variables: object) -> str:
    """``messages`` rendered by ``template`` as transformers renders a chat (:func:`compiled_chat`), with
    no tools or documents; ``variables``: ``add_generation_prompt`` and the special tokens by name."""
    return compiled_chat(template).render(messages=messages, tools=None, documents=None, **variables)


class FileTokenizer:
    """A folder's ``tokenizer.json`` with its ``tokenizer_config.json`` (special tokens, class) and chat
    template, read without transformers."""

    def __init__(self, folder: str | Path) -> None:
        from tokenizers import Tokenizer

        folder = Path(folder)
        if not (folder / TOKENIZER_FILE).is_file():
            raise NoTokenizerFile(f"{folder} has no {TOKENIZER_FILE}")
        self.folder = folder
        self._tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        config = {**_read_json(folder / "special_tokens_map.json"), **_read_json(folder / "tokenizer_config.json")}
        self.special_tokens = {name: text for name in SPECIAL_TOKENS if (text := _token_text(config.get(name)))}
        unknown = [text for text in self.special_tokens.values() if self._tokenizer.token_to_id(text) is None]
        if unknown:  # transformers would add them to the vocabulary
            raise NoTokenizerFile(f"{folder}: special token(s) {', '.join(unknown)} are not in {TOKENIZER_FILE}")
        self.chat_template = _chat_template(folder, config)
        # what transformers' class is called (Gemma's prompt rule reads it: headstats.io.tasks.formats)
        self.class_name = str(config.get("tokenizer_class") or "")

    def _id(self, name: str) -> int | None:
        text = self.special_tokens.get(name)
        return None if text is None else self._tokenizer.token_to_id(text)

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    @property
    def bos_token_id(self) -> int | None:
        return self._id("bos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._id("eos_token")

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # the batch call without character offsets: the same ids, in two thirds of the time
        return self._tokenizer.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def apply_chat_template(
        self, messages: list[dict[str, str]], *, tokenize: bool = False, add_generation_prompt: bool = False
    ) -> str:
        if tokenize or self.chat_template is None:
            raise ValueError(f"{self.folder}: only a chat template's text is rendered here, and one is needed")
        return render_chat(
            self.chat_template, messages, add_generation_prompt=add_generation_prompt, **self.special_tokens
        )


__all__ = ["FileTokenizer", "NoTokenizerFile", "compiled_chat", "render_chat"]
