"""The report of a skipping study (``headstats run analyses/adaptive_embedded.toml``): each selection's
cost against the full model at every share, the certified shares, per-prompt against static, and,
where the study's folder holds them, the speed of skipping (``benchmarks/bench_skip.py`` written to
``<results>/speed``). Every number is computed in :mod:`headstats.stats.adaptive`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from headstats.io import store
from headstats.jobs.adaptive_plan import AdaptiveStudy, read_rows
from headstats.report.freshness import report_inputs
from headstats.report.writer import ReportWriter
from headstats.stats import adaptive as A

COLOURS = {"per-prompt": "#1f77b4", "static": "#ff7f0e", "random": "#7f7f7f", "oracle": "#2ca02c"}
MARKERS = {"per-prompt": "o", "static": "s", "random": "^", "oracle": "D"}
UNITS = {"correct_norm": "accuracy drop (points)", "loss": "loss increase (nats/token)"}


def family_size(study: AdaptiveStudy) -> int:
    """The fixed sequences read: models x tasks x selections."""
    return len(study.model_names()) * len(study.adaptive.tasks) * len(A.SELECTIONS)


def frontier_figure(table: pd.DataFrame) -> Figure:
    """One panel per (model, task): each selection's cost against share, bars the 95% interval, the
    dotted line the margin."""
    models, tasks = sorted(table["model"].unique()), list(dict.fromkeys(table["task"]))
    fig = Figure(figsize=(3.6 * len(tasks), 3.0 * len(models)))
    axes = fig.subplots(len(models), len(tasks), squeeze=False)
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            cells = table[(table["model"] == model) & (table["task"] == task)]
            for k, selection in enumerate(A.SELECTIONS):
                rows = cells[cells["selection"] == selection].sort_values("share")
                if rows.empty:
                    continue
                x = 100 * rows["share"] + (k - 1.5) * 0.8  # side by side at each share
                ax.errorbar(
                    x,
                    rows["drop"],
                    yerr=[rows["drop"] - rows["low"], rows["high"] - rows["drop"]],
                    color=COLOURS[selection],
                    marker=MARKERS[selection],
                    label=selection + (" (upper bound)" if selection == "oracle" else ""),
                    capsize=2,
                    linestyle="-" if selection != "oracle" else "--",
                )
            if not cells.empty:
                ax.axhline(float(cells["margin"].iloc[0]), color="grey", linestyle=":", linewidth=1)
                ax.set_ylabel(UNITS[cells["metric"].iloc[0]], fontsize=8)
            ax.axhline(0.0, color="grey", linewidth=0.6)
            ax.set_title(f"{model}: {task}", fontsize=9)
            ax.set_xlabel("heads skipped (%)", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _share_list(shares: list[float]) -> str:
    return "none" if not shares else ", ".join(f"{s:.0%}" for s in shares)


def answer(table: pd.DataFrame, certified: pd.DataFrame, versus: pd.DataFrame, speed: pd.DataFrame | None) -> str:
    """The abstract: the certified shares per selection, what the measured costs say, and the speed."""
    if certified.empty:
        return "No (model, task) has all its items measured yet: every cell below is interim."
    best = certified.groupby("selection")["certified_share"].max()
    done = table.merge(certified[["model", "task"]].drop_duplicates(), on=["model", "task"])
    n = done.groupby(["model", "task"])["n"].first()
    smallest = table[table["share"] == table["share"].min()]

    def reach(selection: str) -> str:
        share = best.get(selection, 0.0)
        return f"up to {share:.0%}" if share > 0 else f"not even at {smallest['share'].iloc[0]:.0%}"

    lead = "No selection is" if not (best > 0).any() else "Per-prompt and static selections are"
    lines = [
        f"{lead} certified to keep a task within its margin (1 point of accuracy, 0.02 nats of loss): "
        f"per-prompt {reach('per-prompt')} of heads skipped, static {reach('static')}; {n.min()} to {n.max()} items "
        "per task give bounds wider than the margins."
    ]
    loss = smallest[smallest["metric"] == "loss"]
    parts = []
    for (model, task), cells in loss.groupby(["model", "task"], sort=False):
        cost = cells.set_index("selection")["drop"]
        parts.append(
            f"{model} on {task}, +{cost['per-prompt']:.2f} nats/token per prompt against +{cost['static']:.2f} static "
            f"and +{cost['random']:.2f} random (oracle +{cost['oracle']:.2f})"
        )
    wins, losses = (versus["low"] > 0).sum(), (versus["high"] < 0).sum()
    lines.append(
        (f"At {smallest['share'].iloc[0]:.0%} of heads: " + "; ".join(parts) + ". " if parts else "")
        + f"Per-prompt keeps more than static in {wins} of {len(versus)} cells, less in {losses}."
    )
    if speed is not None and not speed.empty:
        mine = speed[speed["contestant"] == "per-prompt"]
        decode, whole = mine[mine["phase"] == "decode"], mine[mine["phase"] == "prefill+decode"]
        lines.append(
            f"Skipping makes decode x{decode['speedup'].min():.2f} to x{decode['speedup'].max():.2f} as fast as the "
            f"dense model (prompt and continuation, decision included: x{whole['speedup'].min():.2f} to "
            f"x{whole['speedup'].max():.2f}); {(decode['low'] > 1).sum()} of {len(decode)} decode intervals lie "
            "above 1."
        )
    return "\n\n".join(lines)


def main_table(table: pd.DataFrame, certified: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task, selection): the cost at each share as ``drop [family-wise upper]``, and the certified share."""
    out = []
    for (model, task, selection), rows in table.groupby(["model", "task", "selection"], sort=False):
        row = {"model": model, "task": task, "selection": selection}
        loss = rows["metric"].iloc[0] == "loss"
        for _, cell in rows.sort_values("share").iterrows():
            fmt = "{:+.3f} [{:.3f}]" if loss else "{:+.1f} [{:.1f}]"
            row[f"{cell['share']:.0%}"] = fmt.format(cell["drop"], cell["upper_fw"])
        hit = certified[
            (certified["model"] == model) & (certified["task"] == task) & (certified["selection"] == selection)
        ]
        share = hit["certified_share"].iloc[0]
        row["certified"] = f"{share:.0%}" if share == share else f"interim ({rows['n'].iloc[0]} items)"
        out.append(row)
    return pd.DataFrame(out)


