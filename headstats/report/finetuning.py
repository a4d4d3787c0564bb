"""The report of a fine-tuning seed study (``headstats run FILE --stages report`` on a file with
``[design]``): the study's sentence per stage end first, one figure, the main table.

It renders the finished tables of :func:`headstats.stats.seeds.study_decision` (the verdict per
stage end x dataset x score over the seeds whose stages learned, and the sentence per stage end)
through the report writer; the design's registered keys and their hash are written beside them
(``design.json``) and recorded in the page, so a reader can check the report against the
pre-registered file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headstats.report import seed_distance
from headstats.report.registered import record_name, registration_line
from headstats.report.writer import ReportWriter
from headstats.stats.seeds import (
    EQUIVALENT,
    MOVED,
    MOVED_BEYOND_MARGIN,
    MOVED_WITHIN_MARGIN,
    UNDETERMINED,
)

VERDICT_COLOURS = {
    MOVED_BEYOND_MARGIN: "#b2182b",
    MOVED: "#ef8a62",
    MOVED_WITHIN_MARGIN: "#5aae61",
    EQUIVALENT: "#1b7837",
    UNDETERMINED: "#777777",
}
MAIN_COLUMNS = [
    "stage",
    "dataset",
    "score",
    "n_seeds",
    "from_base",
    "between_seeds",
    "mean_delta",
    "upper_bound",
    "p_moved_holm",
    "p_equivalent",
    "verdict",
]


@dataclass(frozen=True)
class SeedDecision:
    """What the report shows: the decision's tables and the design they follow."""

    title: str
    seeds: tuple[int, ...]  # every seed of the design
    margin: float
    alpha: float
    min_seeds: int
    family: str
    power_moved: float | None  # the design's stated power of the moved test at the margin
    power_equivalent: float | None  # and of the equivalence test at no movement beyond noise
    verdicts: pd.DataFrame
    sentences: pd.DataFrame
    learning: pd.DataFrame  # per (seed, stage): the primary metric's change, its interval, kept and reason
    distances: pd.DataFrame
    heads: pd.DataFrame  # per (cell, head): the seeds' mean shift from the base, its max-T test
    moved_heads: pd.DataFrame  # per cell: how many heads moved beyond the seeds, the largest
    machines: pd.DataFrame  # per cell: seed pairs within and across training machines (stats.seeds.machine_spread)
    registration: dict  # {"keys": ..., "sha256": ...}
    rule: str  # the design's registered rule: "distance" or "contrast"
    distance_verdicts: pd.DataFrame  # per cell: the distance rule (headstats.stats.seed_margin.study_verdicts)
    distance_sentences: pd.DataFrame
    power: pd.DataFrame  # per cell: the distance rule's power at its estimate with these seeds' spread
    model: str  # the base model and where its weights come from
    design_file: str
    design_sha256: str
    rebuild: str  # the command that rebuilds the report
    # the deciding keys the file changed since its first run recorded them (headstats.jobs.registration);
    # None: no record; results: the results folder, as the report names it
    amended: tuple[str, ...] | None = ()
    results: str = ""


def _stage_sentence(stages: list[str], sentence: str, kept: list[int]) -> str:
    """One clause for the stage ends that share a sentence: "after SFT and DPO it holds"."""
    names = [str(stage).upper() for stage in stages]
    where = f"after {names[0]}" if len(names) == 1 else f"after {', '.join(names[:-1])} and {names[-1]}"
    if sentence.endswith("scored"):
        learned = f"{kept[0]} of them learned" if len(set(kept)) == 1 else f"{'/'.join(map(str, kept))} learned"
        return f"{where} it is {sentence} ({learned}; it decides once all are)"
    if sentence == UNDETERMINED:  # decided cells that neither make it hold nor fail
        return f"{where} it is {sentence} (not every cell is shown within the margin, and none beyond it)"
    return f"{where} it is {sentence}" if sentence.startswith(UNDETERMINED) else f"{where} it {sentence}"


