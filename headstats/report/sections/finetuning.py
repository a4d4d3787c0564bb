"""Fine-tuning: how far a chain's checkpoints (``headstats finetune``) move the heads from its base.

Present when the score tables hold checkpoints of a chain and its base (their provenance names the
stage and step). Reads: each stage's learning evidence (``metrics.json``, when the chain folder is
on this machine), W1 from the base against training steps with intervals and noise floors (the
dose-response), W1 per score and depth at each stage's end as multiples of the noise floor, which
heads moved (per-head Spearman between stages against its split-half value, whether the heads a
score calls inactive stay inactive), and a closing reading computed from those numbers.
"""

from __future__ import annotations

import json
from itertools import pairwise

import pandas as pd

from headstats.report import plots
from headstats.report.sections.context import Context, Writer, permutation_resolution
from headstats.stats import distances
from headstats.stats.movement import head_movement, moved_heads

STAGES = ("base", "sft", "dpo", "grpo")
STAGE_NAMES = {"base": "base", "sft": "SFT", "dpo": "DPO", "grpo": "GRPO (RL, verifiable reward)"}


def chain_order(checkpoints: dict[str, dict]) -> pd.DataFrame:
    """One row per checkpoint: ``model, stage, step, steps, cumulative_step``, in training order
    (``cumulative_step`` counts the steps of the earlier stages too)."""
    rows = [
        {"model": m, "stage": i["stage"], "step": int(i.get("step") or 0), "steps": int(i.get("steps") or 0)}
        for m, i in checkpoints.items()
        if i.get("stage") in STAGES
    ]
    frame = pd.DataFrame(rows, columns=["model", "stage", "step", "steps"])
    frame["order"] = frame["stage"].map(STAGES.index)
    frame = frame.sort_values(["order", "step"], kind="stable").reset_index(drop=True)
    totals = frame.groupby("order")["steps"].max()
    before = {o: int(totals[totals.index < o].sum()) for o in totals.index}
    frame["cumulative_step"] = frame["step"] + frame["order"].map(before)
    return frame.drop(columns="order")


def learning_table(metrics: dict) -> pd.DataFrame:
    """The chain's learning evidence (its ``metrics.json``), one row per (stage, checkpoint step, metric): value, 95%
    interval, examples; and each stage's measured run time where it was recorded."""
    rows = []
    for stage in STAGES[1:]:
        info = metrics.get(stage) or {}
        for step, measured in sorted((info.get("checkpoints") or {}).items(), key=lambda kv: int(kv[0])):
            for name, m in measured.items():
                if isinstance(m, dict) and "value" in m:
                    rows.append({
                        "stage": stage, "step": int(step), "metric": name, "value": m["value"],
                        "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high"), "n": m.get("n"),
                    })  # fmt: skip
    return pd.DataFrame(rows)


# Metrics whose value at a stage's start is fixed by construction, not measured: comparing the end
# with it says nothing (DPO's policy equals its reference at step 0, so every margin is exactly 0 and
# no pair counts as preferred; reward_margin's end interval against 0 and likelihood_preference
# carry that stage's evidence).
FIXED_AT_START = {"preference_accuracy"}


def learning_summary(learned: pd.DataFrame) -> pd.DataFrame:
    """Per (stage, metric): its value at the stage's first and last measured checkpoint and whether
    the two 95% intervals are disjoint (``moved``: the stage changed its own metric beyond noise; NA
    for a metric fixed by construction at the start, :data:`FIXED_AT_START`)."""
    rows = []
    for (stage, metric), g in learned.groupby(["stage", "metric"], sort=False):
        first, last = g.loc[g["step"].idxmin()], g.loc[g["step"].idxmax()]
        moved = last["ci_low"] > first["ci_high"] or last["ci_high"] < first["ci_low"]
        rows.append({
            "stage": stage, "metric": metric, "start": first["value"], "end": last["value"],
            "change": last["value"] - first["value"],
            "moved": pd.NA if metric in FIXED_AT_START or len(g) < 2 else bool(moved),
        })  # fmt: skip
    return pd.DataFrame(rows)


def zero_gradient_share(metrics: dict) -> dict[str, float]:
    """Per stage: the share of logged training steps whose gradient norm was exactly 0 (a stage that
    got no training signal, e.g. GRPO when every sampled group has the same reward)."""
    out = {}
    for stage in STAGES[1:]:
        norms = [e["grad_norm"] for e in (metrics.get(stage) or {}).get("log_history", []) if "grad_norm" in e]
        if norms:
            out[stage] = sum(float(n) == 0.0 for n in norms) / len(norms)
    return out


