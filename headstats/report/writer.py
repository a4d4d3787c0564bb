"""``headstats report RESULTS_DIR --out reports/NAME``: a report built only from Parquet results.

The report reads what ``headstats collect`` (score tables, ``model=<slug>/dataset=<name>/``) and
``headstats ablate`` (intervention results, ``model=<slug>/task=<name>/``) wrote anywhere under
RESULTS_DIR, and never loads a model, so it can be rebuilt on any machine from the results alone.
It writes

- ``index.html``: self-contained (figures embedded as PNG, tables inline, the provenance of every
  table used);
- ``summary.md``: the same content in markdown, linking the figure files;
- ``figures/*.png|svg`` and ``tables/*.csv``.

Sections, each present when its inputs are:

- score distributions per dataset: per-model means, ECDFs, layer x head maps, score overlap
  (:mod:`headstats.stats.overlap`);
- between models (two or more on a common dataset): W1 distances with bootstrap intervals,
  permutation p-values and noise floors (:mod:`headstats.stats.distances`);
- across datasets (a model scored on two or more): rank stability and per-layer W1
  (:mod:`headstats.stats.stability`);
- interventions per task: accuracy with intervals and paired tests against the baseline, curves,
  the study's within-1-point number next to its certified bracket, ranks and their agreement
  (:func:`add_curve_sections`, shared with ``headstats paper``).
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import html
import json
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from headstats.io import store
from headstats.report import plots
from headstats.stats import distances, overlap, ranking, stability
from headstats.stats.summary import summarize_curves, summarize_interventions

Kind = Literal["scores", "interventions"]
HEADLINE_SCORES = ("awft", "ahon_ln")  # the study's contrast: attention sink vs output norm
_PARTITION_KEYS: dict[str, Kind] = {"dataset": "scores", "task": "interventions"}


# --- finding and reading the tables ---------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """One table: a ``model=<slug>/dataset=<name>/`` or ``model=<slug>/task=<name>/`` directory."""

    path: Path
    kind: Kind
    model: str
    name: str  # the dataset (scores) or the task (interventions)
    provenance: dict | None = field(default=None, compare=False, hash=False)


def find_partitions(results_dir: str | os.PathLike) -> tuple[list[Partition], list[Path]]:
    """Every score and intervention table under ``results_dir`` (at any depth), and the Parquet
    files that lie outside that layout (reported, not read)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise store.StoreError(f"results directory {str(root)!r} does not exist or is not a directory")
    found: dict[Path, Partition] = {}
    stray: list[Path] = []
    for file in sorted(root.rglob("*.parquet")):
        rel = file.relative_to(root).parts
        if any(part.startswith(".") for part in rel):
            continue  # temporary files of an unfinished write
        parent = file.parent
        if len(rel) >= 3 and rel[-3].startswith("model=") and rel[-2].split("=")[0] in _PARTITION_KEYS:
            key, _, name = rel[-2].partition("=")
            if parent not in found:
                found[parent] = Partition(
                    parent, _PARTITION_KEYS[key], rel[-3].removeprefix("model="), name, store.read_provenance(parent)
                )
        else:
            stray.append(file)
    parts = sorted(found.values(), key=lambda p: (p.kind, p.model, p.name, str(p.path)))
    seen: dict[tuple[str, str, str], Path] = {}
    for p in parts:
        key = (p.kind, p.model, p.name)
        if key in seen:
            raise store.StoreError(
                f"two {p.kind} tables for model {p.model!r} and {'dataset' if p.kind == 'scores' else 'task'} "
                f"{p.name!r}: {seen[key]} and {p.path}; report on one results directory at a time"
            )
        seen[key] = p.path
    return parts, stray


def read_partitions(partitions: Sequence[Partition], kind: Kind) -> pd.DataFrame | None:
    """The tables of one kind as one DataFrame with ``model`` and ``dataset``/``task`` columns."""
    frames = []
    for p in partitions:
        if p.kind != kind:
            continue
        frame = store.read_scores(p.path) if kind == "scores" else store.read_interventions(p.path)
        frame["model"] = p.model
        frame["dataset" if kind == "scores" else "task"] = p.name
        frames.append(frame)
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True)


