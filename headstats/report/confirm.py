"""The report of a pre-registered confirmatory run (:mod:`headstats.jobs.confirm`): per claim, the
held-out questions, the drop's upper bound on every computation path and the verdict, with the
claims as the file stated them and every path's run time. Built from the paths' Parquet results
alone; a path not run yet is reported as missing, never as a pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headstats.io import store
from headstats.io.assets import portable_name
from headstats.jobs.confirm import ConfirmPlan, amendments, claims_table, left_to_run
from headstats.report.freshness import report_inputs
from headstats.report.registered import record_name, registration_line
from headstats.report.sections.context import ABSTRACT_WORDS, Context, term, word_count
from headstats.report.writer import ReportWriter
from headstats.specs import ConfirmSection
from headstats.stats import coverage
from headstats.stats.confirm import claim_bounds, claim_verdicts, path_agreement, path_baselines


def path_rows(plan: ConfirmPlan) -> dict[str, pd.DataFrame]:
    """Path name -> the per-question rows under its results folder (paths not run yet are left out)."""
    out = {}
    for path in plan.paths:
        root = plan.results_of(path)
        if root.is_dir() and any(p.kind == "interventions" for p in store.find_partitions(root)[0]):
            out[path.name] = store.read_interventions(root)
    return out


PLAIN_QUESTION = (
    "An earlier study found attention heads that language models seemed to lose at almost no cost in accuracy; "
    "this run checks those findings on test questions the study never saw."
)


def run_times(plan: ConfirmPlan) -> pd.DataFrame:
    """Per path, model and machine (:func:`headstats.stats.coverage.run_times`): the timed
    passes, their wall and CPU hours and minutes per pass; a path resumed on another machine gives one
    row per machine. Empty (with its columns) before any pass."""
    frames = []
    for path in plan.paths:
        root = plan.results_of(path)
        table = coverage.run_times(Context(root).passes) if root.is_dir() else None
        if table is not None and len(table):
            frames.append(table.assign(path=path.name))
    if not frames:
        return pd.DataFrame(columns=["path", "model", "passes_timed", "hours", "cpu_hours", "min_per_pass", "machine"])
    out = pd.concat(frames, ignore_index=True)
    return out[["path", *(c for c in out.columns if c not in ("path", "task", "dtype"))]]


PATH_MARKERS = ("o", "s", "^", "D", "v", "P")
VERDICT_COLORS = {"confirmed": "#1b7837", "not confirmed": "#b2182b", "incomplete": "#555555"}
# Paths are told apart by hues the verdicts do not use: a green or red path would read as a verdict.
PATH_COLORS = ("#1f77b4", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2")


def verdict_label(row: pd.Series, drop: float) -> str:
    """A claim's verdict in a few words, for the line under its name in the headline figure."""
    if row["verdict"] == "confirmed":
        return f"confirmed: worst bound {row['worst_bound']:.2f} ≤ {drop:g}"
    if row["verdict"] == "not confirmed":
        return f"not confirmed: bound {row['worst_bound']:.2f} > {drop:g}"
    return f"incomplete: {row['paths']} paths run"


