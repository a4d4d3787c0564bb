"""The report's lead: the answer to its question in an abstract (with the main numbers and their
intervals, computed from the tables), one headline figure and the main table with a one-line legend.

Which question depends on what the results hold, in this order: a fine-tuning chain (how far do the
heads move from the base?), interventions (how many heads can be zeroed within 1 point, and which
score finds them?), score tables alone (what do the score distributions look like?). The full legend
of the main table goes to the "Methods and caveats" appendix (:meth:`Writer.note`).
"""

from __future__ import annotations

import pandas as pd

from headstats.engine.scores import score_ids as registered_score_ids
from headstats.report import plots
from headstats.report.sections.context import Context, Writer, fit_sentences, term
from headstats.report.sections.curves import MAIN_TABLE_LEGEND, MAIN_TABLE_LINE, main_table
from headstats.stats import coverage, curve_bootstrap, describe
from headstats.stats.summary import BASELINE

# The score the abstract reads when the run has it: the study's best score, named before any run, so
# the abstract's numbers are not the best of several curves picked after seeing them.
PRESPECIFIED = "ahon_ln"


def _names(items: list[str]) -> str:
    quoted = [f"`{i}`" for i in items]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


# --- interventions --------------------------------------------------------------------------------


def _end(value: float, is_open: bool) -> str:
    return ("≥ " if is_open else "") + f"{value:.1f}"


def reading_text(curve: pd.Series, interval: pd.Series | None) -> str:
    """``4.9% [2.1, 9.0]`` (first 1-point drop with its bootstrap interval), ``≥ 28.0%`` when the
    curve never dropped, ``unstable (25.4%; median 13.1%)`` when the reading lies outside the central
    half of its resamples (``first_unstable``: not a finding), then ``, certified 1.9%``."""
    if bool(curve.get("zeroes_none", False)):
        return "no head zeroed"
    text = _end(float(curve["within_1pt"]), bool(curve.get("censored", False))) + "%"
    if interval is not None and bool(interval.get("first_unstable", False)):
        text = f"unstable ({text}; median {float(interval['first_median']):.1f}%)"
    if interval is not None and pd.notna(interval.get("first_low")):
        low = _end(float(interval["first_low"]), bool(interval["first_low_open"]))
        high = _end(float(interval["first_high"]), bool(interval["first_high_open"]))
        text += f" [{low}, {high}]"
    if pd.notna(curve.get("within_1pt_certified")):
        text += f", certified {_end(float(curve['within_1pt_certified']), bool(curve.get('certified_open')))}%"
    return text


PLAIN_QUESTION = (
    "This report switches off a growing share of a language model's attention heads and asks how many can go "
    "before it gets more than 1 in 100 test questions fewer right."
)


def reading_words(curve: pd.Series, interval: pd.Series | None, task: str) -> str:
    """One curve's reading in words: the share of heads at which accuracy first fell 1 point on
    ``task`` (or that it had not by the most tried), its 95% interval, and the share certified."""
    if bool(curve.get("zeroes_none", False)):
        return f"on {task} no head was zeroed"
    value = float(curve["within_1pt"])
    text = (
        f"not by {value:.1f}% of heads, the most tried, on {task}"
        if curve.get("censored")
        else f"{value:.1f}% of heads on {task}"
    )
    inner = []
    if interval is not None and bool(interval.get("first_unstable", False)):
        inner.append(f"{term('unstable', 'unstable')}: not a finding")
    elif interval is not None and pd.notna(interval.get("first_low")):
        high = float(interval["first_high"])
        upper = f"over {high:.1f}" if bool(interval["first_high_open"]) else f"{high:.1f}"
        inner.append(f"95% interval {float(interval['first_low']):.1f} to {upper}%")
    if pd.notna(curve.get("within_1pt_certified")):
        share = float(curve["within_1pt_certified"])
        inner.append(f"certified safe up to {share:.1f}%" if share > 0 else "none certified safe")
    return text + (f" ({'; '.join(inner)})" if inner else "")


def what_it_can_show_words(context: Context) -> list[str]:
    """What the run's size lets it show, in words: the smallest drop it detects against 1 point, and
    the tasks the model answers no better than chance."""
    table = coverage.what_it_can_show(context.interventions, context.points, context.options.metric)
    if table.empty:
        return []
    out = []
    small = table[~table["can_certify_1pt"]]
    if len(small):
        n_low, n_high = int(small["n_questions"].min()), int(small["n_questions"].max())
        sizes = f"{n_low}" if n_low == n_high else f"{n_low} to {n_high}"
        mdd = float(small["min_detectable_drop"].min())
        out.append(
            f"With {sizes} questions per task this run cannot show a 1-point drop: the smallest drop it "
            f"{term('detects', 'mde')} is about {mdd:.0f} points, and certifying 1 point needs at least "
            f"{coverage.fewest_questions_to_certify()} questions, so read its curves as a demonstration."
        )
    for row in table[table["at_chance"]].itertuples(index=False):
        out.append(
            f"On {row.task}, `{row.model}` answers no better than guessing ({row.baseline:.0f}% against "
            f"{row.chance:.0f}% by chance), so that curve cannot show which heads matter."
        )
    return out