# --- the writer: one content stream, two renderings -----------------------------------------------


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table.t { border-collapse: collapse; font-size: .82em; margin: .5em 0 1.2em; }
table.t th, table.t td { border: 1px solid #ddd; padding: .2em .5em; text-align: right; }
table.t th { background: #f4f4f4; } table.t td:first-child { text-align: left; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; } figcaption { font-size: .85em; color: #555; }
code { background: #f4f4f4; padding: 0 .2em; } pre { background: #f8f8f8; padding: .6em; overflow-x: auto;
font-size: .8em; } details { margin: .5em 0 1em; } summary { cursor: pointer; color: #225; }
"""


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", escaped)


def _format_cell(value: object, floatfmt: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, (float, np.floating)):
        return format(float(value), floatfmt)
    return str(value)


def markdown_table(frame: pd.DataFrame, floatfmt: str = ".3g", index: bool = False) -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""
    data = frame.reset_index() if index else frame
    header = [str(c) for c in data.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in data.itertuples(index=False):
        lines.append("| " + " | ".join(_format_cell(v, floatfmt).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


class ReportWriter:
    """Collects headings, text, tables and figures, and writes ``index.html`` + ``summary.md``.

    Figures go to ``out/figures`` (PNG and SVG) and are embedded in the HTML as PNG; tables are
    written as CSV (``out/tables/<name>.csv`` unless given another path relative to ``out``).
    """

    def __init__(self, out: str | os.PathLike, title: str, *, dpi: int = 90) -> None:
        self.out = Path(out)
        self.title = title
        self.dpi = dpi
        self._html: list[str] = []
        self._md: list[str] = []

    def heading(self, text: str, level: int = 2) -> None:
        self._html.append(f"<h{level}>{_inline_html(text)}</h{level}>")
        self._md.append(f"{'#' * level} {text}")

    def text(self, text: str) -> None:
        self._html.append(f"<p>{_inline_html(text)}</p>")
        self._md.append(text)

    def table(
        self,
        frame: pd.DataFrame,
        name: str,
        *,
        floatfmt: str = ".3g",
        index: bool = False,
        csv: str | None = None,
        collapsed: str | None = None,
        max_md_rows: int = 60,
    ) -> Path:
        """Add a table (in a collapsed block titled ``collapsed`` if given) and write it as CSV."""
        path = self.out / (csv or f"tables/{name}.csv")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp"
        frame.to_csv(tmp, index=index)
        os.replace(tmp, path)
        body = frame.to_html(
            index=index, border=0, classes="t", na_rep="", float_format=lambda v: format(v, floatfmt), escape=True
        )
        link = (
            f'<p><small>CSV: <a href="{html.escape(path.relative_to(self.out).as_posix())}">'
            f"{html.escape(path.relative_to(self.out).as_posix())}</a></small></p>"
        )
        block = body + link
        if collapsed:
            block = f"<details><summary>{_inline_html(collapsed)}</summary>{block}</details>"
        self._html.append(block)
        shown = frame if len(frame) <= max_md_rows else frame.head(max_md_rows)
        md = markdown_table(shown, floatfmt, index)
        if len(frame) > max_md_rows:
            md += f"\n\n({len(frame) - max_md_rows} more rows in `{path.relative_to(self.out).as_posix()}`)"
        elif collapsed:
            md = f"{collapsed}:\n\n{md}"
        self._md.append(md)
        return path

    def figure(self, fig: Figure, name: str, caption: str) -> Path:
        paths = plots.save_figure(fig, self.out / "figures", name, dpi=self.dpi)
        data = base64.b64encode(paths["png"].read_bytes()).decode("ascii")
        rel_svg = paths["svg"].relative_to(self.out).as_posix()
        self._html.append(
            f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            f'<figcaption>{_inline_html(caption)} <a href="{html.escape(rel_svg)}">(SVG)</a></figcaption></figure>'
        )
        self._md.append(f"![{name}]({paths['png'].relative_to(self.out).as_posix()})\n\n*{caption}*")
        return paths["png"]

    def details(self, summary: str, body: str) -> None:
        self._html.append(
            f"<details><summary>{_inline_html(summary)}</summary><pre>{html.escape(body)}</pre></details>"
        )
        self._md.append(f"<details><summary>{summary}</summary>\n\n```\n{body}\n```\n\n</details>")

    def provenance(self, records: Iterable[dict]) -> None:
        """The provenance of every table used: a summary table and the full records."""
        records = list(records)
        self.heading("Provenance of the tables used")
        if not records:
            self.text("No provenance records were found next to the tables.")
            return
        keys = (
            "partition",
            "kind",
            "model",
            "revision",
            "dtype",
            "device",
            "prompt_format",
            "max_length",
            "calibration",
            "created",
            "schema_version",
            "source",
        )
        rows = []
        for rec in records:
            row = {k: rec.get(k) for k in keys if k in rec}
            versions = rec.get("versions")
            if isinstance(versions, dict):
                row["headstats"] = versions.get("headstats")
                row["torch"] = versions.get("torch")
                row["transformers"] = versions.get("transformers")
            rows.append(row)
        self.table(pd.DataFrame(rows).astype(object), "provenance")
        self.details("full provenance records (JSON)", json.dumps(records, indent=2, sort_keys=True, default=str))

    def write(self) -> Path:
        """Write ``index.html`` and ``summary.md`` atomically; returns the HTML path."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        from headstats import __version__

        footer = f"Generated by headstats {__version__} on {stamp}."
        page = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(self.title)}</title>'
            f"<style>{_CSS}</style></head><body>\n<h1>{html.escape(self.title)}</h1>\n"
            + "\n".join(self._html)
            + f"\n<hr><p><small>{html.escape(footer)}</small></p></body></html>\n"
        )
        md = f"# {self.title}\n\n" + "\n\n".join(self._md) + f"\n\n---\n{footer}\n"
        index = self.out / "index.html"
        for path, text in ((index, page), (self.out / "summary.md", md)):
            tmp = path.parent / f".{path.name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        return index


# --- intervention curves (shared with `headstats paper`) ------------------------------------------


def add_curve_sections(
    writer: ReportWriter,
    points: pd.DataFrame,
    curves: pd.DataFrame,
    *,
    rank_by: str = "grid_auc",
    top_models: Sequence[str] | None = None,
    top_k: int = 5,
    prefix: str = "",
    key_tables_at_root: bool = False,
    level: int = 2,
    progress: bool = False,
) -> None:
    """Curves, within-1-point numbers, ranks and rank agreement for one task's points and curve
    summaries (own results or the published ones: the same tables, the same figures).
    ``key_tables_at_root`` writes the within-1-point and rank tables as ``out/<name>.csv`` rather
    than under ``out/tables/``."""

    def key_csv(name: str) -> str | None:
        return f"{prefix}{name}.csv" if key_tables_at_root else None

    models = list(dict.fromkeys(curves["model"]))
    n_scores = curves["score"].nunique()
    steps = tqdm(total=6, desc="curve figures", disable=not progress)
    writer.heading("Accuracy vs % of heads zeroed", level)
    writer.text(
        "Every curve of every model against the realised % of (sequence, layer, head) triples zeroed (not the "
        "target p); dashed: baseline accuracy, dotted: baseline - 1 point."
    )
    writer.figure(
        plots.accuracy_grid(points, models=models),
        f"{prefix}accuracy_grid",
        "Accuracy vs realised % of heads zeroed, one panel per model.",
    )
    steps.update()

    shown = [m for m in (top_models or models[:3]) if m in models]
    if shown:
        writer.figure(
            plots.top_curves(points, curves, shown, k=3, by=rank_by),
            f"{prefix}top_curves",
            f"Random and the three best curves by `{rank_by}` of {', '.join(shown)}.",
        )
    steps.update()

    writer.heading("Heads that can be zeroed within 1 point", level + 1)
    writer.text(
        "The study's number: the realised % at the last crossing of baseline - 1 point on the piecewise-linear "
        "curve, 0 when the curve never crosses (then 0 means 'not measured within the sweep', not 'nothing')."
    )
    writer.table(
        ranking.within_one_point_table(curves),
        f"{prefix}within_one_point",
        floatfmt=".2f",
        index=True,
        csv=key_csv("within_one_point"),
    )
    never = curves.loc[~curves["crosses"].astype(bool), ["model", "score", "max_realised_pct"]]
    if len(never):
        writer.table(
            never,
            f"{prefix}never_crosses",
            floatfmt=".2f",
            collapsed=f"{len(never)} curve(s) never cross baseline - 1 point within their sweep",
        )
    if "within_1pt_certified" in curves.columns:
        writer.text(
            "Statistically honest counterpart (paired with the baseline on the same questions, 95% bootstrap "
            "intervals): `within_1pt_certified` is the largest realised % up to which every point's drop is "
            "shown to be below 1 point; `within_1pt_not_excluded` the largest up to which no point is shown to "
            "drop more. Between the two the data cannot decide."
        )
        cols = [
            "model",
            "score",
            "baseline",
            "within_1pt",
            "crosses",
            "within_1pt_certified",
            "certified_open",
            "within_1pt_not_excluded",
            "max_realised_pct",
        ]
        writer.table(curves[cols], f"{prefix}within_one_point_certified", floatfmt=".2f")
    if "awft" in set(curves["score"]) and n_scores > 1:
        writer.table(
            ranking.compare_with_reference(curves, "awft"),
            f"{prefix}awft_vs_best_other",
            floatfmt=".2f",
            collapsed="`awft` vs the best other curve per model (the study's Table 2 layout)",
        )
    steps.update()

    writer.heading(f"Ranking score functions by `{rank_by}`", level + 1)
    writer.text(
        "`norm_auc` is the study's area (trapezoid area over the curve's own x-range, which favours curves that "
        "stop early); `grid_auc` the mean accuracy over a realised-% range common to all curves of a model."
    )
    ranks = ranking.rank_scores(curves, rank_by)
    writer.figure(plots.rank_heatmap(ranks), f"{prefix}rank_heatmap", f"Rank of each score function by `{rank_by}`.")
    writer.table(ranks, f"{prefix}ranks", index=True, csv=key_csv("ranks"), collapsed=f"ranks by `{rank_by}`")
    for metric in ranking.RANK_METRICS:
        writer.table(
            ranking.metric_table(curves, metric),
            f"{prefix}{metric}",
            floatfmt=".2f",
            index=True,
            collapsed=f"`{metric}` per model and score",
        )
    steps.update()

    if len(models) >= 2 and n_scores >= 3:
        corr = ranking.rank_correlation(curves, rank_by)
        writer.figure(
            plots.matrix_heatmap(
                corr,
                title=f"Spearman correlation of score rankings ({rank_by})",
                cmap="coolwarm",
                vmin=-1.0,
                vmax=1.0,
                annotate=True,
            ),
            f"{prefix}rank_spearman",
            "Do models agree on which score functions work best?",
        )
        writer.table(corr, f"{prefix}rank_spearman", floatfmt=".2f", index=True, collapsed="Spearman matrix")
    steps.update()
    k = min(top_k, n_scores - 1)
    if len(models) >= 2 and k >= 1:
        iou = ranking.top_k_iou(curves, k, rank_by)
        writer.figure(
            plots.overlap_heatmap(iou, title=f"IoU of top-{k} score functions ({rank_by})", annotate=True),
            f"{prefix}top{k}_iou",
            f"Overlap of each pair of models' {k} best score functions.",
        )
        writer.table(iou, f"{prefix}top{k}_iou", floatfmt=".2f", index=True, collapsed=f"top-{k} IoU matrix")
    steps.update()
    steps.close()


def _intervention_sections(writer: ReportWriter, rows: pd.DataFrame, metric: str, rank_by: str, progress: bool) -> None:
    points = summarize_interventions(rows, metric=metric)
    curves = summarize_curves(rows, points)
    for task in sorted(points["task"].unique()):
        writer.heading(f"Interventions: task `{task}`")
        tp = points[points["task"] == task]
        writer.text(
            f"Accuracy (`{metric}`, %) with Wilson 95% intervals; `diff` = accuracy - baseline on the same questions "
            "(points) with a paired bootstrap 95% interval, and the exact McNemar p-value."
        )
        cols = [
            "model",
            "score",
            "target",
            "realised_pct",
            "n_questions",
            "accuracy",
            "acc_low",
            "acc_high",
            "diff",
            "diff_low",
            "diff_high",
            "mcnemar_p",
        ]
        writer.table(tp[cols], f"{task}_points", floatfmt=".3g")
        tc = curves[curves["task"] == task]
        if tc.empty:
            writer.text("Only the baseline was run: no curves to draw.")
            continue
        add_curve_sections(writer, tp, tc, rank_by=rank_by, prefix=f"{task}_", level=3, progress=progress)


# --- score tables ---------------------------------------------------------------------------------


@dataclass
class ScoreOptions:
    """Resampling effort of the score-table statistics (see :func:`headstats.stats.distances.model_distance`)."""

    n_boot: int = 200
    n_perm: int = 200
    n_split: int = 20
    depth_bins: int = 5
    rates: tuple[float, ...] = (0.05, 0.10, 0.20)
    seed: int = 0


def _score_sections(writer: ReportWriter, scores: pd.DataFrame, opt: ScoreOptions, progress: bool) -> None:
    models = sorted(scores["model"].unique())
    datasets = sorted(scores["dataset"].unique())
    headline = [s for s in HEADLINE_SCORES if s in distances.score_columns(scores)]
    # `random` is a seeded draw per (sample id, layer, head), not a property of the model: the same
    # draws recur in every model and dataset, so distances and stability say nothing about it.
    measured = [s for s in distances.score_columns(scores) if s != "random"]
    writer.heading("Score distributions")
    for dataset in datasets:
        rows = scores[scores["dataset"] == dataset]
        here = sorted(rows["model"].unique())
        writer.heading(f"Dataset `{dataset}`", 3)
        sids = distances.score_columns(rows)
        summary = rows.groupby("model")[sids].mean()
        counts = rows.groupby("model").agg(
            sequences=("sample_id", "nunique"), layers=("layer", "nunique"), heads=("head", "nunique")
        )
        writer.table(
            counts.join(summary),
            f"means_{dataset}",
            index=True,
            collapsed="sequences, layers, heads and the mean of every score per model",
        )
        if headline:
            names = " and ".join(f"`{sid}`" for sid in headline)
            writer.figure(
                plots.ecdf(scores, headline, here, dataset=dataset),
                f"ecdf_{dataset}",
                f"ECDFs of {names} on `{dataset}`.",
            )
            for model in here:
                writer.figure(
                    plots.layer_head_heatmap(scores, headline, model, dataset=dataset),
                    f"heads_{model}_{dataset}",
                    f"Mean {names} per (layer, head) of {model} on `{dataset}`.",
                )
        if len(headline) == 2:
            writer.text(
                f"Overlap of `{headline[0]}` and `{headline[1]}` at matched selection rates (each thresholded at its "
                "own quantile, as an intervention calibrates it): IoU of the selected (sequence, layer, head) "
                f"triples and of the heads selected in at least half of the sequences; `missed_by_a` = share of "
                f"`{headline[1]}`'s heads that `{headline[0]}` misses."
            )
            ov = overlap.score_overlap(rows, headline[0], headline[1], opt.rates, models=here)
            writer.table(ov, f"overlap_{dataset}", floatfmt=".3g")
        for model in here:
            matrix = overlap.overlap_matrix(rows, model, rate=0.10, dataset=dataset)
            writer.figure(
                plots.overlap_heatmap(matrix, title=f"{model} on {dataset}: IoU of usually-selected heads at 10%"),
                f"overlap_{model}_{dataset}",
                "IoU between score functions' usually-selected heads at a 10% selection rate.",
            )

    by_dataset = {d: sorted(scores.loc[scores["dataset"] == d, "model"].unique()) for d in datasets}
    compared = {d: ms for d, ms in by_dataset.items() if len(ms) >= 2}
    if compared:
        writer.heading("Between models: Wasserstein-1 distances")
        writer.text(
            f"W1 between two models' score distributions on one dataset, overall and in {opt.depth_bins} "
            f"relative-depth bins (layer / (L - 1)). Sequences are the sampling unit: {opt.n_boot} bootstrap "
            f"resamples of sequences give the 95% interval (basic bootstrap), {opt.n_perm} permutations of "
            "sequence labels (swaps within a sequence when both models saw the same texts) the p-value, and "
            f"{opt.n_split} random halvings of each model's own sequences the noise floor (95th percentile); "
            "`above_noise` marks distances beyond it."
        )
        results = []
        jobs = [(d, a, b) for d, ms in compared.items() for a, b in combinations(ms, 2)]
        for dataset, a, b in tqdm(jobs, desc="model pairs", disable=not progress):
            here = scores[scores["dataset"] == dataset]
            ids = [s for s in _own(here, a, measured) if s in _own(here, b, measured)] or None
            res = distances.model_distance(
                here, a, b, ids, depth_bins=opt.depth_bins, n_boot=opt.n_boot, n_perm=opt.n_perm,
                n_split=opt.n_split, seed=opt.seed,
            )  # fmt: skip
            results.append(res.assign(dataset=dataset))
        table = pd.concat(results, ignore_index=True)
        table = table[["dataset", *[c for c in table.columns if c != "dataset"]]]
        writer.table(table[table["depth"] == distances.ALL_DEPTHS], "w1_overall", floatfmt=".3g")
        writer.table(
            table[table["depth"] != distances.ALL_DEPTHS], "w1_by_depth", floatfmt=".3g",
            collapsed="W1 per relative-depth bin",
        )  # fmt: skip
        for dataset, ms in compared.items():
            rows = scores[scores["dataset"] == dataset]
            for sid in headline:
                dm = distances.distance_matrix(
                    rows, ms, sid, depth_bins=opt.depth_bins, n_split=opt.n_split, seed=opt.seed
                )
                writer.figure(
                    plots.wasserstein_heatmap(dm),
                    f"w1_matrix_{sid}_{dataset}",
                    f"W1 of `{sid}` between models on `{dataset}`; hatched cells lie within the noise floor.",
                )

    multi = [m for m in models if scores.loc[scores["model"] == m, "dataset"].nunique() >= 2]
    if multi:
        writer.heading("Across datasets: stability of each model's heads")
        writer.text(
            "Spearman correlation of per-head means between datasets, next to the split-half correlation within "
            "each dataset (what re-drawing texts of the same kind gives); and per-layer W1 between datasets."
        )
        for model in multi:
            writer.table(
                stability.rank_stability(scores, model, _own(scores, model, measured) or None, seed=opt.seed),
                f"stability_{model}",
                floatfmt=".3g",
            )
            writer.table(
                stability.layer_distances(scores, model, headline or None, n_split=min(opt.n_split, 10), seed=opt.seed),
                f"layer_w1_{model}",
                floatfmt=".3g",
                collapsed=f"per-layer W1 between datasets, {model}",
            )


def _own(scores: pd.DataFrame, model: str, score_ids: Sequence[str]) -> list[str]:
    have = distances.score_columns(scores[scores["model"] == model])
    return [s for s in score_ids if s in have]


# --- the command ----------------------------------------------------------------------------------


def build_report(
    results_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    title: str | None = None,
    metric: str = "correct",
    rank_by: str = "grid_auc",
    n_boot: int = 200,
    n_perm: int = 200,
    n_split: int = 20,
    depth_bins: int = 5,
    rates: Sequence[float] = (0.05, 0.10, 0.20),
    seed: int = 0,
    dpi: int = 90,
    progress: bool = True,
) -> Path:
    """Build the report of everything under ``results_dir`` into ``out``; returns ``out/index.html``.

    ``metric``: the accuracy column (``correct`` or ``correct_norm``); ``rank_by``: the curve area
    that ranks score functions (``grid_auc``, or the study's ``norm_auc``); ``n_boot``, ``n_perm``,
    ``n_split``: bootstrap resamples, permutations and random halvings behind each W1 interval,
    p-value and noise floor; ``depth_bins``: relative-depth bins; ``rates``: selection rates of the
    score-overlap table. Flat keyword arguments, so an analysis file's ``report_options`` maps onto them.
    """
    if rank_by not in ranking.RANK_METRICS:
        raise ValueError(f"rank_by must be one of {', '.join(ranking.RANK_METRICS)}, not {rank_by!r}")
    if metric not in ("correct", "correct_norm"):
        raise ValueError(f"metric must be 'correct' or 'correct_norm', not {metric!r}")
    options = ScoreOptions(n_boot, n_perm, n_split, depth_bins, tuple(rates), seed)
    results = Path(results_dir)
    store.check_schema_versions(results)  # mixed schema versions cannot be analysed together
    partitions, stray = find_partitions(results)
    if not partitions:
        raise store.StoreError(
            f"no score or intervention tables under {str(results)!r}: expected "
            ".../model=<slug>/dataset=<name>/*.parquet (headstats collect) or "
            ".../model=<slug>/task=<name>/*.parquet (headstats ablate)"
        )
    out_dir = store.ensure_writable(out)
    writer = ReportWriter(out_dir, title or f"headstats report: {results.name}", dpi=dpi)
    kinds = {p.kind for p in partitions}
    rebuild = f"headstats report {results} --out {out}" + (f" --title {shlex.quote(title)}" if title else "")
    writer.text(
        f"Built from `{results}` only (no model loaded): {sum(p.kind == 'scores' for p in partitions)} score "
        f"table(s), {sum(p.kind == 'interventions' for p in partitions)} intervention table(s). Rebuild with "
        f"`{rebuild}`."
    )
    if stray:
        writer.text(f"{len(stray)} Parquet file(s) outside the results layout were ignored, e.g. `{stray[0]}`.")
    if "scores" in kinds:
        scores = read_partitions(partitions, "scores")
        _score_sections(writer, scores, options, progress)
    if "interventions" in kinds:
        rows = read_partitions(partitions, "interventions")
        _intervention_sections(writer, rows, metric, rank_by, progress)
    records = []
    for p in partitions:
        rec = dict(p.provenance or {"note": "no provenance record found"})
        rec["partition"] = p.path.relative_to(results).as_posix()
        rec.setdefault("kind", p.kind)
        records.append(rec)
    writer.provenance(records)
    return writer.write()


def add_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="HTML + markdown report of score tables and intervention results (no model is loaded)",
        description="Build OUT/index.html (self-contained) and OUT/summary.md from the Parquet results under "
        "RESULTS_DIR: score distributions, distances, stability, overlap, intervention curves and ranks.",
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="directory holding headstats collect / ablate output")
    p.add_argument("--out", required=True, help="report directory, e.g. reports/NAME")
    p.add_argument("--title", help="report title")
    p.add_argument("--metric", default="correct", choices=("correct", "correct_norm"), help="accuracy column")
    p.add_argument(
        "--rank-by",
        default="grid_auc",
        choices=ranking.RANK_METRICS,
        help="curve area used to rank score functions (default: %(default)s; the study used norm_auc)",
    )
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples of sequences (default: %(default)s)")
    p.add_argument("--permutations", type=int, default=200, help="permutations per W1 test (default: %(default)s)")
    p.add_argument("--splits", type=int, default=20, help="random halvings for noise floors (default: %(default)s)")
    p.add_argument("--depth-bins", type=int, default=5, help="relative-depth bins (default: %(default)s)")
    p.add_argument("--dpi", type=int, default=90, help="PNG resolution (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    index = build_report(
        args.results_dir, args.out, title=args.title, metric=args.metric, rank_by=args.rank_by,
        n_boot=args.bootstrap, n_perm=args.permutations, n_split=args.splits, depth_bins=args.depth_bins,
        seed=args.seed, dpi=args.dpi, progress=not args.no_progress,
    )  # fmt: skip
    print(f"report: {index}")
    return 0