def abstract(decision: SeedDecision) -> str:
    """The study's sentence per stage end, then the cells' verdicts in numbers."""
    groups = decision.sentences.groupby("sentence", sort=False)
    stages = "; ".join(
        _stage_sentence(list(g["stage"]), str(sentence), [int(k) for k in g["seeds_kept"]]) for sentence, g in groups
    )
    counts = decision.verdicts["verdict"].value_counts()
    decided = len(decision.verdicts) - int(counts.get(UNDETERMINED, 0))
    first = (
        f"**Does fine-tuning barely change attention heads?** As registered, the claim holds at a stage end when in "
        f"every dataset × score cell the mean base → stage distance exceeds the mean seed → seed distance by less "
        f"than the [margin](#the-design) of {decision.margin:g} W1/IQR (a difference of distances; see the "
        f"re-analysis): {stages}."
    )
    parts = [f"{int(v)} {k}" for k, v in counts.items() if k != UNDETERMINED]
    second = (
        f"Of {len(decision.verdicts)} cells, {decided} are decided"
        + (f" ({', '.join(parts)}; 'moved' Holm-adjusted over each stage end, 'equivalent' per cell, unadjusted)"
           if parts else "")
        + "."
    )  # fmt: skip
    return f"{first}\n\n{second}" + (f" By dataset: {_by_dataset(decision.verdicts)}." if decided else "")


def _by_dataset(verdicts: pd.DataFrame) -> str:
    """The cells' verdicts per dataset, datasets with the same tally together: "mmlu and wikipedia: all
    9 equivalent within the margin; piqa: 5 moved beyond training noise, 4 undetermined"."""
    tallies: dict[str, list[str]] = {}
    for dataset, cells in verdicts.groupby("dataset", sort=False):
        counts = cells["verdict"].value_counts()
        tally = (
            f"all {len(cells)} {counts.index[0]}"
            if len(counts) == 1
            else ", ".join(f"{int(n)} {verdict}" for verdict, n in counts.items())
        )
        tallies.setdefault(tally, []).append(str(dataset))
    return "; ".join(
        f"{' and '.join(names) if len(names) < 3 else ', '.join(names[:-1]) + ' and ' + names[-1]}: {tally}"
        for tally, names in tallies.items()
    )