def intervention_abstract(context: Context) -> str:
    """The plain question, what the run's size can show, then how many heads can be zeroed within 1
    point on the pre-specified score and how the scores compare with random: at most 150 words."""
    points, curves, intervals = context.points, context.curves, context.curve_intervals
    models = list(dict.fromkeys(curves["model"].astype(str)))
    tasks = sorted(curves["task"].astype(str).unique())
    scores = [s for s in registered_score_ids() if s in set(curves["score"])]
    base = points[points["score"] == BASELINE]
    sizes = base.groupby("task")["n_questions"].max()
    size_text = ", ".join(f"{t} ({int(sizes[t])})" for t in tasks if t in sizes.index)
    top = 100 * float(pd.to_numeric(points["target"]).max())
    measured = [s for s in scores if s != "random"]
    chosen = PRESPECIFIED if PRESPECIFIED in measured else (measured[0] if measured else scores[0])
    why = "the study's best score, fixed before the run" if chosen == PRESPECIFIED else "the first score run"
    sentences = [
        PLAIN_QUESTION,
        f"Here: {_names(models)} on {size_text} questions, heads chosen by {len(scores)} "
        f"score function{'s' if len(scores) != 1 else ''}, up to {top:.0f}% of heads.",
        *what_it_can_show_words(context),
    ]
    for model in models:
        parts = []
        for task in tasks:
            row = curves[(curves["model"] == model) & (curves["task"] == task) & (curves["score"] == chosen)]
            if row.empty:
                continue
            iv = None
            if intervals is not None:
                hit = intervals[
                    (intervals["model"] == model) & (intervals["task"] == task) & (intervals["score"] == chosen)
                ]
                iv = hit.iloc[0] if len(hit) else None
            parts.append(reading_words(row.iloc[0], iv, task))
        if parts and model == models[0]:  # the first model's reading says how to read the others
            sentences.append(
                f"`{model}`, heads chosen by `{chosen}` ({why}): accuracy {term('first fell 1 point', 'first-drop')} "
                f"at " + ", ".join(parts) + f" ({term('certified', 'certified')}: proven within 1 point at 95%)."
            )
        elif parts:
            sentences.append(f"`{model}`: " + ", ".join(parts) + ".")
    if intervals is not None and not intervals.empty and intervals["reference"].ne("").any():
        verdicts = curve_bootstrap.verdicts(intervals)
        counts = {
            kind: sum(len([s for s in str(v).split(", ") if s]) for v in verdicts[kind])
            for kind in ("better", "indistinguishable", "worse")
        }
        ref = str(intervals.loc[intervals["reference"].ne(""), "reference"].iloc[0])
        sentences.append(
            f"Against heads chosen at `{ref}`, by the area under each accuracy curve: {counts['better']} curves "
            f"better, {counts['indistinguishable']} indistinguishable, {counts['worse']} worse "
            f"({term('Holm', 'holm')}-adjusted {term('cluster bootstrap', 'cluster-bootstrap')})."
        )
    return fit_sentences(sentences)


def intervention_lead(writer: Writer, context: Context) -> bool:
    points, curves = context.points, context.curves
    if points is None or curves is None or curves.empty or not curves["reading"].eq("first").all():
        return False
    writer.abstract(intervention_abstract(context))
    writer.headline(
        plots.headline_curves(points, curves),
        "headline_curves",
        "Accuracy (%) against the realised % of heads zeroed, per model (rows) and task (columns); dashed: "
        "baseline, dotted: baseline - 1 point, shaded: 95% intervals.",
    )
    legend = writer.note("Reading the main table", MAIN_TABLE_LEGEND)
    writer.main_table(
        main_table(points, curves, context.curve_intervals), "main_table", legend=MAIN_TABLE_LINE, full_legend=legend
    )
    return True


# --- score tables alone ---------------------------------------------------------------------------


def distribution_table(context: Context) -> pd.DataFrame:
    """Per (dataset, model): sequences scored, and the median and interquartile range of each score
    the figures draw, pooled over (sequence, layer, head) (:func:`headstats.stats.describe.score_quartiles`)."""
    table = describe.score_quartiles(context.scores, context.figure_scores)
    out = table[["dataset", "model", "sequences"]].copy()
    for column in table.columns:
        if column.endswith("_median"):
            sid = column.removesuffix("_median")
            out[f"{sid} median [IQR]"] = [
                f"{med:.3g} [{q1:.3g}, {q3:.3g}]" if pd.notna(med) else ""
                for q1, med, q3 in zip(table[f"{sid}_q1"], table[column], table[f"{sid}_q3"], strict=True)
            ]
    return out


def distributions_lead(writer: Writer, context: Context) -> bool:
    scores = context.scores
    if scores is None:
        return False
    table = distribution_table(context)
    models = [m for m in context.model_order if m in set(scores["model"])]
    datasets = sorted(scores["dataset"].astype(str).unique())
    drawn = context.figure_scores(scores)
    sentences = [
        f"What do the heads' score distributions look like? {_names(models)} scored on {_names(datasets)} "
        f"({int(table['sequences'].sum())} sequences in all), {len(context.score_ids())} scores per (sequence, "
        "layer, head).",
    ]
    for _, row in table.iterrows():
        values = "; ".join(f"{sid} {row[f'{sid} median [IQR]']}" for sid in drawn if f"{sid} median [IQR]" in row)
        sentences.append(f"`{row['model']}` on {row['dataset']}, median [interquartile range]: {values}.")
    writer.abstract(fit_sentences(sentences))
    first = scores[scores["dataset"] == datasets[0]]
    here = [m for m in models if m in set(first["model"])]
    writer.headline(
        plots.ecdf(first, context.figure_scores(first), here, dataset=datasets[0], labels=context.short_labels),
        "headline_ecdf",
        f"Empirical CDFs of {_names(context.figure_scores(first))} on `{datasets[0]}`, per model.",
    )
    writer.main_table(
        table,
        "main_table",
        legend="Per dataset and model: sequences scored; median [interquartile range] of each score over "
        "(sequence, layer, head).",
    )
    return True


LEADS = (intervention_lead, distributions_lead)


def the_answer(writer: Writer, context: Context) -> None:
    """The lead of the first kind in :data:`LEADS` whose inputs the results hold."""
    for lead in LEADS:
        if lead(writer, context):
            return
