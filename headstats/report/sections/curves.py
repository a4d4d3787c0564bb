"""Interventions per task: every point against the baseline, the accuracy curves, the heads that can
be zeroed within 1 point, and the ranking of score functions. :func:`add_curve_sections` is shared
with ``headstats paper``, so the study's published curves and a new run are read the same way."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from tqdm.auto import tqdm

from headstats.report import figure, plots
from headstats.report.sections.context import Context, Writer
from headstats.stats import curve_bootstrap, ranking
from headstats.stats.paired import minimum_detectable_drop
from headstats.stats.summary import BASELINE, certified_headline

POINT_TABLE = (
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
    "n_clusters",
    "drop_upper",
    "certified",
    "mcnemar_p",
    "mcnemar_p_holm",
)
# What the "within 1 point" number of a curve means, per reading (headstats.stats.curves).
READINGS = {
    "first": (
        "Realised % at the *first* drop of the curve to baseline - 1 point (piecewise-linear between points). "
        "`≥ x`: the curve never dropped 1 point within the tested range, so its value is a lower bound "
        "(censored at the largest realised % tested, never 0); `*`: the curve dropped below the line and climbed "
        "back later (non-monotone: the recovery is noise or a real effect; the first drop is where the claim "
        "stops holding)."
    ),
    "study": (
        "The study's reading: the realised % at the last crossing of baseline - 1 point in either direction on "
        "the piecewise-linear curve, 0 when the curve never crosses (then 0 means 'not measured within the "
        "sweep', not 'nothing')."
    ),
}


# The main table (main_table): its one-line legend under the table, and the full one in the appendix.
MAIN_TABLE_LINE = (
    "Per score: % of heads zeroed at the first 1-point drop [95% cluster-bootstrap interval] | the % certified "
    "within 1 point (one-sided 95%) (fw: the same, Bonferroni over the report's curves); `≥`: never dropped in "
    "the tested range; `*`: dropped and recovered; `unstable`: not a finding (most resamples read elsewhere)."
)
MAIN_TABLE_LEGEND = (
    "Per model and task: questions, baseline accuracy (%) with its Wilson 95% interval, the smallest drop in "
    "points detectable with 80% power on these questions (as in the first section), and per score "
    "`first [95% interval] | certified (fw adjusted)`: the realised % of heads zeroed at the first drop of 1 point "
    "(`≥`: the curve never dropped within the tested range, so this is a lower bound; `*`: it dropped and "
    "climbed back) with its cluster-bootstrap interval (an end marked `≥` is a resample in which the curve "
    "never dropped; a wide interval says the curve runs flat near the line and the reading is fragile). "
    "`unstable (x; median m)`: the point reading x lies outside the central half (25-75%) of its own bootstrap "
    "distribution, whose median is m: most resamples of the same questions read the first drop elsewhere, so x "
    "is not a finding (the first drop jumps where a point grazes the line). Then the largest realised % up to "
    "which every point's one-sided 95% upper bound of the paired drop is at most 1 point (`≥` when all were), "
    "and in brackets (`fw`) the same with every bound at one-sided level 0.05 / m, m the number of curves of the "
    "report that zeroed a head (Bonferroni): a statement that picks the best of the curves ('at most x% of "
    "heads') holds at 95% only for the adjusted values. A certified value of 0 means the data cannot "
    "certify the curve's first zeroed point, not that zeroing costs more than 1 point: a grid with "
    "smaller targets below that point may certify some. "
    f"`{ranking.NO_HEAD_ZEROED}`: no point of the score zeroed a head, because the score is tied at its "
    "extreme over the tested fractions (e.g. value-norm scores when each layer has one KV head, where the "
    "layer-normalised score is 1 for every head) or thresholds calibrated on other data select no head "
    "here: the curve says nothing about how many heads can be zeroed."
)


def add_curve_sections(
    writer: Writer,
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
    labels: dict[str, str] | None = None,
    intervals: pd.DataFrame | None = None,
) -> None:
    """Curves, within-1-point numbers, ranks and rank agreement for one task's points and curve
    summaries (own results or the published ones: the same tables, the same figures).
    ``key_tables_at_root`` writes the within-1-point and rank tables as ``out/<name>.csv`` rather
    than under ``out/tables/``; ``labels`` titles each model's panel (e.g. its exact identity);
    ``intervals``: the task's :func:`headstats.stats.curve_bootstrap.curve_intervals` (only where the
    per-question answers are at hand, not for the published curves)."""
    models = list(dict.fromkeys(curves["model"]))
    csv_root = prefix if key_tables_at_root else None
    steps = tqdm(total=6, desc="curve figures", disable=not progress)
    _curve_figures(
        writer,
        points,
        curves,
        models,
        rank_by=rank_by,
        top_models=top_models,
        prefix=prefix,
        level=level,
        labels=labels,
        step=steps.update,
    )
    _within_one_point(writer, curves, prefix=prefix, csv_root=csv_root, level=level)
    steps.update()
    _score_ranks(
        writer,
        curves,
        rank_by=rank_by,
        prefix=prefix,
        csv_root=csv_root,
        level=level,
        labels=labels,
        intervals=intervals,
    )
    steps.update()
    _model_agreement(writer, curves, models, rank_by=rank_by, top_k=top_k, prefix=prefix, step=steps.update)
    steps.close()


def _key_csv(csv_root: str | None, name: str) -> str | None:
    """Where a key table's CSV goes: ``out/<prefix><name>.csv`` when written at the root, else the default."""
    return f"{csv_root}{name}.csv" if csv_root is not None else None


