"""The figure kinds of the study and of headstats' analyses (seaborn/matplotlib): accuracy curves,
matrices (ranks, IoU, W1) and score distributions.

Every function takes finished tables (intervention points and curve summaries, score tables, rankings,
distance and overlap matrices, per-head means) and returns a :class:`matplotlib.figure.Figure` built
without pyplot, so plotting works headless and leaves no global state behind; the statistics it draws
come from :mod:`headstats.stats`, its looks, legibility and saving from :mod:`headstats.report.figure`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from headstats.engine.scores import SCORES
from headstats.report.figure import (
    MAX_CURVES,
    curve_groups,
    is_normalised_score,
    is_random_score,
    model_looks,
    ordered_scores,
    score_label,
    score_style,
    wrap_title,
)
from headstats.stats import describe
from headstats.stats.matrix import DistanceMatrix
from headstats.stats.summary import BASELINE
from headstats.stats.tables import model_rows

X_LABEL = "heads zeroed (realised %)"
MIN_HEATMAP = 3  # rows and columns a heatmap needs; a smaller matrix is a few numbers, shown as a table


# --- accuracy vs % of heads zeroed ---------------------------------------------------------------


def _check_points(points: pd.DataFrame) -> pd.DataFrame:
    needed = {"model", "score", "realised_pct", "accuracy"}
    if not isinstance(points, pd.DataFrame) or not needed <= set(points.columns):
        raise ValueError(
            "accuracy curves need a table with columns model, score, realised_pct, accuracy "
            "(headstats.summarize_interventions or headstats.report.paper.paper_points)"
        )
    if "task" in points.columns and points["task"].nunique() > 1:
        raise ValueError("points of several tasks: plot one task at a time")
    return points


def _baseline_row(points: pd.DataFrame, model: str) -> pd.Series:
    base = points[(points["model"] == model) & (points["score"] == BASELINE)]
    if base.empty:
        raise ValueError(f"no baseline point for model {model!r}: the curves need the un-intervened run")
    return base.iloc[0]


def _band(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """The 95% interval columns of ``rows`` where the table has them (published points do not)."""
    if not {"acc_low", "acc_high"} <= set(rows.columns):
        return None
    low, high = rows["acc_low"].to_numpy(dtype=float), rows["acc_high"].to_numpy(dtype=float)
    return (low, high) if np.isfinite(low).all() and np.isfinite(high).all() else None


def _draw_curves(
    ax: object, points: pd.DataFrame, model: str, scores: Sequence[str], linewidth: float, title: str | None = None
) -> None:
    rows = points[points["model"] == model]
    base = _baseline_row(points, model)
    baseline = float(base["accuracy"])
    band = _band(base.to_frame().T)
    if band is not None:
        ax.axhspan(band[0][0], band[1][0], color="grey", alpha=0.15, linewidth=0, label="baseline 95% interval")
    ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="baseline")
    ax.axhline(baseline - 1, color="grey", linestyle=":", linewidth=1, label="baseline - 1 point")
    for sid in scores:
        curve = rows[rows["score"] == sid].sort_values("realised_pct", kind="stable")
        if curve.empty:
            continue
        style = score_style(sid)
        ax.plot(curve["realised_pct"], curve["accuracy"], linewidth=linewidth, markersize=4.5, **style)
        band = _band(curve)
        if band is not None:
            ax.fill_between(curve["realised_pct"], *band, color=style["color"], alpha=0.1, linewidth=0)
    ax.set_title(title or model, fontsize=10 if title is None else 8)
    ax.set_xlabel(X_LABEL, fontsize=8)
    ax.set_ylabel("accuracy (%)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _panel_title(model: str, labels: Mapping[str, str] | None) -> str | None:
    """The model's slug and, when known, its exact identity (source file, quantisation), wrapped to
    fit a panel at font size 8 (an identity runs to 80 characters; unwrapped, neighbouring panels'
    titles overlap)."""
    label = (labels or {}).get(model)
    if not label or label == model:
        return None
    return "\n".join([model, *textwrap.wrap(label, 48)])


def _model_list(points: pd.DataFrame, models: Sequence[str] | None) -> list[str]:
    have = list(dict.fromkeys(points["model"].astype(str)))
    if models is None:
        return have
    missing = [m for m in models if m not in have]
    if missing:
        raise ValueError(f"no points for model(s) {', '.join(missing)}; the table has {', '.join(have)}")
    return list(models)


def accuracy_grid(
    points: pd.DataFrame,
    *,
    models: Sequence[str] | None = None,
    scores: Sequence[str] | None = None,
    cols: int = 3,
    title: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Accuracy vs realised % of heads zeroed: one panel per model with the baseline and the
    baseline - 1 point lines (the study's Figure 2 layout), and shaded 95% intervals of every point
    and of the baseline where ``points`` has them (``acc_low``, ``acc_high``). At most
    :data:`MAX_CURVES` curves share a panel: more scores are drawn as small multiples, one block of
    panels per group of :func:`curve_groups`, each with its legend at its right. ``labels``:
    model -> its exact identity, shown under the model in the panel title."""
    points = _check_points(points)
    models = _model_list(points, models)
    scores = ordered_scores(points.loc[points["score"] != BASELINE, "score"]) if scores is None else list(scores)
    groups = curve_groups(scores)
    cols = max(1, min(cols, len(models)))
    rows = math.ceil(len(models) / cols)
    block = 3.4 * rows + (0.35 if len(groups) > 1 else 0.0)
    fig = Figure(figsize=(4.2 * cols + 2.6, block * len(groups)), layout="constrained")
    blocks = fig.subfigures(len(groups), 1, squeeze=False)[:, 0] if len(groups) > 1 else [fig]
    for sub, group in zip(blocks, groups, strict=True):
        axes = sub.subplots(rows, cols, squeeze=False)
        for ax, model in zip(axes.flat, models, strict=False):
            _draw_curves(ax, points, model, group, linewidth=1.3, title=_panel_title(model, labels))
        for ax in list(axes.flat)[len(models) :]:
            ax.set_axis_off()
        handles, names = axes.flat[0].get_legend_handles_labels()
        sub.legend(handles, names, loc="outside right upper", fontsize=7, frameon=False)
        if len(groups) > 1:
            kind = "normalised scores" if any(is_normalised_score(s) for s in group) else "raw scores"
            sub.suptitle(f"{kind} (with random)", fontsize=10)
    if title:
        fig.suptitle(title)
    return fig