def read_speed(results: Path) -> pd.DataFrame | None:
    path = Path(results) / "speed" / "speed.csv"
    return pd.read_csv(path) if path.is_file() else None


def unfinished_cells(study: AdaptiveStudy, rows: pd.DataFrame) -> tuple[dict, dict]:
    """(items planned per (model, task), items measured where fewer than planned)."""
    spec = study.adaptive
    planned = {(m, t): n for m in study.model_names() for t, n in zip(spec.tasks, spec.limits, strict=True)}
    done = rows.groupby(["model", "task"])["item"].nunique().to_dict()
    return planned, {key: done.get(key, 0) for key, n in planned.items() if done.get(key, 0) < n}


def build_adaptive_report(study: AdaptiveStudy, out: str | Path | None = None) -> Path:
    """Write the report of ``study``'s results to ``out`` (default: its ``report`` folder)."""
    rows = read_rows(study)
    if rows.empty:
        raise ValueError(f"no measured items under {str(study.results)!r}: run the study first")
    spec = study.adaptive
    margins = {"correct_norm": spec.max_drop, "loss": spec.loss_margin}
    family = family_size(study)
    table = A.cells(rows, margins, family, seed=spec.seed)
    order = {t: i for i, t in enumerate(spec.tasks)}
    table = table.sort_values(["model", "task"], key=lambda c: c.map(order) if c.name == "task" else c, kind="stable")
    planned, unfinished = unfinished_cells(study, rows)
    certified = A.certified_shares(table)
    finished = ~certified.apply(lambda r: (r["model"], r["task"]) in unfinished, axis=1)
    certified = certified.assign(certified_share=certified["certified_share"].where(finished))
    versus = A.versus_static(rows, seed=spec.seed)
    speed = read_speed(study.results)
    writer = ReportWriter(
        out or study.report,
        study.description or f"Heads skipped per prompt: {study.name}",
        dpi=90,
        subtitle="Models: " + ", ".join(f"`{m}`" for m in study.model_names()) + ".",
    )
    writer.hide(study.path, study.results)
    abstract = answer(table, certified.dropna(subset=["certified_share"]), versus, speed)
    if unfinished:
        left = ", ".join(f"{m} {t} {n} of {planned[(m, t)]}" for (m, t), n in unfinished.items())
        abstract += f"\n\nInterim (no share read): {left} items; `headstats run {study.path.as_posix()}` resumes."
    writer.abstract(abstract)
    writer.headline(
        frontier_figure(table),
        "frontier",
        "Each selection's cost against the full model on the same items, at each share of heads skipped "
        "(accuracy drop in points, or loss increase in nats per token); bars are 95% cluster-bootstrap intervals, "
        "the dotted line the margin. The oracle sees the continuation it is scored on: an upper bound, not a method.",
    )
    writer.main_table(
        main_table(table, certified),
        "selections",
        legend="Per model, task and selection: the cost at each share as estimate [one-sided upper bound at "
        f"family-wise 95%, {family} sequences], and the largest share certified within the margin.",
    )
    writer.heading("Per-prompt against static")
    writer.text(
        "At equal share, how much more of the full model's result per-prompt selection keeps than the static set "
        "(accuracy points, or nats per token of loss; positive = per-prompt better), with a 95% cluster-bootstrap "
        "interval, and the share of the per-prompt heads the static set also holds."
    )
    writer.table(versus.merge(A.overlap(rows), on=["model", "task", "share"]), "per_prompt_vs_static")
    if speed is not None:
        writer.heading("Speed")
        writer.text(
            "Speed-ups over the dense model (geometric mean of paired rounds, 95% t interval) of the statically "
            "pruned model and of per-prompt skipping (its scored prompt pass, the choice and the cut included in "
            "its prefill), batch 1; every round's times are in the results' speed folder."
        )
        writer.table(speed, "speed")
    _appendix(writer, study, table)
    writer.inputs = report_inputs(
        study.results, {**study.tables["models"], **study.tables["adaptive"]}, study.path, report=writer.out
    )
    writer.write()
    return Path(writer.out) / "index.html"