def _curve_figures(
    writer: Writer,
    points: pd.DataFrame,
    curves: pd.DataFrame,
    models: list[str],
    *,
    rank_by: str,
    top_models: Sequence[str] | None,
    prefix: str,
    level: int,
    labels: dict[str, str] | None,
    step,
) -> None:
    """Every curve per model, then random and the best three of the models shown."""
    writer.heading("Accuracy vs % of heads zeroed", level)
    how = writer.note(
        "Reading the accuracy curves",
        "Every curve of every model against the realised % of (sequence, layer, head) triples zeroed (not the "
        "target p); dashed: baseline accuracy, dotted: baseline - 1 point; shaded: 95% intervals of each point's "
        "accuracy and, in grey, of the baseline (where the table has them). More than "
        f"{figure.MAX_CURVES} curves are split into panels of raw and of normalised scores, `random` in each.",
    )
    writer.figure(
        plots.accuracy_grid(points, models=models, labels=labels),
        f"{prefix}accuracy_grid",
        f"Accuracy vs realised % of heads zeroed, one panel per model ([how to read](#{how})).",
    )
    step()
    shown = [m for m in (top_models or models[:3]) if m in models]
    measured = points[(points["score"] != BASELINE) & (points["score"] != "random") & points["model"].isin(shown)]
    # With at most three curves per model besides random, the best three are all of them: the grid above.
    if shown and measured.groupby("model")["score"].nunique().max() > 3:
        best = ranking.top_k(curves, 3, rank_by, exclude=("random",))
        writer.figure(
            plots.top_curves(points, {model: best[model] for model in shown}, labels=labels),
            f"{prefix}top_curves",
            f"Random and the three best curves by `{rank_by}` of {', '.join(shown)}.",
        )
    step()


