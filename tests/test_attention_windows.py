"""Key windows of the explicit attention kernel: each block of query rows is computed over the keys
some row of it may see (causal attention skips the later keys, a sliding window the earlier ones),
and every score still equals the one written out from the model's own eager attention weights."""

from __future__ import annotations

import pytest
import torch
from families import reference_scores, tiny_model

import headstats
from headstats.engine import attention as attention_module
from headstats.engine.scores import SCORES, Score, TokenRows

SEQUENCES = [
    [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37],
    [2, 4, 6, 8],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12, 14, 15],
    [42],
]
WEIGHT_SCORES = ["awft", "awft_ln", "entropy", "entropy_ln", "ahon", "ahon_ln"]


@pytest.fixture()
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Blocks of 3 query rows, so that the test sequences span several; returns the (lo, hi, keys)
    of every window the kernel used."""
    windows: list[tuple[int, int, int]] = []
    real = attention_module.key_window

    def recorded(mask, start, stop, cache):  # type: ignore[no-untyped-def]
        lo, hi, blocked = real(mask, start, stop, cache)
        windows.append((lo, hi, mask.shape[-1]))
        return lo, hi, blocked

    monkeypatch.setattr(attention_module, "key_window", recorded)
    monkeypatch.setattr(attention_module, "BLOCK_ROWS", 3)
    return windows


@pytest.mark.parametrize("family", ["gemma3", "llama"])
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_key_windows_give_the_scores_of_the_eager_attention_weights(
    family: str, padding_side: str, small_blocks: list[tuple[int, int, int]]
) -> None:
    model = tiny_model(family)  # gemma3: a sliding window of 4 keys in two of its three layers
    frame = headstats.score_sequences(model, SEQUENCES, batch_size=3, padding_side=padding_side)
    assert any(hi < keys for _, hi, keys in small_blocks), "no block skipped the keys after its rows"
    if family == "gemma3":
        assert any(lo > 0 for lo, _, _ in small_blocks), "no block skipped the keys before a sliding window"
    for i, ids in enumerate(SEQUENCES):
        ref = reference_scores(model, ids)
        rows = frame[frame.sample_id == i].sort_values(["layer", "head"])
        for score in [s for s in SCORES if s in ref]:
            got = torch.tensor(rows[score].to_numpy()).view(ref[score].shape)
            torch.testing.assert_close(got, ref[score].float(), rtol=2e-5, atol=1e-6, msg=f"{family} {score} seq {i}")


def test_key_windows_equal_whole_rows(small_blocks: list[tuple[int, int, int]], monkeypatch) -> None:
    model = tiny_model("gemma3")
    windowed = headstats.score_sequences(model, SEQUENCES, batch_size=4, scores=WEIGHT_SCORES)
    monkeypatch.setattr(attention_module, "BLOCK_ROWS", 10**6)  # one block: every row over every key
    whole = headstats.score_sequences(model, SEQUENCES, batch_size=4, scores=WEIGHT_SCORES)
    assert all(lo == 0 and hi == keys for lo, hi, keys in small_blocks[-3:])
    for score in WEIGHT_SCORES:
        torch.testing.assert_close(
            torch.tensor(windowed[score].to_numpy()), torch.tensor(whole[score].to_numpy()), rtol=1e-6, atol=1e-7
        )


def test_a_statistic_reading_whole_rows_sees_every_key_with_the_masked_ones_at_zero(
    small_blocks: list[tuple[int, int, int]],
) -> None:
    # A user's statistic may index rows.probs by key position: it gets all S keys, the ones outside
    # the window masked (probability 0, logit finfo.min), whatever window the kernel used.
    seen: list[tuple[int, int, int, bool]] = []

    def first_key_weight(rows: TokenRows) -> torch.Tensor:
        outside = torch.ones(rows.probs.shape[-1], dtype=torch.bool)
        outside[rows.key_start : rows.key_start + rows.probs_window.shape[-1]] = False
        masked = bool((rows.probs[..., outside] == 0).all()) and bool(
            (rows.logits[..., outside] == torch.finfo(torch.float32).min).all()
        )
        seen.append((rows.probs.shape[-1], rows.n_keys, rows.probs_window.shape[-1], masked))
        return rows.probs[..., 0]

    score = Score("u_key0", "weight of key 0", "above", stat=first_key_weight, pool="mean", needs_weights=True)
    headstats.scores.register(score)
    try:
        frame = headstats.score_sequences(
            tiny_model("gemma3"), SEQUENCES, batch_size=3, padding_side="right", scores=["awft", "u_key0"]
        )
    finally:
        SCORES.pop(score.id, None)
    assert seen and all(width == keys and masked for width, keys, _, masked in seen)
    assert any(window < keys for _, keys, window, _ in seen)
    # Right padding puts every sequence's first token at key 0, so the two are the same number.
    assert (frame["u_key0"].to_numpy() == frame["awft"].to_numpy()).all()
