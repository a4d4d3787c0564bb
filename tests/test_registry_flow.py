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
from headstats.report import figure
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
    raw_style, ln_style = figure.score_style(raw_id), figure.score_style(ln_id)
    assert raw_style["color"] == ln_style["color"] != "grey"
    assert (
        raw_style["marker"] == ln_style["marker"] not in {figure.score_style(s)["marker"] for s in ("awft", "random")}
    )
    assert (raw_style["linestyle"], ln_style["linestyle"]) == ("-", "--")
    assert figure.ordered_scores([ln_id, "awft", raw_id]) == ["awft", raw_id, ln_id]


# -- a user's score that reads the attention probabilities, used alone ------------------------------


@pytest.fixture()
def registered() -> Iterator[list[str]]:
    """Ids registered by one test through ``register_score``; removed from the registry after it."""
    ids: list[str] = []
    try:
        yield ids
    finally:
        for sid in ids:
            SCORES.pop(sid, None)


def _register(ids: list[str], score: Score) -> Score:
    ids.append(score.id)
    return headstats.register_score(score)


def test_needs_weights_is_inferred_from_what_the_statistic_reads(registered) -> None:
    reads_probs = _register(registered, Score("u_maxw", "max weight", "above", stat=max_attention_weight, pool="mean"))
    reads_logits = _register(
        registered, Score("u_maxz", "max logit", "above", stat=lambda rows: rows.logits.amax(-1), pool="mean")
    )
    reads_entropy = _register(
        registered, Score("u_lse", "normaliser", "below", stat=lambda rows: rows.log_normaliser, pool="mean")
    )
    reads_outputs = _register(
        registered, Score("u_sq", "squared norm", "below", stat=lambda rows: rows.output_norm**2, pool="mean")
    )
    assert [SCORES[s.id].needs_weights for s in (reads_probs, reads_logits, reads_entropy, reads_outputs)] == [
        True,
        True,
        True,
        False,
    ]
    assert reads_probs.needs_weights is True  # register returns the registered score
    # The built-in scores keep what they declare.
    assert [sid for sid in ("awft", "entropy", "ahon", "avvn", "fhon") if SCORES[sid].needs_weights] == [
        "awft",
        "entropy",
    ]
    # A declared value is taken as declared (a wrong False is caught when the statistic runs: below).
    declared = _register(
        registered, Score("u_declared", "x", "above", stat=max_attention_weight, pool="mean", needs_weights=False)
    )
    assert declared.needs_weights is False


def _independent_max_weight(model: torch.nn.Module, ids: list[int]) -> np.ndarray:
    """(layers, heads) mean over tokens of max_s A[t, s], from eager attention weights."""
    from families import eager_internals

    return np.stack([layer["a"].amax(-1).mean(-1).numpy() for layer in eager_internals(model, ids)])


def test_a_score_reading_probs_works_alone_in_collect_and_in_dynamic_zeroing(registered, tmp_path: Path) -> None:
    sid = _register(
        registered,
        # float64 on purpose: every score column is float32 whatever the statistic returns.
        Score("u_maxw", "max weight", "above", stat=lambda rows: rows.probs.amax(-1).double(), pool="mean"),
    ).id
    tokenizer = make_tokenizer(adds_bos=False)
    path = tmp_path / "tiny"
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    corpus = tmp_path / "notes.txt"
    corpus.write_text("\n\n".join(TEXTS))
    loaded, tok = headstats.load_model(str(path), device="cpu")
    headstats.collect_scores(loaded, tok, str(corpus), tmp_path / "results", scores=[sid], batch_size=4)
    table = headstats.read_scores(tmp_path / "results").sort_values(["sample_id", "layer", "head"])
    assert table[sid].dtype == np.float32
    first = tok(TEXTS[0], add_special_tokens=False)["input_ids"]
    expected = _independent_max_weight(model, first)
    got = table[table["sample_id"] == 0][sid].to_numpy().reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5)

    threshold = float(np.median(expected))
    ids = torch.tensor([first])
    with torch.no_grad():
        plain = loaded(input_ids=ids).logits
        with headstats.ablate_heads(loaded, score=sid, threshold=threshold, record_scores=True) as ablation:
            zeroed = loaded(input_ids=ids).logits
    scores = ablation.scores()[sid]
    assert scores.dtype == torch.float32
    # Layer 0 sees the unintervened model: its decisions are the collected scores crossing the threshold.
    np.testing.assert_array_equal(ablation.zero_masks()[0, 0].numpy(), expected[0] > threshold)
    torch.testing.assert_close(ablation.zero_masks()[0], scores[0] > threshold, rtol=0, atol=0)
    assert 0 < ablation.realised_fraction() < 1
    assert float((zeroed - plain).abs().max()) > 1e-3


