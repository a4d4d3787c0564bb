"""The pruning frontier's report when speed is timed in paired rounds (``timing = "paired"``): each
point's speed-up at every timed setting (a long prefill, decoding after a long KV cache) with its 95%
interval, beside its arithmetic ceiling and the KV-cache bytes it saves, against the certified
accuracy bound on the held-out questions. The baseline point times the unpruned model against an
identical copy of itself, the control whose interval should contain 1.

The accuracy side (drops, Tango bounds, the fixed-sequence certified shares) is the one of
:mod:`headstats.report.frontier`; the speed side reads finished rows
(:func:`headstats.stats.speed.against_ceiling`).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from headstats.io.assets import portable_name
from headstats.jobs.frontier_plan import Frontier, check_recorded_settings, pruned_points
from headstats.report.figure import score_style
from headstats.report.frontier import (
    LEGEND,
    family_size,
    hide_folders,
    read_points,
    record_inputs,
    run_notes,
    settings_line,
)
from headstats.report.sections.context import fit_sentences, term
from headstats.report.writer import ReportWriter, anchor_slug
from headstats.specs import FrontierSpec
from headstats.stats.frontier import CONFIDENCE, add_family_bounds, both_certified_shares, unfinished
from headstats.stats.speed import against_ceiling

MIB = 2**20


def _interval(row: pd.Series) -> str:
    return f"x{row['speedup']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"


def _setting_order(speed: pd.DataFrame) -> list[str]:
    """Settings in a reading order: prefills, then decodes, each by context."""
    keys = speed.drop_duplicates("setting").sort_values(["phase", "context", "batch"], ascending=[False, True, True])
    return list(keys["setting"])


def _headline(speed: pd.DataFrame, points: pd.DataFrame, max_drop: float) -> Figure:
    """Per model and setting: the speed-up with its interval against the held-out drop's upper bound."""
    models, settings = sorted(speed["model"].unique()), _setting_order(speed)
    fig = Figure(figsize=(4.2 * len(settings), 3.4 * len(models) + 0.5), layout="constrained")
    axes = fig.subplots(len(models), len(settings), squeeze=False)
    bounds = points.groupby(["model", "score", "share"])["upper"].max().rename("bound").reset_index()
    for i, model in enumerate(models):
        for j, setting in enumerate(settings):
            ax = axes[i][j]
            sel = speed[(speed["model"] == model) & (speed["setting"] == setting)].merge(
                bounds, on=["model", "score", "share"], how="left"
            )
            for score, rows in sel.groupby("score"):
                rows = rows.sort_values("share")
                style = score_style(score.split("/")[0]) if score != "none" else {"color": "grey", "marker": "s"}
                ax.errorbar(
                    100 * rows["bound"],
                    rows["speedup"],
                    yerr=[rows["speedup"] - rows["low"], rows["high"] - rows["speedup"]],
                    color=style["color"],
                    marker=style["marker"],
                    linestyle="--" if score.endswith("kv-group") else "-",
                    label="identical copy" if score == "none" else score,
                    capsize=2,
                )
                for _, r in rows.iterrows():
                    ax.annotate(
                        f"{r['share']:.0%}",
                        (100 * r["bound"], r["speedup"]),
                        fontsize=7,
                        xytext=(3, 3),
                        textcoords="offset points",
                    )
            ax.axvline(100 * max_drop, color="grey", linestyle=":", linewidth=1)
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_title(f"{model}: {setting}", fontsize=9)
            ax.set_xlabel("accuracy drop's one-sided 95% upper bound (points)", fontsize=8)
            ax.set_ylabel("speed-up (95% interval)", fontsize=8)
    # one legend for every panel, above them: inside an axes it covered the points
    handles = {label: handle for ax in axes.flat for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncol=len(handles), fontsize=8,
               frameon=False)  # fmt: skip
    return fig


def _main_table(speed: pd.DataFrame, points: pd.DataFrame, settings: list[str]) -> pd.DataFrame:
    rows = []
    pruned = points[points["score"] != "none"]
    for (model, score, share), group in pruned.groupby(["model", "score", "share"]):
        first = group.iloc[0]
        row = {"model": model, "score": score, "share": share, "heads removed": int(first["n_removed"])}
        mine = speed[(speed["model"] == model) & (speed["score"] == score) & (speed["share"] == share)]
        for setting in settings:
            at = mine[mine["setting"] == setting]
            if len(at):
                row[f"{setting}: x [95%]"] = _interval(at.iloc[0])
                row[f"{setting}: ceiling"] = at.iloc[0]["ceiling"]
        decode = mine[mine["phase"] == "decode"].sort_values("context")
        if len(decode):
            last = decode.iloc[-1]
            row[f"KV saved at {int(last['context'])} (MiB)"] = last["kv_bytes_saved"] / MIB
        for task, at in group.groupby("task"):
            r = at.iloc[0]
            row[f"{task} drop [upper] (pts)"] = f"{100 * r['drop']:+.2f} [{100 * r['upper']:.2f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def _times(row) -> str:
    """A speed-up in words: how many times as fast, its 95% interval and the ceiling."""
    return (
        f"{row.speedup:.2f} times as fast ({row.low:.2f}-{row.high:.2f}; {term('ceiling', 'roof')} {row.ceiling:.2f})"
    )