def run_times(metrics: dict) -> pd.DataFrame:
    """Per stage: the scalar facts ``headstats finetune`` recorded of its training run (steps run,
    seconds, tokens/s, ...)."""
    rows = []
    for stage in STAGES[1:]:
        info = metrics.get(stage) or {}
        facts = {k: v for k, v in (info.get("run") or info).items() if isinstance(v, (int, float, str))}
        if facts:
            rows.append({"stage": stage, **facts})
    return pd.DataFrame(rows)


def fine_tuning(writer: Writer, context: Context) -> None:
    scores, opt = context.scores, context.options
    chain = chain_order(context.checkpoints)
    if scores is None or chain.empty or (chain["stage"] == "base").sum() != 1 or len(chain) < 2:
        return
    base = str(chain.loc[chain["stage"] == "base", "model"].iloc[0])
    trained = chain[chain["stage"] != "base"]
    datasets = [
        d
        for d in sorted(scores["dataset"].astype(str).unique())
        if base in set(scores.loc[scores["dataset"] == d, "model"])
    ]
    writer.heading("Fine-tuning: how far do the heads move?")
    stage_list = ", ".join(
        f"{STAGE_NAMES[s]} ({int(g['steps'].max())} steps; checkpoints at {', '.join(map(str, g['step']))})"
        for s, g in trained.groupby("stage", sort=False)
    )
    writer.text(
        f"A chain trained from `{base}` by `headstats finetune`: {stage_list}. Each checkpoint was scored on the "
        "same texts as the base (a paired design), with the same prompt format. W1 is the distance between the "
        f"base's and a checkpoint's score distributions; its 95% interval resamples clusters ({opt.n_boot} "
        f"bootstrap resamples) and the noise floor is the 95th percentile of W1 between random halves of one "
        f"model's own texts ({opt.n_split} halvings): a distance below its floor is what re-drawing the texts "
        "gives, not fine-tuning."
    )
    base_rows = scores[scores["model"] == base]
    constant = [s for s in context.measured_scores(base_rows) if base_rows[s].nunique(dropna=True) <= 1]
    if constant:
        writer.text(
            f"Constant over every head and text of the base: {', '.join(f'`{s}`' for s in constant)}. Their "
            "distances are 0 by construction and say nothing about heads (a value-vector score is shared by all "
            "query heads of one key/value head; with a single key/value head per layer, as in Gemma-3 270M, its "
            "layer-normalised form is exactly 1)."
        )
    root = next((i["root"] for i in context.checkpoints.values() if i.get("root")), None)
    metrics = json.loads((root / "metrics.json").read_text()) if root and (root / "metrics.json").is_file() else {}
    if metrics:
        learned = learning_table(metrics)
        if not learned.empty:
            writer.heading("Did each stage learn?", 3)
            writer.text(
                "Held-out evidence per stage, at the stage's start and end (and at every checkpoint when the "
                "chain was built with `--measure all`), with 95% bootstrap intervals over held-out examples. "
                "A stage whose own metric did not move says nothing about heads either way."
            )
            summary = learning_summary(learned)
            writer.table(summary, "finetuning_learning_summary", floatfmt=".4g")
            writer.table(learned, "finetuning_learning", floatfmt=".4g", collapsed="every measured checkpoint")
            stuck = {k: v for k, v in zero_gradient_share(metrics).items() if v > 0.5}
            moved = summary["moved"].fillna(False).astype(bool)
            silent = sorted(set(summary["stage"]) - set(summary.loc[moved, "stage"]))
            if silent:
                writer.text(
                    "Not shown to learn (no metric's interval at the end is disjoint from its start): "
                    + ", ".join(f"**{STAGE_NAMES[s]}**" for s in silent)
                    + ". Its distances below measure what that stage did to the heads without evidence that it "
                    "changed the model's behaviour."
                )
            for stage, share in stuck.items():
                writer.text(
                    f"**{STAGE_NAMES[stage]}** had a gradient norm of exactly 0 at {share:.0%} of its logged steps: "
                    "at those steps it received no training signal (for GRPO: every sampled group of completions got "
                    "the same reward), so its checkpoints differ from its start only by the few updates of the "
                    "other steps, and its distances are close to a negative control."
                )
        times = run_times(metrics)
        if not times.empty:
            writer.table(times, "finetuning_run_times", floatfmt=".4g", collapsed="training run per stage")
    rows = []
    for dataset in datasets:
        for _, ck in trained.iterrows():
            if ck["model"] not in set(scores.loc[scores["dataset"] == dataset, "model"]):
                continue
            dist = context.distance(dataset, base, str(ck["model"]))
            rows.append(dist.assign(stage=ck["stage"], step=ck["step"], cumulative_step=ck["cumulative_step"]))
    if not rows:
        return
    table = pd.concat(rows, ignore_index=True)
    overall = table[table["depth"] == distances.ALL_DEPTHS]
    writer.heading("Distance from the base against training steps", 3)
    starts = (
        trained.groupby("stage", sort=False)["cumulative_step"].min()
        - trained.groupby("stage", sort=False)["step"].min()
    )
    writer.figure(
        plots.dose_response(overall, [(float(v), STAGE_NAMES[s].split(" ")[0]) for s, v in starts.items()]),
        "finetuning_dose_response",
        "W1 between the base and each checkpoint against training steps (95% cluster-bootstrap intervals); "
        "dotted: the pair's noise floor. Vertical lines: where each stage starts.",
    )
    shown = ["dataset", "stage", "step", "cumulative_step", "score", "w1", "ci_low", "ci_high", "noise_floor"]
    resolution = permutation_resolution(table)
    if resolution:
        writer.text(resolution)
    writer.table(overall[[*shown, "above_noise", "p_holm", "p_holm_min"]], "finetuning_w1_by_step", floatfmt=".3g")
    ends = trained.groupby("stage", sort=False).tail(1)
    depth = table[table["model_b"].isin(ends["model"]) & (table["depth"] != distances.ALL_DEPTHS)]
    for dataset in sorted(depth["dataset"].unique()):
        here = depth[depth["dataset"] == dataset].assign(
            ratio=lambda f: f["w1"] / f["noise_floor"], column=lambda f: f["score"] + " · " + f["depth"].astype(str)
        )
        matrix = here.pivot_table(index="stage", columns="column", values="ratio", sort=False)
        matrix = matrix.reindex([s for s in STAGES if s in matrix.index])
        writer.figure(
            plots.matrix_heatmap(
                matrix, title=f"W1 from the base / noise floor, {dataset} (> 1: beyond noise)", cmap="magma_r",
                vmin=0.0, fmt=".1f", colorbar_label="W1 / noise floor", xlabel="score · relative depth",
                annotate=matrix.size <= 60,
            ),
            f"finetuning_w1_depth_{dataset}",
            f"W1 between the base and each stage's last checkpoint on `{dataset}` per score and relative-depth bin, "
            "in multiples of the pair's noise floor.",
        )  # fmt: skip
    writer.table(
        depth[["dataset", "stage", "score", "depth", "w1", "ci_low", "ci_high", "noise_floor", "above_noise"]],
        "finetuning_w1_by_depth",
        floatfmt=".3g",
        collapsed="W1 per relative-depth bin at each stage's end",
    )
    movement = _movement(writer, context, base, ends, datasets)
    _closing(writer, overall, movement, ends)
    _cross_family(writer, context, base, set(chain["model"]), datasets)


