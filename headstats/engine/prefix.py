"""Shared-prefix reuse: run a few-shot prompt's common prefix once, and each sequence's own tokens
against its cached keys and values.

MMLU's 5-shot prompts of one subject share the header and the five dev shots, about 80% of their
tokens. Under causal attention the prefix's rows (its keys, values, attention rows and head
outputs, in every layer) are the same in every sequence that starts with it, so:

- the model's outputs at the other positions are unchanged when the prefix is computed once (batch
  1, its keys and values kept in a transformers ``DynamicCache``) and the suffixes are run as
  continuations, through the same registered attention function; suffix queries attend over the
  prefix's keys from the cache;
- every pooled score combines exactly: a mean over tokens is (prefix sum + suffix sum) / all
  tokens, a ``first``-token score comes from the prefix, a ``last``-token score from the suffix
  (:class:`headstats.engine.probe.PrefixStats`). Layer- and head-normalised scores are derived after
  the combination, as in a whole pass.

So score collection, the un-zeroed baseline and calibration passes, and static zeroing can share
prefixes. Dynamic zeroing and per-sequence random zeroing cannot: they decide which heads to zero
from the whole sequence (or per sequence), so a prefix shared by several sequences has no single
zeroed state. Random zeroing is refused up front (:meth:`Probe.prefix_refusal`); any other policy
is checked in every layer of every continuation — the heads it zeroes for each whole sequence must
be those it zeroed for the prefix alone, which makes the reuse exact by induction over layers — and
the first disagreement (:class:`PrefixMismatch`, what dynamic zeroing gives in practice) switches the
rest of the call to full forward passes. The fallback re-runs the rejected batch too, so results
never depend on whether reuse was attempted.

Padding: a continuation's 2-D attention mask is the prefix's ones followed by the suffix batch's
mask, and position ids continue from the prefix length, so left- and right-padded suffix batches
give the same numbers. Models with sliding-window (local) layers count windows in cache positions,
which pads between prefix and suffix would shift; their suffix batches are always right-padded.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from headstats.engine.attention import hooked_module
from headstats.engine.batching import Batch, PaddingSide, length_sorted_batches
from headstats.engine.prefix_groups import MIN_PREFIX_TOKENS, PrefixGroup, shared_prefix_groups
from headstats.engine.probe import PrefixMismatch, PrefixStats, Probe

__all__ = [
    "MIN_PREFIX_TOKENS",
    "PrefixGroup",
    "PrefixMismatch",
    "PrefixRunner",
    "SharedPrefix",
    "continue_inputs",
    "encode_prefix",
    "has_local_attention",
    "shared_prefix_groups",
]


@dataclass
class SharedPrefix:
    """One prefix computed once: its token ids, each layer's cached keys and values (1, KVH, P, D),
    and, under a probe, its rows' pooled scores."""

    ids: tuple[int, ...]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    stats: PrefixStats | None
    argument: str = "past_key_values"  # the model's name for its cache argument

    @property
    def length(self) -> int:
        return len(self.ids)


def has_local_attention(model: PreTrainedModel) -> bool:
    """Whether some layer attends within a window (sliding or chunked attention). Conservative: a
    configured window counts unless the config switches it off."""
    config = model.config.get_text_config()
    types = getattr(config, "layer_types", None) or ()
    if any(t != "full_attention" for t in types):
        return True
    if getattr(config, "attention_chunk_size", None):
        return True
    return bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True) is not False


@torch.inference_mode()
def encode_prefix(
    model: PreTrainedModel, ids: Sequence[int], probe: Probe | None = None, keys: Sequence[int] | None = None
) -> SharedPrefix:
    """Run ``ids`` once (the model body, no LM head) and keep each layer's keys and values; under
    ``probe`` (inside its with-block) also the pooled scores of its rows. ``keys``: the sample keys of
    the sequences that will continue it (what a zeroing policy is asked about; default [0])."""
    device = next(model.parameters()).device
    tokens = torch.tensor([list(ids)], dtype=torch.long, device=device)
    inputs = {
        "input_ids": tokens,
        "attention_mask": torch.ones_like(tokens),
        "position_ids": torch.arange(tokens.shape[1], device=device)[None],
    }
    cache = DynamicCache()
    stats = None
    argument = {cache_argument(model): cache}
    if probe is not None:
        _, stats = probe.forward_prefix(inputs, list(keys) if keys is not None else [0], **argument)
    else:
        hooked_module(model)(**inputs, **argument, use_cache=True)
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    if len(kv) != model.config.get_text_config().num_hidden_layers or any(k is None for k, _ in kv):
        raise PrefixMismatch(f"{type(model).__name__} did not keep one key/value cache per layer")
    return SharedPrefix(tuple(int(i) for i in ids), kv, stats, cache_argument(model))


