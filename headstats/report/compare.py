"""The report of ``headstats compare``: one sentence per comparison, one figure, the main table.

It renders the finished tables of :class:`headstats.jobs.compare.Comparison` (every number is a
statistic of :mod:`headstats.stats.compare`) through the report writer
(:class:`headstats.report.writer.ReportWriter`): ``index.html``, ``summary.md``, ``tables/*.csv``
(``heads.csv``: every head's verdict, with ``layer`` and ``head`` columns) and ``figures/``; the
per-head part is :mod:`headstats.report.compare_heads`.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from headstats.io import store
from headstats.io.assets import portable_name
from headstats.jobs.compare import COMPARED, FORMAT_CHANGE, Comparison
from headstats.report.compare_heads import heads_clause, plain, write_constant_texts, write_head_rule, write_heads
from headstats.report.freshness import report_inputs
from headstats.report.sections.context import ABSTRACT_WORDS, word_count
from headstats.report.writer import ReportWriter
from headstats.stats.compare import ANECDOTE_SEEDS, EQUIVALENT, MOVED, UNDETERMINED

SERIES_AXIS = {"given": "model (order given)", "params": "parameters", "step": "training step"}

PLAIN_NUMBER = FuncFormatter(lambda value, _: f"{value:g}")  # tick labels without exponents


def _label(result: Comparison, slug: str) -> str:
    name = result.names.get(slug, slug)
    return slug if name == slug else f"{slug} ({portable_name(name)})" if Path(name).name != slug else slug


def sentence(result: Comparison, other: str, *, first: bool = True) -> str:
    """The plain-language answer for one compared model, each count ordered by what happened most: the
    distribution's verdicts, then per head (same architecture), then the permutation test's count
    (significance, not size); ``first``: the sentence that names the margin and the unit."""
    rows = result.distances[result.distances["model_b"] == other]
    counts = rows["verdict"].value_counts()
    n = len(rows)
    labels = _labels(result)
    if not first:
        margin = "margin"
    elif result.spec.margin is None:
        margin = "[format-change margin](#the-margin)"
    else:
        margin = f"[margin](#the-margin) of {result.spec.margin:g}"
    unit = " dataset × score pairs" if first else ""
    lead_words = {
        EQUIVALENT: f"[equivalent](#verdicts) within the {margin}",
        MOVED: f"[moved beyond](#verdicts) the {margin}",
        UNDETERMINED: f"[undetermined](#verdicts) against the {margin}",
    }
    later_words = {EQUIVALENT: "equivalent within it", MOVED: "moved beyond it", UNDETERMINED: "undetermined"}
    order = sorted((v for v in (EQUIVALENT, MOVED, UNDETERMINED) if counts.get(v, 0)), key=lambda v: -counts[v])
    parts = [f"**{labels.get(other, other)} vs {labels.get(result.reference, result.reference)}**: "]
    parts.append(f"{lead_words[order[0]]} on {counts[order[0]]} of {n}{unit}")
    if len(order) > 1:
        parts.append(" (" + ", ".join(f"{later_words[v]} on {counts[v]}" for v in order[1:]) + ")")
    if result.same_architecture.get(other) and not result.heads.empty:
        parts.append("; " + heads_clause(result, other))
    elif not result.same_architecture.get(other):
        parts.append("; other architecture: distributions only")
    told = int(rows["moved"].sum())
    parts.append(f"; a [permutation test](#movement-test) tells the distributions apart on {told} of {n}")
    return "".join(parts) + "."


def series_sentence(result: Comparison) -> str:
    """The series' answer: which steps moved beyond the margin from the model before them."""
    steps, labels = result.steps, _labels(result)
    by = {"given": "in the order given", "params": "by parameter count", "step": "by training step"}
    moved = steps[steps["verdict"] == MOVED].drop_duplicates("step")
    named = [f"{labels.get(r.model_a, r.model_a)} → {labels.get(r.model_b, r.model_b)}" for r in moved.itertuples()]
    shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
    n_steps = steps["step"].nunique()
    return (
        f"**[Along the series](#along-the-series)** ({by[result.spec.series]}): {len(named)} of {n_steps} steps "
        f"moved beyond the margin from the model before on some dataset × score" + (f" ({shown})." if named else ".")
    )


