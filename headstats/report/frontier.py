"""The pruning frontier's report (``reports/prune-embedded/``), built from the results folder of
:mod:`headstats.jobs.frontier` alone (no model is loaded).

Per model, score and share: the held-out accuracy drop on each task against the unpruned model on
the same questions, with Tango's one-sided 95% upper bound (:func:`headstats.stats.paired.drop_bound`);
the measured prefill and decode speed-ups (pruned / unpruned tokens/s, side by side); the KV-cache and
parameter ratios; and the roof, the share of FLOPs and bytes the removed heads carried. The largest
certified share of a score is read as a fixed-sequence test over increasing shares (it stops at the
first share not certified), per task and on both tasks at once; beside it the same reading
adjusted for the report's family of sequences (Bonferroni over every planned model, score, unit and
task). A point that removes whole KV groups is read as a selection rule of its own, named
``<score>/kv-group`` where the score's name stands; its KV-cache saving is the main table's
"KV saved" column (bytes per token of context, per sequence).
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from headstats.io.assets import portable_name
from headstats.io.machine import describe_machine
from headstats.jobs.frontier_plan import (
    Frontier,
    check_recorded_settings,
    pruned_points,
    read_record,
    recorded_settings,
)
from headstats.report.figure import score_style
from headstats.report.freshness import report_inputs
from headstats.report.sections.context import ABSTRACT_WORDS, term, word_count
from headstats.report.writer import ReportWriter, anchor_slug
from headstats.specs import FrontierSpec
from headstats.stats import frontier as frontier_stats
from headstats.stats.frontier import CONFIDENCE

LEGEND = "Reading the main table"  # the appendix heading the main table links to


def read_points(results: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(points: one row per model, score, share, task with accuracy and drop bound, and one per model
    at share 0; speed: one row per model, score, share, batch; runs: model -> run.json and baseline)."""
    frames, speed, runs = [], [], {}
    for root in sorted(Path(results).glob("model=*")):
        model = root.name.removeprefix("model=")
        base_file = root / "points" / "baseline.parquet"
        if not base_file.is_file():
            continue
        base = pd.read_parquet(base_file)
        base_info = read_record(root / "points" / "baseline.json")
        run = read_record(root / "run.json")
        runs[model] = {"run": run, "baseline": base_info, "machines": {}, "timing": []}
        speed.extend(_speed_rows(base_info["speed"], model, "none", 0.0))
        frames.append(frontier_stats.baseline_rows(base).assign(model=model, score="none", share=0.0))
        for info_file in sorted((root / "points").glob("*.json")):
            info = base_info if info_file.stem == "baseline" else read_record(info_file)
            # a point written before points recorded their machine ran on the run's
            machine = describe_machine(info.get("machine", run.get("machine")))
            runs[model]["machines"].setdefault(machine, []).append(info_file.stem)
            # the machine its speed was measured on: the last round of stage time's, else the point's
            timing = info.get("timed", {}).get("machine") or info.get("machine", run.get("machine"))
            if timing not in runs[model]["timing"]:
                runs[model]["timing"].append(timing)
            if info_file.stem == "baseline":
                continue
            answers = pd.read_parquet(info_file.with_suffix(".parquet"))
            rule = selection_name(info["score"], info.get("unit", "head"))
            speed.extend(_speed_rows(info["speed"], model, rule, info["share"]))
            drops = frontier_stats.task_drops(base, answers)
            frames.append(
                drops.assign(
                    model=model,
                    score=rule,
                    share=info["share"],
                    n_removed=info["n_removed"],
                    params_ratio=info["params_after"] / info["params_before"],
                    **info["roof"],
                    eval_seconds=info["eval_seconds"],
                )
            )
    points = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not points.empty:
        first = ["model", "score", "share", "task"]
        points = points[first + [c for c in points.columns if c not in first]]
    return points, pd.DataFrame(speed), runs


def selection_name(score: str, unit: str) -> str:
    """The report's name of a selection rule: the score's id for query heads, ``<score>/kv-group`` for
    whole KV groups."""
    return score if unit == "head" else f"{score}/{unit}"


