"""Scoring token sequences with every head's scores: the public Python entry points."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from headstats.engine import scores as S
from headstats.engine.attention import check_supported
from headstats.engine.batching import PaddingSide
from headstats.engine.prefix import PrefixRunner, continue_inputs
from headstats.engine.probe import ForwardRecord, Probe

KEY_COLUMNS = ("sample_id", "layer", "head", "kv_head", "n_tokens")


def record_to_table(
    record: ForwardRecord, sample_ids: Sequence[int], score_ids: Sequence[str], kv_group: int
) -> pa.Table:
    """One forward's scores as rows of (sample, layer, head), the layout of docs/design.md#table-layout."""
    first = record.scores[score_ids[0]]
    b, n_layers, n_heads = first.shape
    per_sample = n_layers * n_heads
    heads = np.arange(n_heads, dtype=np.int16)
    columns: dict[str, np.ndarray] = {
        "sample_id": np.repeat(np.asarray(sample_ids, dtype=np.int64), per_sample),
        "layer": np.tile(np.repeat(np.arange(n_layers, dtype=np.int16), n_heads), b),
        "head": np.tile(heads, b * n_layers),
        "kv_head": np.tile(heads // kv_group, b * n_layers).astype(np.int16),
        "n_tokens": np.repeat(record.n_tokens.cpu().numpy().astype(np.int32), per_sample),
    }
    for sid in score_ids:
        columns[sid] = record.scores[sid].float().reshape(-1).cpu().numpy()
    return pa.table(columns)


def kv_group_size(model: PreTrainedModel) -> int:
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    return heads // kv


def iter_score_tables(
    model: PreTrainedModel,
    items: Iterable[tuple[int, Sequence[int]]],
    *,
    batch_size: int = 8,
    window: int | None = None,
    score_ids: Sequence[str] | None = None,
    padding_side: PaddingSide = "right",
    seed: int = 0,
    salt: int = 0,
    progress: bool | tqdm = True,
    total: int | None = None,
    share_prefix: bool = True,
) -> Iterator[pa.Table]:
    """Score a stream of (sample_id, token ids); yield one Arrow table per batch.

    The stream is read ``window`` sequences at a time (default 16 batches) and each window is
    batched by length, so padding stays small while memory stays flat however long the stream is.
    This is the streaming core of collection; :func:`score_sequences` wraps it for in-memory lists.
    With ``share_prefix``, sequences of a window that share a long prefix (few-shot prompts) run it
    once and pool its rows once (:mod:`headstats.engine.prefix`); the scores are the same.
    """
    check_supported(model)
    ids = S.resolve(score_ids)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    window = window or 16 * batch_size
    device = next(model.parameters()).device
    group = kv_group_size(model)
    vocab = model.get_input_embeddings().num_embeddings
    bar = (
        progress if isinstance(progress, tqdm) else tqdm(total=total, desc="scoring", unit="seq", disable=not progress)
    )
    iterator = iter(items)
    with Probe(model, ids, seed=seed, salt=salt) as probe, torch.inference_mode():
        runner = PrefixRunner(model, probe, enabled=share_prefix)
        while chunk := list(itertools.islice(iterator, window)):
            keys, sequences = zip(*chunk, strict=True)
            for key, seq in zip(keys, sequences, strict=True):
                check_token_ids(seq, vocab, key)
            batches = runner.batches(sequences, batch_size, padding_side=padding_side, device=device, keys=keys)
            for batch, prefix in batches:
                batch_keys = [keys[i] for i in batch.indices]
                if prefix is None:
                    _, record = probe.forward(batch.model_inputs(), batch_keys, body=True)
                else:
                    inputs = continue_inputs(prefix, batch.model_inputs())
                    _, record = probe.forward(inputs, batch_keys, body=True, prefix=prefix.stats)
                yield record_to_table(record, batch_keys, ids, group)
                bar.update(len(batch_keys))
    if bar is not progress:
        bar.close()


def check_token_ids(ids: Sequence[int], vocab_size: int, key: object) -> None:
    """A clear error for what would otherwise be an IndexError deep inside the embedding."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise ValueError(f"sequence {key!r} is {type(ids).__name__}, not a list of token ids")
    if len(ids) == 0:
        raise ValueError(f"sequence {key!r} is empty: every sequence needs at least one token")
    values = ids.tolist() if hasattr(ids, "tolist") else ids
    low, high = min(values), max(values)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"sequence {key!r} holds token id {bad}, outside the model's vocabulary (0..{vocab_size - 1}); "
            "tokenise with the model's own tokenizer"
        )


def score_sequences(
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    batch_size: int = 8,
    *,
    scores: Sequence[str] | None = None,
    padding_side: PaddingSide = "right",
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Every score of every head for each token-id sequence, in one forward pass per batch.

    Returns one row per (sample_id = index in ``sequences``, layer, head) with the columns
    ``sample_id, layer, head, kv_head, n_tokens`` and one float32 column per score id. Works on
    any loaded transformers decoder that uses the AttentionInterface: headstats' attention is
    selected for the call and the previous implementation restored afterwards. Scores do not
    depend on the batch size or the padding side.
    """
    if isinstance(sequences, (str, bytes)):
        raise ValueError("score_sequences takes a list of token-id sequences; for text use score_texts")
    if len(sequences) == 0:
        raise ValueError("no sequences to score: give a non-empty list of token-id lists")
    tables = list(
        iter_score_tables(
            model,
            enumerate(sequences),
            batch_size=batch_size,
            window=len(sequences),
            score_ids=scores,
            padding_side=padding_side,
            seed=seed,
            progress=progress,
            total=len(sequences),
        )
    )
    frame = pa.concat_tables(tables).to_pandas()
    return frame.sort_values(["sample_id", "layer", "head"], kind="stable").reset_index(drop=True)


def score_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    batch_size: int = 8,
    *,
    max_length: int | None = None,
    add_special_tokens: bool = False,
    **kwargs: object,
) -> pd.DataFrame:
    """:func:`score_sequences` for strings, tokenised with ``tokenizer`` (no special tokens by
    default, like lm-evaluation-harness for base models; truncated to ``max_length`` tokens)."""
    if isinstance(texts, (str, bytes)):
        raise ValueError("score_texts takes a list of texts, not one string: use score_texts(model, tokenizer, [text])")
    if not isinstance(texts, Iterable):
        raise ValueError(
            f"score_texts takes a list of texts, not {type(texts).__name__}: use score_texts(model, tokenizer, "
            "['a text', ...])"
        )
    texts = list(texts)
    if not texts:
        raise ValueError("no texts to score: give a non-empty list of strings")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"text {i} is {type(text).__name__}, not a string")
        if not text:
            raise ValueError(f"text {i} is empty: every text needs at least one token")
    encoded = tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]
    if max_length is not None:
        encoded = [ids[:max_length] for ids in encoded]
    return score_sequences(model, encoded, batch_size, **kwargs)  # type: ignore[arg-type]
