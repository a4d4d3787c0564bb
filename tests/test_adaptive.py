"""Per-prompt skipping's measurement and statistics (headstats.jobs.adaptive, headstats.stats.adaptive)."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from headstats.stats import adaptive as A


def _rows(full, selected, *, metric="correct_norm", share=0.1, selection="per-prompt", clusters=None):
    n = len(full)
    clusters = clusters if clusters is not None else [f"c{i}" for i in range(n)]
    base = pd.DataFrame({"model": "m", "task": "t", "item": range(n), "cluster": clusters})
    return pd.concat(
        [
            base.assign(selection="full", share=0.0, **{metric: full}),
            base.assign(selection=selection, share=share, **{metric: selected}),
        ],
        ignore_index=True,
    )


def test_an_unchanged_selection_is_bounded_by_tangos_closed_form_and_not_by_zero():
    n, family = 80, 24
    rows = _rows([1, 0] * (n // 2), [1, 0] * (n // 2))
    cell = A.cells(rows, {"correct_norm": 1.0, "loss": 0.02}, family).iloc[0]
    z = NormalDist().inv_cdf(1 - 0.05 / family)
    assert cell["drop"] == 0 and cell["low"] == 0 and cell["high"] == 0
    assert cell["upper_fw"] == pytest.approx(100 * z * z / (n + z * z), rel=1e-6)  # 9.3 points, not 0
    assert not cell["within"]


def test_the_drop_is_the_paired_difference_in_points():
    full = [1] * 60 + [0] * 40
    selected = [1] * 50 + [0] * 10 + [1] * 5 + [0] * 35  # 10 lost, 5 gained
    cell = A.cells(_rows(full, selected), {"correct_norm": 1.0, "loss": 0.02}, 1).iloc[0]
    assert cell["drop"] == pytest.approx(5.0) and (cell["lost"], cell["gained"]) == (10, 5)
    assert cell["full"] == pytest.approx(60.0) and cell["selected"] == pytest.approx(55.0)
    assert cell["low"] < 5.0 < cell["high"] and cell["upper"] > 5.0


def test_a_constant_loss_increase_has_a_zero_width_interval_at_itself():
    rng = np.random.default_rng(0)
    full = rng.normal(3.0, 0.5, 40)
    cell = A.cells(_rows(full, full + 0.01, metric="loss"), {"correct_norm": 1.0, "loss": 0.02}, 1).iloc[0]
    assert cell["drop"] == pytest.approx(0.01) and cell["low"] == pytest.approx(0.01)
    assert cell["upper_fw"] == pytest.approx(0.01) and cell["within"]


def test_the_loss_rule_at_its_margin_says_within_at_most_alpha_of_the_time():
    """The quantity equals the margin: 'within' must come out at most 5% of the time (here family 1)."""
    rng = np.random.default_rng(1)
    margin, hits, sims = 0.02, 0, 200
    for s in range(sims):
        full = rng.normal(3.0, 0.3, 80)
        selected = full + margin + rng.normal(0, 0.05, 80)
        rows = _rows(full, selected, metric="loss")
        hits += A.cells(rows, {"correct_norm": 1.0, "loss": margin}, 1, n_resamples=1000, seed=s).iloc[0]["within"]
    assert hits / sims <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / sims)


def test_clusters_widen_the_interval():
    rng = np.random.default_rng(2)
    effect = np.repeat(rng.normal(0, 0.1, 10), 8)  # ten documents of eight items, shared shifts
    full = rng.normal(3, 0.3, 80)
    margins = {"correct_norm": 1.0, "loss": 0.02}
    alone = A.cells(_rows(full, full + effect, metric="loss"), margins, 1).iloc[0]
    grouped = A.cells(_rows(full, full + effect, metric="loss", clusters=np.repeat(range(10), 8)), margins, 1).iloc[0]
    assert grouped["high"] - grouped["low"] > 1.5 * (alone["high"] - alone["low"])


def test_a_certified_share_is_read_as_a_fixed_sequence():
    table = pd.DataFrame(
        {
            "model": "m",
            "task": "t",
            "selection": ["per-prompt"] * 3 + ["static"] * 3,
            "share": [0.1, 0.2, 0.3] * 2,
            "within": [True, False, True, False, True, True],
        }
    )
    got = A.certified_shares(table).set_index("selection")["certified_share"]
    assert got["per-prompt"] == 0.1  # 0.3 within, but the sequence stopped at 0.2
    assert got["static"] == 0.0


def test_per_prompt_against_static_is_positive_when_per_prompt_keeps_more():
    n = 50
    base = pd.DataFrame({"model": "m", "task": "t", "item": range(n), "cluster": [f"c{i}" for i in range(n)]})
    rows = pd.concat(
        [
            base.assign(selection="full", share=0.0, correct_norm=1),
            base.assign(selection="per-prompt", share=0.2, correct_norm=[1] * 45 + [0] * 5),
            base.assign(selection="static", share=0.2, correct_norm=[1] * 35 + [0] * 15),
        ],
        ignore_index=True,
    )
    row = A.versus_static(rows).iloc[0]
    assert row["advantage"] == pytest.approx(20.0) and row["low"] > 0


def test_an_items_rows_score_continuations_as_a_whole_sequence_pass_does():
    """The full model's answer from the prompt's cache equals log-likelihoods of whole sequences; every
    selection at every share has its row."""
    import torch
    from families import tiny_model

    from headstats.jobs.adaptive import Design, Item, item_rows

    model = tiny_model("llama", attn="sdpa")
    torch.manual_seed(0)
    prompt = tuple(torch.randint(3, 128, (7,)).tolist())
    conts = tuple(tuple(torch.randint(3, 128, (n,)).tolist()) for n in (3, 5))
    logliks = []
    with torch.no_grad():
        for c in conts:
            ids = torch.tensor([prompt + c])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
            logliks.append(sum(float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(c)))
    gold = int(logliks[1] > logliks[0])
    item = Item(0, "doc", prompt, conts, gold=gold, lengths=(1, 1))
    static = {0.25: [(0, 0), (1, 1), (2, 2)]}
    rows = pd.DataFrame(item_rows(model, item, Design("ahon_ln", (0.25,), "head", 0, static)))
    assert sorted(zip(rows["selection"], rows["share"], strict=True)) == sorted(
        [("full", 0.0)] + [(s, 0.25) for s in A.SELECTIONS]
    )
    assert rows.loc[rows["selection"] == "full", "correct"].item() == 1


@pytest.mark.integration
@pytest.mark.parametrize("task", ["piqa", "hellaswag", "wikipedia"])
def test_measured_items_share_no_document_with_the_calibration_items(task):
    from headstats.io.models import load_model
    from headstats.jobs.adaptive import task_items

    _, tok = load_model("smollm2-135m")
    items, calibration = task_items(task, tok, limit=40, calibration_limit=32, seed=0, model_name="smollm2-135m")
    assert len(items) == 40 and len(calibration) == 32
    assert not {i.cluster for i in items} & {i.cluster for i in calibration}
    assert not {i.prompt for i in items} & {i.prompt for i in calibration}