def seeds_sentence(result: Comparison) -> str:
    """The seed yardstick's answer, and whether it is one."""
    d, seeds = result.distances, result.seeds
    counted = d[d["seed_max"].notna()]
    n_seeds = int(seeds["n_seeds"].min())
    anecdote = f", an anecdote, not a yardstick: fewer than {ANECDOTE_SEEDS}" if n_seeds < ANECDOTE_SEEDS else ""
    return (
        f"**[Seed replicates](#seed-replicates)** ({n_seeds} seeds{anecdote}): {int(counted['beyond_seeds'].sum())} "
        f"of {len(counted)} distances lie above the largest seed-vs-seed distance."
    )


def learning_sentence(result: Comparison) -> str:
    """Whether each stage of the fine-tuning chain learned, on its held-out examples: the stages that did
    in a word, any that did not (or have no interval) with their change; the numbers are in the body."""
    rows = _primary_learning(result)
    learned = [r.stage.upper() for r in rows.itertuples() if r.learned is True]
    others = [
        f"{r.stage.upper()} {r.metric} {r.change:+.3g} [{r.ci_low:+.3g}, {r.ci_high:+.3g}]"
        + (" (did not learn)" if r.learned is False else " (no interval)")
        for r in rows.itertuples()
        if r.learned is not True
    ]
    said = []
    if learned:
        said.append(f"{', '.join(learned)} improved on held-out examples")
    said.extend(others)
    return "**[Did each stage learn?](#did-each-stage-learn)** " + "; ".join(said) + "."


def _primary_learning(result: Comparison) -> pd.DataFrame:
    learning = result.learning
    seeds = learning["chain_seed"]
    first = learning[seeds.isna() | (seeds == seeds.min())]  # the chain of the lowest seed speaks
    return first[first["primary"]]


ABSTRACT_MODELS = 3  # compared models the abstract answers for; the section "Every compared model" has all


def abstract_models(result: Comparison) -> list[str]:
    """The compared models the abstract speaks of: all of them up to :data:`ABSTRACT_MODELS`; of a series
    only its end (its steps have their own sentence), then the models outside it."""
    if result.spec.series and result.series:
        chosen = [result.series[-1], *(o for o in result.others if o not in result.series)]
    else:
        chosen = list(result.others)
    return chosen[:ABSTRACT_MODELS]


def abstract(result: Comparison) -> str:
    """The answer: a sentence per compared model the abstract speaks of, whether each stage learned, the
    series and the seed yardstick, the margin's definition. Whatever would take it past
    :data:`ABSTRACT_WORDS` words goes, least needed first (the margin's definition, the seed sentence, the
    series sentence, then the later models' sentences): each has its section in the body."""
    shown = abstract_models(result)
    models = [sentence(result, other, first=i == 0) for i, other in enumerate(shown)]
    learning = [learning_sentence(result)] if not result.learning.empty else []
    series = [series_sentence(result)] if result.spec.series and not result.steps.empty else []
    seeds = [seeds_sentence(result)] if not result.seeds.empty else []
    margin = []
    if result.spec.margin is None:
        margin.append(
            f"The margin: how far {result.reference} itself moves when its prompts use the `{result.format_change}` "
            f"format instead of `{result.spec.prompt_format}`, on the same texts."
        )

    def text(models: list[str], optional: list[list[str]]) -> str:
        more = len(result.others) - len(models)
        tail = [f"[Every compared model](#every-compared-model): {more} more."] if more else []
        return "\n\n".join([*learning, *models, *tail, *(line for part in optional for line in part)])

    optional = [series, seeds, margin]
    while optional and word_count(text(models, optional)) > ABSTRACT_WORDS:
        optional.pop()
    while len(models) > 1 and word_count(text(models, optional)) > ABSTRACT_WORDS:
        models.pop()
    return text(models, optional)


def answer_text(result: Comparison) -> str:
    """The abstract's answer for the terminal: every compared model's sentence as plain text."""
    return "\n".join(plain(sentence(result, other, first=i == 0)) for i, other in enumerate(result.others))


def _labels(result: Comparison) -> dict[str, str]:
    if result.facts.empty:
        return {}
    return dict(zip(result.facts["slug"], result.facts["label"], strict=True))


def _interval(value: float, low: float, high: float, exact: bool = False) -> str:
    if not np.isfinite(value):
        return ""
    if exact:
        return f"{value:.3g} (exact)"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]" if np.isfinite(low) else f"{value:.3g}"


