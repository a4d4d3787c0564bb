"""Fine-tuning: did each stage learn, how far did it move the heads against training noise, and which
heads moved.

Present when the score tables hold checkpoints of a chain (``headstats finetune``) and its base. The
analysis is paired throughout: every checkpoint is scored on the base's texts.

- **Learning** (:mod:`headstats.stats.learning`): each stage's own held-out metric, end minus start on
  the same examples, with a paired interval; a stage that did not learn is named, and its distances
  are read as what it did to the heads without evidence that it changed the model's behaviour.
- **Whether a distribution moved**: W1 between the base and a checkpoint, tested by the paired
  permutation test that swaps model labels within texts (clusters); every test of the report is one
  Holm family, with enough permutations for the family to reach 0.01
  (:func:`~headstats.stats.distances.permutations_for`).
- **Size**: W1 divided by the base's interquartile range of the score (``w1_iqr``), beside the
  distance between the stage's ends of two chains trained with different seeds (the training noise
  yardstick), the chat-vs-plain template contrast on the base, and another model family.
- **Which heads moved**: the per-head paired sign-flip max-T test
  (:func:`~headstats.stats.movement.head_shift_test`, family-wise error 5% over a comparison's heads).
- Scores that are constant by construction for the model (:func:`~headstats.stats.constant.constant_scores`)
  and the ``random`` baseline (a seeded draw, not a property of the model) are left out of every test,
  count and figure, with the reason stated once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from headstats.io import store
from headstats.report import plots
from headstats.report.sections.context import (
    STAGE_NAMES,
    Context,
    Writer,
    chain_order,
    chain_recipe,
    fit_sentences,
)
from headstats.stats import distances
from headstats.stats.constant import constant_scores
from headstats.stats.learning import PRIMARY, learning_verdicts, training_signal
from headstats.stats.learning import STAGES as TRAINED_STAGES
from headstats.stats.movement import head_shift_test

FAMILY_ALPHA = 0.01  # the Holm-adjusted level the permutation count lets the whole family reach
HEAD_ALPHA = 0.05  # family-wise error of the per-head max-T test, per comparison
HEAD_PERMUTATIONS = 9999


@dataclass
class ChainAnalysis:
    """Everything the lead and the section read, computed once per report."""

    chain: pd.DataFrame  # chain_order
    base: str
    datasets: list[str]
    tested: list[str]  # score ids in the tests
    left_out: dict[str, str]  # score id -> why it is not tested
    learning: pd.DataFrame  # learning_verdicts of each chain, with its seed
    signal: pd.DataFrame  # training_signal of each chain
    tests: pd.DataFrame  # the Holm family: W1 from the base and between seeds
    yardsticks: pd.DataFrame  # template and cross-family W1 / IQR (descriptive)
    heads: pd.DataFrame  # per-head max-T rows of every stage end and seed pair
    n_perm: int
    base_source: str = ""  # what the chain's base was saved from (an embedded name or a folder)

    @property
    def ends(self) -> pd.DataFrame:
        trained = self.chain[self.chain["primary"] & self.chain["stage"].ne("base")]
        return trained.groupby("stage", sort=False).tail(1)


def _left_out(context: Context, base_rows: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    measured = context.measured_scores(base_rows)
    constant = constant_scores(base_rows, str(base_rows["model"].iloc[0]), measured)
    why = {str(s): str(r) for s, r in constant.items()}
    if "random" in context.score_ids(base_rows):
        why["random"] = "a seeded U(0,1) draw per (text, layer, head), the same in every model: not a property of heads"
    return [s for s in measured if s not in why], why


def _pairs(analysis_chain: pd.DataFrame, base: str) -> list[tuple[str, str, str, str, int]]:
    """(comparison, model_a, model_b, stage, step) of every test: base -> each primary checkpoint, and
    each primary stage end -> the replicate's checkpoint of the same stage and step."""
    primary = analysis_chain[analysis_chain["primary"] & analysis_chain["stage"].ne("base")]
    pairs = [("from base", base, str(r["model"]), str(r["stage"]), int(r["step"])) for _, r in primary.iterrows()]
    replicas = analysis_chain[~analysis_chain["primary"]]
    for _, r in replicas.iterrows():
        twin = primary[(primary["stage"] == r["stage"]) & (primary["step"] == r["step"])]
        if len(twin):
            pairs.append(
                ("between seeds", str(twin["model"].iloc[0]), str(r["model"]), str(r["stage"]), int(r["step"]))
            )
    return pairs