def cache_argument(model: PreTrainedModel) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (earlier), as the model's forward names it."""
    parameters = inspect.signature(hooked_module(model).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def continue_inputs(prefix: SharedPrefix, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | DynamicCache]:
    """Model inputs that run a padded suffix batch (``Batch.model_inputs()``) as the continuation of
    ``prefix``: a fresh cache holding the prefix for every row (the suffix's keys are appended to a
    copy, never to the prefix's tensors), the mask over prefix and suffix, and positions from P on."""
    ids = inputs["input_ids"]
    b, p = ids.shape[0], prefix.length
    cache = DynamicCache(ddp_cache_data=[(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in prefix.kv])
    mask = inputs["attention_mask"]
    ones = torch.ones(b, p, dtype=mask.dtype, device=mask.device)
    return {
        "input_ids": ids,
        "attention_mask": torch.cat([ones, mask], dim=1),
        "position_ids": inputs["position_ids"] + p,
        prefix.argument: cache,
    }


class PrefixRunner:
    """Batches for a list of sequences, with shared prefixes computed once where possible.

    ``batches`` yields ``(batch, prefix)``: ``prefix`` is None for a whole-sequence batch, otherwise
    ``batch`` holds the suffixes (tokens after ``prefix.length``) and runs with
    ``continue_inputs(prefix, batch.model_inputs())``. ``batch.indices`` index the caller's list either
    way. When a continuation raises :class:`PrefixMismatch`, call :meth:`fall_back`: the batch's
    sequences and all later ones are then yielded as whole batches."""

    def __init__(
        self,
        model: PreTrainedModel,
        probe: Probe | None = None,
        *,
        enabled: bool = True,
        min_length: int = MIN_PREFIX_TOKENS,
    ) -> None:
        self.model = model
        self.probe = probe
        self.min_length = min_length
        self.refusal: str | None = None if enabled else "prefix reuse is off"
        if enabled and probe is not None:
            self.refusal = probe.prefix_refusal()
        self.n_prefixes = 0  # prefix passes run
        self.n_continued = 0  # sequences served as continuations
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self.refusal is None

    def fall_back(self, reason: PrefixMismatch | str = "") -> None:
        self.refusal = str(reason) or "prefix reuse disagreed with whole passes"
        self._failed = True

    def batches(
        self,
        sequences: Sequence[Sequence[int]],
        batch_size: int,
        *,
        padding_side: PaddingSide = "right",
        device: torch.device | str = "cpu",
        keep: Sequence[int] | int = 1,
        keys: Sequence[int] | None = None,
    ) -> Iterator[tuple[Batch, SharedPrefix | None]]:
        """``keys``: the sequences' sample keys (what a zeroing policy sees; default their indices)."""
        sequences = [s.tolist() if hasattr(s, "tolist") else list(s) for s in sequences]
        rest: list[int] = list(range(len(sequences)))
        groups: list[PrefixGroup] = []
        if self.enabled:
            groups, rest = shared_prefix_groups(sequences, keep=keep, min_length=self.min_length)
        side: PaddingSide = "right" if has_local_attention(self.model) else padding_side
        for group in groups:
            if not self.enabled:
                rest.extend(group.members)
                continue
            try:
                members = [keys[i] for i in group.members] if keys is not None else group.members
                prefix = encode_prefix(self.model, sequences[group.members[0]][: group.length], self.probe, members)
            except PrefixMismatch as error:
                self.refusal = str(error)
                rest.extend(group.members)
                continue
            self.n_prefixes += 1
            suffixes = [sequences[i][group.length :] for i in group.members]
            for batch in length_sorted_batches(suffixes, batch_size, padding_side=side, device=device):
                batch.indices = [group.members[i] for i in batch.indices]
                if not self.enabled:
                    rest.extend(batch.indices)
                    continue
                yield batch, prefix
                if self._failed:
                    self._failed = False
                    rest.extend(batch.indices)
                else:
                    self.n_continued += len(batch.indices)
        rest.sort()
        for batch in length_sorted_batches(
            [sequences[i] for i in rest], batch_size, padding_side=padding_side, device=device
        ):
            batch.indices = [rest[i] for i in batch.indices]
            yield batch, None