def p_value_text(p: float, floor: float) -> str:
    """A p-value as a report shows it: ``<= 0.01`` at the floor its permutations allow (no permutation
    reached the observed statistic: it says only that p is at most that), else its value."""
    if not np.isfinite(p):
        return ""
    return f"<= {floor:.2g}" if np.isfinite(floor) and p <= floor * (1 + 1e-9) else f"{p:.3g}"


def main_table(result: Comparison) -> pd.DataFrame:
    d = result.distances
    exact = d["exact"] if "exact" in d else pd.Series(False, index=d.index)
    return pd.DataFrame(
        {
            "compared": d["model_b"],
            "dataset": d["dataset"],
            "score": d["score"],
            "W1/IQR [90% CI]": [
                _interval(*v) for v in zip(d["w1_iqr"], d["w1_iqr_low"], d["w1_iqr_high"], exact, strict=True)
            ],
            "margin": d["margin"],
            **({"seeds (max)": d["seed_max"]} if "seed_max" in d else {}),
            "verdict": d["verdict"],
            "p (Holm)": [p_value_text(p, f) for p, f in zip(d["p_holm"], d["p_holm_min"], strict=True)],
            "W1 (raw)": d["w1"],
            "texts to decide": d["texts_to_decide"],
        }
    )


# Okabe and Ito's colours (their yellow left out: too faint on white), told apart with any colour vision:
# one per compared model, or per score, in a figure.
MODEL_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
# the verdict as the marker's fill, so that colour keeps one meaning (the model): filled moved beyond the
# margin, hollow equivalent within it, half-filled undetermined
VERDICT_FILL = {MOVED: "full", EQUIVALENT: "none", UNDETERMINED: "left"}
VERDICT_WORDS = {MOVED: "moved beyond the margin", EQUIVALENT: "equivalent within it", UNDETERMINED: "undetermined"}


def colours(keys: list[str]) -> dict[str, str]:
    """One distinguishable colour per key, in order (:data:`MODEL_COLOURS`; repeated past seven)."""
    return {key: MODEL_COLOURS[i % len(MODEL_COLOURS)] for i, key in enumerate(keys)}


def _marker(ax, x: float, y: float, colour: str, verdict: str, marker: str = "o", size: float = 6) -> None:
    fill = VERDICT_FILL.get(verdict, "none")
    ax.plot(
        [x], [y], linestyle="none", marker=marker, markersize=size, color=colour, markeredgecolor=colour,
        fillstyle=fill, markerfacecoloralt="white", markerfacecolor=colour if fill != "none" else "white", zorder=3,
    )  # fmt: skip


def _verdict_handles(verdicts: list[str]) -> list[Line2D]:
    return [
        Line2D([], [], linestyle="none", marker="o", markersize=6, color="#444444", fillstyle=VERDICT_FILL[v],
               markerfacecoloralt="white", markerfacecolor="#444444" if v != EQUIVALENT else "white",
               label=VERDICT_WORDS[v])
        for v in (MOVED, EQUIVALENT, UNDETERMINED) if v in verdicts
    ]  # fmt: skip


def _two_columns(left: list[Line2D], right: list[Line2D]) -> list[Line2D]:
    """Legend handles that a two-column legend (filled column by column) shows as ``left`` beside
    ``right``, the shorter padded with blank entries."""
    rows = max(len(left), len(right))
    blank = Line2D([], [], linestyle="none", label=" ")
    return [*left, *[blank] * (rows - len(left)), *right, *[blank] * (rows - len(right))]