def headline_figure(
    bounds: pd.DataFrame, paths: list[str], drop: float, verdicts: pd.DataFrame | None = None
) -> Figure:
    """Per claim (one row each), every planned path's drop with a bar to its one-sided upper bound,
    beside the tolerance: a claim is confirmed when every bar ends left of the dotted line. A planned
    path not run yet is written out as such, ending at the tolerance. With ``verdicts``
    (:func:`~headstats.stats.confirm.claim_verdicts`), each claim's name has its verdict under it, in
    the verdict's colour."""
    claims = list(dict.fromkeys(bounds["claim"]))
    fig = Figure(figsize=(8.6, 0.9 + 0.75 * len(claims)))
    ax = fig.subplots()
    colors = [PATH_COLORS[i % len(PATH_COLORS)] for i in range(len(paths))]
    step = 0.7 / max(len(paths), 1)
    labelled: set[str] = set()
    for i, claim in enumerate(claims):
        for j, path in enumerate(paths):
            hit = bounds[(bounds["claim"] == claim) & (bounds["path"] == path)]
            if hit.empty:
                continue  # not planned on this path (the fused kernel computes no probabilities)
            y = i + (j - (len(paths) - 1) / 2) * step
            row = hit.iloc[0]
            if pd.isna(row["drop_upper"]):
                ax.annotate(  # left of the tolerance line, inside the axes: its row has no bar to cover
                    f"{path}: not run yet",
                    (drop, y),
                    fontsize=7,
                    color=colors[j],
                    va="center",
                    ha="right",
                    xytext=(-4, 0),
                    textcoords="offset points",
                )
                continue
            ax.errorbar(
                row["drop"],
                y,
                xerr=[[0], [row["drop_upper"] - row["drop"]]],
                color=colors[j],
                marker=PATH_MARKERS[j % len(PATH_MARKERS)],
                capsize=3,
                linestyle="none",
                label=None if path in labelled else path,
            )
            labelled.add(path)
    ax.axvline(drop, color="grey", linestyle=":", linewidth=1.2)
    ax.axvline(0.0, color="grey", linewidth=0.6)
    said = verdicts.set_index("claim") if verdicts is not None else None
    labels = [claim if said is None else f"{claim}\n{verdict_label(said.loc[claim], drop)}" for claim in claims]
    ax.set_yticks(np.arange(len(claims)), labels=labels, fontsize=8)
    if said is not None:
        for tick, claim in zip(ax.get_yticklabels(), claims, strict=True):
            tick.set_color(VERDICT_COLORS[said.loc[claim, "verdict"]])
    ax.set_ylim(len(claims) - 0.5, -0.5)
    ax.set_xlabel(
        f"accuracy drop (points; bar to the one-sided upper bound; dotted: the {drop:g}-point tolerance)", fontsize=8
    )
    if labelled:
        # Below the axes, clear of the bars and notes.
        ax.legend(
            fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=len(paths), title="path", title_fontsize=7
        )
    fig.tight_layout()
    return fig


def _worst_lines(bounds: pd.DataFrame, verdicts: pd.DataFrame) -> str:
    """Per decided or part-run claim, its worst path so far: the bound that decides it."""
    parts = []
    for verdict in ("not confirmed", "confirmed", "incomplete"):
        names = verdicts.loc[verdicts["verdict"] == verdict, "claim"]
        ran = bounds[bounds["claim"].isin(names) & bounds["drop_upper"].notna()]
        if ran.empty:
            continue
        worst = ran.loc[ran.groupby("claim", sort=False)["drop_upper"].idxmax()]
        said = ", ".join(f"{r.claim} up to {r.drop_upper:.2f} points on {r.path}" for r in worst.itertuples())
        so_far = " so far" if verdict == "incomplete" else ""
        parts.append(f"{verdict.capitalize()}, the largest bound on the accuracy lost{so_far}: {said}.")
    return "\n\n" + " ".join(parts) if parts else ""


def _what_it_can_show(writer: ReportWriter, plan: ConfirmPlan, rows: dict[str, pd.DataFrame], claims) -> None:
    sec = plan.section
    table = path_baselines(rows, claims, confidence=sec.confidence, metric=sec.metric)
    legend = writer.note(
        "Reading the table of what this run can show",
        "Per model and planned path: n_questions and n_clusters, the held-out questions and the source documents "
        "they come from (the resampling unit); baseline, the unzeroed model's accuracy (%) on them with its 95% "
        "Wilson interval (baseline_low, baseline_high; questions taken as independent); chance, the accuracy of "
        "guessing among each question's endings; floor, the one-sided upper bound of the drop (points) at the "
        "claims' level when zeroing changes no answer at all. Empty rows: paths not run yet.",
    )
    writer.heading("What this run can show")
    ran = table[table["n_questions"].notna()]
    floor = f"{ran['floor'].max():.2f}" if len(ran) else "n/a"
    writer.text(
        f"Per model and path: the held-out questions, the unzeroed model's accuracy against chance, and the floor, "
        f"the bound a claim gets when zeroing changes no answer ({floor} point here, against a {sec.drop:g}-point "
        "tolerance). Answers that flip both ways raise it: `bound_if_no_drop` under "
        f"[every claim on every path](#every-claim-on-every-path) is the bound at a claim's own churn with no net "
        f"drop ([full legend](#{legend}); paths, clusters and run time: [methods and caveats](#methods-and-caveats))."
    )
    writer.table(table, "what_this_run_can_show", floatfmt=".3g")


