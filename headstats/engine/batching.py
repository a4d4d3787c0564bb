"""Padding token-id lists into batches, the one place that decides how padding looks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from headstats.engine.cost import padded_tokens  # noqa: F401  (what a pass of these batches computes)

PaddingSide = Literal["left", "right"]


@dataclass
class Batch:
    indices: list[int]  # positions of these sequences in the caller's list
    input_ids: torch.Tensor  # (B, S)
    attention_mask: torch.Tensor  # (B, S), 1 = real token
    position_ids: torch.Tensor  # (B, S), 0.. over the real tokens of each row

    def model_inputs(self) -> dict[str, torch.Tensor]:
        # Explicit position ids: with left padding a model that numbers positions itself would
        # shift absolute position embeddings (GPT-2), so a sequence's result would depend on its batch.
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "position_ids": self.position_ids}


def pad_batch(
    sequences: Sequence[Sequence[int]],
    indices: list[int],
    *,
    padding_side: PaddingSide = "right",
    pad_id: int = 0,
    device: torch.device | str = "cpu",
) -> Batch:
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        n = len(seq)
        cols = slice(0, n) if padding_side == "right" else slice(width - n, width)
        ids[row, cols] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[row, cols] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return Batch(indices, ids.to(device), mask.to(device), positions.to(device))


def length_sorted_batches(
    sequences: Sequence[Sequence[int]],
    batch_size: int,
    *,
    padding_side: PaddingSide = "right",
    pad_id: int = 0,
    device: torch.device | str = "cpu",
) -> Iterator[Batch]:
    """Batches of similar length (longest first, so memory problems show up at once)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    for i, seq in enumerate(sequences):
        if len(seq) == 0:
            raise ValueError(f"sequence {i} is empty: every sequence needs at least one token")
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        yield pad_batch([sequences[i] for i in chunk], chunk, padding_side=padding_side, pad_id=pad_id, device=device)