def headline_figure(result: Comparison) -> Figure:
    """Distance over the reference's IQR with its interval per dataset × score, one colour per compared
    model (the verdict as the marker's fill), the margin as a grey band from 0, and the split-half noise
    of the texts as a small mark; the legend above the axes, off the data."""
    d = result.distances
    pairs = d[["dataset", "score"]].drop_duplicates().reset_index(drop=True)
    n_rows, others = len(pairs), result.others
    # rows dense enough that the figure, at most HEADLINE_HEIGHT_PX high, is shown wide enough for legible text
    fig = Figure(figsize=(7.5, 1.6 + 0.17 * n_rows * max(1, len(others)) ** 0.5), layout="constrained")
    ax = fig.subplots()
    step = 0.7 / max(len(others), 1)
    for i, pair in pairs.iterrows():
        here = d[(d["dataset"] == pair["dataset"]) & (d["score"] == pair["score"])]
        margin = here["margin"].iloc[0]
        if np.isfinite(margin):
            ax.barh(i, margin, height=0.8, color="#e4e4e4", zorder=0)
        noise = here["noise_iqr"].max()
        if np.isfinite(noise):
            ax.plot([noise], [i], marker="|", color="#555555", markersize=10, zorder=1)
    labels, colour = _labels(result), colours(others)
    for j, other in enumerate(others):
        rows = d[d["model_b"] == other].merge(pairs.reset_index(), on=["dataset", "score"])
        y = rows["index"].to_numpy() + (j - (len(others) - 1) / 2) * step
        x = rows["w1_iqr"].to_numpy()
        lo = np.clip(x - rows["w1_iqr_low"].to_numpy(), 0, None)
        hi = np.clip(rows["w1_iqr_high"].to_numpy() - x, 0, None)
        ax.errorbar(x, y, xerr=[lo, hi], fmt="none", ecolor=colour[other], elinewidth=0.9, zorder=2)
        for xi, yi, verdict in zip(x, y, rows["verdict"], strict=True):
            _marker(ax, xi, yi, colour[other], verdict)
    ax.set_yticks(range(n_rows), [f"{r.dataset} · {r.score}" for r in pairs.itertuples()])
    ax.set_ylim(n_rows - 0.5, -0.5)
    finite = d[["w1_iqr_high", "margin"]].to_numpy(dtype=float)
    top = np.nanmax(finite) if np.isfinite(finite).any() else 1.0
    linthresh = max(top / 1000, 1e-4)
    ax.set_xscale("symlog", linthresh=linthresh)
    right = top * 1.5 if top > 0 else 1
    # 0, then the decades of the log part: a tick inside the linear part would print over 0.
    decades = range(math.ceil(math.log10(linthresh)), math.floor(math.log10(right)) + 1)
    ax.xaxis.set_major_locator(FixedLocator([0.0, *(10.0**k for k in decades)]))
    ax.xaxis.set_major_formatter(PLAIN_NUMBER)  # 0.01, not 10^-2: a superscript is too small to read
    ax.set_xlim(0, right)
    ax.set_xlabel(f"W1 over {result.reference}'s IQR (90% interval)\ngrey band: margin; |: split-half noise")
    models = [Line2D([], [], color=colour[o], marker="s", linestyle="none", label=labels.get(o, o)) for o in others]
    fig.legend(handles=_two_columns(models, _verdict_handles(list(d["verdict"].unique()))),
               loc="outside upper center", ncol=2, frameon=False)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    return fig


def series_scores(result: Comparison) -> list[str]:
    """The scores the series figure draws: the first as many as it has colours (the table has all)."""
    return list(dict.fromkeys(result.distances["score"]))[: len(MODEL_COLOURS)]