def _paths_apart(
    writer: ReportWriter, rows: dict[str, pd.DataFrame], claims: pd.DataFrame, bounds: pd.DataFrame, bounds_at: str
) -> None:
    """The answers the path alone moves, beside those a claim's zeroing moves (``bounds``, under the
    heading anchored ``bounds_at``): the yardstick of its churn."""
    table = path_agreement(rows, claims)
    if not len(table):
        return
    writer.heading("The paths against each other")
    model_of = claims.set_index("claim")["model"]
    ran = bounds[bounds["n_questions"].notna()]
    zeroing = ran.assign(model=ran["claim"].map(model_of), moved=ran["lost"] + ran["gained"])
    alone = table.assign(moved=table["lost"] + table["gained"])
    said = [
        f"{model} {_span(zeroing.loc[zeroing['model'] == model, 'moved'])} by zeroing a claim's heads, "
        f"{_span(group['moved'])} by switching paths alone"
        for model, group in alone.groupby("model", sort=False)
        if (zeroing["model"] == model).any()
    ]
    writer.text(
        (
            f"Answers turned right or wrong (lost plus gained): {'; '.join(said)} (per claim and path: "
            f"[every claim on every path](#{bounds_at}); per pair of paths: the table below). "
            if said
            else ""
        )
        + "Per model and pair of paths whose baselines ran, before anything is zeroed: the questions both answered, "
        "the answers that differ, the questions the first path (`path`) answers right and the second (`against`) "
        "wrong (`lost`) or the reverse (`gained`), the accuracy change from the first to the second (points), and "
        "the median and largest difference of the gold ending's log-likelihood (nats). Each claim is tested against "
        "its own path's baseline, so this churn is not part of any bound; it is the size of a rounding change, "
        "beside which to read a claim's."
    )
    writer.table(table, "paths_against_each_other", floatfmt=".3g")


def _span(counts: pd.Series) -> str:
    low, high = int(counts.min()), int(counts.max())
    return f"{low}" if low == high else f"{low}-{high}"


def _methods(
    writer: ReportWriter,
    plan: ConfirmPlan,
    rows: dict[str, pd.DataFrame],
    times: pd.DataFrame,
    left: pd.DataFrame,
    decided: bool,
) -> None:
    sec = plan.section
    writer.note(
        "Computation paths",
        "Each path is one attention kernel (explicit: softmax of the scores, which the scores reading attention "
        "probabilities need; fused: PyTorch's scaled_dot_product_attention) with one dtype of the model body "
        f"({', '.join(sec.dtypes)}), run as its own sweep with the kernel pinned, against its own baseline on the "
        "same questions. The path alone changes some answers (rounding), so a claim must hold on every path: an "
        "intersection-union test, which needs no adjustment over the paths.",
    )
    per_doc = [
        int(frame[frame["score"] == "baseline"].groupby(["model", "document"]).size().max())
        for frame in rows.values()
        if "document" in frame.columns and frame["document"].notna().any()
    ]
    if per_doc:
        writer.note(
            "Clusters",
            f"Questions that come from the same source document (a video or article of {sec.task}) are one "
            f"cluster: at most {max(per_doc)} held-out questions share a document. Bounds are taken at the "
            "effective number of questions (the design effect of the paired differences, at least 1).",
        )
    with writer.appendix():
        writer.heading("Run time", 3)
        writer.text(
            "Per path, model and machine: the timed passes, their wall and CPU hours and minutes per pass (a bf16 "
            "path is fast only on a CPU with bf16 units or a GPU), passes that reused the baseline's answers, "
            "passes resumed from batches saved before a pass's time was kept (`part_timed`: their hours leave "
            "those batches out; a pass resumed since counts every session that ran it), and the last one's end. "
            "A bf16 path stays on the kind of machine that began it: its numbers depend on the machine's bf16 "
            "kernels, and a sweep refuses to join batches or a baseline that other kernels computed."
        )
        writer.table(times, "run_times", floatfmt=".3g")
        if len(left):
            writer.heading("What is left to run", 3)
            writer.text(
                "Per path and model with passes left: the passes left of its sweep (the baseline and each claimed "
                "point; target 0 takes the baseline's answers), the sequences their stopped passes saved (a run "
                "resumes from them), and where they may run. A bf16 path that began must finish on bf16 kernels like "
                "those that began it; elsewhere it runs again whole. `headstats run --dry-run` on a machine names what "
                "that machine may not run."
                + (
                    " Every claim is decided: each of these passes belongs to a claim that a path already failed "
                    "(it is not confirmed whatever its other paths show), so none of them can change a verdict."
                    if decided
                    else ""
                )
            )
            writer.table(left, "left_to_run")


METRIC_WORDS = {
    "correct": "raw accuracy (an answer is right when its ending has the highest total log-likelihood)",
    "correct_norm": "length-normalised accuracy (the highest log-likelihood per character of the ending)",
}


