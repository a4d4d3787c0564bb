"""Which heads move between a base and its checkpoint (headstats.stats.movement), against an
independent computation on a hand-made table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from headstats.stats.movement import head_movement, most_inactive, moved_heads


def _table(rng: np.random.Generator, model: str, shift: dict[tuple[int, int], float]) -> pd.DataFrame:
    layers, heads, n_seq = 3, 4, 40
    base = np.arange(layers * heads, dtype=float).reshape(layers, heads)  # head (l, h) has mean 4l + h
    rows = []
    for s in range(n_seq):
        for layer in range(layers):
            for head in range(heads):
                value = base[layer, head] + shift.get((layer, head), 0.0) + rng.normal(0, 0.3)
                rows.append((model, "texts", s, layer, head, value, rng.uniform()))
    return pd.DataFrame(rows, columns=["model", "dataset", "sample_id", "layer", "head", "ahon_ln", "random"])


def test_head_movement_matches_a_direct_computation() -> None:
    rng = np.random.default_rng(0)
    moved = {(0, 0): 20.0, (2, 3): -20.0}  # the lowest head becomes one of the highest, and back
    a, b = _table(rng, "base", {}), _table(rng, "tuned", moved)
    scores = pd.concat([a, b], ignore_index=True)
    out = head_movement(scores, "base", "tuned", dataset="texts", rate=0.25, n_split=50)
    assert list(out["score"]) == ["ahon_ln"]  # random describes no head
    row = out.iloc[0]
    ma = a.groupby(["layer", "head"])["ahon_ln"].mean().to_numpy()
    mb = b.groupby(["layer", "head"])["ahon_ln"].mean().to_numpy()
    assert row["spearman"] == pytest.approx(spearmanr(ma, mb).statistic, rel=1e-12)
    # ahon_ln: low is inactive; the 3 lowest heads of the base are (0,0), (0,1), (0,2); (0,0) left them.
    assert row["inactive_kept"] == pytest.approx(2 / 3)
    assert row["inactive_iou"] == pytest.approx(2 / 4)
    assert row["split_half"] > 0.99 > row["spearman"]  # the order moved beyond what noise moves it
    top = moved_heads(scores, "base", "tuned", "ahon_ln", dataset="texts", k=2)
    assert {tuple(x) for x in top[["layer", "head"]].to_numpy()} == set(moved)
    assert np.allclose(np.abs(top["shift"]), 20.0 / np.std(ma), rtol=0.05)


def test_unchanged_model_keeps_every_head() -> None:
    rng = np.random.default_rng(1)
    a = _table(rng, "base", {})
    scores = pd.concat([a, a.assign(model="copy")], ignore_index=True)
    row = head_movement(scores, "base", "copy", n_split=10).iloc[0]
    assert row["spearman"] == pytest.approx(1.0) and row["inactive_kept"] == 1.0


def test_most_inactive_follows_the_score_direction() -> None:
    means = np.array([0.1, 0.9, 0.5, 0.3])
    assert most_inactive(means, "ahon_ln", 0.5).tolist() == [True, False, False, True]  # low = inactive
    assert most_inactive(means, "awft", 0.5).tolist() == [False, True, True, False]  # high = inactive


def test_different_architectures_are_refused_with_a_pointer_to_w1() -> None:
    rng = np.random.default_rng(2)
    a = _table(rng, "base", {})
    b = a[a["layer"] < 2].assign(model="small")
    with pytest.raises(ValueError, match="use W1 across architectures"):
        head_movement(pd.concat([a, b]), "base", "small")