def series_figure(result: Comparison) -> Figure:
    """W1/IQR from the reference against the series' position (one panel per dataset, one colour per
    score of :func:`series_scores` throughout; the verdict as the marker's fill), the margin per score
    dashed, the seed yardstick's largest distance dotted; the legend above the panels, off the data."""
    facts = result.facts
    d = result.distances[result.distances["score"].isin(series_scores(result))]
    pos = facts.set_index("slug")["position"].astype(float)
    rows = d[d["model_b"].isin(result.series)].assign(x=lambda f: f["model_b"].map(pos))
    if result.reference in pos.index:  # the reference is the series' point at distance 0
        start = rows.drop_duplicates(["dataset", "score"]).assign(
            model_b=result.reference, x=pos[result.reference], w1_iqr=0.0, w1_iqr_low=0.0, w1_iqr_high=0.0,
            verdict=EQUIVALENT,
        )  # fmt: skip
        rows = pd.concat([start, rows], ignore_index=True)
    datasets = list(dict.fromkeys(rows["dataset"]))
    colour = colours(list(dict.fromkeys(rows["score"])))
    fig = Figure(figsize=(7.5, 2.6 * len(datasets) + 0.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(datasets), 1, sharex=True))
    for ax, dataset in zip(axes, datasets, strict=True):
        here = rows[rows["dataset"] == dataset]
        for score, line in here.groupby("score", sort=False):
            line = line.sort_values("x")
            below = np.clip(line["w1_iqr"] - line["w1_iqr_low"], 0, None)
            above = np.clip(line["w1_iqr_high"] - line["w1_iqr"], 0, None)
            ax.errorbar(line["x"], line["w1_iqr"], yerr=[below, above], color=colour[score], lw=1, elinewidth=0.6)
            for xi, yi, verdict in zip(line["x"], line["w1_iqr"], line["verdict"], strict=True):
                _marker(ax, xi, yi, colour[score], verdict, size=5)
            if np.isfinite(line["margin"].iloc[0]):
                ax.axhline(line["margin"].iloc[0], color=colour[score], ls="--", lw=0.8)
            if "seed_max" in line and np.isfinite(line["seed_max"].iloc[0]):
                ax.axhline(line["seed_max"].iloc[0], color=colour[score], ls=":", lw=0.8)
        ax.set_title(dataset, loc="left")
        ax.set_ylabel("W1 / reference IQR")
        ax.grid(alpha=0.3)
    scores = [Line2D([], [], color=c, marker="s", linestyle="none", label=s) for s, c in colour.items()]
    lines = [Line2D([], [], color="#444444", ls="--", lw=0.8, label="margin")]
    if "seed_max" in rows and rows["seed_max"].notna().any():
        lines.append(Line2D([], [], color="#444444", ls=":", lw=0.8, label="largest seed-vs-seed"))
    handles = scores + lines + _verdict_handles(list(rows["verdict"].unique()))
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 4), frameon=False)
    ticks = rows.drop_duplicates("model_b")
    labels = _labels(result)
    axes[-1].set_xticks(ticks["x"], [labels.get(m, m) for m in ticks["model_b"]], rotation=30, ha="right")
    axes[-1].set_xlabel(SERIES_AXIS[result.spec.series])
    if result.spec.series == "params":
        axes[-1].set_xscale("log")
        axes[-1].xaxis.set_minor_formatter(NullFormatter())  # the models' own ticks only
    return fig


def _write_series(writer: ReportWriter, result: Comparison) -> None:
    if not result.spec.series or result.steps.empty:
        return
    writer.heading("Along the series")
    writer.figure(
        series_figure(result),
        "series",
        "Distance from the reference (W1 over its IQR, 90% interval) along the series, one panel per dataset and a "
        "colour per score (filled: moved beyond the margin, hollow: equivalent, half-filled: undetermined); dashed: "
        "the margin; dotted: the largest seed-vs-seed distance when replicates are given."
        + (
            f" The first {len(series_scores(result))} of the {result.distances['score'].nunique()} scores; the "
            "table below has every one."
            if result.distances["score"].nunique() > len(series_scores(result))
            else ""
        ),
    )
    steps = result.steps
    labels = _labels(result)
    table = pd.DataFrame(
        {
            "step": steps["step"],
            "from": steps["model_a"].map(lambda m: labels.get(m, m)),
            "to": steps["model_b"].map(lambda m: labels.get(m, m)),
            "dataset": steps["dataset"],
            "score": steps["score"],
            "W1/IQR [90% CI]": [
                _interval(*v) for v in zip(steps["w1_iqr"], steps["w1_iqr_low"], steps["w1_iqr_high"], strict=True)
            ],
            "margin": steps["margin"],
            "verdict": steps["verdict"],
        }
    )
    writer.text(
        "Per step, the distance between each model and the one before it, in the reference's IQR, against the same "
        "margin and by the same rule as the distances from the reference: a step *moved beyond the margin* changed "
        "the heads more than the margin; *equivalent* steps are each as small as the margin, though several of them "
        "can add up to more."
    )
    writer.table(table, "step_verdicts", floatfmt=".3g", collapsed=f"The {len(table)} per-step verdicts")


def _write_every_model(writer: ReportWriter, result: Comparison) -> None:
    if len(abstract_models(result)) == len(result.others):
        return
    writer.heading("Every compared model")
    writer.text("\n\n".join(sentence(result, other) for other in result.others))


def _write_learning(writer: ReportWriter, result: Comparison) -> None:
    if result.learning.empty:
        return
    writer.heading("Did each stage learn?")
    writer.text(
        "The models are checkpoints of `headstats finetune` chains: per stage, its metrics on held-out examples at "
        "the stage's first and last checkpoint, the paired change (end − start) with a 95% interval from resampling "
        "the examples, and whether the interval excludes 0 in the direction training pushes (`primary`: the metric "
        "that decides the stage). A stage that did not learn moved the heads without evidence that it changed "
        "the model's behaviour."
    )
    shown = ["chain", "chain_seed", "stage", "metric", "primary", "start", "end", "change", "ci_low",
             "ci_high", "n", "learned"]  # fmt: skip
    writer.table(result.learning[[c for c in shown if c in result.learning]], "learning", floatfmt=".3g")