def _cross_family(writer: Writer, context: Context, base: str, chain: set[str], datasets: list[str]) -> None:
    """Models outside the chain against its base, depth-binned: another family, not another step."""
    scores = context.scores
    others = sorted(set(scores["model"].astype(str)) - chain)
    frames = [
        context.distance(d, base, other)
        for d in datasets
        for other in others
        if other in set(scores.loc[scores["dataset"] == d, "model"])
    ]
    if not frames:
        return
    table = pd.concat(frames, ignore_index=True)
    writer.heading("Cross-family pair", 3)
    writer.text(
        f"{', '.join(f'`{o}`' for o in others)} against the chain's base `{base}`, overall and per relative-depth "
        "bin. This is a cross-family size comparison: the two models differ in tokenizer, architecture details, "
        "pretraining data and chat template as well as in size, so it is not a scaling series and says nothing "
        "about size alone. It shows how large a distance between unrelated models is, a yardstick for the "
        "fine-tuning distances above."
    )
    shown = ["dataset", "model_b", "score", "depth", "w1", "ci_low", "ci_high", "noise_floor", "above_noise"]
    writer.table(table[shown], "cross_family_w1", floatfmt=".3g")


def _movement(writer: Writer, context: Context, base: str, ends: pd.DataFrame, datasets: list[str]) -> pd.DataFrame:
    scores, opt = context.scores, context.options
    steps = [base, *ends["model"]]
    frames = []
    for dataset in datasets:
        have = set(scores.loc[scores["dataset"] == dataset, "model"])
        present = [m for m in steps if m in have]
        for a, b in [(base, m) for m in present[1:]] + list(pairwise(present[1:])):
            frames.append(
                head_movement(
                    scores, a, b, dataset=dataset, n_split=opt.n_split, seed=opt.seed
                ).assign(comparison="from base" if a == base else "consecutive stages")
            )  # fmt: skip
    if not frames:
        return pd.DataFrame()
    movement = pd.concat(frames, ignore_index=True)
    writer.heading("Which heads move?", 3)
    writer.text(
        "Per score and dataset, between the base and each stage's end and between consecutive stages: Spearman "
        "correlation of the heads' mean scores (1 = the heads keep their order), next to `split_half`, the same "
        "correlation between two random halves of the first model's own texts (Spearman-Brown corrected), the "
        "agreement that noise alone leaves; `inactive_kept`: the share of the 10% of heads the score calls most "
        "inactive in the first model that are still among the 10% most inactive in the second."
    )
    writer.table(movement, "finetuning_head_movement", floatfmt=".3g")
    last = str(ends["model"].iloc[-1])
    if "ahon_ln" in movement["score"].values:
        top = moved_heads(scores, base, last, "ahon_ln", dataset=datasets[0], k=8)
        writer.table(
            top,
            "finetuning_moved_heads",
            floatfmt=".3g",
            collapsed=f"the 8 heads whose mean ahon_ln moved most on {datasets[0]}, base to {last} "
            "(shift in standard deviations of the base's head means)",
        )
    return movement


