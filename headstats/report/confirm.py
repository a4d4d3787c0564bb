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
from headstats.jobs.confirm import ConfirmPlan, claims_table
from headstats.report.freshness import report_inputs
from headstats.report.sections.context import Context
from headstats.report.writer import ReportWriter
from headstats.stats.confirm import claim_bounds, claim_verdicts


def path_rows(plan: ConfirmPlan) -> dict[str, pd.DataFrame]:
    """Path name -> the per-question rows under its results folder (paths not run yet are left out)."""
    out = {}
    for path in plan.paths:
        root = plan.results_of(path)
        if root.is_dir() and any(p.kind == "interventions" for p in store.find_partitions(root)[0]):
            out[path.name] = store.read_interventions(root)
    return out


def run_times(plan: ConfirmPlan) -> pd.DataFrame:
    """Per path: the timed passes, their wall hours and CPU hours, and the machine they ran on."""
    rows = []
    for path in plan.paths:
        root = plan.results_of(path)
        if not root.is_dir():
            rows.append({"path": path.name, "passes_timed": 0, "hours": 0.0, "cpu_hours": 0.0, "machine": ""})
            continue
        passes = Context(root).passes
        timed = passes[passes["seconds"].notna()]
        machines = {str((m or {}).get("cpu") or (m or {}).get("device") or "") for m in timed["machine"]}
        rows.append(
            {
                "path": path.name,
                "passes_timed": len(timed),
                "hours": timed["seconds"].sum() / 3600,
                "cpu_hours": timed["cpu_seconds"].sum() / 3600,
                "machine": "; ".join(sorted(m for m in machines if m)),
            }
        )
    return pd.DataFrame(rows)


PATH_MARKERS = ("o", "s", "^", "D", "v", "P")


def headline_figure(bounds: pd.DataFrame, paths: list[str], drop: float) -> Figure:
    """Per claim (one row each), every planned path's drop with a bar to its one-sided upper bound,
    beside the tolerance: a claim is confirmed when every bar ends left of the dotted line. A planned
    path not run yet is written out as such at the tolerance."""
    claims = list(dict.fromkeys(bounds["claim"]))
    fig = Figure(figsize=(8.6, 0.9 + 0.75 * len(claims)))
    ax = fig.subplots()
    colors = [f"C{i}" for i in range(len(paths))]
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
                ax.annotate(
                    f"{path}: not run yet",
                    (drop, y),
                    fontsize=7,
                    color=colors[j],
                    va="center",
                    xytext=(4, 0),
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
    ax.set_yticks(np.arange(len(claims)), labels=claims, fontsize=8)
    ax.set_ylim(len(claims) - 0.5, -0.5)
    ax.set_xlabel(
        f"accuracy drop (points; bar to the one-sided upper bound; dotted: the {drop:g}-point tolerance)", fontsize=8
    )
    if labelled:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="path", title_fontsize=7)
    fig.tight_layout()
    return fig


def write_confirmation(plan: ConfirmPlan, *, progress: bool = True) -> Path:
    """Write ``plan.report`` (index.html, summary.md, tables/*.csv); returns index.html."""
    sec = plan.section
    claims = claims_table(plan)
    bounds = claim_bounds(path_rows(plan), claims, drop=sec.drop, confidence=sec.confidence)
    verdicts = claim_verdicts(bounds, [p.name for p in plan.paths], drop=sec.drop)
    times = run_times(plan)
    k = len(claims)
    writer = ReportWriter(store.ensure_writable(plan.report), plan.description or plan.name)
    counts = verdicts["verdict"].value_counts()
    ran = int(bounds["n_questions"].notna().sum())
    writer.abstract(
        f"Do the exploratory study's certified zeroing shares hold on questions it never saw? {k} claims, "
        f"stated before this run, were tested on {sec.limit or 'all'} held-out {sec.task} questions under "
        f"{len(plan.paths)} computation paths (attention kernel x model dtype): {int(counts.get('confirmed', 0))} "
        f"confirmed, {int(counts.get('not confirmed', 0))} not confirmed, {int(counts.get('incomplete', 0))} "
        f"incomplete ({ran} of {len(bounds)} claim-path runs done; {times['hours'].sum():.1f} hours of passes). "
        f"A claim is confirmed when the one-sided upper bound of its paired drop is at most {sec.drop:g} point on "
        f"every path, at level {(1 - sec.confidence) / k:.3g} each (Bonferroni over the {k} claims)."
    )
    writer.headline(
        headline_figure(bounds, [p.name for p in plan.paths], sec.drop),
        "bounds",
        f"Each claim's drop on every path it runs on, with a bar to its one-sided upper bound at level "
        f"{(1 - sec.confidence) / k:.3g}; confirmed when every bar ends at most {sec.drop:g} point (dotted line).",
    )
    writer.main_table(
        verdicts,
        "verdicts",
        legend=(
            f"Per claim: held-out questions, per path the upper bound of the drop (points, one-sided level "
            f"{(1 - sec.confidence) / k:.3g}) and the % of heads zeroed, and the verdict (confirmed: every bound at "
            f"most {sec.drop:g}; a path not run yet leaves the claim incomplete)."
        ),
        floatfmt=".3g",
    )
    writer.heading("The claims as stated before the run")
    writer.text(
        f"From `{plan.path.as_posix()}`. Held-out questions: a seeded random sample (seed {sec.seed}) of "
        f"{sec.limit or 'all'} {sec.task} questions that share neither content nor source document with the "
        f"exploratory run's sample (limit {sec.exclude_limit}, seed {sec.exclude_seed}). Thresholds are calibrated "
        "on the held-out questions' own scores, as the exploratory run calibrated on its own; a claim whose score "
        "reads the attention probabilities runs on the explicit kernel only."
    )
    writer.table(claims.assign(paths=claims["paths"].map(", ".join)), "claims", floatfmt=".3g")
    writer.heading("Every claim on every path")
    writer.text(
        "Per (claim, path): paired questions and their clusters, baseline and zeroed accuracy (%), the realised % of "
        "heads zeroed, the answers lost and gained, the design effect, the drop with its one-sided upper bound "
        "(Tango's score bound at the effective number of questions) and whether it certifies the claim."
    )
    writer.table(bounds, "bounds", floatfmt=".3g")
    writer.heading("Run time")
    writer.table(times, "run_times", floatfmt=".3g")
    if plan.results.is_dir():
        writer.inputs = report_inputs(plan.results, plan.section.settings(), plan.path)
    return writer.write()


__all__ = ["path_rows", "run_times", "write_confirmation"]
