"""The score registry is the one source (issue 9): a score registered in user code flows through
collection, reading, W1 distances, synthetic tables, plot styles and a report with no edit to headstats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import headstats
from headstats.engine.scores import SCORES, Ratio, Score, TokenRows, score_ids
from headstats.report import plots
from headstats.report.writer import build_report
from headstats.stats import distances
from headstats.testing.synthetic import SyntheticModel, synthetic_part

try:
    from families import tiny_model
    from test_tasks import make_tokenizer
except ImportError:  # tests/ imported as a package
    from tests.families import tiny_model
    from tests.test_tasks import make_tokenizer

TEXTS = [
    "Attention heads that attend to the first token do little.",
    "The cat sat on the mat and looked at the dog.",
    "Scores are computed in one pass over the sequence.",
    "Inactive heads can be zeroed without hurting accuracy much.",
    "Padding must not change any score of any sequence in the batch.",
    "Layer-normalised head output norms are the most reliable score.",
]


def max_attention_weight(rows: TokenRows) -> torch.Tensor:
    """max_s A[t, s]: how concentrated query t's attention is (near 1 = it reads one token)."""
    return rows.probs.amax(dim=-1)


@pytest.fixture()
def maxattn() -> Iterator[tuple[str, str]]:
    """A user's score and its layer-normalised variant, registered for one test and removed after."""
    raw = Score(
        "maxattn",
        "max attention weight",
        "above",
        stat=max_attention_weight,
        pool="mean",
        needs_weights=True,
        description="mean over valid query rows of max_s A[t, s]",
    )
    ln = Score("maxattn_ln", "max attention weight, layer-normalised", "above", ratio=Ratio("maxattn", "maxattn"))
    try:
        headstats.scores.register(raw)
        headstats.scores.register(ln)
        yield raw.id, ln.id
    finally:
        SCORES.pop(raw.id, None)
        SCORES.pop(ln.id, None)


def test_a_registered_score_reaches_tables_distances_and_the_report(maxattn, tmp_path: Path) -> None:
    raw_id, ln_id = maxattn
    assert score_ids()[-2:] == (raw_id, ln_id)
    tokenizer = make_tokenizer(adds_bos=False)
    corpus = tmp_path / "notes.txt"
    corpus.write_text("\n\n".join(TEXTS))
    results = tmp_path / "results"
    results.mkdir()
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        path = tmp_path / name
        model = tiny_model("llama", seed=seed)
        model.resize_token_embeddings(len(tokenizer))
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        loaded, tok = headstats.load_model(str(path), device="cpu")
        headstats.collect_scores(loaded, tok, str(corpus), results, scores=[raw_id, ln_id, "awft"], batch_size=3)

    table = headstats.read_scores(results)
    assert {raw_id, ln_id} <= set(table.columns) and set(table["model"]) == {"tiny-a", "tiny-b"}
    values = table[raw_id].to_numpy()
    assert np.isfinite(values).all() and ((values > 0) & (values <= 1 + 1e-6)).all()
    # The normalised column follows the registered Ratio: the score over its layer mean.
    layer_mean = table.groupby(["model", "dataset", "sample_id", "layer"])[raw_id].transform("mean")
    np.testing.assert_allclose(table[ln_id], table[raw_id] / layer_mean, rtol=1e-5)

    res = distances.model_distance(table, "tiny-a", "tiny-b", depth_bins=0, n_boot=20, n_perm=19, n_split=20)
    assert {raw_id, ln_id, "awft"} == set(res["score"])
    row = res[res["score"] == raw_id].iloc[0]
    assert row["w1"] > 0 and row["ci_low"] <= row["ci_high"]

    build_report(results, tmp_path / "report")
    written = "".join(p.read_text() for p in (tmp_path / "report").rglob("*") if p.suffix in (".md", ".html"))
    assert raw_id in written


def test_a_registered_score_reaches_synthetic_tables_and_plot_styles(maxattn) -> None:
    raw_id, ln_id = maxattn
    part = synthetic_part(SyntheticModel("m", 3, 4, 2), "web", np.arange(5)).to_pandas()
    assert list(part.columns[-len(score_ids()) :]) == list(score_ids())
    layer_mean = part.groupby(["sample_id", "layer"])[raw_id].transform("mean")
    np.testing.assert_allclose(part[ln_id], part[raw_id] / layer_mean, rtol=1e-6)
    raw_style, ln_style = plots.score_style(raw_id), plots.score_style(ln_id)
    assert raw_style["color"] == ln_style["color"] != "grey"
    assert raw_style["marker"] == ln_style["marker"] not in {plots.score_style(s)["marker"] for s in ("awft", "random")}
    assert (raw_style["linestyle"], ln_style["linestyle"]) == ("-", "--")
    assert plots._ordered_scores([ln_id, "awft", raw_id]) == ["awft", raw_id, ln_id]