def _abstract(speed: pd.DataFrame, points: pd.DataFrame, certified: pd.DataFrame, frontier: Frontier) -> str:
    spec = frontier.prune
    sizes = points[points["score"] == "none"].groupby("task")["n"].min()
    questions = ", ".join(f"{int(n):,} {t} questions" for t, n in sizes.items())
    parts = [
        "This report removes a growing share of a model's attention heads for good and measures whether the "
        f"smaller model still answers {questions} as well, and how much faster it runs on long prompts and "
        f"long generations. The largest share of heads {term('certified', 'certified')} to cost at most "
        f"{spec.max_drop:g} point of accuracy, per model and the score that chose the heads:"
    ]
    everywhere = certified[certified["task"] == "all"]
    for model, group in everywhere.groupby("model"):
        parts.append(f"{model}: " + ", ".join(f"{r.score} {r.certified_share:.0%}" for r in group.itertuples()) + ".")
    if everywhere.empty:
        parts.append("none can be read yet: no model has run every share.")
    control = speed[speed["score"] == "none"]
    steady = [model for model, group in control.groupby("model") if bool(group["contains_one"].all())]
    if steady:
        one = len(steady) == 1
        parts.append(
            f"Timed against an identical copy of itself (the control), {' and '.join(steady)} "
            f"{'shows' if one else 'show'} no speed-up, as {'it' if one else 'they'} should: every "
            f"{term('95% interval', 'accuracy-interval')} contains 1."
        )
    for model in sorted(set(control["model"]) - set(steady)):
        parts.append(
            f"Timed against an identical copy of itself (the control), {model} shows a speed-up where there is "
            "none: the machine's drift is in these numbers (see the speed at each setting)."
        )
    measured = speed[speed["score"] != "none"]
    rules = []
    for (model, score), group in measured.groupby(["model", "score"]):
        top = group[group["share"] == group["share"].max()]
        cells = "; ".join(f"{r.setting}: {_times(r)}" for r in top.itertuples())
        rule, _, unit = score.partition("/")
        how = "as whole KV groups " if unit == "kv-group" else ""
        share = top["share"].iloc[0]
        at = points[(points["model"] == model) & (points["score"] == score) & (points["share"] == share)]
        cost = "".join(
            f"; {r.task} accuracy drops {100 * r.drop:.1f} points (at most {100 * r.upper:.1f})"
            for r in at.itertuples()
        )
        sentence = f"{model} with {share:.0%} of its heads removed {how}by {rule}: {cells}{cost}."
        rules.append((model, -float(top["speedup"].prod()), sentence))  # ranks as the geometric mean
    # Each model's rule that paid most at its largest share first, then each one's next: the abstract keeps
    # the leading sentences, so every model is named before any is named twice.
    ranked = []
    for _, mine in itertools.groupby(sorted(rules), key=lambda rule: rule[0]):
        ranked.extend((rank, model, sentence) for rank, (model, _, sentence) in enumerate(mine))
    parts.extend(sentence for _, _, sentence in sorted(ranked))
    return fit_sentences(parts)  # the leading parts within the abstract's words; the body has every number


def _relocated(speed: pd.DataFrame) -> bool:
    """Whether every row was timed with the weights moved to fresh memory before each run (rows timed
    before the protocol did so lack the column)."""
    return "relocated" in speed and bool(speed["relocated"].fillna(False).astype(bool).all())


def _machine(speed: pd.DataFrame, runs: dict) -> str:
    lines = []
    for model, info in runs.items():
        machines = [m for m in info.get("timing", []) if m] or [info["run"]["machine"]]
        mine = speed[speed["model"] == model]
        loads = pd.concat([mine["load_before"], mine["load_after"]]) if "load_before" in mine else pd.Series([])
        load = f"; 1-minute load average during the rounds {loads.min():.1f}-{loads.max():.1f}" if len(loads) else ""
        described = " and ".join(
            f"CPU {m.get('cpu')} ({m.get('cores')} usable cores, shared with other jobs), torch threads "
            f"{m.get('torch_threads')}, device {m.get('device')}"
            for m in machines
        )
        lines.append(f"{model}: {described}{load}.")
    return " ".join(lines)