def _speed_rows(rows: list[dict], model: str, score: str, share: float) -> list[dict]:
    """Rows of :func:`headstats.engine.speed.time_inference` (``model`` = unpruned / pruned there)
    with that name moved to ``role`` and the model, score and share added; rows of paired timing
    (:func:`headstats.jobs.frontier.paired_speed`, a speed-up with its interval) get the role ``paired``."""
    return [
        {
            **{k: v for k, v in r.items() if k != "model"},
            "role": "paired" if "candidate" in r else r["model"],
            "model": model,
            "score": score,
            "share": share,
        }
        for r in rows
    ]


def family_size(frontier: Frontier) -> int:
    """The sequences a reader can pick the best of: every planned model x score x unit x task."""
    spec = frontier.prune
    return len(frontier.model_names(all_models=True)) * len(spec.scores) * len(spec.units) * len(spec.tasks)


def _headline(table: pd.DataFrame, tasks: list[str], batch: int) -> Figure:
    models = sorted(table["model"].unique())
    fig = Figure(figsize=(4.2 * len(tasks), 3.4 * len(models)))
    axes = fig.subplots(len(models), len(tasks), squeeze=False)
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            sel = table[(table["model"] == model) & (table["task"] == task) & (table["batch"] == batch)]
            for score, rows in sel.groupby("score"):
                rows = rows.sort_values("share")
                style = score_style(score)
                ax.errorbar(
                    100 * rows["drop"],
                    rows["decode_speedup"],
                    xerr=[[0] * len(rows), 100 * (rows["upper"] - rows["drop"])],
                    color=style["color"],
                    marker=style["marker"],
                    linestyle=style["linestyle"],
                    label=score,
                    capsize=2,
                )
                last = rows.iloc[-1]  # each line runs in share order: its largest share labelled, at its end
                ax.annotate(
                    f"{last['share']:.0%}",
                    (100 * last["drop"], last["decode_speedup"]),
                    color=style["color"],
                    xytext=(4, 4),
                    textcoords="offset points",
                )
            ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_title(f"{model}: {task}", fontsize=9)
            ax.set_xlabel("accuracy drop (points; bar to the 95% upper bound)", fontsize=8)
            ax.set_ylabel(f"decode speed-up (batch {batch})", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # the legend below the panels, off the data
    return fig


def build_frontier_report(frontier: Frontier, out: str | os.PathLike | None = None) -> Path:
    """Write the report of ``frontier``'s results to ``out`` (default: its ``report`` directory)."""
    spec = frontier.prune
    check_recorded_settings(frontier)  # points run under other settings are not reported as the file's
    points, speed, runs = read_points(frontier.results)
    if points.empty:
        raise ValueError(f"no finished frontier points under {str(frontier.results)!r}: run the frontier first")
    if spec.timing == "paired":
        raise ValueError(
            f"{frontier.path} is timed in paired rounds: its report is headstats.report.frontier_paired's "
            "build_paired_report (headstats frontier FILE --stages report chooses it)"
        )
    ratios = frontier_stats.speedups(speed)
    # once per (model, score, share, task), before the rows repeat per batch
    points = frontier_stats.add_questions_to_certify(points, spec.max_drop)
    family = family_size(frontier)
    points = frontier_stats.add_family_bounds(points, family)
    table = points.merge(ratios, on=["model", "score", "share"], how="left")
    certified = frontier_stats.both_certified_shares(points, spec.max_drop / 100, spec.shares)
    partial = frontier_stats.unfinished(points, list(runs), len(pruned_points(spec)))
    certified = certified[~certified["model"].isin(partial)]  # a missing share would read as "not certified"
    tasks = sorted(points["task"].unique())
    writer = ReportWriter(
        out or frontier.report,
        frontier.description or f"Pruning frontier: {frontier.name}",
        dpi=90,
        subtitle="Models: " + ", ".join(f"`{m}`" for m in sorted(runs)) + ".",
    )
    hide_folders(writer, frontier)
    b_small = min(spec.speed_batches)
    from headstats.io.identity import model_slug

    names = {model_slug(m): m for m in frontier.model_names(all_models=True)}
    missing = [m for slug, m in names.items() if slug not in runs or slug in partial]
    abstract = _abstract(table[~table["model"].isin(partial)], certified, b_small, spec, family)
    if missing:
        done = ", ".join(f"{names.get(slug, slug)} {n} of {len(pruned_points(spec))}" for slug, n in partial.items())
        so_far = f" (pruned points done: {done}; no share is read until all are)" if done else ""
        abstract += (
            f"\n\nNot finished: {', '.join(missing)}{so_far}; `headstats frontier {portable_name(frontier.path)} "
            f"--models {','.join(missing)}` resumes."
        )
    writer.abstract(abstract)
    writer.headline(
        _headline(table, tasks, b_small),
        "speedup_vs_drop",
        f"Measured decode speed-up (batch {b_small}, pruned / unpruned tokens/s, side by side) against "
        "the held-out accuracy drop, per score; each line runs from the smallest share of heads removed to the "
        "largest (labelled), bars reach the "
        "one-sided 95% Tango upper bound; the dotted line is 1 point; 'none' at 0% is the unpruned model "
        "timed against an identical copy (the measurement's noise).",
    )
    writer.main_table(
        _main_table(table, spec),
        "frontier",
        legend=f"Per model, score and share: heads removed, measured speed-ups at batch "
        f"{'/'.join(map(str, spec.speed_batches))}, the roof (speed-up if time followed the removed "
        "FLOPs or bytes), and each task's drop with its 95% upper bound; certified = bound <= "
        f"{spec.max_drop:g} point.",
        full_legend=anchor_slug(LEGEND),
    )
    _body(writer, table, certified, runs, spec, frontier.results, family, settings_line(frontier))
    record_inputs(writer, frontier)
    writer.write()
    return Path(writer.out) / "index.html"


def hide_folders(writer: ReportWriter, frontier: Frontier) -> None:
    """The file, its results and its model folders named as records name them (``<local>/<folder>``)
    wherever the report's text would name them: no local path in a report."""
    writer.hide(frontier.path, frontier.results, *(m for m in frontier.model_names(all_models=True) if os.sep in m))


def record_inputs(writer: ReportWriter, frontier: Frontier) -> None:
    """Record what the build read in the report's manifest (its results' digest, the file, the
    [prune] settings), so ``headstats.report.freshness`` can tell when the report is older than them."""
    writer.inputs = report_inputs(frontier.results, frontier.prune.settings(), frontier.path, report=writer.out)


def _fmt_drop(row) -> str:
    return f"{100 * row['drop']:+.1f} [{100 * row['upper']:.1f}]"


def _main_table(table: pd.DataFrame, spec: FrontierSpec) -> pd.DataFrame:
    """:func:`headstats.stats.frontier.frontier_table` with each task's drop and bound as one
    "+d.d [u.u]" column in points."""
    out = frontier_stats.frontier_table(table, spec.speed_batches)
    for task in sorted(table["task"].unique()):
        if f"{task} drop" in out:
            drops = out.pop(f"{task} drop")
            uppers = out.pop(f"{task} upper")
            pairs = zip(drops, uppers, strict=True)
            out[f"{task} drop [upper] (pts)"] = [_fmt_drop({"drop": d, "upper": u}) for d, u in pairs]
    return out


def _alone(certified: pd.DataFrame, model: str, score: str, column: str = "certified_share") -> list[str]:
    """``score``'s largest share on every task, then each task on which alone it certifies more:
    ["0%", "5% on piqa alone"]."""
    mine = certified[(certified["model"] == model) & (certified["score"] == score)].set_index("task")[column]
    every = mine["all"]
    alone = [f"{share:.0%} on {task} alone" for task, share in mine.drop("all").items() if share > every]
    return [f"{every:.0%}", *alone]


def _shares(certified: pd.DataFrame, model: str) -> str:
    """Each score's reading in words, with the family-wise one where it differs:
    "random 0% (2% on piqa alone; 0% family-wise)"."""
    out = []
    for score in certified.loc[certified["model"] == model, "score"].unique():
        plain, wise = _alone(certified, model, score), _alone(certified, model, score, "certified_share_fw")
        inner = ", ".join(plain[1:])
        if wise != plain:
            inner += ("; " if inner else "") + ", ".join(wise) + " " + term("family-wise", "bonferroni")
        out.append(f"`{score}` {plain[0]}" + (f" ({inner})" if inner else ""))
    return ", ".join(out)


def _speed_line(model: str, group: pd.DataFrame) -> str:
    """The measured speed-ups beside the roof and beside an identical copy's ratios (the noise), in
    words: within that noise, or how many ratios leave it, how many pass the roof (which removed
    FLOPs cannot explain), and how much the unpruned model's own rate moved (the machine's variation)."""
    noise = frontier_stats.speed_noise(group)
    if noise is None:
        return ""
    line = (
        f"`{model}` speed: removing {noise.top_share:.0%} of heads can make it at most {noise.roof:.3f} times as "
        f"fast (its {term('roof', 'roof')}); measured {noise.low:.2f} to {noise.high:.2f} times, while the unpruned "
        f"model timed against an identical copy gave {noise.copy_low:.2f} to {noise.copy_high:.2f} times"
    )
    if not noise.outside:
        return line + ": within this machine's noise."
    return line + (
        f"; {noise.above_roof} of {noise.ratios} exceed their roof and the unpruned model's own speed varied "
        f"{noise.rate_span:.1f}-fold: the machine's noise sets them, not pruning."
    )


def _speed_summary(table: pd.DataFrame) -> list[str]:
    """The abstract's words on speed: one sentence when every model's ratios are the machine's noise
    (within an identical copy's, or past the roof), else :func:`_speed_line` per model."""
    readings = {
        model: frontier_stats.speed_noise(group.drop_duplicates(["score", "share", "batch"]))
        for model, group in table.groupby("model")
    }
    readings = {m: r for m, r in readings.items() if r is not None}
    if not readings:
        return []
    if all(not r.outside or r.above_roof for r in readings.values()):
        r = list(readings.values())
        return [
            f"Speed: removing {max(x.top_share for x in r):.0%} of heads can make a model at most "
            f"{max(x.roof for x in r):.3f} times as fast (its {term('roof', 'roof')}); measured, "
            f"{min(x.low for x in r):.2f} to {max(x.high for x in r):.2f} times, as scattered as the unpruned "
            f"model timed against an identical copy ({min(x.copy_low for x in r):.2f} to "
            f"{max(x.copy_high for x in r):.2f}): the machine's noise, not pruning."
        ]
    return [
        _speed_line(model, group.drop_duplicates(["score", "share", "batch"]))
        for model, group in table.groupby("model")
        if model in readings
    ]


def _abstract(table: pd.DataFrame, certified: pd.DataFrame, batch: int, spec: FrontierSpec, family: int) -> str:
    both = certified[certified["task"] == "all"]
    adjusted = bool((certified["certified_share"] != certified["certified_share_fw"]).any())
    parts = [
        "This report removes a growing share of a model's attention heads for good and measures whether the "
        "smaller model still answers test questions as well, and how much faster it runs. The largest share of "
        f"heads {term('certified', 'certified')} to cost at most {spec.max_drop:g} point of accuracy on every task, "
        "per model and the score that chose the heads:"
    ]
    for model, group in both.groupby("model"):
        best = group.sort_values("certified_share").iloc[-1]
        line = f"`{model}`: {_shares(certified, model)}."
        if best["certified_share"] > 0:
            at = table[
                (table["model"] == model)
                & (table["score"] == best["score"])
                & (table["share"] == best["certified_share"])
                & (table["batch"] == batch)
            ].iloc[0]
            line += (
                f" At `{best['score']}` {best['certified_share']:.0%}: generating {at['decode_speedup']:.2f} and "
                f"reading the prompt {at['prefill_speedup']:.2f} times as fast (batch {batch}), KV cache "
                f"{at['kv_ratio']:.2f} times the size, {term('roof', 'roof')} "
                f"{1 / (1 - at['prefill_flops_removed']):.2f}."
            )
        parts.append(line)
    parts.extend(_speed_summary(table))
    counts = frontier_stats.certification_counts(table, spec.max_drop / 100)
    line = (
        "Questions per task: "
        + ", ".join(f"{t} {int(n):,}" for t, n in counts.questions.items())
        + f"; {counts.certified} of {counts.cells} measurements (one model, score, share and task each) certified"
    )
    if not math.isnan(counts.need_low):
        line += (
            f"; the others would need {counts.need_low:,.0f} to {counts.need_high:,.0f} questions "
            f"({term('questions to certify', 'questions-to-certify')}), and {counts.beyond} lost "
            f"{spec.max_drop:g} point or more"
        )
    line += "."
    if adjusted:
        line += f" Family-wise: adjusted for picking the best of {family} planned sequences."
    if word_count("\n\n".join([*parts, line])) > ABSTRACT_WORDS:  # the counts stay, the sizing goes to the body
        line = f"{counts.certified} of {counts.cells} measurements certified ([accuracy per task](#accuracy-per-task))."
    parts.append(line)
    return "\n\n".join(parts)


def _body(
    writer: ReportWriter,
    table: pd.DataFrame,
    certified: pd.DataFrame,
    runs: dict,
    spec: FrontierSpec,
    results: Path,
    family: int,
    settings: str = "",
) -> None:
    writer.heading("Largest certified share per score", 2)
    writer.text(
        "Fixed-sequence reading: shares are tested in increasing order and the first one whose upper bound "
        f"exceeds {spec.max_drop:g} point ends the sequence, so the 5% level holds without adjustment "
        "for the number of shares; 'all' requires every task at once. A share of 0 means the first share "
        f"tested was not certified. Columns marked 'fw' read the bounds at one-sided "
        f"{(1 - CONFIDENCE) / family:.2g} (Bonferroni over the {family} planned (model, score, unit, task) "
        "sequences): the share to quote when it is the best of several."
    )
    if certified.empty:
        writer.text("No model has run every point yet.")
    else:
        values = ["certified_share", "certified_share_fw"]
        wide = certified.pivot(index=["model", "score"], columns="task", values=values)
        wide.columns = [task if kind == "certified_share" else f"{task} fw" for kind, task in wide.columns]
        tasks = [*sorted(t for t in certified["task"].unique() if t != "all"), "all"]
        writer.table(wide[[c for t in tasks for c in (t, f"{t} fw")]].reset_index(), "certified_shares")
    writer.heading("Speed against the unpruned model", 2)
    cols = [
        "model",
        "score",
        "share",
        "batch",
        "prefill_speedup",
        "decode_speedup",
        "kv_ratio",
        "prefill_tok_s_unpruned",
        "decode_tok_s_unpruned",
    ]
    speed = table.drop_duplicates(["model", "score", "share", "batch"])[cols].sort_values(cols[:4])
    writer.text(
        "Pruned / unpruned tokens/s, measured in alternating turns in one process (medians of "
        f"{spec.repeats} rounds; prompt {spec.prompt_length} tokens, then {spec.new_tokens} greedy decode "
        "steps with the KV cache). Score 'none' at share 0 times the unpruned model against an identical "
        "copy: its distance from 1 is the noise of the measurement on this machine."
    )
    for model, group in table.groupby("model"):
        line = _speed_line(model, group.drop_duplicates(["score", "share", "batch"]))
        if line:
            writer.text(line)
    writer.table(speed, "speed")
    writer.heading("Accuracy per task", 2)
    acc = table.drop_duplicates(["model", "score", "share", "task"])[
        [
            "model",
            "score",
            "share",
            "task",
            "n",
            "accuracy",
            "drop",
            "upper",
            "upper_fw",
            "lost",
            "gained",
            "mdd_80",
            "n_to_certify",
            "n_to_certify_note",
        ]
    ].sort_values(["model", "task", "score", "share"])
    writer.table(acc, "accuracy")
    _roof(writer, table)
    with writer.appendix():
        run_notes(writer, table, runs, results, settings)


def _roof(writer: ReportWriter, table: pd.DataFrame) -> None:
    """The shares of the unpruned model's per-token cost that the removed heads carried."""
    writer.heading("The roof: what the removed heads carried", 2)
    roof_cols = [c for c in table.columns if c.endswith("_removed") or c.startswith("decode_bytes_removed")]
    roof = table[table["score"] != "none"].drop_duplicates(["model", "score", "share"])[
        ["model", "score", "share", "params_ratio", *roof_cols]
    ]
    writer.text(
        "Shares of the unpruned model's per-token cost that the removed heads carried, by arithmetic on "
        "the module shapes: FLOPs of a prefill and of a decode step (projections, lm_head and the attention "
        "core), and the bytes a decode step reads (all linear weights once plus the KV cache). 1 / (1 - "
        "share) is the speed-up the removal allows at most when time follows that cost; the gap to the "
        "measured speed-up is time spent where heads do not count (embedding, norms, MLPs' share of "
        "memory traffic, Python and kernel launch overhead, and the K/V gather of uneven groups)."
    )
    writer.table(roof, "roof")


def settings_line(frontier: Frontier) -> str:
    """The settings the points were run with, as their ``run.json`` records them (the same for every
    model: :func:`~headstats.jobs.frontier.check_recorded_settings` refuses a folder that differs)."""
    recorded = next(
        (r for root in sorted(frontier.results.glob("model=*")) if (r := recorded_settings(frontier, root))), None
    )
    if not recorded:
        return ""
    parts = [f"`{key} = {json.dumps(value)}`" for part in sorted(recorded) for key, value in recorded[part].items()]
    return (
        "Every point was run with these settings (each model's `run.json`; a file whose settings changed since "
        f"is refused, never half-followed): {', '.join(parts)}."
    )


def run_notes(writer: ReportWriter, table: pd.DataFrame, runs: dict, results: Path, settings: str = "") -> None:
    """The appendix: the columns' legend, the settings the points were run with (``settings``:
    :func:`settings_line`), and each model's machine and run time."""
    writer.heading(LEGEND, 3)
    writer.text(
        "share: fraction of all heads removed; heads removed: their number; params: parameters after / "
        "before; prefill/decode x: pruned / unpruned tokens/s at that batch; KV cache: pruned / unpruned "
        "cache bytes after the prompt; roof prefill x: 1 / (1 - share of prefill FLOPs removed); roof "
        "decode x: 1 / (1 - share of decode-step bytes removed); drop [upper]: accuracy drop in points "
        "with its one-sided 95% Tango upper bound; upper_fw: that bound at the family-wise level (Bonferroni "
        "over the planned (model, score, unit, task) sequences); n_to_certify: the questions per task at which that "
        "bound would reach the tolerated drop if the shares of lost and gained answers stayed as observed (for sizing "
        "a rerun; empty, with n_to_certify_note saying never, where the observed drop already reaches it); KV "
        "saved: KV-cache bytes per token of context and sequence that the removed KV heads held."
    )
    writer.heading("Run", 3)
    if settings:
        writer.text(settings)
    for model, info in runs.items():
        machine = info["run"]["machine"]
        points = table[(table["model"] == model) & (table["score"] != "none")]
        total = info["baseline"]["eval_seconds"] + points.drop_duplicates(["score", "share"])["eval_seconds"].sum()
        line = (
            f"{model}: CPU {machine.get('cpu')}, torch threads {machine.get('torch_threads')}, "
            f"device {machine.get('device')}; evaluation passes took {total / 60:.1f} min in all."
        )
        if len(info.get("machines", {})) > 1:
            where = "; ".join(f"{m}: {', '.join(stems)}" for m, stems in info["machines"].items())
            line += f" Its points were evaluated and timed on more than one machine ({where})."
        timed = info["baseline"].get("timed")
        if timed:
            again = timed["machine"]
            when = datetime.fromtimestamp(timed["round"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            gpu = f", GPU {again['gpu']}" if again.get("gpu") else ""
            line += (
                f" Speeds timed again (stage `time`, from {when}) on CPU {again.get('cpu')}, torch threads "
                f"{again.get('torch_threads')}, device {again.get('device')}{gpu}; each point keeps its earlier "
                "timings (`earlier_speed` in its JSON)."
            )
        writer.text(line)
    log = results / "runs.jsonl"
    if log.is_file():
        runs_logged = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        minutes = sum(r["seconds"] for r in runs_logged) / 60
        writer.text(f"Wall time of the completed `headstats frontier` runs (runs.jsonl): {minutes:.1f} min.")
