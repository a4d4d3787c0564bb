"""``headstats paper``: the study's Table 2 and MMLU figures, rebuilt from its published numbers.

The study (Sandoval-Segura et al., ICLR 2026) published every MMLU intervention point in the saved
outputs of its notebook; headstats bundles them (``headstats/data/paper_mmlu_curves.json``, MIT
licence, see ``headstats/data/README.md``). :func:`paper_points` turns them into the per-point table
that :func:`headstats.summarize_interventions` returns for headstats' own results, so the
same code (:func:`headstats.summarize_curves`, :mod:`headstats.stats.ranking`,
:mod:`headstats.report.plots`, :func:`headstats.report.sections.add_curve_sections`) produces both the paper's
figures and those of a new run.

Choices, each checked against the notebook ``plot-accuracy-vs-percent-of-heads-zeroed.ipynb``:

- baseline = the ``Random`` curve's first point (p = 0), the notebook's ``RandomHeads:0.0`` run;
- Table 2's "best other" is the best within-1-point value over every curve except ``awft``
  (``Dormant``): the notebook's cell sets apart only ``Dormant``, so ``random`` counts among the
  others (it never wins on the published curves: at most 1.85% against at least 5.76%);
- ranks by the normalised AUC (``norm_auc``), as the notebook's Figures 3, 5 and 6;
- top-3 panels: ``random`` plus the three best non-random curves (the notebook drew random plus
  the top three, which would show only two scores if random ranked in the top three; it does not
  for the three models shown).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pandas as pd

from headstats.engine.scores import get_score
from headstats.report import plots
from headstats.report.sections import add_curve_sections, write_provenance
from headstats.report.sections.context import term
from headstats.report.writer import ReportWriter
from headstats.specs import PaperSpec
from headstats.stats import ranking
from headstats.stats.summary import BASELINE, CURVE_QUESTION_COLUMNS, POINT_COLUMNS, summarize_curves

DATA_FILE = "paper_mmlu_curves.json"
TASK = "mmlu"

# Class names of the study's code -> headstats score ids (docs/design.md#paper-data).
PAPER_SCORE_IDS: dict[str, str] = {
    "Random": "random",
    "Dormant": "awft",
    "NormalizedDormant": "awft_ln",
    "Entropy": "entropy",
    "NormalizedEntropy": "entropy_ln",
    "ValueVectorMagnitudeFirstToken": "ftvvn",
    "ValueVectorMagnitudeNormalizedFirstToken": "ftvvn_ln",
    "ValueVectorAvgMagnitude": "avvn",
    "ValueVectorAvgNormalizedMagnitude": "avvn_ln",
    "HeadOutputMagnitudeLastToken": "lthon",
    "HeadOutputMagnitudeNormalizedLastToken": "lthon_ln",
    "HeadOutputMagnitudeNormalizedHeadLastToken": "lthon_hn",
    "UnnormalizedHONOR": "ahon",
    "HONOR": "ahon_ln",
}
# The models of the study's Figure 4 (random + top-3 curves).
TOP_CURVE_MODELS = ("Llama-3.1-8B-Instruct", "OLMo-2-1124-7B-Instruct", "Qwen2.5-3B")
TARGETS = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30)


def load_published() -> dict[str, dict[str, list[list[float]]]]:
    """The bundled JSON: model -> class name -> [[threshold, realised %, accuracy %], ...]."""
    text = resources.files("headstats").joinpath("data", DATA_FILE).read_text()
    return json.loads(text)


def _targets(score_id: str, thresholds: list[float]) -> list[float]:
    """Recover each point's target p: the study calibrated one threshold per p in :data:`TARGETS`,
    monotone in the score's direction (larger p = smaller threshold for "above" scores)."""
    if get_score(score_id).is_random:
        return [float(t) for t in thresholds]  # random's threshold is p itself
    if len(thresholds) != len(TARGETS) or len(set(thresholds)) != len(thresholds):
        raise ValueError(f"{score_id}: expected {len(TARGETS)} distinct thresholds, got {thresholds}")
    descending = get_score(score_id).inactive_when == "above"
    order = sorted(range(len(thresholds)), key=lambda i: thresholds[i], reverse=descending)
    targets = [0.0] * len(thresholds)
    for rank, i in enumerate(order):
        targets[i] = TARGETS[rank]
    return targets


def paper_points() -> pd.DataFrame:
    """The published points in the layout of :func:`headstats.summarize_interventions`
    (``model, task, score, target, threshold, realised_pct, accuracy``; per-question columns NaN),
    with one ``baseline`` row per model."""
    rows = []
    for model, curves in load_published().items():
        baseline = float(curves["Random"][0][2])
        rows.append(
            {"model": model, "task": TASK, "score": BASELINE, "target": 0.0, "realised_pct": 0.0, "accuracy": baseline}
        )
        for class_name, points in curves.items():
            sid = PAPER_SCORE_IDS[class_name]
            targets = _targets(sid, [p[0] for p in points])
            for (threshold, realised, accuracy), target in zip(points, targets, strict=True):
                rows.append(
                    {
                        "model": model,
                        "task": TASK,
                        "score": sid,
                        "target": target,
                        "threshold": threshold,
                        "realised_pct": realised,
                        "accuracy": accuracy,
                    }
                )
    return pd.DataFrame(rows).reindex(columns=list(POINT_COLUMNS))