def _within_one_point(writer: Writer, curves: pd.DataFrame, *, prefix: str, csv_root: str | None, level: int) -> None:
    """How many heads each curve zeroes within 1 point: read, certified, family-wise."""
    reading = str(curves["reading"].iloc[0]) if "reading" in curves.columns else "study"
    writer.heading("Heads that can be zeroed within 1 point", level + 1)
    how = writer.note(f"The within-1-point reading ({reading})", READINGS[reading])
    writer.text(f"Realised % of heads zeroed within 1 point per model and score ([how to read](#{how})).")
    writer.table(
        ranking.within_one_point_labels(curves) if reading == "first" else ranking.within_one_point_table(curves),
        f"{prefix}within_one_point",
        floatfmt=".2f",
        index=True,
        csv=_key_csv(csv_root, "within_one_point"),
    )
    unmeasured = curves["censored"].astype(bool) if reading == "first" else ~curves["crosses"].astype(bool)
    if unmeasured.any():
        writer.table(
            curves.loc[unmeasured, ["model", "score", "max_realised_pct"]],
            f"{prefix}never_crosses",
            floatfmt=".2f",
            collapsed=f"{int(unmeasured.sum())} curve(s) never drop 1 point within their sweep",
        )
    if "within_1pt_certified" in curves.columns:
        how = writer.note(
            "Certified within 1 point",
            "Certified, paired with the baseline on the same questions: `within_1pt_certified` is the largest "
            "realised % up to which every point's one-sided 95% upper bound of the drop (Tango's score bound on the "
            "changed answers, which stays honest when few or none changed) is at most 1 point; "
            "`within_1pt_not_excluded` the largest up to which no point's drop is shown to exceed 1 point. Between "
            "the two the data cannot decide. `within_1pt_certified_fw`: `within_1pt_certified` with every bound at "
            "one-sided level 0.05 / `family_size` (Bonferroni over the report's curves that zeroed a head), the value "
            "to quote when the curve is picked as the best of them. `mdd_80`: the smallest drop (points) "
            "detectable with 80% power at the "
            "curve's number of questions and share of changed answers. `zeroes_none`: the score zeroed no head at "
            "any target, so its curve has no readings and no rank.",
        )
        cols = [
            "model",
            "score",
            "baseline",
            "within_1pt",
            "censored",
            "non_monotone",
            "within_1pt_certified",
            "certified_open",
            "within_1pt_not_excluded",
            "within_1pt_certified_fw",
            "certified_fw_open",
            "family_size",
            "max_realised_pct",
            "n_questions",
            "mdd_80",
            "zeroes_none",
        ]
        _guided_table(
            writer,
            curves,
            cols,
            f"{prefix}within_one_point_certified",
            floatfmt=".2f",
            collapsed="per curve: the first drop, the certified and the not-excluded share, the detectable drop",
            guide=("What certified means", how),
        )
    if "awft" in set(curves["score"]) and curves["score"].nunique() > 1:
        writer.table(
            ranking.compare_with_reference(curves, "awft"),
            f"{prefix}awft_vs_best_other",
            floatfmt=".2f",
            collapsed="`awft` vs the best other curve per model (the study's Table 2 layout)",
        )


def _score_ranks(
    writer: Writer,
    curves: pd.DataFrame,
    *,
    rank_by: str,
    prefix: str,
    csv_root: str | None,
    level: int,
    labels: dict[str, str] | None,
    intervals: pd.DataFrame | None,
) -> None:
    """The scores ranked by curve area, with intervals where the per-question answers are at hand."""
    writer.heading(f"Ranking score functions by `{rank_by}`", level + 1)
    how = writer.note(
        "Curve areas",
        "`norm_auc` is the study's area (trapezoid area over the curve's own x-range, which favours curves that "
        "stop early); `grid_auc` the mean accuracy over a realised-% range common to all curves of a model.",
    )
    ranks = ranking.rank_scores(curves, rank_by)
    if plots.fits_heatmap(ranks):
        writer.figure(
            plots.rank_heatmap(ranks),
            f"{prefix}rank_heatmap",
            f"Rank of each score function by `{rank_by}` ([areas](#{how})); `none`: the score zeroed no head, so it "
            "has no rank.",
        )
        writer.table(
            ranks, f"{prefix}ranks", index=True, csv=_key_csv(csv_root, "ranks"), collapsed=f"ranks by `{rank_by}`"
        )
    else:  # too few models or scores for a heatmap: the ranks themselves
        writer.text(f"Rank of each score function by `{rank_by}` ([areas](#{how})); empty: it zeroed no head.")
        writer.table(ranks, f"{prefix}ranks", index=True, csv=_key_csv(csv_root, "ranks"))
    if intervals is not None and not intervals.empty:
        _curve_intervals(writer, intervals, prefix, labels)
    for metric in ranking.RANK_METRICS:
        writer.table(
            ranking.metric_table(curves, metric),
            f"{prefix}{metric}",
            floatfmt=".2f",
            index=True,
            collapsed=f"`{metric}` per model and score",
        )


def _model_agreement(
    writer: Writer, curves: pd.DataFrame, models: list[str], *, rank_by: str, top_k: int, prefix: str, step
) -> None:
    """Whether the models agree on which score functions work best: rank correlation, top-k overlap."""
    n_scores = curves["score"].nunique()
    if len(models) == 2 and n_scores >= 3:
        corr = ranking.rank_correlation(curves, rank_by)
        writer.text(
            f"Do the two models agree on which score functions work best? Spearman correlation of their rankings "
            f"by `{rank_by}`: {_number(corr.iloc[0, 1])} over {n_scores} scores."
        )
    elif len(models) >= 3 and n_scores >= 3:
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
    step()
    k = min(top_k, n_scores - 1)
    if len(models) == 2 and k >= 1:
        iou = ranking.top_k_iou(curves, k, rank_by)
        writer.text(f"IoU of the two models' {k} best score functions by `{rank_by}`: {_number(iou.iloc[0, 1])}.")
    elif len(models) >= 3 and k >= 1:
        iou = ranking.top_k_iou(curves, k, rank_by)
        writer.figure(
            plots.overlap_heatmap(iou, title=f"IoU of top-{k} score functions ({rank_by})", annotate=True),
            f"{prefix}top{k}_iou",
            f"Overlap of each pair of models' {k} best score functions.",
        )
        writer.table(iou, f"{prefix}top{k}_iou", floatfmt=".2f", index=True, collapsed=f"top-{k} IoU matrix")
    step()