def test_a_statistic_that_reads_probs_only_sometimes_gets_an_error_naming_the_flag(registered) -> None:
    def sometimes(rows: TokenRows) -> torch.Tensor:
        # Reads the probabilities only for heads wider than the small input register() tries.
        return rows.probs.amax(-1) if rows.outputs.shape[-1] > 2 else rows.output_norm

    sid = _register(registered, Score("u_sometimes", "sometimes", "above", stat=sometimes, pool="mean")).id
    assert SCORES[sid].needs_weights is False
    with pytest.raises(ValueError) as err:
        headstats.score_sequences(tiny_model("llama"), [[3, 5, 7]], scores=[sid])
    assert str(err.value) == (
        "score 'u_sometimes' read the attention probabilities (rows.probs or rows.logits), which were not computed: "
        "register it with needs_weights=True (Score('u_sometimes', ..., needs_weights=True))"
    )
    wrong = Score("u_wrong", "declared wrong", "above", stat=max_attention_weight, pool="mean", needs_weights=False)
    _register(registered, wrong)
    with pytest.raises(ValueError, match=r"^score 'u_wrong' read the attention probabilities .*needs_weights=True"):
        headstats.score_sequences(tiny_model("llama"), [[3, 5, 7]], scores=["u_wrong"])


def test_a_score_registered_later_never_locks_out_a_default_collection(registered, tmp_path: Path) -> None:
    """``scores=None`` extends a partition with the scores it records; a new partition of the same
    folder gets every registered score, the new one included."""
    from headstats import Score, register_score

    tokenizer = make_tokenizer(adds_bos=False)
    path = tmp_path / "tiny"
    model = tiny_model("llama")
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    loaded, tok = headstats.load_model(str(path), device="cpu")
    notes, other = tmp_path / "notes.txt", tmp_path / "other.txt"
    notes.write_text("\n\n".join(TEXTS))
    other.write_text("\n\n".join(reversed(TEXTS)))
    results = tmp_path / "results"
    results.mkdir()
    before = headstats.collect_scores(loaded, tok, str(notes), results, limit=2, batch_size=2)
    builtin = score_ids()

    registered.append("u_maxw_late")
    register_score(Score("u_maxw_late", "max weight", "above", stat=max_attention_weight, pool="mean"))
    extended = headstats.collect_scores(loaded, tok, str(notes), results, limit=4, batch_size=2)
    assert extended.partition == before.partition and (extended.n_samples, extended.n_new) == (4, 2)
    fresh = headstats.collect_scores(loaded, tok, str(other), results, batch_size=2)

    table = headstats.read_scores(results)
    extended_rows = table[table["dataset"] == before.partition.name.partition("=")[2]]
    assert extended_rows["sample_id"].nunique() == 4
    assert extended_rows[list(builtin)].notna().all().all() and extended_rows["u_maxw_late"].isna().all()
    fresh_rows = table[table["dataset"] == fresh.partition.name.partition("=")[2]]
    values = fresh_rows["u_maxw_late"].to_numpy()
    assert table["u_maxw_late"].dtype == np.float32 and len(values) > 0
    assert ((values > 0) & (values <= 1 + 1e-6)).all()
    # Asked for explicitly, the new score in the old partition is another run: refused, with the way out.
    with pytest.raises(headstats.io.store.StoreError, match=r"other settings.*scores"):
        headstats.collect_scores(loaded, tok, str(notes), results, scores=["u_maxw_late"], limit=4)
    # A partition recording a score that is not registered cannot be extended by default: the error says so.
    SCORES.pop("u_maxw_late")
    with pytest.raises(ValueError, match=r"holds the score\(s\) u_maxw_late, which are not registered now"):
        headstats.collect_scores(loaded, tok, str(other), results, batch_size=2)


def test_register_means_one_thing_and_register_attention_is_the_attention_function(registered) -> None:
    from transformers import AttentionInterface

    registered.append("u_plain")
    plain = Score("u_plain", "output norm", "below", stat=lambda rows: rows.output_norm, pool="mean")
    score = headstats.register(plain)
    assert SCORES["u_plain"] is score and headstats.register_score is headstats.scores.register
    with pytest.raises(TypeError) as err:
        headstats.register()
    assert str(err.value) == (
        "headstats.register(Score(...)) registers a score and needs one; to register headstats' attention function "
        "with transformers call headstats.register_attention()"
    )
    AttentionInterface._global_mapping.pop(headstats.ATTN_IMPLEMENTATION, None)
    headstats.register_attention()
    assert headstats.ATTN_IMPLEMENTATION in AttentionInterface._global_mapping
