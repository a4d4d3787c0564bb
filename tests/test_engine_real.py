"""The score engine on the real embedded models and real MMLU prompts (integration)."""

from __future__ import annotations

import pytest
import torch
from families import reference_scores

import headstats
from headstats.engine.scores import score_ids
from headstats.io.tasks import collection_source

SCORE_IDS = score_ids()

pytestmark = pytest.mark.integration
NON_RANDOM = [s for s in SCORE_IDS if s != "random"]


def _check_against_reference(model, sequences, frame, rtol: float) -> None:
    for i, ids in enumerate(sequences):
        ref = reference_scores(model, ids)
        rows = frame[frame.sample_id == i].sort_values(["layer", "head"])
        for score in NON_RANDOM:
            got = torch.tensor(rows[score].to_numpy()).view(ref[score].shape)
            torch.testing.assert_close(got, ref[score].float(), rtol=rtol, atol=1e-5, msg=f"{score}, prompt {i}")


def test_smollm2_scores_on_real_mmlu_prompts_match_an_independent_computation() -> None:
    model, tokenizer = headstats.load_model("smollm2-135m")
    prompts = [ids for _, ids in collection_source("mmlu").iter_sequences(tokenizer, limit=3)]
    assert all(len(p) > 200 for p in prompts)  # real 5-shot prompts
    frame = headstats.score_sequences(model, prompts, batch_size=3, padding_side="left")
    model.set_attn_implementation("eager")
    _check_against_reference(model, prompts, frame, rtol=1e-4)
    # The published finding holds on the real model: attention sinks. On average a head gives the
    # first token over 100 times the share uniform attention over the prompt would give it.
    assert (frame["awft"] * frame["n_tokens"]).mean() > 100


def test_gemma3_sliding_window_model_matches_an_independent_computation() -> None:
    model, tokenizer = headstats.load_model("gemma3-270m")
    texts = ["The quick brown fox jumps over the lazy dog. " * 3, "Attention heads can be inactive."]
    sequences = [tokenizer(t)["input_ids"] for t in texts]
    frame = headstats.score_sequences(model, sequences, batch_size=2)
    model.set_attn_implementation("eager")
    _check_against_reference(model, sequences, frame, rtol=1e-4)