def _guided_table(
    writer: Writer,
    frame: pd.DataFrame,
    columns: Sequence[str],
    name: str,
    *,
    floatfmt: str,
    collapsed: str,
    guide: tuple[str, str],
) -> None:
    """The ``columns`` of ``frame`` that it has, as a collapsed table, then a link to the note that
    says how to read it (``guide``: the link's text and the note's anchor)."""
    writer.table(frame[[c for c in columns if c in frame.columns]], name, floatfmt=floatfmt, collapsed=collapsed)
    text, anchor = guide
    writer.text(f"[{text}](#{anchor}).")


def _number(value: float) -> str:
    return "undefined (a ranking without spread)" if pd.isna(value) else f"{value:.2f}"


def _curve_intervals(writer: Writer, intervals: pd.DataFrame, prefix: str, labels: dict[str, str] | None) -> None:
    first = intervals.iloc[0]
    reference = str(first["reference"]) or "the reference"
    how = writer.note(
        "Curve areas and ranks with intervals",
        f"How sure are these readings? Each curve's `{first['by']}` (`area`) and rank with 95% percentile intervals "
        f"over {int(first['n_resamples'])} resamples of the questions' clusters (`{first['cluster']}`, "
        f"{int(first['n_clusters'])} of them per model): every resample redraws the questions and recomputes every "
        "point of every curve of the model on them, the thresholds and zeroing fixed as run. `p_best`: the share "
        f"of resamples in which the score ranks first; `vs_reference`: its area minus `{reference}`'s on the same "
        f"resample, so an interval above 0 says the score picks heads better than chance. Two scores whose rank "
        "intervals overlap are not shown to differ. `first_drop`: the first-drop reading with its interval "
        "(`first_low`, `first_high`; `*_open` where that end is a resample in which the curve never dropped, a "
        "lower bound); `first_median`, `first_q25`, `first_q75`: the median and quartiles of its resamples, and "
        "`first_unstable` when the reading lies outside that central half (not a finding); `first_mono`: the first "
        "drop of the curve's monotone (isotonic, never rising) fit with its interval `first_mono_low`, "
        "`first_mono_high`; `vs_reference_p`: the two-sided bootstrap p-value of `vs_reference` before adjustment.",
    )
    writer.figure(
        plots.area_intervals(intervals, labels=labels),
        f"{prefix}area_intervals",
        f"`{first['by']}` per score with its 95% interval; grey: `{reference}`'s interval. The intervals are "
        "marginal: the curves answer the same questions, so their paired differences (`vs_reference`) are "
        f"tighter than the overlap of two bars suggests ([how to read](#{how})).",
    )
    cols = [c for c in curve_bootstrap.CURVE_INTERVAL_COLUMNS if c not in _INTERVAL_COLUMNS_LEFT_TO_CSV]
    writer.table(
        intervals[cols],
        f"{prefix}curve_intervals",
        floatfmt=".2f",
        collapsed="areas, ranks and first drops with intervals",
    )


# Columns of a curve-interval table that its page leaves to the CSV: the same in every row (task,
# area, reference, clusters, resamples) or the monotone reading's open ends.
_INTERVAL_COLUMNS_LEFT_TO_CSV = frozenset(
    {"task", "by", "reference", "first_mono_low_open", "first_mono_high_open", "cluster", "n_clusters", "n_resamples"}
)


