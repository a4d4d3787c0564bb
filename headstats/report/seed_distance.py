"""The words and the figure of a seed study's distance rule (:mod:`headstats.stats.seed_margin`): the
answer per stage end, the verdicts figure, the main table's legend, the power the seeds gave, and the
paragraph that says why the rule replaced the contrast rule (a re-analysis of a contrast design is
post hoc and says so)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headstats.stats.seed_margin import EQUIVALENT, MOVED_BEYOND_MARGIN, UNDETERMINED, VERDICTS

COLOURS = {MOVED_BEYOND_MARGIN: "#b2182b", EQUIVALENT: "#1b7837", UNDETERMINED: "#777777"}
MAIN_COLUMNS = [
    "stage",
    "dataset",
    "score",
    "n_seeds",
    "mean_distance",
    "lower",
    "upper",
    "systematic",
    "seed_spread",
    "p_beyond_holm",
    "p_equivalent",
    "verdict",
]
QUESTION = "does one fine-tuning run move a head-score distribution by more than the margin?"
ESTIMAND = (
    "the expected distance from the base to one run's stage end, E d(base, end) in W1 over the base's IQR "
    "(the margin's units), estimated by the seeds' mean distance, each seed one unit"
)
WHY = (
    "Why this rule. The contrast rule registered earlier tested the mean base → stage distance minus the mean seed "
    "→ seed distance against the margin. Distances between noisy distributions do not subtract: with no systematic "
    "move at all that difference is negative (about −0.3 times the seed spread), so a margin that is a distance was "
    "compared with a quantity in other units, and where the seeds land exactly one margin from the base the "
    "contrast rule says 'equivalent' in nearly every simulated study (tests/test_seed_margin.py prints both rules' "
    "levels). The distance rule tests the quantity the margin measures."
)


def _stages(names: list[str]) -> str:
    upper = [str(n).upper() for n in names]
    return f"after {upper[0]}" if len(upper) == 1 else f"after {', '.join(upper[:-1])} and {upper[-1]}"


def answer(verdicts: pd.DataFrame, sentences: pd.DataFrame, margin: float, *, post_hoc: bool = False) -> str:
    """The sentence per stage end with the cells that decide it, then the tallies labelled with their
    adjustment."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}  # stage ends with one sentence and one reason
    for r in sentences.itertuples():
        beyond = verdicts[(verdicts["stage"] == r.stage) & (verdicts["verdict"] == MOVED_BEYOND_MARGIN)]
        cells = tuple(f"{c.dataset} {c.score}" for c in beyond.itertuples()) if r.sentence == "fails" else ()
        groups.setdefault((str(r.sentence), cells), []).append(str(r.stage))
    clauses = []
    for (sentence, cells), stages in groups.items():
        verb = "" if sentence in ("holds", "fails") else "is "
        reason = f" ({', '.join(cells)} moved beyond the margin)" if cells else ""
        clauses.append(f"{_stages(stages)} it {verb}{sentence}{reason}")
    lead = "Post hoc, under the distance rule: " if post_hoc else ""
    first = (
        f"{lead}**Does one fine-tuning run move the heads by more than the margin?** Per stage end × dataset × score, "
        f"the seeds' mean distance from the base against the margin of {margin:g} W1/IQR: {'; '.join(clauses)}."
    )
    counts = verdicts["verdict"].value_counts()
    decided = [f"{int(counts.get(v, 0))} {v}" for v in VERDICTS if counts.get(v, 0)]
    second = (
        f"Of {len(verdicts)} cells: {', '.join(decided)} ('moved beyond' Holm-adjusted over the cells of its stage "
        "end; 'equivalent' per cell, unadjusted: the sentence holds only when every cell of a stage end is, an "
        "intersection-union test)."
    )
    return f"{first}\n\n{second}"