def _closing(writer: Writer, overall: pd.DataFrame, movement: pd.DataFrame, ends: pd.DataFrame) -> None:
    final = overall[overall["model_b"] == ends["model"].iloc[-1]]
    ratio = overall["w1"] / overall["noise_floor"]
    above = overall[overall["ci_low"] > overall["noise_floor"]]
    worst = overall.loc[ratio.idxmax()] if ratio.notna().any() else None
    parts = [
        f"Of {len(overall)} (checkpoint, dataset, score) distances from the base, {int(overall['above_noise'].sum())} "
        f"exceed their noise floor and {len(above)} do so with the whole 95% interval above it."
    ]
    if worst is not None:
        parts.append(
            f"The largest, relative to its floor, is `{worst['score']}` on {worst['dataset']} after "
            f"{STAGE_NAMES[worst['stage']].split(' ')[0]} step {int(worst['step'])}: W1 = {worst['w1']:.3g} "
            f"[{worst['ci_low']:.3g}, {worst['ci_high']:.3g}] against a floor of {worst['noise_floor']:.3g} "
            f"({ratio.max():.1f}x)."
        )
    if not final.empty:
        parts.append(
            f"At the end of the chain {int(final['above_noise'].sum())} of {len(final)} distances lie above the floor."
        )
    if not movement.empty:
        from_base = movement[movement["comparison"] == "from base"]
        last = from_base[from_base["model_b"] == ends["model"].iloc[-1]]
        if not last.empty:
            gap = (last["split_half"] - last["spearman"]).max()
            kept = last.loc[last["score"] == "ahon_ln", "inactive_kept"]
            low, reliability = last["spearman"].min(), last["split_half"].min()
            verdict = "moved beyond what noise moves it" if reliability - low > 0.05 else "stayed within noise"
            parts.append(
                f"The heads' order {verdict}: per-head Spearman from the base to the chain's end is {low:.3f} at the "
                f"lowest, against a split-half reliability of {reliability:.3f} (largest shortfall {gap:.3f})"
                + (f"; {kept.iloc[0]:.0%} of the heads ahon_ln calls most inactive stay so." if len(kept) else ".")
            )
    writer.heading("What this says", 3)
    writer.text(
        " ".join(parts)
        + " Limits: one small model (270M parameters), short CPU training with frozen embeddings, one seed and "
        "one data order; distances are between score distributions on a few dozen texts per dataset, so a small "
        "movement can hide below the floor. A distance within its floor means the fine-tuning did not move that "
        "score beyond what changing the texts does, not that the heads are unchanged."
    )


__all__ = ["chain_order", "fine_tuning", "learning_summary", "learning_table", "run_times", "zero_gradient_share"]