def _certified_headline(writer: Writer, curves: pd.DataFrame) -> None:
    """The largest certified share over the report's curves, unadjusted and family-wise."""
    table = certified_headline(curves)
    m = int(table["family_size"].iloc[0])
    writer.heading("Largest certified share: unadjusted and family-wise")
    writer.text(
        "'Zeroing certified within 1 point reaches at most x% of heads' picks the best of the report's curves. "
        "`certified`: the largest certified share of any curve, each at one-sided level 5% (what a single "
        f"pre-specified curve would give); `certified_fw`: the largest with every curve at one-sided level 0.05 / {m} "
        f"(Bonferroni over the {m} curves that zeroed a head), so that the statement holds for the curve it picks "
        "with 95% confidence. Within a curve, points are tested in order of the share zeroed and the reading stops "
        "at the first failure, which needs no further adjustment. 0: nothing certified."
    )
    writer.table(table, "certified_headline", floatfmt=".2f")


def _certified_label(curve: pd.Series) -> str:
    """`` | 9.1 (fw 4.7)``: the certified within-1-point value, then the family-wise one (``≥`` when
    every point of the sweep was certified)."""
    if pd.isna(curve.get("within_1pt_certified")) or bool(curve.get("zeroes_none", False)):
        return ""
    text = f" | {'≥ ' if bool(curve.get('certified_open', False)) else ''}{float(curve['within_1pt_certified']):.1f}"
    if pd.notna(curve.get("within_1pt_certified_fw")):
        fw = float(curve["within_1pt_certified_fw"])
        text += f" (fw {'≥ ' if bool(curve.get('certified_fw_open', False)) else ''}{fw:.1f})"
    return text


def _interval_row(intervals: pd.DataFrame | None, model: str, task: str, score: str) -> pd.Series | None:
    if intervals is None:
        return None
    row = intervals[(intervals["model"] == model) & (intervals["task"] == task) & (intervals["score"] == score)]
    return None if row.empty else row.iloc[0]


def _first_interval(intervals: pd.DataFrame | None, model: str, task: str, score: str) -> str:
    """`` [2.9, ≥ 28.0]``: the first-drop reading's 95% interval
    (:func:`headstats.stats.curve_bootstrap.curve_intervals`)."""
    r = _interval_row(intervals, model, task, score)
    if r is None or pd.isna(r["first_low"]):
        return ""
    low = ("≥ " if r["first_low_open"] else "") + f"{r['first_low']:.1f}"
    high = ("≥ " if r["first_high_open"] else "") + f"{r['first_high']:.1f}"
    return f" [{low}, {high}]"


def _reading_label(label: str, intervals: pd.DataFrame | None, model: str, task: str, score: str) -> str:
    """The reading as :func:`headstats.stats.ranking.within_one_point_labels` writes it, or
    ``unstable (25.4; median 13.1)`` when it lies outside the central half of its bootstrap
    distribution (``first_unstable``)."""
    r = _interval_row(intervals, model, task, score)
    if r is None or not bool(r.get("first_unstable", False)):
        return label
    return f"unstable ({label}; median {float(r['first_median']):.1f})"