def _chain_metrics(context: Context, chain: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    learning, signal = [], []
    seen = set()
    for info in context.checkpoints.values():
        root = info.get("root")
        if root is None or root in seen or not (root / "metrics.json").is_file():
            continue
        seen.add(root)
        metrics = json.loads((root / "metrics.json").read_text())
        seed = chain_recipe(root).get("seed")
        primary = bool(chain.loc[chain["chain"] == root.name, "primary"].any())
        tags = {"chain": root.name, "seed": seed, "primary_chain": primary}
        learning.append(learning_verdicts(metrics, seed=context.options.seed).assign(**tags))
        signal.append(training_signal(metrics).assign(**tags))
    learn = pd.concat(learning, ignore_index=True) if learning else pd.DataFrame()
    sig = pd.concat(signal, ignore_index=True) if signal else pd.DataFrame()
    return learn, sig


def _yardsticks(context: Context, base: str, chain_models: set[str], datasets: list[str], tested: list[str]):
    """W1 / IQR of the base against the base under another prompt format (``options.contrast``) and
    against each model outside the chain (another family), per dataset and score: descriptive."""
    scores, opt, frames = context.scores, context.options, []
    plain = None
    if opt.contrast and Path(opt.contrast).is_dir() and store.find_partitions(opt.contrast)[0]:
        other = store.read_scores(opt.contrast)
        if base in set(other["model"]):
            plain = other[other["model"] == base].assign(model=f"{base} (other format)")
    for dataset in datasets:
        here = scores[scores["dataset"] == dataset]
        if plain is not None and (plain["dataset"] == dataset).any():
            both = pd.concat([here[here["model"] == base], plain[plain["dataset"] == dataset]], ignore_index=True)
            both["model"] = both["model"].astype(str)
            dist = distances.model_distance(
                both,
                base,
                f"{base} (other format)",
                tested,
                depth_bins=0,
                n_boot=opt.n_boot,
                n_perm=0,
                n_split=0,
                seed=opt.seed,
            )
            frames.append(dist.assign(dataset=dataset, kind="template"))
        for other in sorted(set(here["model"].astype(str)) - chain_models):
            common = [s for s in tested if s in here.columns and here.loc[here["model"] == other, s].notna().any()]
            if not common:
                continue
            dist = distances.model_distance(
                here, base, other, common, depth_bins=0, n_boot=opt.n_boot, n_perm=0, n_split=0, seed=opt.seed
            )
            frames.append(dist.assign(dataset=dataset, kind="other family"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def analyse_chain(context: Context) -> ChainAnalysis | None:
    """The fine-tuning analysis of the report's results, or None when they hold no chain (cached on
    the context: the lead and the section share it)."""
    cached = context.__dict__.get("_finetuning")
    if cached is not None or "_finetuning" in context.__dict__:
        return cached
    context.__dict__["_finetuning"] = None
    scores = context.scores
    chain = chain_order(context.checkpoints)
    if scores is None or chain.empty or (chain["stage"] == "base").sum() != 1 or len(chain) < 2:
        return None
    base = str(chain.loc[chain["stage"] == "base", "model"].iloc[0])
    chain = chain[chain["model"].isin(set(scores["model"]))]
    datasets = [
        d
        for d in sorted(scores["dataset"].astype(str).unique())
        if base in set(scores.loc[scores["dataset"] == d, "model"])
    ]
    tested, left_out = _left_out(context, scores[scores["model"] == base])
    pairs = _pairs(chain, base)
    if not tested or not pairs:
        return None
    opt = context.options
    have = {d: set(scores.loc[scores["dataset"] == d, "model"]) for d in datasets}
    planned = [(p, d) for p in pairs for d in datasets if p[1] in have[d] and p[2] in have[d]]
    n_perm = distances.permutations_for(len(planned) * len(tested), FAMILY_ALPHA)
    frames, heads = [], []
    for (comparison, a, b, stage, step), dataset in planned:
        here = scores[scores["dataset"] == dataset]
        dist = distances.model_distance(
            here, a, b, tested, depth_bins=0, n_boot=opt.n_boot, n_perm=n_perm, n_split=0, seed=opt.seed
        )
        tags = {"comparison": comparison, "dataset": dataset, "stage": stage, "step": step}
        frames.append(dist.assign(**tags))
        is_end = comparison == "between seeds" or step == int(chain.loc[chain["model"] == b, "steps"].iloc[0])
        if is_end:
            for sid in tested:
                moved = head_shift_test(
                    here, a, b, sid, dataset=dataset, n_perm=HEAD_PERMUTATIONS, alpha=HEAD_ALPHA, seed=opt.seed
                )
                heads.append(moved.assign(comparison=comparison, stage=stage, step=step))
    tests = distances.holm_family(frames)
    cumulative = chain.set_index("model")["cumulative_step"]
    tests["cumulative_step"] = tests["model_b"].map(cumulative)
    learning, signal = _chain_metrics(context, chain)
    analysis = ChainAnalysis(
        chain=chain,
        base=base,
        base_source=str(context.checkpoints.get(base, {}).get("source") or base),
        datasets=datasets,
        tested=tested,
        left_out=left_out,
        learning=learning,
        signal=signal,
        tests=tests,
        yardsticks=_yardsticks(context, base, set(chain["model"]), datasets, tested),
        heads=pd.concat(heads, ignore_index=True) if heads else pd.DataFrame(),
        n_perm=n_perm,
    )
    context.__dict__["_finetuning"] = analysis
    return analysis


# --- what the page shows ----------------------------------------------------------------------------


def _interval(value: float, low: float, high: float, fmt: str = ".3g") -> str:
    if pd.isna(low):
        return f"{value:{fmt}}"
    return f"{value:+{fmt}} [{low:+{fmt}}, {high:+{fmt}}]"


def _median_range(values: pd.Series) -> str:
    v = values.dropna()
    return "" if v.empty else f"{v.median():.2f} [{v.min():.2f}–{v.max():.2f}]"


LEARNED = "learned (primary metric, end − start [95% CI])"
NO_COMPARISON = "no comparison: not shown to learn"


def _learning_cell(learning: pd.DataFrame, stage: str) -> tuple[str, bool | None]:
    """The main table's learning cell of ``stage`` (its primary metric's paired change, per seed) and
    whether the primary chain's stage learned (None without evidence)."""
    if learning.empty:
        return "", None
    mine = learning[learning["primary_chain"] & (learning["stage"] == stage) & learning["metric"].eq(PRIMARY[stage])]
    parts = []
    for _, r in mine.iterrows():
        seed = "" if pd.isna(r["seed"]) else f"seed {int(r['seed'])}: "
        verdict = "learned" if r["learned"] else "not shown"
        parts.append(f"{seed}{verdict}, {r['metric']} {_interval(r['change'], r['ci_low'], r['ci_high'])}")
    return "; ".join(parts), (bool(mine["learned"].fillna(False).all()) if len(mine) else None)


BEYOND = "above seed noise"


def beyond_seeds(tests: pd.DataFrame, end: pd.Series) -> pd.DataFrame:
    """Stage ``end``'s distances from the base beside the same (dataset, score)'s distance between the
    stage ends of two seeds: ``beyond`` when the base -> end interval lies wholly above the seed -> seed
    one (both bootstrap intervals of W1 / IQR over texts). A description of size, not a test; empty
    without a scored replicate."""
    keys = ["dataset", "score"]
    mine = tests[(tests["comparison"] == "from base") & (tests["model_b"] == end["model"])]
    seeds = tests[(tests["comparison"] == "between seeds") & (tests["stage"] == end["stage"])]
    if seeds.empty or "w1_iqr_low" not in tests:
        return pd.DataFrame(columns=[*keys, "w1_iqr", "w1_iqr_seed", "beyond"])
    cols = [*keys, "w1_iqr", "w1_iqr_low", "w1_iqr_high"]
    both = mine[cols].merge(seeds[cols], on=keys, suffixes=("", "_seed"))
    return both.assign(beyond=both["w1_iqr_low"] > both["w1_iqr_high_seed"])


def _movement_cells(analysis: ChainAnalysis, end: pd.Series) -> dict[str, str]:
    tests, heads = analysis.tests, analysis.heads
    stage, step = str(end["stage"]), int(end["step"])
    mine = tests[(tests["comparison"] == "from base") & (tests["model_b"] == end["model"])]
    seeds = tests[(tests["comparison"] == "between seeds") & (tests["stage"] == stage) & (tests["step"] == step)]
    moved = int((mine["p_holm"] <= FAMILY_ALPHA).sum())
    beyond = beyond_seeds(tests, end)
    row = {
        "base → end, W1/IQR": _median_range(mine["w1_iqr"]),
        "seed → seed, W1/IQR": _median_range(seeds["w1_iqr"]),
        BEYOND: f"{int(beyond['beyond'].sum())} of {len(beyond)}" if len(beyond) else "",
        "distributions moved (Holm p ≤ 0.01)": f"{moved} of {len(mine)}",
    }
    if not heads.empty:
        from_base = heads[(heads["comparison"] == "from base") & (heads["model_b"] == end["model"])]
        twin = heads[(heads["comparison"] == "between seeds") & (heads["stage"] == stage)]
        row["heads moved from base (max-T)"] = f"{int(from_base['moved'].sum())} of {len(from_base)}"
        row["heads moved between seeds"] = f"{int(twin['moved'].sum())} of {len(twin)}" if len(twin) else ""
    return row


def stage_table(analysis: ChainAnalysis) -> pd.DataFrame:
    """The main table: per stage, whether it learned (its primary metric's paired change), how far its
    end moved from the base against the seed replicate (W1 / IQR: median [range] over datasets and
    scores), how many of those distances the permutation test calls moved (Holm over the report's
    family, p <= 0.01), and how many heads the max-T test calls moved (summed over datasets and scores).
    A stage not shown to learn makes no comparison: its row says so, whether or not it was scored."""
    learning, rows = analysis.learning, []
    ends = {str(e["stage"]): e for _, e in analysis.ends.iterrows()}
    trained = [] if learning.empty else list(dict.fromkeys(learning.loc[learning["primary_chain"], "stage"]))
    for stage in [s for s in TRAINED_STAGES if s in ends or s in trained]:
        cell, learned = _learning_cell(learning, stage)
        end = ends.get(stage)
        label = STAGE_NAMES[stage] + (f" (to step {int(end['step'])})" if end is not None else "")
        row = {"stage": label, LEARNED: cell}
        if learned is False or end is None:
            row["base → end, W1/IQR"] = NO_COMPARISON if learned is False else "not scored"
        else:
            row.update(_movement_cells(analysis, end))
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def _learning_sentence(analysis: ChainAnalysis) -> str:
    learning = analysis.learning
    if learning.empty:
        return "The chain's learning evidence (metrics.json) is not on this machine, so learning is not shown."
    mine = learning[learning["primary_chain"] & learning["primary"]]
    parts = [
        f"{STAGE_NAMES[r['stage']]} {r['metric'].replace('_', ' ')} {_interval(r['change'], r['ci_low'], r['ci_high'])}"
        for _, r in mine.iterrows()
    ]
    silent = [STAGE_NAMES[s] for s in mine.loc[~mine["learned"].fillna(False).astype(bool), "stage"]]
    head = "Every stage learned on held-out data" if not silent else f"Not shown to learn: {', '.join(silent)}"
    return f"{head} (end − start, paired 95% CI): " + "; ".join(parts) + "."


def _last_learned_end(analysis: ChainAnalysis) -> pd.Series:
    """The last stage end whose stage learned (the last end when learning is unknown)."""
    learning = analysis.learning
    if learning.empty:
        return analysis.ends.iloc[-1]
    mine = learning[learning["primary_chain"] & learning["primary"]]
    silent = set(mine.loc[~mine["learned"].fillna(False).astype(bool), "stage"])
    kept = analysis.ends[~analysis.ends["stage"].isin(silent)]
    return (kept if len(kept) else analysis.ends).iloc[-1]


def finetuning_abstract(analysis: ChainAnalysis) -> str:
    chain, tests = analysis.chain, analysis.tests
    primary = chain[chain["primary"] & chain["stage"].ne("base")]
    stages = " → ".join(STAGE_NAMES[s] for s in dict.fromkeys(primary["stage"]))
    n_seq = int(tests["n_seq_a"].max()) if len(tests) else 0
    sentences = [
        f"Does fine-tuning move attention heads? `{analysis.base_source or analysis.base}` was trained {stages} "
        f"({int(primary['cumulative_step'].max())} steps) and each of {len(primary)} checkpoints scored on the "
        f"base's {n_seq} texts of {len(analysis.datasets)} datasets.",
        _learning_sentence(analysis),
    ]
    final = _last_learned_end(analysis)
    end = tests[(tests["comparison"] == "from base") & (tests["model_b"] == final["model"])]
    seeds = tests[(tests["comparison"] == "between seeds") & (tests["stage"] == final["stage"])]
    if len(end):
        text = (
            f"At the end of {STAGE_NAMES[final['stage']]}"
            + ("" if analysis.learning.empty else ", the last stage that learned,")
            + f" the median distance from the base is {end['w1_iqr'].median():.2f} IQR"
        )
        if len(seeds):
            text += f", against {seeds['w1_iqr'].median():.2f} between two seeds of the same training"
        beyond = beyond_seeds(tests, final)
        if beyond["beyond"].any():
            top = beyond.loc[(beyond["w1_iqr"] / beyond["w1_iqr_seed"]).idxmax()]
            text += (
                f" ({int(beyond['beyond'].sum())} of {len(beyond)} distances lie above their seed interval, the "
                f"largest `{top['score']}` on {top['dataset']}: {top['w1_iqr']:.2f} against {top['w1_iqr_seed']:.2f})"
            )
        yard = analysis.yardsticks
        for kind in ("template", "other family"):
            here = yard[yard["kind"] == kind] if not yard.empty else yard
            if len(here):
                name = "chat-vs-plain template" if kind == "template" else "other model family"
                text += f", {here['w1_iqr'].median():.2f} for the {name}"
        sentences.append(text + ".")
    moved = int((tests.loc[tests["comparison"] == "from base", "p_holm"] <= FAMILY_ALPHA).sum())
    n_from = int((tests["comparison"] == "from base").sum())
    sentences.append(
        f"{moved} of {n_from} base-to-checkpoint distributions moved (paired permutation, Holm over "
        f"{len(tests)} tests, p ≤ 0.01)."
    )
    heads = analysis.heads
    if not heads.empty:
        last = heads[(heads["comparison"] == "from base") & (heads["model_b"] == final["model"])]
        twin = heads[(heads["comparison"] == "between seeds") & (heads["stage"] == final["stage"])]
        text = f"Heads moved at the end (max-T, FWER 5%): {int(last['moved'].sum())}"
        if len(twin):
            text += f"; between seeds: {int(twin['moved'].sum())}"
        sentences.append(text + ".")
    return fit_sentences(sentences)


def finetuning_lead(writer: Writer, context: Context) -> bool:
    analysis = analyse_chain(context)
    if analysis is None:
        return False
    writer.abstract(finetuning_abstract(analysis))
    starts = _stage_starts(analysis)
    writer.headline(
        plots.finetuning_distance(analysis.tests, analysis.ends, starts, analysis.yardsticks, FAMILY_ALPHA),
        "headline_finetuning",
        "W1 between the base and each checkpoint in units of the base's interquartile range, against training "
        "steps, one panel per score and a line per dataset (filled: moved, Holm p ≤ 0.01 over the report's family; "
        "hollow: not). Grey bands: the distance between the stage ends of two seeds; dashed: the chat-vs-plain "
        "template contrast on the base.",
    )
    legend = writer.note("Reading the fine-tuning table", _legend(analysis))
    writer.main_table(
        stage_table(analysis),
        "main_table",
        legend="Per stage: learned?, distance from the base vs between seeds (W1/IQR, median [range]; how many "
        "lie above seed noise), moved distributions and heads.",
        full_legend=legend,
    )
    return True


def _stage_starts(analysis: ChainAnalysis) -> list[tuple[float, str]]:
    trained = analysis.chain[analysis.chain["primary"] & analysis.chain["stage"].ne("base")]
    by_stage = trained.groupby("stage", sort=False)
    starts = by_stage["cumulative_step"].min() - by_stage["step"].min()
    return [(float(v), STAGE_NAMES[s]) for s, v in starts.items()]


def _legend(analysis: ChainAnalysis) -> str:
    left = "; ".join(f"`{s}`: {why}" for s, why in analysis.left_out.items())
    return (
        "**learned**: the paired change of the stage's primary held-out metric (SFT: answer loss per token; DPO: "
        "implicit reward margin against the stage's start; GRPO: mean verifiable reward of sampled completions) "
        "between the stage's start and end on the same examples, with a 95% bootstrap interval over examples; "
        "learned when the interval excludes 0 in the direction training pushes it. **W1/IQR**: the Wasserstein-1 "
        "distance between two models' score distributions pooled over (text, layer, head), divided by the "
        "interquartile range of the base's distribution of that score, so that scores of different scales read "
        "alike; median [min–max] over datasets and scores. **seed → seed**: the same distance between the stage's "
        "ends of two chains that differ only in the training seed (data order, sampling): training noise, the "
        "yardstick for 'barely changes'. **above seed noise**: the (dataset, score) distances whose bootstrap "
        "interval lies wholly above the interval of the same distance between seeds (a description of size, not "
        "a test). **moved**: the paired permutation test (swapping the two models' labels "
        f"within texts or clusters, {analysis.n_perm} permutations) with Holm's adjustment over all "
        f"{len(analysis.tests)} tests of this report (every checkpoint, dataset and score, and the seed pairs), "
        "at 0.01. **heads moved**: the per-head paired sign-flip max-T test (Westfall-Young), family-wise error "
        f"5% over the heads of one (comparison, dataset, score); 'k of H × m' counts over m such families. "
        f"Left out of every test, count and figure: {left or 'nothing'}."
    )


def fine_tuning(writer: Writer, context: Context) -> None:
    analysis = analyse_chain(context)
    if analysis is None:
        return
    writer.heading("Fine-tuning: did each stage learn, and how far did the heads move?")
    if analysis.left_out:
        writer.text(
            "Left out of every test, count and figure: "
            + "; ".join(f"`{s}` ({why})" for s, why in analysis.left_out.items())
            + "."
        )
    _learning(writer, analysis)
    _distances(writer, analysis)
    _moved_heads(writer, analysis)
    with writer.appendix():
        writer.heading("Fine-tuning: the checkpoints", 3)
        writer.table(
            analysis.chain[["label", "stage", "step", "cumulative_step", "seed", "model"]],
            "finetuning_checkpoints",
            collapsed="every checkpoint with its full name (the chain's recipe hash)",
        )


def _learning(writer: Writer, analysis: ChainAnalysis) -> None:
    writer.heading("Did each stage learn?", 3)
    writer.text(_learning_sentence(analysis))
    if not analysis.learning.empty:
        writer.table(analysis.learning, "finetuning_learning", floatfmt=".4g")
    signal = analysis.signal
    if not signal.empty:
        writer.text(
            "Training signal per stage: the share of steps whose gradient was exactly 0 and, for GRPO, the share of "
            "steps at which every group of completions had all-equal rewards (no advantage, no gradient)."
        )
        writer.table(signal, "finetuning_training_signal", floatfmt=".3g")


def _distances(writer: Writer, analysis: ChainAnalysis) -> None:
    writer.heading("How far did the distributions move, against training noise?", 3)
    tests = analysis.tests
    shown = [
        "comparison",
        "dataset",
        "stage",
        "step",
        "cumulative_step",
        "score",
        "model_b",
        "w1",
        "w1_iqr",
        "w1_iqr_low",
        "w1_iqr_high",
        "p_value",
        "p_holm",
        "p_holm_min",
        "n_tests",
        "n_perm",
        "n_seq_a",
    ]
    writer.text(
        f"Every test of the report, one Holm family of {len(tests)} (p_holm reaches {tests['p_holm_min'].iloc[0]:.3g} "
        f"at best with {analysis.n_perm} permutations). 'between seeds' compares a stage's end with the same "
        "checkpoint of the replicate chain."
    )
    writer.table(tests[shown], "finetuning_tests", floatfmt=".3g", collapsed=f"all {len(tests)} distances and tests")
    yard = analysis.yardsticks
    if not yard.empty:
        writer.text(
            "Yardsticks on the same scale (descriptive, not tested): the base under another prompt format (the "
            "template contrast) and other model families against the base."
        )
        writer.table(
            yard[["kind", "model_b", "dataset", "score", "w1", "w1_iqr", "w1_iqr_low", "w1_iqr_high"]],
            "finetuning_yardsticks",
            floatfmt=".3g",
        )


def _moved_heads(writer: Writer, analysis: ChainAnalysis) -> None:
    heads = analysis.heads
    if heads.empty:
        return
    writer.heading("Which heads moved?", 3)
    counts = (
        heads.groupby(["comparison", "stage", "dataset", "score"], sort=False)
        .agg(heads=("moved", "size"), moved=("moved", "sum"), largest_shift_iqr=("shift_iqr", lambda s: s.abs().max()))
        .reset_index()
    )
    writer.text(
        "Per comparison, dataset and score: the heads whose mean score moved (paired sign-flip max-T over texts, "
        f"{HEAD_PERMUTATIONS} sign vectors, family-wise error 5% over the heads). Effect size: the head's mean "
        "shift in units of the base's IQR of the score (`shift_iqr`) and in units of its own per-text spread (`d_z`)."
    )
    writer.text("Heads moved, summed over datasets (largest |shift| in base IQRs):")
    summed = counts.groupby(["comparison", "stage", "score"], sort=False).agg(
        moved=("moved", "sum"), heads=("heads", "sum"), largest=("largest_shift_iqr", "max")
    )
    cells = summed.apply(lambda r: f"{int(r['moved'])} of {int(r['heads'])} (≤ {r['largest']:.2f})", axis=1)
    writer.table(
        cells.unstack("score").reset_index(),
        "finetuning_moved_head_summary",
    )
    writer.table(
        counts, "finetuning_moved_head_counts", floatfmt=".3g", collapsed="per dataset: heads moved and largest shift"
    )
    moved = heads[heads["moved"]]
    columns = [
        "comparison",
        "stage",
        "dataset",
        "score",
        "layer",
        "head",
        "mean_a",
        "mean_b",
        "shift_iqr",
        "d_z",
        "p_max_t",
    ]
    if not moved.empty:
        writer.table(
            moved[columns].sort_values(["comparison", "stage", "dataset", "score", "p_max_t"]),
            "finetuning_moved_heads",
            floatfmt=".3g",
            collapsed=f"the {len(moved)} moved heads with layer, head and effect size",
        )


__all__ = ["ChainAnalysis", "analyse_chain", "chain_order", "fine_tuning", "finetuning_lead", "stage_table"]