def headline_figure(decision: SeedDecision) -> Figure:
    """Per cell, mean(delta) (base -> stage distance less the seed -> seed one) with its one-sided upper
    bound, coloured by verdict; the lines at 0 (training noise) and at the margin."""
    v = decision.verdicts.reset_index(drop=True)
    fig = Figure(figsize=(7.5, 1.4 + 0.24 * len(v)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(v))
    x = v["mean_delta"].to_numpy(dtype=float) if "mean_delta" in v else np.full(len(v), np.nan)
    upper = v["upper_bound"].to_numpy(dtype=float) if "upper_bound" in v else np.full(len(v), np.nan)
    colours = [VERDICT_COLOURS.get(str(k), "#777777") for k in v["verdict"]]
    shown = np.isfinite(x)
    bounded = shown & np.isfinite(upper)
    ax.hlines(y[bounded], x[bounded], upper[bounded], color="#444444", linewidth=0.8, zorder=2)
    ax.scatter(x[shown], y[shown], c=[c for c, s in zip(colours, shown, strict=True) if s], s=24, zorder=3)
    for i in np.flatnonzero(~shown):
        ax.text(0, y[i], " too few seeds to decide", va="center", fontsize=7, color="#777777")
    ax.axvline(0, color="#444444", linewidth=0.8)
    ax.axvline(decision.margin, color="#b2182b", linewidth=0.8, linestyle="--")
    ax.set_yticks(y, [f"{r.stage} · {r.dataset} · {r.score}" for r in v.itertuples()], fontsize=7)
    ax.invert_yaxis()
    finite = np.concatenate([x[shown], upper[bounded], [decision.margin, 0.0]])
    ax.set_xlim(min(finite.min() * 1.1, -0.02), max(finite.max() * 1.1, decision.margin * 1.5))
    ax.set_xlabel(
        "mean(delta): distance base → stage end beyond the seeds' (W1/IQR)\n"
        f"line: its {1 - decision.alpha:.0%} upper bound; dashed: the margin"
    )
    for verdict, colour in VERDICT_COLOURS.items():
        if (v["verdict"] == verdict).any():
            ax.scatter([], [], c=colour, s=24, label=verdict)
    fig.legend(fontsize=7, loc="outside lower center", ncol=2, frameon=False)  # below: never over the data
    ax.grid(axis="x", alpha=0.3)
    return fig


def power_statement(decision: SeedDecision) -> str:
    """What the design could detect, as the pre-registered file states it (its power analysis)."""
    n = len(decision.seeds)
    if decision.rule == "distance":
        parts = [
            f"at least {p:.0%} towards '{what}' in the cells its plan expected to decide"
            for p, what in ((decision.power_moved, "moved beyond"), (decision.power_equivalent, "equivalent"))
            if p is not None
        ]
        source = "from an earlier study's seeds, each cell's estimate taken as its truth"
    else:
        parts = []
        if decision.power_equivalent is not None:
            parts.append(
                f"a cell whose stage ends are no further from the base than from one another is found equivalent "
                f"within the margin with probability at least {decision.power_equivalent:.0%}"
            )
        if decision.power_moved is not None:
            parts.append(
                f"a cell whose mean(delta) equals the margin is found to have moved beyond training noise with "
                f"probability {decision.power_moved:.0%} (the median over the cells)"
            )
        source = "a simulation whose seed spread came from one exploratory seed pair, not from these seeds"
    if not parts:
        return f"The design states no power for its {n} seeds."
    return f"Power stated in the design before any seed was trained ({n} seeds; {source}): " + "; ".join(parts) + "."


def machine_statement(decision: SeedDecision) -> str:
    """Which machines trained the seeds and whether the machine spread them apart."""
    seeds = decision.learning.drop_duplicates("seed")
    machines = seeds["machine"] if "machine" in seeds else pd.Series(dtype=str)
    recorded = machines[machines != "not recorded"]
    if not len(recorded):
        return "The seeds' training machines are not recorded."
    if recorded.nunique() == 1:
        return f"Every seed whose machine is recorded trained on {recorded.iloc[0]}."
    counts = "; ".join(f"{name}: {n}" for name, n in recorded.value_counts().sort_index().items())
    lead = (
        f"The seeds trained on {recorded.nunique()} machines (seeds per machine: {counts}; each seed's machine is in "
        "the learning table). A machine that moved the heads would set seeds from two machines further apart than "
        "seeds from one, and so inflate the training noise the verdicts measure against."
    )
    cells = decision.machines[decision.machines["stage"] != "all"]
    if not len(cells):
        return lead + " Too few seeds share a machine to compare pairs within and across machines."
    whole = decision.machines[decision.machines["stage"] == "all"]
    spread = f"{cells['ratio'].min():.2f}-{cells['ratio'].max():.2f}"
    jointly = (
        f" Over all {len(cells)} cells at once, pairs across machines lie {whole['ratio'].iloc[0]:.2f} times as far "
        f"apart as pairs on one machine (geometric mean; one-sided permutation p = {whole['p_value'].iloc[0]:.2g}, "
        "the machine labels relabelled in every cell together)."
        if len(whole)
        else ""
    )
    if cells["p_min"].min() * len(cells) > decision.alpha:
        per_cell = (
            f"their p-values are descriptive: none can fall below {cells['p_min'].min():.2g}, too coarse for Holm over "
            f"{len(cells)} cells to reach {decision.alpha:g}."
        )
    else:
        beyond = int((cells["p_holm"] <= decision.alpha).sum())
        per_cell = f"{beyond} of {len(cells)} cells further apart across machines at {decision.alpha:g} after Holm."
    return f"{lead}{jointly} Cell by cell the ratio runs {spread}; {per_cell}"


def heads_figure(decision: SeedDecision, score: str) -> Figure:
    """Per stage end (rows) x dataset (columns), the heads of one score as a layer x head grid: t of
    the seeds' mean shift from the base (red: up, blue: down), a dot on each head that moved beyond
    the seeds (max-T)."""
    heads = decision.heads[decision.heads["score"] == score]
    stages = list(dict.fromkeys(decision.verdicts["stage"]))
    datasets = list(dict.fromkeys(decision.verdicts["dataset"]))
    n_layers = int(heads["layer"].max()) + 1
    n_heads = int(heads["head"].max()) + 1
    fig = Figure(figsize=(2.2 * len(datasets) + 1.0, 0.9 + 0.12 * n_layers * len(stages)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(stages), len(datasets), squeeze=False))
    finite = np.abs(heads["t"].to_numpy(dtype=float))
    finite = finite[np.isfinite(finite)]
    limit = float(np.quantile(finite, 0.99)) if finite.size else 1.0
    image = None
    for i, stage in enumerate(stages):
        for j, dataset in enumerate(datasets):
            ax = axes[i, j]
            cell = heads[(heads["stage"] == stage) & (heads["dataset"] == dataset)]
            grid = np.full((n_layers, n_heads), np.nan)
            grid[cell["layer"].to_numpy(int), cell["head"].to_numpy(int)] = cell["t"].to_numpy(float)
            image = ax.imshow(
                np.clip(grid, -limit, limit), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", origin="upper"
            )
            moved = cell[cell["moved"].astype(bool)]
            ax.scatter(moved["head"], moved["layer"], s=6, c="black")
            ax.set_xticks(range(n_heads))
            ax.tick_params(labelsize=6)
            if i == 0:
                ax.set_title(dataset, fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{stage}\nlayer", fontsize=7)
            if i == len(stages) - 1:
                ax.set_xlabel("head", fontsize=7)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label=f"t of the mean shift of {score} over the seeds")
    return fig


def _distance_decision(writer: ReportWriter, decision: SeedDecision) -> None:
    """The registered distance rule: the answer, its figure, its table, the sentences and the power."""
    v, sentences = decision.distance_verdicts, decision.distance_sentences
    writer.abstract(seed_distance.answer(v, sentences, decision.margin))
    writer.headline(
        seed_distance.figure(v, decision.margin, decision.alpha),
        "verdicts",
        "Per stage end × dataset × score: the seeds' mean distance from the base (W1 over the base's IQR) with its "
        "bounds; colour: the verdict.",
    )
    writer.main_table(v[seed_distance.MAIN_COLUMNS], "verdicts", legend=seed_distance.LEGEND, full_legend="the-design")
    writer.heading("The study's sentence per stage end")
    writer.table(sentences, "sentences")
    writer.text(seed_distance.power_text(decision.power, seed_distance.deciding_cells(v, sentences)))
    writer.text(power_statement(decision))
    writer.table(decision.power, "power", collapsed="The power these seeds gave in every cell")
    writer.table(v, "estimates", collapsed=ESTIMATES)


ESTIMATES = (
    "Every cell in full: the standard error's seed and text parts, the seeds' sd, the systematic displacement's "
    "interval, the texts and clusters"
)


def _contrast_decision(writer: ReportWriter, decision: SeedDecision) -> None:
    """The registered contrast rule, as registered, then the post hoc re-analysis under the distance rule."""
    registered = abstract(decision).split("\n\n")[0]  # the tallies go to the table: 150 words in all
    post_hoc = seed_distance.answer(
        decision.distance_verdicts, decision.distance_sentences, decision.margin, post_hoc=True
    ).split("\n\n")[0]
    writer.abstract(f"{registered}\n\n{post_hoc} See [the re-analysis](#re-analysis-under-the-distance-rule-post-hoc).")
    writer.headline(
        headline_figure(decision),
        "verdicts",
        "Per stage end × dataset × score, as registered: mean(delta), the base → stage distance less the seed → seed "
        "one, in W1 over the base's IQR, with its upper bound; colour: the verdict.",
    )
    main = decision.verdicts[[c for c in MAIN_COLUMNS if c in decision.verdicts]]
    writer.main_table(
        main,
        "verdicts",
        legend="As registered: seeds kept, mean base -> stage and seed -> seed W1/IQR, their difference with its upper "
        "bound, the Holm-adjusted p of 'moved', the p of 'equivalent' (per cell, unadjusted), the verdict.",
        full_legend="the-design",
    )
    writer.heading("The study's sentence per stage end")
    writer.table(decision.sentences, "sentences")
    writer.text(power_statement(decision))
    writer.heading("Re-analysis under the distance rule (post hoc)")
    writer.text(
        "Post hoc: the rule below was chosen after these seeds were scored, so it decides nothing here; a fresh "
        "confirmation on new seeds and new texts registers it before its data. " + seed_distance.WHY
    )
    writer.figure(
        seed_distance.figure(decision.distance_verdicts, decision.margin, decision.alpha),
        "distance_verdicts",
        "Post hoc: the seeds' mean distance from the base with its bounds, against the margin.",
    )
    columns = seed_distance.MAIN_COLUMNS
    writer.table(decision.distance_verdicts[columns], "distance_verdicts")
    writer.table(decision.distance_sentences, "distance_sentences")
    deciding = seed_distance.deciding_cells(decision.distance_verdicts, decision.distance_sentences)
    writer.text(seed_distance.power_text(decision.power, deciding))
    writer.table(decision.power, "power", collapsed="The power these seeds gave the distance rule in every cell")
    writer.table(decision.distance_verdicts, "distance_estimates", collapsed=ESTIMATES)


def write_seed_report(decision: SeedDecision, out: Path, inputs: dict | None = None) -> Path:
    """Write the seed study's report to ``out``; returns ``out/index.html``. ``inputs``: what the build
    read (:func:`headstats.report.freshness.report_inputs`), recorded in its manifest."""
    n_scored = int(decision.sentences["seeds_scored"].max()) if len(decision.sentences) else 0
    subtitle = (
        f"{len(decision.seeds)} seeds in the design, {n_scored} scored; design {decision.design_file}, registered "
        f"keys' SHA-256 `{decision.registration['sha256'][:16]}`."
    )
    amended = None if decision.amended is None else list(decision.amended)
    registered = registration_line(amended, decision.results, n_scored > 0, more="under the design")
    subtitle += f" {registered.strip()}" if registered else ""
    writer = ReportWriter(out, decision.title, subtitle=subtitle)
    if decision.rule == "distance":
        _distance_decision(writer, decision)
    else:
        _contrast_decision(writer, decision)
    writer.heading("Learning per seed")
    writer.text(
        "A seed enters a stage end's cells only when that stage and every earlier stage of its chain learned: the "
        "95% paired interval of its primary metric's change on the evidence split excludes 0 in the training "
        "direction. A seed kept out is listed here with its reason."
    )
    writer.table(decision.learning, "learning")
    writer.heading("Which heads moved beyond the seeds")
    counts = decision.moved_heads
    n_min = int(counts["n_seeds"].min()) if len(counts) else 0
    writer.text(
        "Beside the pre-registered rule, not part of it: per stage end × dataset × score and head, each kept seed's "
        "shift of the head's mean from the base (in the base's IQR), tested against the seeds' own spread by a "
        "sign-flip max-T test over the seeds (family-wise error "
        f"{decision.alpha:g} over the heads of each cell; the null is a stage end whose heads scatter around the "
        "base as the seeds scatter around one another). Pooled distances cannot see heads that trade values; this "
        f"can. With n seeds no p falls below 2^(1 − n): {n_min} seeds reach "
        + (f"{2.0 ** (1 - n_min):.2g}." if n_min else "nothing yet.")
    )
    writer.table(counts, "moved_heads")
    for score in dict.fromkeys(decision.verdicts["score"]):
        if len(decision.heads[decision.heads["score"] == score]):
            writer.figure(
                heads_figure(decision, score),
                f"heads_{score}",
                f"{score}: t of each head's mean shift from the base over the seeds (red up, blue down); a dot: "
                "moved beyond the seeds.",
            )
    with writer.appendix():
        writer.heading("The design", 3)
        contrast = (
            f"Margin {decision.margin:g} W1/IQR in every cell; one-sided sign-flip tests over seeds at "
            f"{decision.alpha:g}: 'moved' (mean(delta) > 0) and 'beyond the margin' (mean(delta) > margin), Holm "
            f"over the family `{decision.family}`; 'equivalent' (mean(delta) < margin) per cell. A stage end with "
            f"fewer than {decision.min_seeds} seeds that learned is undetermined. delta_s = d(base, end_s) − "
            "(2 b_s − B), b_s the mean distance of seed s's end to the other seeds' and B the mean over all pairs."
        )
        distance = seed_distance.method(decision.margin, decision.alpha, decision.family, decision.min_seeds)
        registered = distance if decision.rule == "distance" else f"{contrast} The post hoc re-analysis: {distance}"
        writer.text(
            f"{registered} The model: {decision.model}. The file `{decision.design_file}` (SHA-256 "
            f"`{decision.design_sha256}`) states the reasons; its deciding keys hash to "
            f"`{decision.registration['sha256']}` (`design.json`)."
        )
        if decision.amended:
            writer.text(
                f"Changed after the first run recorded the keys in `{record_name(decision.results)}` (an "
                f"amendment, not pre-registered): {'; '.join(decision.amended)}."
            )
        writer.details(
            "The registered keys", json.dumps(decision.registration, indent=2, sort_keys=True), file="design.json"
        )
        writer.heading("Machines", 3)
        writer.text(machine_statement(decision))
        if len(decision.machines):
            writer.table(decision.machines, "machines", collapsed="Seed pairs within and across machines per cell")
        writer.heading("Rebuild", 3)
        writer.text(f"`{decision.rebuild}` rebuilds this report from the score tables and chain records alone.")
        writer.table(decision.distances, "distances", collapsed="Every base -> stage and seed -> seed distance")
        writer.table(decision.heads, "heads", collapsed="Every head's shift from the base and its max-T test")
    writer.inputs = inputs
    return writer.write()


__all__ = [
    "SeedDecision",
    "abstract",
    "headline_figure",
    "heads_figure",
    "machine_statement",
    "power_statement",
    "write_seed_report",
]