def _write_seeds(writer: ReportWriter, result: Comparison) -> None:
    if result.seeds.empty:
        return
    writer.heading("Seed replicates")
    seeds = result.seeds
    n_seeds = int(seeds["n_seeds"].min())
    writer.text(
        "The yardstick of training noise: W1/IQR (in the reference's IQR) between every pair of seed replicates, "
        "per dataset and score, with seeds as the unit: one distance per pair of seeds, summarised by its median "
        "and largest value. A compared model's distance lies *beyond seeds* when its lower bound exceeds the "
        "largest replicate-vs-replicate distance (its own replicates when given, else the reference's)."
        + (
            f" With {n_seeds} seeds this is an anecdote, not a yardstick: one pair of seeds shows what one other "
            f"seed did, not how far seeds spread; {ANECDOTE_SEEDS} or more make one."
            if n_seeds < ANECDOTE_SEEDS
            else ""
        )
    )
    writer.table(seeds, "seed_yardstick", floatfmt=".3g", collapsed="Seed-vs-seed distances per dataset and score")


def _write_methods(writer: ReportWriter, result: Comparison, out: Path) -> None:
    spec, d = result.spec, result.distances
    n_tests, n_perm = int(d["p_value"].notna().sum()), int(d["n_perm"].max())
    with writer.appendix():
        writer.heading("The margin", 3)
        if spec.margin is None:
            writer.text(
                f"The margin of each dataset × score is a yardstick measured on the same texts: W1/IQR between "
                f"{result.reference} with its prompts in the `{spec.prompt_format}` format (the comparison's) and in "
                f"the `{result.format_change}` format. A compared model that moves less than that is as close to the "
                "reference as a change of prompt format."
            )
        else:
            writer.text(f"The margin is {spec.margin:g} W1/IQR for every dataset and score, as given.")
        writer.heading("Verdicts", 3)
        writer.text(
            f"Equivalence by the interval-inclusion rule, which is two one-sided tests (TOST) at {spec.alpha:g} each: "
            f"the {1 - 2 * spec.alpha:.0%} paired cluster-bootstrap interval of W1/IQR ({spec.n_resamples} "
            "resamples of texts; the lower bound is the basic bootstrap's less twice more the bootstrap's estimate "
            "of W1's upward bias, which the bootstrap underestimates near zero; the upper the wider of the basic "
            f"and percentile bounds) wholly below the margin is *{EQUIVALENT}*, wholly above it *{MOVED}*, "
            f"else *{UNDETERMINED}*, "
            "with the texts that would decide: n × (half-width / |distance − margin|)², if the distance stayed as "
            "observed (for sizing a rerun, not a result). At a true distance equal to the margin, simulations of "
            "40 to 128 paired texts called it either way at most 5% of the time, within Monte Carlo error "
            "(`benchmarks/compare_margin_size.py`). W1/IQR: the Wasserstein-1 distance between the two "
            "models' score distributions over texts, layers and heads, divided by the reference's interquartile "
            "range of the score, so that scores on different scales read alike. A distance marked *exact* (a score "
            "the same on every text in both models) has no interval and is compared with the margin as it is."
        )
        writer.heading("Movement test", 3)
        floor = float(d["p_holm_min"].max())
        writer.text(
            f"Paired permutation test over texts that swaps the two models' labels within each text; {n_perm} "
            f"permutations per test, chosen so that Holm over this report's family of {n_tests} tests can reach "
            f"0.01 (a p-value is at least 1/({n_perm} + 1), a Holm-adjusted one at least {floor:.2g}: shown as "
            f"`<= {floor:.2g}`, no permutation reached the observed distance). 'Told apart' means Holm-adjusted "
            "p ≤ 0.01. With enough texts every pair of models differs: the verdict against the margin says whether "
            "it matters."
        )
        writer.heading("Yardsticks", 3)
        if not result.yardstick.empty:
            y = result.yardstick
            shown = ["dataset", "score", "w1_iqr", "w1_iqr_low", "w1_iqr_high", "exact", "w1", "n_seq_a"]
            table = y[[c for c in shown if c in y]].rename(columns={"n_seq_a": "texts"})
            writer.text(
                f"The format change ({result.reference}: `{spec.prompt_format}` vs `{result.format_change}`), "
                "W1/IQR with its 90% interval (none where `exact`):"
            )
            writer.table(table, "format_change", collapsed="Format-change distances")
        writer.text(
            "The split-half mark (|) in the figure is W1/IQR between two random halves of the reference's texts "
            "(95th percentile): resampling noise at half the texts, a description, never a decision."
        )
        write_head_rule(writer, result)
        write_constant_texts(writer, result)
        left = {s: r for other in result.others for s, r in result.left_out.get(other, {}).items()}
        if left:
            writer.heading("Scores left out", 3)
            writer.text("\n\n".join(f"`{s}`: {r}." for s, r in sorted(left.items())))
        writer.heading("Rebuild", 3)
        # every folder as the tables record it (<local>/<folder>, ~/...): no local path in what is shared
        models = " ".join(
            shlex.quote(portable_name(result.names.get(m, m))) for m in [result.reference, *result.others]
        )
        data = ",".join(map(portable_name, spec.data)) + (" --self-comparison" if spec.self_comparison else "")
        writer.text(
            f"`headstats compare {models} --data {data} --limit {spec.limit} --out {portable_name(out)}`; the "
            f"score tables are under `{portable_name(spec.scores_dir or out / 'results')}` "
            f"(`{COMPARED}/` and `{FORMAT_CHANGE}/`) and a rerun reuses them."
        )
        if not result.facts.empty:
            columns = ["slug", "label", "role", "replicate_of", "params", "stage", "step", "position"]
            facts = result.facts[[c for c in columns if c in result.facts]]
            writer.table(facts, "models", collapsed="The models: roles, parameters, steps, positions in the series")
        writer.table(result.distances, "distances", collapsed="Every distance, test and verdict (all columns)")
        if not result.steps.empty:
            writer.table(result.steps, "steps", collapsed="Every step's distance and verdict (all columns)")
        if not result.replicates.empty:
            writer.table(result.replicates, "seed_pairs", collapsed="Every seed-vs-seed distance (all columns)")