def headline_curves(
    points: pd.DataFrame,
    curves: pd.DataFrame,
    *,
    scores: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Small multiples of the accuracy curves of several tasks: one row per model, one column per
    task, at most :data:`MAX_CURVES` curves per panel (``scores``, default every score the curves
    have, ``random`` first and then in registry order, cut to fit), the baseline and baseline - 1
    point lines, and one legend at the right."""
    for column in ("model", "task", "score", "realised_pct", "accuracy"):
        if column not in points.columns:
            raise ValueError("headline curves need points with columns model, task, score, realised_pct, accuracy")
    models = list(dict.fromkeys(curves["model"].astype(str)))
    tasks = sorted(curves["task"].astype(str).unique())
    have = ordered_scores(curves["score"].astype(str))
    shown = [s for s in (scores or have) if s in have]
    shown = ([s for s in shown if is_random_score(s)] + [s for s in shown if not is_random_score(s)])[:MAX_CURVES]
    fig = Figure(figsize=(3.3 * len(tasks) + 2.6, 2.6 * len(models) + 0.3), layout="constrained")
    axes = fig.subplots(len(models), len(tasks), squeeze=False)
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i, j]
            here = points[points["task"].astype(str) == task]
            if not ((here["model"] == model) & (here["score"] == BASELINE)).any():
                ax.set_axis_off()
                ax.set_title(f"{model} · {task}: not run", fontsize=8)
                continue
            name = (labels or {}).get(model, model)
            _draw_curves(ax, here, model, shown, linewidth=1.4, title=wrap_title(f"{task} · {name}", 3.1, 8))
    drawn = next((ax for ax in axes.flat if ax.lines), axes.flat[0])
    handles, names = drawn.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside right upper", fontsize=7, frameon=False)
    return fig


def within_one_point_dots(table: pd.DataFrame, reference: str, other: str, *, title: str) -> Figure:
    """Per model (rows), two dots on one axis: ``table[reference]`` and ``table[other]`` (e.g. the
    study's Table 2: % of heads zeroed within 1 point by ``awft`` and by the best other score), the
    gap between them drawn as a line; rows of ``model`` == "Average" are drawn apart, in bold."""
    rows = table.reset_index(drop=True)
    fig = Figure(figsize=(7.0, 0.28 * len(rows) + 1.3), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    ref, oth = rows[reference].astype(float), rows[other].astype(float)
    ax.hlines(y, np.minimum(ref, oth), np.maximum(ref, oth), color="0.75", linewidth=2)
    ax.plot(ref, y, "o", color=score_style(reference)["color"], label=reference)
    ax.plot(oth, y, "s", color="#d55e00", label=other)
    ax.set_yticks(y, [str(m) for m in rows["model"]], fontsize=7)
    for tick, model in zip(ax.get_yticklabels(), rows["model"], strict=True):
        if model == "Average":
            tick.set_fontweight("bold")
    ax.set_xlabel("% of heads zeroed within 1 accuracy point", fontsize=8)
    ax.set_xlim(left=0)
    ax.grid(True, axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(wrap_title(title, 6.5, 9), fontsize=9)
    fig.legend(loc="outside right upper", fontsize=7, frameon=False)
    return fig


def top_curves(
    points: pd.DataFrame, best: Mapping[str, Sequence[str]], *, labels: Mapping[str, str] | None = None
) -> Figure:
    """Random plus each model's best curves (the study's Figure 4), one panel per model: ``best`` maps
    each model drawn to its best score ids, best first, as :mod:`headstats.stats.ranking` ranks them
    (``top_k(curves, k, by, exclude=("random",))``); ``labels`` as in :func:`accuracy_grid`."""
    points = _check_points(points)
    models = _model_list(points, list(best))
    fig = Figure(figsize=(4.6 * len(models), 5.2), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        scores = ["random", *(s for s in best[model] if s != "random")]
        _draw_curves(ax, points, model, scores, linewidth=1.8, title=_panel_title(model, labels))
        # Below the panel: inside it, the legend would hide the curves' low-accuracy end.
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return fig


# --- matrices -------------------------------------------------------------------------------------


def matrix_heatmap(
    matrix: pd.DataFrame,
    *,
    title: str,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    fmt: str = ".2f",
    colorbar_label: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    annotate: bool | None = None,
) -> Figure:
    """A heatmap of any labelled matrix (ranks, correlations, IoU, distances), its cells annotated
    with their values when ``annotate`` (default: up to 100 cells; the numbers are in the CSV).
    Missing values are grey cells labelled "blank" (:func:`blank_cells` lists them for a caption).
    A matrix of fewer than :data:`MIN_HEATMAP` rows or columns is refused (:func:`fits_heatmap`):
    its few numbers read better as a table."""
    if matrix.empty:
        raise ValueError(f"nothing to draw for {title!r}: the matrix is empty")
    if not fits_heatmap(matrix):
        raise ValueError(
            f"{title!r}: a {matrix.shape[0]} x {matrix.shape[1]} matrix is too small for a heatmap (at least "
            f"{MIN_HEATMAP} x {MIN_HEATMAP}): show its numbers as a table"
        )
    n_rows, n_cols = matrix.shape
    width = max(4.5, 0.55 * n_cols + 2.8)
    fig = Figure(figsize=(width, max(3.2, 0.42 * n_rows + 1.8)), layout="constrained")
    ax = fig.subplots()
    values = matrix.astype(float)
    annotate = n_rows * n_cols <= 100 if annotate is None else annotate
    sns.heatmap(
        values,
        ax=ax,
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        annot=annotate,
        fmt=fmt,
        linewidths=0.5,
        annot_kws={"fontsize": 7},
        cbar_kws={"label": colorbar_label} if colorbar_label else None,
    )
    for i, j in blank_cells(values):
        r, c = values.index.get_loc(i), values.columns.get_loc(j)
        ax.add_patch(Rectangle((c, r), 1, 1, facecolor="0.88", edgecolor="white", linewidth=0.5, label="blank"))
    ax.set_title(wrap_title(title, width - 1.2, 10), fontsize=10)
    ax.set_xticklabels(ax.get_xticklabels(), rotation=45, ha="right", fontsize=8)
    ax.set_yticklabels(ax.get_yticklabels(), rotation=0, fontsize=8)
    ax.set_xlabel(xlabel or "")
    ax.set_ylabel(ylabel or "")
    return fig


def fits_heatmap(matrix: pd.DataFrame) -> bool:
    """Whether a matrix has at least :data:`MIN_HEATMAP` rows and columns, the least a heatmap shows
    better than its numbers."""
    return min(matrix.shape) >= MIN_HEATMAP


def blank_cells(matrix: pd.DataFrame) -> list[tuple[object, object]]:
    """(row, column) labels of the missing values of ``matrix``: the blank cells a caption explains."""
    mask = matrix.astype(float).isna().to_numpy()
    return [(matrix.index[i], matrix.columns[j]) for i, j in zip(*np.nonzero(mask), strict=True)]


def rank_heatmap(ranks: pd.DataFrame, *, title: str = "Rank of score functions (1 = best)") -> Figure:
    """Models x score functions, annotated with ranks (the study's Figure 3). A score without a rank
    (it zeroed no head) gets a grey cell marked "none": left blank, it would read as the palest
    colour, the worst rank."""
    values = ranks.astype(float)
    fig = matrix_heatmap(
        values,
        title=title,
        cmap="Blues_r",
        fmt=".0f",
        xlabel="score function",
        ylabel="model",
        annotate=True,
    )
    ax = fig.axes[0]
    for i, j in zip(*np.nonzero(values.isna().to_numpy()), strict=True):
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor="0.85", edgecolor="white", linewidth=0.5, label="no rank"))
        ax.text(j + 0.5, i + 0.5, "none", ha="center", va="center", fontsize=7, color="0.3")
    return fig


def area_intervals(intervals: pd.DataFrame, *, labels: Mapping[str, str] | None = None) -> Figure:
    """Each model's curve areas with their bootstrap intervals, best first, one panel per model
    (``intervals``: :func:`headstats.stats.curve_bootstrap.curve_intervals`); the reference curve's interval
    is shaded across the panel, so a score whose interval clears it beats chance."""
    if intervals.empty:
        raise ValueError("no curve areas to draw: curve_intervals returned no rows")
    models = list(dict.fromkeys(intervals["model"]))
    height = 1.2 + 0.4 * intervals.groupby("model").size().max()
    fig = Figure(figsize=(4.2 * len(models), height), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        rows = intervals[intervals["model"] == model].sort_values("area", ascending=True, na_position="first")
        ref = rows[rows["score"] == rows["reference"]]
        if len(ref) and np.isfinite(ref["area_low"].iloc[0]):
            ax.axvspan(ref["area_low"].iloc[0], ref["area_high"].iloc[0], color="0.85", zorder=0)
        y = np.arange(len(rows))
        for i, (_, row) in enumerate(rows.iterrows()):
            color = score_style(str(row["score"])).get("color", "C0")
            ax.errorbar(
                row["area"],
                i,
                xerr=[[row["area"] - row["area_low"]], [row["area_high"] - row["area"]]],
                fmt="o",
                color=color,
                capsize=3,
            )
        ax.set_yticks(y, [str(s) for s in rows["score"]])
        ax.set_xlabel(f"{rows['by'].iloc[0]} (accuracy %)")
        ax.set_title(_panel_title(model, labels) or model, fontsize=8)
    return fig


def wasserstein_heatmap(
    result: DistanceMatrix, *, title: str | None = None, labels: Mapping[str, str] | None = None
) -> Figure:
    """W1 between models, in the order of ``result`` (e.g. checkpoints by training step); cells whose
    distance does not exceed the pair's noise floor (the larger of the two models' split-half floors)
    are hatched: there the models cannot be told apart from re-drawing the texts. ``labels``: model ->
    the short name its row and column show."""
    names = dict(labels or {})
    fig = matrix_heatmap(
        result.w1.rename(index=names, columns=names),
        title=title or f"W1 of {result.score} ({result.depth} depth); hatched: within noise floor",
        cmap="magma_r",
        vmin=0.0,
        fmt=".3g",
        colorbar_label="Wasserstein-1",
    )
    ax = fig.axes[0]
    floor = result.pair_floor()
    for i, a in enumerate(result.w1.index):
        for j, b in enumerate(result.w1.columns):
            if a != b and np.isfinite(floor.loc[a, b]) and result.w1.loc[a, b] <= floor.loc[a, b]:
                ax.add_patch(Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="grey", linewidth=0))
    return fig


def overlap_heatmap(matrix: pd.DataFrame, *, title: str, annotate: bool | None = None) -> Figure:
    """IoU between score functions' selections, or models' top-k sets (0 = disjoint, 1 = identical)."""
    return matrix_heatmap(
        matrix, title=title, cmap="plasma", vmin=0.0, vmax=1.0, colorbar_label="IoU", annotate=annotate
    )


# --- score distributions --------------------------------------------------------------------------


def _one_dataset(rows: pd.DataFrame, model: str, dataset: str | None) -> pd.DataFrame:
    if "dataset" not in rows.columns:
        return rows
    have = sorted(rows["dataset"].astype(str).unique())
    if dataset is None:
        if len(have) > 1:
            raise ValueError(f"model {model!r} has several datasets ({', '.join(have)}): pick one with dataset=")
        return rows
    if dataset not in have:
        raise ValueError(f"model {model!r} has no dataset {dataset!r}; it has {', '.join(have)}")
    return rows[rows["dataset"].astype(str) == dataset]


def _score_list(score_ids: str | Sequence[str]) -> list[str]:
    ids = [score_ids] if isinstance(score_ids, str) else list(score_ids)
    for sid in ids:
        if sid not in SCORES:
            raise ValueError(f"unknown score id {sid!r}: choose from {', '.join(SCORES)}")
    if not ids:
        raise ValueError("no score ids to plot")
    return ids


def _values(rows: pd.DataFrame, model: str, score_id: str) -> np.ndarray:
    if score_id not in rows.columns or rows[score_id].isna().all():
        raise ValueError(f"model {model!r} has no values of {score_id!r}")
    values = rows[score_id].to_numpy(np.float64)
    return values[np.isfinite(values)]


def ecdf(
    scores: pd.DataFrame,
    score_ids: str | Sequence[str],
    models: Sequence[str],
    *,
    dataset: str | None = None,
    quantiles: int = 512,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Empirical CDFs of a score for several models (pooled over sequences, layers and heads); one
    panel per score id. More than :data:`MAX_CURVES` models are drawn as small multiples: one row of
    panels per group, the first model (the reference) in every row. ``labels``: model -> the short
    name its legend shows.

    Drawn from ``quantiles`` quantiles per model, so a table of millions of rows plots as fast as a
    small one and the figure stays small.
    """
    ids = _score_list(score_ids)
    models = list(models)
    head, rest = models[:1], models[1:]
    room = MAX_CURVES - len(head)
    groups = [head + rest[i : i + room] for i in range(0, len(rest), room)] or [head]
    fig = Figure(figsize=(5.0 * len(ids), 3.8 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), len(ids), squeeze=False)
    looks = model_looks(models)
    rows = {m: _one_dataset(model_rows(scores, m), m, dataset) for m in models}
    names = dict(labels or {})
    for g, group in enumerate(groups):
        for ax, sid in zip(axes[g], ids, strict=True):
            for model in group:
                ax.plot(
                    *describe.ecdf_points(_values(rows[model], model, sid), quantiles),
                    linewidth=1.5,
                    **looks[model],
                    label=names.get(model, model),
                )
            ax.set_xlabel(f"{score_label(sid)}\ninactive when {SCORES[sid].inactive_when} the threshold", fontsize=8)
            ax.set_ylabel("fraction of (sequence, layer, head)", fontsize=8)
            ax.set_title(wrap_title(f"ECDF of {sid}" + (f" on {dataset}" if dataset else ""), 4.6, 10), fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    return fig


def layer_head_heatmap(
    scores: pd.DataFrame,
    score_ids: str | Sequence[str],
    model: str,
    *,
    dataset: str | None = None,
    model_label: str | None = None,
) -> Figure:
    """Mean of a score over sequences for every (layer, head) of one model; one panel per score id
    (titled with ``model_label``, default the model's name)."""
    ids = _score_list(score_ids)
    rows = _one_dataset(model_rows(scores, model), model, dataset)
    for sid in ids:
        _values(rows, model, sid)
    grids = describe.head_means(rows, ids)
    n_layers, n_heads = grids.index.levshape
    if min(n_layers, n_heads) < MIN_HEATMAP:
        raise ValueError(
            f"model {model!r} has {n_layers} layer(s) x {n_heads} head(s): too few for a heatmap (at least "
            f"{MIN_HEATMAP} x {MIN_HEATMAP}); show the per-head means as a table"
        )
    fig = Figure(
        figsize=(len(ids) * max(3.2, 0.3 * n_heads + 2.0), max(3.0, 0.2 * n_layers + 1.4)), layout="constrained"
    )
    axes = fig.subplots(1, len(ids), squeeze=False)[0]
    for ax, sid in zip(axes, ids, strict=True):
        grid = grids[sid].unstack("head").astype(float)
        sns.heatmap(
            grid,
            ax=ax,
            cmap="viridis",
            cbar_kws={"label": f"mean {sid}"},
            annot=grid.size <= 64,
            fmt=".2g",
            annot_kws={"fontsize": 6},
        )
        title = f"{score_label(sid)}\n{model_label or model}" + (f" on {dataset}" if dataset else "")
        ax.set_title(wrap_title(title, max(3.2, 0.3 * n_heads + 2.0) - 0.9, 9), fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    return fig