def build_paired_report(frontier: Frontier, out: str | os.PathLike | None = None) -> Path:
    """Write the report of a frontier timed in paired rounds (see the module docstring) to ``out``
    (default: its ``report`` directory)."""
    spec = frontier.prune
    check_recorded_settings(frontier)  # points run under other settings are not reported as the file's
    points, speed, runs = read_points(frontier.results)
    if points.empty:
        raise ValueError(f"no finished frontier points under {str(frontier.results)!r}: run the frontier first")
    speed = against_ceiling(speed[speed["role"] == "paired"].reset_index(drop=True))
    family = family_size(frontier)
    points = add_family_bounds(points, family)
    certified = pd.DataFrame(columns=["model", "score", "task", "certified_share", "certified_share_fw"])
    if (points["score"] != "none").any():
        certified = both_certified_shares(points, spec.max_drop / 100, spec.shares)
    partial = unfinished(points, list(runs), len(pruned_points(spec)))
    certified = certified[~certified["model"].isin(partial)]
    settings = _setting_order(speed)
    writer = ReportWriter(
        out or frontier.report,
        frontier.description or f"Pruning frontier: {frontier.name}",
        dpi=90,
        subtitle="Models: " + ", ".join(f"`{m}`" for m in sorted(runs)) + ".",
    )
    hide_folders(writer, frontier)
    abstract = _abstract(speed, points, certified, frontier)
    if partial:
        done = ", ".join(f"{m} {n} of {len(pruned_points(spec))}" for m, n in partial.items())
        abstract += (
            f"\n\nNot finished: pruned points done: {done} (no share is read until all are); "
            f"`headstats frontier {portable_name(frontier.path)}` resumes."
        )
    writer.abstract(abstract)
    writer.headline(
        _headline(speed, points, spec.max_drop / 100),
        "speedup_vs_bound",
        "Measured speed-up (paired rounds, bars: its 95% interval) against the held-out accuracy drop's one-sided "
        "95% upper bound, per selection rule (dashed: whole KV groups); labels are the shares of heads removed; the "
        f"dotted line is {spec.max_drop:g} point; grey at 0 is the unpruned model timed against an identical copy.",
    )
    writer.main_table(
        _main_table(speed, points, settings),
        "frontier",
        legend="Per model, rule and share: speed-up [95% interval] and ceiling per timed setting, KV-cache bytes saved "
        f"per sequence at the longest cache, and each task's drop [upper bound] in points; certified = bound <= "
        f"{spec.max_drop:g} point.",
        full_legend=anchor_slug(LEGEND),
    )
    writer.heading("Largest certified share per rule", 2)
    writer.text(
        "Shares are tested in increasing order; the first whose bound exceeds the tolerated drop ends the sequence "
        f"(no adjustment for the number of shares). 'fw': at one-sided {(1 - CONFIDENCE) / family:.2g} (Bonferroni "
        f"over the {family} planned (model, score, unit, task) sequences)."
    )
    if certified.empty:
        writer.text("No model has run every point yet.")
    else:
        writer.table(certified, "certified_shares")
    _speed_section(writer, speed, runs, spec)
    writer.heading("Accuracy per task", 2)
    acc_cols = ["model", "score", "share", "task", "n", "accuracy", "drop", "upper", "upper_fw", "lost", "gained"]
    writer.table(points[acc_cols].sort_values(["model", "task", "score", "share"]), "accuracy")
    with writer.appendix():
        table = points if "eval_seconds" in points else points.assign(eval_seconds=0.0)  # a baseline alone
        run_notes(writer, table, runs, frontier.results, settings_line(frontier))
    record_inputs(writer, frontier)
    writer.write()
    return Path(writer.out) / "index.html"


def _speed_section(writer: ReportWriter, speed: pd.DataFrame, runs: dict, spec: FrontierSpec) -> None:
    """Every timed setting: how the rounds were run and read, and their table."""
    writer.heading("Speed at each setting", 2)
    writer.text(
        "Paired, interleaved rounds (the unpruned model and the candidate on the same random prompts, the order "
        "reversing every round, one warm-up round discarded"
        + (", each model's weights moved to fresh memory before every run" if _relocated(speed) else "")
        + "); the speed-up is the geometric mean of the rounds' "
        f"time ratios with a t interval on their logarithms; rounds stop at a half-width of {spec.time_target:.0%} "
        f"or after {spec.time_cap:g} s per setting (then the width reached is reported; `resolved` says which). "
        "Ceiling: the ratio of FLOPs (prefill) or of bytes a decode step reads (weights plus the KV cache); "
        "share_of_ceiling_gain: (speed-up - 1) / (ceiling - 1); above 1, the removed heads took a larger share of "
        "the time than of the arithmetic (on a CPU, attention given a mask computes every key of the square: "
        f"see {term('the roof', 'roof')}). Timings on a shared machine: " + _machine(speed, runs)
    )
    cols = [
        "model",
        "score",
        "share",
        "setting",
        "speedup",
        "low",
        "high",
        "rounds",
        "resolved",
        "ceiling",
        "ceiling_basis",
        "share_of_ceiling_gain",
        "kv_bytes_saved",
        "reference_seconds_median",
        "candidate_seconds_median",
        "torch_threads",
        "load_before",
        "load_after",
    ]
    writer.table(speed[[c for c in cols if c in speed]].sort_values(["model", "setting", "score", "share"]), "speed")