def _post_hoc_metric(
    writer: ReportWriter, plan: ConfirmPlan, rows: dict[str, pd.DataFrame], claims: pd.DataFrame, decided: pd.DataFrame
) -> None:
    """The verdicts under the other accuracy (length-normalised for raw, raw for normalised): a
    sensitivity analysis chosen after the results, labelled so, which changes no verdict."""
    sec = plan.section
    other = next(m for m in METRIC_WORDS if m != sec.metric)
    if not rows or not all(other in frame.columns for frame in rows.values()):
        return
    bounds = claim_bounds(rows, claims, drop=sec.drop, confidence=sec.confidence, metric=other)
    verdicts = claim_verdicts(bounds, [p.name for p in plan.paths], drop=sec.drop)
    table = decided[["claim", "verdict", "worst_bound"]].merge(
        verdicts[["claim", "verdict", "worst_bound"]], on="claim", suffixes=(f" {sec.metric}", f" {other}")
    )
    flipped = table[table[f"verdict {sec.metric}"] != table[f"verdict {other}"]]
    writer.heading(f"Post hoc: the verdicts under {other}")
    writer.text(
        f"A sensitivity analysis chosen after the results, not part of the pre-registered rule: the same bounds "
        f"and rule with {METRIC_WORDS[other]} in place of the decided {METRIC_WORDS[sec.metric]}. "
        + (
            f"It changes {len(flipped)} of {len(table)} verdicts ({', '.join(flipped['claim'])}); the decided "
            "verdicts stand, and these say how much they depend on the choice of accuracy."
            if len(flipped)
            else f"It changes none of the {len(table)} verdicts."
        )
    )
    writer.table(table, "post_hoc_metric", floatfmt=".3g")


def write_confirmation(plan: ConfirmPlan, *, progress: bool = True) -> Path:
    """Write ``plan.report`` (index.html, summary.md, tables/*.csv); returns index.html."""
    sec = plan.section
    claims = claims_table(plan)
    rows = path_rows(plan)
    bounds = claim_bounds(rows, claims, drop=sec.drop, confidence=sec.confidence, metric=sec.metric)
    changed = amendments(plan)
    verdicts = claim_verdicts(bounds, [p.name for p in plan.paths], drop=sec.drop)
    times = run_times(plan)
    left = left_to_run(plan)
    k = len(claims)
    writer = ReportWriter(plan.report, plan.description or plan.name)
    writer.hide(plan.path, plan.results)  # named as records name them wherever the text names them
    # No claim incomplete: what is left belongs to claims a path already failed (a confirmed one ran them all).
    decided = not verdicts["verdict"].value_counts().get("incomplete", 0)
    answer = _answer(plan, bounds, verdicts, times, left, changed, bool(rows), k)
    worst = _worst_lines(bounds, verdicts)
    # Many claims: their bounds stay in the verdict table rather than overflow the abstract.
    fits = word_count(answer + worst) <= ABSTRACT_WORDS
    writer.abstract(answer + (worst if fits else " Each claim's deciding bound: the verdict table."))
    writer.headline(
        headline_figure(bounds, [p.name for p in plan.paths], sec.drop, verdicts),
        "bounds",
        f"Each claim's drop on every path it runs on, with a bar to its one-sided upper bound at level "
        f"{(1 - sec.confidence) / k:.3g}; confirmed when every bar ends at most {sec.drop:g} point (dotted line). "
        f"Under each claim, its verdict{' so far' if len(left) else ''}.",
    )
    _verdict_table(writer, verdicts, sec, k)
    _what_it_can_show(writer, plan, rows, claims)
    _the_claims(writer, plan, claims, changed)
    bounds_at = writer.heading("Every claim on every path")
    writer.text(
        "Per (claim, path): paired questions and their clusters, baseline and zeroed accuracy (%), the realised % of "
        "heads zeroed, the answers lost and gained, the design effect, the drop with its one-sided upper bound "
        "(Tango's score bound at the effective number of questions), `bound_if_no_drop` (the bound the same number "
        "of changed answers gives when as many are gained as lost: how much of the tolerance churn alone takes) "
        "and whether it certifies the claim."
    )
    writer.table(bounds, "bounds", floatfmt=".3g")
    _paths_apart(writer, rows, claims, bounds, bounds_at)
    _post_hoc_metric(writer, plan, rows, claims, verdicts)
    _methods(writer, plan, rows, times, left, decided)
    if plan.results.is_dir():
        writer.inputs = report_inputs(plan.results, plan.section.settings(), plan.path, report=writer.out)
    return writer.write()