def paper_curves(points: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-curve summaries of the published points (:func:`headstats.summarize_curves` with the
    study's ``reading="study"``), in the study's model order. The per-question columns (certified
    bracket, questions, detectable drop) are meaningless for published aggregates and are dropped."""
    points = paper_points() if points is None else points
    # The study's reading of "within 1 point" (last crossing, 0 if none), so Table 2 is the paper's.
    curves = summarize_curves(None, points, reading="study")  # type: ignore[arg-type]
    curves = curves.drop(columns=list(CURVE_QUESTION_COLUMNS))
    order = {m: i for i, m in enumerate(load_published())}
    return curves.sort_values("model", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def table2(curves: pd.DataFrame | None = None) -> pd.DataFrame:
    """The study's Table 2: ``model, awft, best_other, best_overall_score`` + an ``Average`` row."""
    curves = paper_curves() if curves is None else curves
    table = ranking.compare_with_reference(curves, "awft")
    return table[["model", "awft", "best_other", "best_overall_score"]]


def paper_abstract(t2: pd.DataFrame, curves: pd.DataFrame) -> str:
    """Table 2's answer in words: the averages, their range over models, and how often ``awft`` is
    the best score, from the table itself."""
    models = t2[t2["model"] != "Average"]
    average = t2[t2["model"] == "Average"].iloc[0]
    best = models["best_overall_score"].value_counts()
    return (
        f"A published study switched off attention heads in {len(models)} language models and measured how much "
        "their answers to MMLU test questions suffered; this report recomputes its main table from its published "
        "numbers. How many attention heads can the study's models lose while MMLU accuracy stays "
        f"{term('within 1 point', 'within-one-point')}, and "
        f"does the attention-sink score (`awft`) find them? Averaged over the {len(models)} models, `awft` zeroes "
        f"{average['awft']:.2f}% of heads within 1 point, the best other score {average['best_other']:.2f}% "
        f"(per model {models['awft'].min():.1f} to {models['awft'].max():.1f}% against "
        f"{models['best_other'].min():.1f} to {models['best_other'].max():.1f}%). The best score overall is "
        + ", ".join(f"`{s}` for {n}" for s, n in best.items())
        + f" of {len(models)} models. Rebuilt from the study's {len(curves)} published curves with its own reading "
        "of 'within 1 point'; the published points carry no per-question answers, so these numbers have no "
        "intervals."
    )


def write_paper(out: str | Path, *, spec: PaperSpec | None = None, **options: object) -> Path:
    """Write Table 2, the per-model tables and the figures under ``out``; returns ``out/index.html``.
    The options are :class:`headstats.specs.PaperSpec`'s (``spec``, or its fields by name)."""
    spec = PaperSpec.from_kwargs(options, base=spec)
    writer = ReportWriter(out, "The study's MMLU results, rebuilt from its published numbers", dpi=spec.dpi)
    points = paper_points()
    curves = paper_curves(points)
    t2 = table2(curves)
    writer.abstract(paper_abstract(t2, curves))
    writer.headline(
        plots.within_one_point_dots(
            t2, "awft", "best_other", title="% of heads zeroed within 1 MMLU point: awft vs the best other score"
        ),
        "table2_dots",
        "The study's Table 2 per model: `awft` (circles) against the best other curve (squares); the last row is "
        "the average over models.",
    )
    legend = writer.note(
        "Reading Table 2",
        "`awft` (average weight of the first token, the attention-sink score) against the best of every other "
        "curve (`random` included, as in the study's notebook), per model; the last row averages over models. "
        "Values are the study's reading of 'within 1 point' (the realised % at the last crossing of baseline - 1 "
        "point, 0 when the curve never crosses). Study: 4.61 vs 12.18. The published points are aggregates "
        "without per-question answers, so no interval can be computed.",
    )
    writer.main_table(
        t2,
        "table2",
        legend="Table 2: % of heads zeroed within 1 MMLU point by `awft` and by the best other score, per model.",
        full_legend=legend,
        floatfmt=".2f",
        csv="table2.csv",
    )
    with writer.appendix():
        writer.heading("Source", 3)
        writer.text(
            "Source: the saved outputs of `plot-accuracy-vs-percent-of-heads-zeroed.ipynb` of "
            "github.com/psandovalsegura/inactive-heads (MIT licence, Copyright (c) 2026 Pedro Sandoval), bundled as "
            f"`headstats/data/{DATA_FILE}`: {curves['model'].nunique()} models x {curves['score'].nunique()} curves "
            f"x {len(TARGETS)} points. Rebuild with `headstats paper --out DIR`."
        )
    add_curve_sections(
        writer,
        points,
        curves,
        rank_by="norm_auc",
        top_models=TOP_CURVE_MODELS,
        key_tables_at_root=True,
        progress=spec.progress,
    )
    write_provenance(
        writer,
        [
            {
                "partition": f"headstats/data/{DATA_FILE}",
                "source": "published (see headstats/data/README.md)",
                "models": int(curves["model"].nunique()),
                "curves": len(curves),
            }
        ],
    )
    return writer.write()


__all__ = [
    "PAPER_SCORE_IDS",
    "TOP_CURVE_MODELS",
    "load_published",
    "paper_curves",
    "paper_points",
    "table2",
    "write_paper",
]