def _appendix(writer: ReportWriter, study: AdaptiveStudy, table: pd.DataFrame) -> None:
    """Every cell, and the methods."""
    spec = study.adaptive
    with writer.appendix():
        writer.heading("Every cell", 3)
        writer.text(
            "Per (model, task, selection, share): items, clusters, the full model's and the selection's mean "
            "(accuracy in %, loss in nats per token), the cost with its 95% interval, its one-sided 95% bound "
            "(`upper`) and the family-wise one (`upper_fw`), and for accuracy the answers lost and gained, the "
            "design effect of the clusters and the items a run would need to certify at the observed rates "
            "(`n_to_certify`, empty where none would)."
        )
        writer.table(table, "cells")
        writer.heading("Methods", 3)
        writer.text(
            f"Score `{spec.score}` ranks heads; every selection takes round(share x heads) {spec.unit}s. "
            "The prompt runs "
            "with every head; the chosen heads are zeroed at the continuation's positions only (what skipping them "
            "computes; tests/test_skip.py). Static: the lowest mean scores over "
            f"{spec.calibration_limit} calibration items per task, disjoint from the measured ones and their "
            "documents. Random: seeded per item. Oracle: scored on the whole text, continuation included. "
            "PIQA and HellaSwag: acc_norm; Wikipedia: mean loss of the "
            f"{spec.continuation_tokens} tokens after the first {spec.prompt_tokens}. Certified: a fixed sequence over "
            "increasing shares at Bonferroni family-wise 95% (Tango's score bound for accuracy at the effective number "
            "of items; a cluster bootstrap for loss). Design and margins were registered before the first item "
            f"(the results' `{store.REGISTRATION_FILE}`)."
        )