def _answer(
    plan: ConfirmPlan,
    bounds: pd.DataFrame,
    verdicts: pd.DataFrame,
    times: pd.DataFrame,
    left: pd.DataFrame,
    changed: list[str] | None,
    ran_any: bool,
    k: int,
) -> str:
    """The abstract's answer: how many of the ``k`` claims were confirmed, on what, and by which rule."""
    sec = plan.section
    counts = verdicts["verdict"].value_counts()
    ran = int(bounds["n_questions"].notna().sum())
    decided = not counts.get("incomplete", 0)
    held_out = f"{sec.limit:,}" if sec.limit else "all"
    answer = (
        f"{k} of the study's {term('certified', 'certified')} zeroing shares (claims), "
        f"stated before this run, were tested on {held_out} held-out {sec.task} questions under "
        f"{len(plan.paths)} computation paths (attention kernel x model dtype): {int(counts.get('confirmed', 0))} "
        f"confirmed, {int(counts.get('not confirmed', 0))} not confirmed, {int(counts.get('incomplete', 0))} "
        f"incomplete ({ran} of {len(bounds)} claim-path runs done; {times['hours'].sum():.1f} hours of passes"
        f"{'; [what is left](#what-is-left-to-run)' if len(left) else ''}"
        f"{', which cannot change a verdict' if len(left) and decided else ''}). "
        f"A claim is {term('confirmed', 'confirmed')} when the {term('upper bound', 'bound')} of its accuracy drop is "
        f"at most {sec.drop:g} point on every path, at level {(1 - sec.confidence) / k:.3g} each "
        f"({term('Bonferroni', 'bonferroni')} over the {k} claims)."
    )
    answer = PLAIN_QUESTION + " " + registration_line(changed, plan.results, ran_any, more="under the claims") + answer
    if changed:
        answer = answer.replace("stated before this run", "stated before this run and amended after it")
    return answer


def _verdict_table(writer: ReportWriter, verdicts: pd.DataFrame, sec: ConfirmSection, k: int) -> None:
    """The main table, one row per claim, with its one-line legend and the full one."""
    legend = writer.note(
        "Reading the verdict table",
        f"One row per claim. held_out_n: the held-out questions paired with each path's baseline (the fewest "
        f"over its paths). level: each bound's one-sided level, (1 - {sec.confidence:g}) / {k} (Bonferroni over "
        f"the {k} claims). bound <path>: the one-sided upper bound of the accuracy drop on that path (points; "
        "Tango's score bound at the effective number of questions given the source-document clusters); "
        "zeroed_pct <path>: the % of heads the claim's threshold zeroed there (calibrated on the held-out "
        "questions' own scores); empty where the claim was not planned on that path (a score that reads the "
        "attention probabilities runs on the explicit kernel only) or has not run yet. paths: paths run of those "
        f"planned. worst_bound: the largest bound over the paths that ran. verdict: confirmed when every planned "
        f"path ran and its bound is at most {sec.drop:g} point; not confirmed when a path that ran exceeds it; "
        "incomplete otherwise (confirmed: empty).",
    )
    writer.main_table(
        verdicts,
        "verdicts",
        legend=(
            f"Per claim: held-out questions, per path the upper bound of the drop (points, one-sided level "
            f"{(1 - sec.confidence) / k:.3g}) and the % of heads zeroed, and the verdict (confirmed: every bound at "
            f"most {sec.drop:g}; a path not run yet leaves the claim incomplete)."
        ),
        full_legend=legend,
        floatfmt=".3g",
    )


def _the_claims(writer: ReportWriter, plan: ConfirmPlan, claims: pd.DataFrame, changed: list[str] | None) -> None:
    """The claims as the file states them, with the held-out questions they are tested on and any
    amendment made after the first pass."""
    sec = plan.section
    writer.heading("The claims as amended after the run" if changed else "The claims as stated before the run")
    writer.text(
        f'From `{portable_name(plan.path)}`. Metric: {METRIC_WORDS[sec.metric]} (`metric = "{sec.metric}"`). '
        f"Held-out questions: a seeded random sample (seed {sec.seed}) of "
        f"{sec.limit or 'all'} {sec.task} questions that share neither content nor source document with the "
        f"exploratory run's sample (limit {sec.exclude_limit}, seed {sec.exclude_seed}). Thresholds are calibrated "
        "on the held-out questions' own scores, as the exploratory run calibrated on its own; a claim whose score "
        "reads the attention probabilities runs on the explicit kernel only."
    )
    if changed:
        writer.text(
            f"Changed after the first pass recorded the keys in `{record_name(plan.results)}` "
            f"(an amendment, not pre-registered): {'; '.join(changed)}."
        )
    writer.table(claims.assign(paths=claims["paths"].map(", ".join)), "claims", floatfmt=".3g")


__all__ = ["path_rows", "run_times", "write_confirmation"]