def write_comparison(result: Comparison, out: Path, *, analysis: str | None = None, title: str | None = None) -> Path:
    """Write the comparison's report to ``out`` (``title``, default: what is compared); returns
    ``out/index.html``."""
    spec = result.spec
    out_dir = store.ensure_writable(out)
    title = title or f"{result.reference} compared with {', '.join(result.others)}"
    texts = int(result.distances["n_seq_a"].max())
    subtitle = (
        f"Reference: {_label(result, result.reference)}; compared: "
        + ", ".join(_label(result, o) for o in result.others)
        + f"; {texts} texts per dataset ({', '.join(result.datasets)}), prompt format `{spec.prompt_format}`."
    )
    writer = ReportWriter(out_dir, title, dpi=spec.dpi, subtitle=subtitle)
    root = Path(spec.scores_dir) if spec.scores_dir else out / "results"
    # the study file, the tables, model folders and data files as records name them, wherever the text names them
    writer.hide(
        root, *([analysis] if analysis else []), *(p for p in [*result.names.values(), *spec.data] if os.sep in p)
    )
    if root.resolve().is_relative_to(out_dir.resolve()):  # the score tables (default OUT/results) are not foreign
        writer.elsewhere = (root.resolve().relative_to(out_dir.resolve()).as_posix(),)
    writer.abstract(abstract(result))
    writer.headline(
        headline_figure(result),
        "distances",
        "Distance of each compared model (one colour each) from the reference per dataset × score, with the margin "
        "(grey band) and the split-half noise (|); filled: moved beyond the margin, hollow: equivalent within it, "
        "half-filled: undetermined.",
    )
    writer.main_table(
        main_table(result),
        "verdicts",
        legend="W1 over the reference's IQR with its 90% interval, the margin, the verdict and the Holm-adjusted "
        "permutation p-value.",
        full_legend="verdicts",
    )
    _write_every_model(writer, result)
    _write_learning(writer, result)
    _write_series(writer, result)
    _write_seeds(writer, result)
    write_heads(writer, result)
    _write_methods(writer, result, out)
    if (root / COMPARED).is_dir():
        writer.inputs = report_inputs(root, spec.settings(), analysis, report=writer.out)
    return writer.write()