def figure(verdicts: pd.DataFrame, margin: float, alpha: float) -> Figure:
    """Per cell, the seeds' mean distance from the base with its one-sided bounds, coloured by the
    verdict; the margin dashed. A cell without seeds is named, not drawn."""
    v = verdicts.reset_index(drop=True)
    fig = Figure(figsize=(7.5, 1.4 + 0.24 * len(v)), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(v))
    x = v["mean_distance"].to_numpy(dtype=float)
    low, high = v["lower"].to_numpy(dtype=float), v["upper"].to_numpy(dtype=float)
    shown, bounded = np.isfinite(x), np.isfinite(x) & np.isfinite(low) & np.isfinite(high)
    ax.hlines(y[bounded], low[bounded], high[bounded], color="#444444", linewidth=0.8, zorder=2)
    colours = [COLOURS.get(str(k), "#777777") for k in v["verdict"]]
    ax.scatter(x[shown], y[shown], c=[c for c, s in zip(colours, shown, strict=True) if s], s=24, zorder=3)
    for i in np.flatnonzero(~shown):
        ax.text(0, y[i], " no seed scored yet", va="center", fontsize=7, color="#777777")
    ax.axvline(margin, color="#b2182b", linewidth=0.8, linestyle="--")
    ax.set_yticks(y, [f"{r.stage} · {r.dataset} · {r.score}" for r in v.itertuples()], fontsize=7)
    ax.invert_yaxis()
    finite = np.concatenate([x[shown], high[bounded], [margin]])
    ax.set_xlim(0, max(finite.max() * 1.1, margin * 1.5))
    ax.set_xlabel(
        "mean distance base → stage end over the seeds (W1/IQR)\n"
        f"line: its one-sided {1 - alpha:.0%} bounds; dashed: the margin"
    )
    for verdict, colour in COLOURS.items():
        if (v["verdict"] == verdict).any():
            ax.scatter([], [], c=colour, s=24, label=verdict)
    fig.legend(fontsize=7, loc="outside lower center", ncol=3, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig


LEGEND = (
    "Seeds kept; the seeds' mean base → stage end W1/IQR with its one-sided bounds (seeds and texts resampled); the "
    "systematic displacement (base → where the seeds land together, bias-corrected) and the seed spread (mean seed → "
    "seed distance) beside it; the Holm-adjusted p of 'moved beyond the margin', the p of 'equivalent'; the verdict."
)


def method(margin: float, alpha: float, family: str, min_seeds: int) -> str:
    return (
        f"The question: {QUESTION} The quantity: {ESTIMAND}. Margin {margin:g} W1/IQR in every cell. Its standard "
        "error has two parts: the seeds' (their standard deviation over √n) and the texts' (the seeds' mean distance "
        "under a cluster bootstrap of the texts, the same resampled texts for the base and every seed), so the "
        f"bounds cover both the seeds and the texts; one-sided bounds mean ∓ t(n − 1, {1 - alpha:g}) · se. 'Moved "
        f"beyond the margin' when the lower bound's test of theta > margin rejects after Holm over the family "
        f"`{family}`; 'equivalent within the margin' when the upper bound lies below the margin (each cell at "
        f"{alpha:g}); otherwise undetermined. A stage end with fewer than {min_seeds} seeds that learned is "
        "undetermined. Beside the rule, not deciding: the systematic displacement, W1 from the base to the seeds' "
        "barycentre (the mean of their quantile functions), bias-corrected quantile by quantile (√max(m² − s²/n, 0) "
        "of the seeds' shifts) with a seed-bootstrap 95% interval (texts fixed), and the seed spread. A systematic "
        "move is where the seeds land together; it is not training noise, which is their scatter about it."
    )


def power_text(power: pd.DataFrame, decided_by: pd.DataFrame) -> str:
    """The power these seeds gave in the cells that decide each stage end's sentence (the cells beyond
    the margin when it fails; every cell when it holds or is undetermined)."""
    if not len(power):
        return "No cell has two seeds yet: no power to state."
    rows = power.merge(decided_by, on=["stage", "dataset", "score"])
    if not len(rows):
        rows = power
    parts = [
        f"{r.stage} {r.dataset} {r.score} {r.power:.2f} (towards '{r.towards}')"
        for r in rows.sort_values("power").head(6).itertuples()
    ]
    return (
        "Power achieved, from the spread these seeds show: the one-sided t test's at each cell's own estimate, "
        f"towards the verdict that estimate points to; in the deciding cells, lowest first: {'; '.join(parts)}. "
        "A cell whose estimate lies near the margin has power near alpha whatever the number of seeds "
        "(`tables/power.csv` has every cell)."
    )


def deciding_cells(verdicts: pd.DataFrame, sentences: pd.DataFrame) -> pd.DataFrame:
    """The cells that decide each stage end's sentence: those beyond the margin where it fails, else
    every cell of the stage end."""
    keep = []
    for r in sentences.itertuples():
        cells = verdicts[verdicts["stage"] == r.stage]
        if r.sentence == "fails":
            cells = cells[cells["verdict"] == MOVED_BEYOND_MARGIN]
        keep.append(cells[["stage", "dataset", "score"]])
    return pd.concat(keep, ignore_index=True) if keep else pd.DataFrame(columns=["stage", "dataset", "score"])


__all__ = ["LEGEND", "MAIN_COLUMNS", "WHY", "answer", "deciding_cells", "figure", "method", "power_text"]
