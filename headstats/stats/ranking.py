"""Which score function finds inactive heads best? Ranks and their agreement across models.

Input: per-curve summaries, one row per (model, score) of one task, as
:func:`headstats.summarize_curves` returns them (columns ``model, task, score,
within_1pt, crosses, norm_auc, grid_auc, ...``), whether the curves come from headstats' own
intervention results or from the study's published points (:func:`headstats.report.paper.paper_points`).

- ``norm_auc`` (the study's ranking): trapezoid area under accuracy vs realised % divided by the
  curve's own x-range. Reproduced for the paper's figures.
- ``grid_auc`` (the sound default): mean accuracy over the same realised-% range for every curve of
  a model.

A curve that zeroed no head (``zeroes_none``: a score tied at its extreme) measures nothing and has
no rank (NA), and is left out of the agreement between models.

Ranks follow the study: 1 = largest area; a missing or NaN area ranks last (the study set NaN areas
to 0, which is below every real accuracy area, so the order is the same); ties keep the canonical
score order of :func:`headstats.engine.scores.score_ids` (the order the study's notebook iterated in).
How sure each area, rank and reading is, from the per-question rows: :mod:`headstats.stats.curve_bootstrap`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

from headstats.engine.scores import score_ids as registered_score_ids
from headstats.stats import RANK_METRICS

NO_HEAD_ZEROED = "no head zeroed"


def _one_task(curves: pd.DataFrame, needed: Sequence[str]) -> pd.DataFrame:
    if not isinstance(curves, pd.DataFrame) or curves.empty:
        raise ValueError("no curve summaries: summarise intervention results with headstats.summarize_curves")
    missing = [c for c in ("model", "score", *needed) if c not in curves.columns]
    if missing:
        raise ValueError(f"curve summaries lack the column(s) {', '.join(missing)} (summarize_curves layout expected)")
    if "task" in curves.columns and curves["task"].nunique() > 1:
        tasks = ", ".join(sorted(map(str, curves["task"].unique())))
        raise ValueError(
            f"curve summaries of several tasks ({tasks}): rank one task at a time, e.g. curves[curves.task == 'mmlu']"
        )
    if curves.duplicated(["model", "score"]).any():
        raise ValueError("curve summaries hold a (model, score) pair twice: mixed runs?")
    return curves


def score_order(scores: Sequence[str]) -> list[str]:
    """The distinct ``scores`` in registry order (the order ties keep), unknown ids last by name."""
    canonical = {sid: i for i, sid in enumerate(registered_score_ids())}
    return sorted(dict.fromkeys(scores), key=lambda s: (canonical.get(s, len(canonical)), s))


def _model_order(curves: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(curves["model"].astype(str)))


def metric_table(curves: pd.DataFrame, column: str) -> pd.DataFrame:
    """models x scores table of one summary column (models in order of appearance, scores canonical)."""
    curves = _one_task(curves, [column])
    table = curves.pivot(index="model", columns="score", values=column)
    return table.reindex(index=_model_order(curves), columns=score_order(table.columns))


def check_metric(by: str) -> None:
    """Refuse a curve area that is not one of :data:`headstats.stats.RANK_METRICS`."""
    if by not in RANK_METRICS:
        raise ValueError(f"rank by one of {', '.join(RANK_METRICS)}, not {by!r}")


def _ranks_of(values: pd.Series) -> pd.Series:
    """1 = largest; NaN last; ties in canonical order (a stable sort of the canonical order)."""
    order = score_order(values.index.tolist())
    keyed = values.reindex(order).fillna(-np.inf).astype(float)
    ranked = keyed.sort_values(ascending=False, kind="stable").index
    return pd.Series(np.arange(1, len(ranked) + 1), index=ranked).reindex(order)


def rank_scores(curves: pd.DataFrame, by: str = "norm_auc") -> pd.DataFrame:
    """models x scores table of ranks (1 = best curve of that model by ``by``)."""
    check_metric(by)
    values = metric_table(curves, by)
    ranks = pd.DataFrame(index=values.index, columns=values.columns, dtype="Int64")
    for model in values.index:
        present = values.loc[model, score_order(_present(curves, model))]
        # A plain array: pandas cannot set a one-column Int64 row from a Series ("setting an array
        # element with a sequence", issue 14: a sweep with a single score).
        ranks.loc[model, present.index] = _ranks_of(present).reindex(present.index).to_numpy("int64")
    return ranks


def rank_correlation(curves: pd.DataFrame, by: str = "norm_auc") -> pd.DataFrame:
    """Spearman correlation between every two models' orderings of the score functions (over the
    scores both have), as the study's Figure 5 (pandas' Spearman there: tied areas share their
    average rank). NaN areas rank last, as in :func:`rank_scores`."""
    check_metric(by)
    values = metric_table(curves, by)
    models = list(values.index)
    present = np.array([[s in _present(curves, m) for s in values.columns] for m in models])
    areas = values.to_numpy(dtype=float)
    areas = np.where(np.isnan(areas), -np.inf, areas)
    out = np.full((len(models), len(models)), np.nan)
    for i in range(len(models)):
        for j in range(i, len(models)):
            both = present[i] & present[j]
            if both.sum() < 2:
                continue
            ra, rb = areas[i, both], areas[j, both]
            if np.ptp(_st.rankdata(ra)) > 0 and np.ptp(_st.rankdata(rb)) > 0:
                out[i, j] = out[j, i] = _st.spearmanr(ra, rb).statistic
    return pd.DataFrame(out, index=models, columns=models)


def _present(curves: pd.DataFrame, model: str) -> set[str]:
    """The scores of ``model`` with a curve that measured something (see ``zeroes_none``)."""
    mine = curves[curves["model"] == model]
    return set(mine.loc[~_flags(mine, "zeroes_none"), "score"])


def _flags(curves: pd.DataFrame, column: str) -> pd.Series:
    if column not in curves.columns:
        return pd.Series(False, index=curves.index)
    return curves[column].fillna(False).astype(bool)


def top_k(
    curves: pd.DataFrame, k: int = 5, by: str = "norm_auc", *, exclude: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Each model's ``k`` best score functions by :func:`rank_scores`, best first, leaving out the
    scores ``exclude`` names (e.g. ``random``, the yardstick a figure draws beside the best)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    ranks = rank_scores(curves, by)
    out = {}
    for model in ranks.index:
        r = ranks.loc[model].dropna().astype(int).sort_values(kind="stable")
        out[model] = [s for s in r.index if s not in exclude][:k]
    return out


def top_k_iou(curves: pd.DataFrame, k: int = 5, by: str = "norm_auc") -> pd.DataFrame:
    """IoU of every two models' top-``k`` sets of score functions (the study's Figure 6)."""
    tops = {m: set(v) for m, v in top_k(curves, k, by).items()}
    models = list(tops)
    out = pd.DataFrame(np.nan, index=models, columns=models)
    for a in models:
        for b in models:
            union = tops[a] | tops[b]
            out.loc[a, b] = len(tops[a] & tops[b]) / len(union) if union else np.nan
    return out


def within_one_point_table(curves: pd.DataFrame) -> pd.DataFrame:
    """models x scores table of the "within 1 point" number (% of heads zeroed), under the reading
    the curves were summarised with (a censored value is a lower bound: see
    :func:`within_one_point_labels`)."""
    return metric_table(curves, "within_1pt")


def within_one_point_labels(curves: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    """:func:`within_one_point_table` as text: ``≥ 26.50`` for a censored curve (it never dropped a
    point within the tested range), a trailing ``*`` for a non-monotone one (it dropped below the
    line and climbed back), ``no head zeroed`` for a curve that zeroed nothing."""
    values = within_one_point_table(curves)
    censored = _flag_table(curves, "censored", values)
    wobbly = _flag_table(curves, "non_monotone", values)
    silent = _flag_table(curves, "zeroes_none", values)
    out = pd.DataFrame("", index=values.index, columns=values.columns)
    for m in values.index:
        for s in values.columns:
            v = values.loc[m, s]
            if silent.loc[m, s]:
                out.loc[m, s] = NO_HEAD_ZEROED
                continue
            if pd.isna(v):
                continue
            text = f"{float(v):.{digits}f}"
            out.loc[m, s] = ("≥ " if censored.loc[m, s] else "") + text + ("*" if wobbly.loc[m, s] else "")
    return out


def _flag_table(curves: pd.DataFrame, column: str, like: pd.DataFrame) -> pd.DataFrame:
    if column not in curves.columns:
        return pd.DataFrame(False, index=like.index, columns=like.columns)
    flags = curves.assign(**{column: _flags(curves, column)})
    table = flags.pivot(index="model", columns="score", values=column)
    return table.reindex(index=like.index, columns=like.columns).fillna(False).astype(bool)


def _best(values: pd.Series, censored: pd.Series) -> str:
    """The score with the largest value; a censored value is a lower bound, so among equal values it
    wins; remaining ties go to the canonical order."""
    order = score_order(values.index.tolist())
    key = sorted(order, key=lambda s: (-float(values[s]), not bool(censored[s]), order.index(s)))
    return key[0]


def compare_with_reference(curves: pd.DataFrame, reference: str = "awft") -> pd.DataFrame:
    """The study's Table 2 for any set of curves: per model, the reference score's within-1-point
    value, the best value of every *other* curve (``random`` included: the study's notebook set
    apart only ``Dormant`` = awft), which curve that was, and which curve is best overall; then an
    ``Average`` row (means over models). Ties go to the first score in canonical order, as the
    notebook's strict ``>`` over its fixed iteration order did.

    Censored curves (``censored`` column, the default ``first`` reading) never dropped a point in the
    tested range: their value is a lower bound, ordered as such (it is never 0, and among equal
    values it wins). ``{reference}_censored`` and ``best_other_censored`` say which values are lower
    bounds, and so is an average over any of them (its flag in the ``Average`` row); ``order_note``
    says so in words.

    Where the curves carry certified values (:func:`headstats.summarize_curves` of per-question
    results), ``{reference}_certified`` and ``best_other_certified`` (the largest of the other
    curves: a best of several) stand beside their family-wise values (``*_certified_fw``: each curve
    at one-sided 0.05 / ``family_size``), which are the ones a "best other" statement may quote.
    """
    table = within_one_point_table(curves)
    if reference not in table.columns:
        raise ValueError(f"no {reference!r} curves to compare with; the curves have {', '.join(table.columns)}")
    flags = _flag_table(curves, "censored", table)
    rows = []
    for model in table.index:
        values = table.loc[model].dropna().astype(float)
        if reference not in values.index:
            raise ValueError(f"model {model!r} has no {reference!r} curve")
        censored = flags.loc[model, values.index]
        others = values.drop(reference)
        if others.empty:
            raise ValueError(f"model {model!r} has no curve besides {reference!r} to compare with")
        best_other = _best(others, censored.drop(reference))
        rows.append(
            {
                "model": model,
                reference: values[reference],
                "best_other": others[best_other],
                "best_other_score": best_other,
                "best_overall_score": _best(values, censored),
                f"{reference}_censored": bool(censored[reference]),
                "best_other_censored": bool(censored[best_other]),
            }
        )
    out = pd.DataFrame(rows)
    certified = [c for c in ("within_1pt_certified", "within_1pt_certified_fw") if c in curves.columns]
    for column in certified:
        values = metric_table(curves, column)
        suffix = column.removeprefix("within_1pt_")
        out[f"{reference}_{suffix}"] = [values.loc[m, reference] for m in out["model"]]
        out[f"best_other_{suffix}"] = [values.loc[m].drop(reference).max() for m in out["model"]]
    average = {
        "model": "Average",
        reference: out[reference].mean(),
        "best_other": out["best_other"].mean(),
        f"{reference}_censored": bool(out[f"{reference}_censored"].any()),
        "best_other_censored": bool(out["best_other_censored"].any()),
        **{c: out[c].mean() for c in out.columns if "_certified" in c},
    }
    out = pd.concat([out, pd.DataFrame([average])], ignore_index=True)
    out["order_note"] = np.where(
        out[f"{reference}_censored"] | out["best_other_censored"],
        "censored values are lower bounds (the curve never dropped a point in the tested range)",
        "",
    )
    return out