def main_table(points: pd.DataFrame, curves: pd.DataFrame, intervals: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (model, task): questions, baseline accuracy with its 95% interval, the minimum
    detectable drop of the task, and per score its within-1-point reading
    (:func:`headstats.stats.ranking.within_one_point_labels`), the reading's bootstrap interval when
    ``intervals`` (:func:`headstats.stats.curve_bootstrap.curve_intervals`) are given, and the certified
    value with its family-wise adjustment: ``≥ 28.0 [12.6, ≥ 28.0] | 12.3 (fw 4.0)``; a reading that
    lies outside the central half of its bootstrap distribution is shown as ``unstable (25.4; median
    13.1)``, never as a plain number."""
    rows = []
    base = points[points["score"] == BASELINE]
    for (model, task), b in base.groupby(["model", "task"], sort=True):
        first = b.iloc[0]
        n = int(first["n_questions"])
        row: dict[str, object] = {
            "model": model,
            "task": task,
            "n": n,
            "baseline [95% CI]": f"{first['accuracy']:.1f} [{first['acc_low']:.1f}, {first['acc_high']:.1f}]",
            "min_detectable_drop": f"{100.0 * minimum_detectable_drop(n):.1f}",
        }
        here = curves[(curves["model"] == model) & (curves["task"] == task)]
        if len(here):
            labels = ranking.within_one_point_labels(here, digits=1)
            for _, curve in here.iterrows():
                score = str(curve["score"])
                interval = "" if curve.get("zeroes_none", False) else _first_interval(intervals, model, task, score)
                label = _reading_label(labels.loc[model, score], intervals, model, task, score)
                row[score] = label + interval + _certified_label(curve)
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def interventions(writer: Writer, context: Context) -> None:
    points, curves = context.points, context.curves
    if points is None:
        return
    intervals = context.curve_intervals
    if curves is not None and "within_1pt_certified_fw" in curves.columns and not curves["zeroes_none"].all():
        _certified_headline(writer, curves)
    if intervals is not None and not intervals.empty and intervals["reference"].ne("").any():
        _against_reference(writer, intervals)
    for task in sorted(points["task"].unique()):
        _task_interventions(writer, context, task)


def _against_reference(writer: Writer, intervals: pd.DataFrame) -> None:
    """Every curve's area against the reference curve's (``random``), Holm-adjusted over the report."""
    ref = str(intervals.loc[intervals["reference"].ne(""), "reference"].iloc[0])
    first = intervals.iloc[0]
    area = (
        "mean accuracy over the range of % of heads zeroed that all of a model's curves reach"
        if first["by"] == "grid_auc"
        else "the study's area over each curve's own range"
    )
    tests = curve_bootstrap.against_reference(intervals)
    floor = min(1.0, len(tests) * 2 / (int(first["n_resamples"]) + 1))
    writer.heading(f"Scores against `{ref}`")
    writer.text(
        f"By the curves' `{first['by']}` ({area}; {int(first['n_resamples'])} "
        "cluster-bootstrap resamples, per task below): `better` / `worse` where the paired area difference "
        f"from `{ref}` is significant at 5% after Holm's adjustment over all {len(tests)} curves of this report "
        "(two-sided bootstrap p-values), `indistinguishable` where it is not; `unadjusted_differs` names the "
        "curves whose verdict from their own 95% interval alone would differ. The smallest adjusted p-value "
        f"these resamples allow is {floor:.3g}. `best`: the score that ranks first in at least 95% of the "
        "resamples, else the contenders with their share of firsts. The thresholds are taken as run."
    )
    writer.table(curve_bootstrap.verdicts(intervals), "against_random")
    writer.table(
        tests,
        "against_random_tests",
        floatfmt=".3g",
        collapsed=f"each curve's area difference from `{ref}`, its p-value and Holm adjustment",
    )


def _task_interventions(writer: Writer, context: Context, task: str) -> None:
    """One task's per-point table and its curve sections."""
    points, curves, opt = context.points, context.curves, context.options
    writer.heading(f"Interventions: task `{task}`")
    tp = points[points["task"] == task]
    unit = str(tp["cluster"].iloc[0]) if "cluster" in tp.columns else "question_id"
    tested = int(points["mcnemar_p"].notna().sum())
    clustered = unit != "question_id"
    how = writer.note(
        f"Per-point tables (clusters: `{unit}`)",
        f"Accuracy (`{opt.metric}`, %) with Wilson 95% intervals; against the baseline on the same questions: "
        f"`diff` (points) with a 95% bootstrap interval resampling whole clusters (`{unit}`, `n_clusters` of "
        "them), `drop_upper` the one-sided 95% upper bound of the drop (Tango's score bound"
        + (
            ", taken at n / `design_effect` questions: answers that change together within a cluster count as "
            "fewer independent ones"
            if clustered
            else ""
        )
        + "), `certified` when it is at most 1 point, the exact McNemar p-value"
        + (" (flipping whole clusters)" if clustered else "")
        + f" and `mcnemar_p_holm`, Holm-adjusted over all {tested} points of this report.",
    )
    at = POINT_TABLE.index("n_clusters") + 1
    columns = [*POINT_TABLE[:at], "design_effect", *POINT_TABLE[at:]] if clustered else POINT_TABLE
    _guided_table(
        writer,
        tp,
        columns,
        f"{task}_points",
        floatfmt=".3g",
        collapsed="every point against the baseline: accuracy, paired difference, certified, McNemar p",
        guide=("How to read the point table", how),
    )
    tc = curves[curves["task"] == task]
    if tc.empty:
        writer.text("Only the baseline was run: no curves to draw.")
        return
    intervals = context.curve_intervals
    add_curve_sections(
        writer,
        tp,
        tc,
        rank_by=opt.rank_by,
        prefix=f"{task}_",
        level=3,
        progress=opt.progress,
        labels=context.models,
        intervals=None if intervals is None else intervals[intervals["task"] == task],
    )
