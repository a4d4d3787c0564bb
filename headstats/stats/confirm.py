"""Verdicts of a pre-registered confirmatory run (docs/statistics.md#confirmation-verdicts): a
confirmatory claim is stated before its run and tested on questions its choice never saw.

A claim says: zeroing the heads ``score`` calls inactive at ``target`` (threshold calibrated as the
sweep calibrates it) costs ``model`` at most ``drop`` accuracy points on ``task``. It is tested on
every computation path it was run on (attention kernel x model dtype; a path is one results folder
of per-question rows, :func:`headstats.read_interventions`), each against that path's own baseline
on the same questions:

- per path, the one-sided upper bound of the paired drop (Tango's score bound,
  :func:`headstats.stats.paired.drop_bound_from_counts`, taken at the effective number of questions
  where answers change together within a cluster, as :func:`headstats.summarize_interventions`
  does) at level ``(1 - confidence) / k`` for ``k`` claims (Bonferroni: every confirmed claim holds
  at once with ``confidence``);
- the claim is **confirmed** when the bound is at most ``drop`` on every planned path. Requiring
  every path is an intersection-union test: it needs no adjustment over the paths, and a claim that
  holds on one path only (a kernel's or a dtype's rounding) is not confirmed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from headstats.stats import summary as S
from headstats.stats.paired import design_effect, drop_bound_from_counts, wilson_interval

CLAIM_COLUMNS = ("claim", "model", "task", "score", "target", "zeroed_pct", "paths")
PATH_COLUMNS = (
    "claim",
    "path",
    "n_questions",
    "n_clusters",
    "cluster",
    "baseline",
    "accuracy",
    "realised_pct",
    "lost",
    "gained",
    "design_effect",
    "drop",
    "drop_upper",
    "bound_if_no_drop",
    "level",
    "certified",
)

COUNT_COLUMNS = ("n_questions", "n_clusters", "lost", "gained")
BASELINE_COLUMNS = (
    "model",
    "task",
    "path",
    "n_questions",
    "n_clusters",
    "cluster",
    "baseline",
    "baseline_low",
    "baseline_high",
    "chance",
    "floor",
)


def claim_name(model: str, task: str, score: str, target: float) -> str:
    """``smollm2-135m hellaswag ahon_ln@0.05``: how a claim is named in every table."""
    return f"{model} {task} {score}@{target:g}"


def claim_bounds(
    rows: Mapping[str, pd.DataFrame],
    claims: pd.DataFrame,
    *,
    drop: float = 1.0,
    confidence: float = 0.95,
    metric: str = "correct",
) -> pd.DataFrame:
    """One row per (claim, planned path): the held-out questions paired with the path's baseline, the
    realised % of heads zeroed, the changed answers, the design effect and the one-sided upper bound
    of the drop (points) at ``level`` = ``(1 - confidence) / len(claims)``; ``certified`` when it is at
    most ``drop``. ``rows``: path name -> per-question rows of that path; ``claims``: the columns
    :data:`CLAIM_COLUMNS` (``paths``: the path names the claim was planned on; ``model`` the results'
    slug). A planned path without the claim's point or baseline gives empty counts and an empty
    ``certified`` (not run is neither certified nor refuted). ``metric``: the per-question column of
    correctness read (``correct``: raw accuracy; ``correct_norm``: length-normalised)."""
    missing = [c for c in CLAIM_COLUMNS if c not in claims.columns]
    if missing:
        raise ValueError(f"claims lack the column(s) {', '.join(missing)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, not {confidence}")
    if claims.empty:
        raise ValueError("no claims to test")
    level = (1.0 - confidence) / len(claims)
    prepared = {path: S.prepare_rows(frame, metric) for path, frame in rows.items() if len(frame)}
    out = []
    for claim in claims.itertuples(index=False):
        name = claim_name(claim.model, claim.task, claim.score, claim.target)
        for path in claim.paths:
            out.append(_one_path(name, path, prepared.get(path), claim, level, drop))
    frame = pd.DataFrame(out, columns=list(PATH_COLUMNS))
    # Counts stay integers (empty where a path has not run), so tables print 3000, never 3e+03.
    return frame.astype({c: "Int64" for c in COUNT_COLUMNS} | {"certified": "boolean"})


def _one_path(name: str, path: str, frame: pd.DataFrame | None, claim, level: float, drop: float) -> dict:
    row: dict[str, object] = dict.fromkeys(PATH_COLUMNS, math.nan)
    row.update(claim=name, path=path, level=level, certified=pd.NA, cluster="")
    if frame is None:
        return row
    mine = frame[(frame["model"] == claim.model) & (frame["task"] == claim.task)]
    base = mine[mine["score"] == S.BASELINE]
    point = mine[(mine["score"] == claim.score) & np.isclose(mine["target"].astype(float), claim.target)]
    if base.empty or point.empty:
        return row
    unit, labels = S.question_clusters(point, None)
    here = point.assign(_cluster=labels).set_index(list(S.QUESTION))
    joined = here[["_ok", "_cluster", "n_zeroed", "n_heads"]].join(
        base.set_index(list(S.QUESTION))["_ok"].rename("_base"), how="inner"
    )
    a, b = joined["_base"].to_numpy(bool), joined["_ok"].to_numpy(bool)
    clusters = None if unit == "question_id" else joined["_cluster"].to_numpy()
    deff = design_effect(a, b, clusters)
    lost, gained = int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b))
    bound = drop_bound_from_counts(lost, gained, len(joined), 1.0 - level, deff)
    # The same churn with no net drop: how much of the tolerance changed answers alone take.
    churn = drop_bound_from_counts((lost + gained) / 2, (lost + gained) / 2, len(joined), 1.0 - level, deff)
    row.update(
        n_questions=len(joined),
        n_clusters=int(joined["_cluster"].nunique()),
        cluster=unit,
        baseline=100.0 * a.mean(),
        accuracy=100.0 * b.mean(),
        realised_pct=100.0 * float((joined["n_zeroed"] / joined["n_heads"]).mean()),
        lost=lost,
        gained=gained,
        design_effect=deff,
        drop=100.0 * bound.drop,
        drop_upper=100.0 * bound.upper,
        bound_if_no_drop=100.0 * churn.upper,
        certified=bool(100.0 * bound.upper <= drop),
    )
    return row


def path_baselines(
    rows: Mapping[str, pd.DataFrame], claims: pd.DataFrame, *, confidence: float = 0.95, metric: str = "correct"
) -> pd.DataFrame:
    """What the run can show, before any claim: one row per (model, task, planned path) of the claims,
    with the held-out questions and their clusters, the unzeroed model's accuracy (%) with its 95%
    Wilson interval (questions taken as independent), chance (%), and the ``floor``: the one-sided
    upper bound of the drop (points, at the claims' level ``(1 - confidence) / len(claims)``) when no
    answer changes, the least any claim on that path can show. A path not run leaves its row empty."""
    level = (1.0 - confidence) / len(claims)
    prepared = {path: S.prepare_rows(frame, metric) for path, frame in rows.items() if len(frame)}
    out = []
    for (model, task), group in claims.groupby(["model", "task"], sort=False):
        for path in dict.fromkeys(p for paths in group["paths"] for p in paths):
            row: dict[str, object] = dict.fromkeys(BASELINE_COLUMNS, math.nan)
            row.update(model=model, task=task, path=path, cluster="")
            frame = prepared.get(path)
            base = pd.DataFrame() if frame is None else frame[(frame["model"] == model) & (frame["task"] == task)]
            base = base[base["score"] == S.BASELINE] if len(base) else base
            if len(base):
                n, right = len(base), int(base["_ok"].sum())
                unit, labels = S.question_clusters(base, None)
                low, high = wilson_interval(right, n)
                row.update(
                    n_questions=n,
                    n_clusters=len(np.unique(labels)),
                    cluster=unit,
                    baseline=100.0 * right / n,
                    baseline_low=100.0 * low,
                    baseline_high=100.0 * high,
                    chance=S.chance_percent(base),
                    floor=100.0 * drop_bound_from_counts(0, 0, n, 1.0 - level).upper,
                )
            out.append(row)
    frame = pd.DataFrame(out, columns=list(BASELINE_COLUMNS))
    return frame.astype({"n_questions": "Int64", "n_clusters": "Int64"})


AGREEMENT_COLUMNS = (
    "model",
    "task",
    "path",
    "against",
    "n_questions",
    "answers_differ",
    "lost",
    "gained",
    "change",
    "gold_loglik_median",
    "gold_loglik_max",
)


def path_agreement(rows: Mapping[str, pd.DataFrame], claims: pd.DataFrame) -> pd.DataFrame:
    """How far the computation paths are apart before anything is zeroed: per (model, task) of the
    claims and pair of its planned paths whose baselines ran, on the questions both answered, the
    answers that differ (``pred``), the questions ``path`` answers right and ``against`` wrong
    (``lost``) or the reverse (``gained``) by the claims' metric, the accuracy ``against`` minus
    ``path`` (``change``, points), and the median and largest absolute difference of the gold
    ending's log-likelihood (nats). The yardstick of a claim's churn: the answers the path alone moves."""
    out = []
    for (model, task), group in claims.groupby(["model", "task"], sort=False):
        planned = list(dict.fromkeys(p for paths in group["paths"] for p in paths))
        bases = {}
        for path in planned:
            frame = rows.get(path)
            if frame is None or not len(frame):
                continue
            base = frame[(frame["model"] == model) & (frame["task"] == task) & (frame["score"] == S.BASELINE)]
            if len(base):
                bases[path] = S.prepare_rows(base, "correct").set_index(list(S.QUESTION))
        names = list(bases)
        out += [
            {
                "model": model,
                "task": task,
                "path": path,
                "against": against,
                **_pair_agreement(bases[path], bases[against]),
            }
            for i, path in enumerate(names)
            for against in names[i + 1 :]
        ]
    return pd.DataFrame(out, columns=list(AGREEMENT_COLUMNS))


def _pair_agreement(first: pd.DataFrame, second: pd.DataFrame) -> dict[str, object]:
    """Two paths' baselines (per-question rows indexed by question) on the questions both answered."""
    both = first[["pred", "_ok", "gold_loglik"]].join(
        second[["pred", "_ok", "gold_loglik"]].add_suffix("_b"), how="inner"
    )
    a, b = both["_ok"].to_numpy(bool), both["_ok_b"].to_numpy(bool)
    gap = (both["gold_loglik"] - both["gold_loglik_b"]).abs()
    some = len(both) > 0
    return {
        "n_questions": len(both),
        "answers_differ": int((both["pred"] != both["pred_b"]).sum()),
        "lost": int(np.count_nonzero(a & ~b)),
        "gained": int(np.count_nonzero(~a & b)),
        "change": 100.0 * (b.mean() - a.mean()) if some else math.nan,
        "gold_loglik_median": float(gap.median()) if some else math.nan,
        "gold_loglik_max": float(gap.max()) if some else math.nan,
    }


def claim_verdicts(bounds: pd.DataFrame, paths: Sequence[str], *, drop: float = 1.0) -> pd.DataFrame:
    """One row per claim of :func:`claim_bounds`: the held-out questions (the fewest of its paths), per
    path its upper bound of the drop (``bound <path>``, points; empty where the claim was not planned
    on that path) and realised % of heads zeroed (``zeroed_pct <path>``), the worst bound, and the verdict:
    ``confirmed`` when every planned path was run and certifies at most ``drop`` points,
    ``not confirmed`` when a path that ran does not, ``incomplete`` when paths are missing and none
    that ran failed."""
    rows = []
    for name, group in bounds.groupby("claim", sort=False):
        ran = group[group["n_questions"].notna()]
        row: dict[str, object] = {
            "claim": name,
            "held_out_n": int(ran["n_questions"].min()) if len(ran) else None,
            "level": f"one-sided {float(group['level'].iloc[0]):.3g}",
        }
        for path in paths:
            hit = group[group["path"] == path]
            planned = len(hit) > 0
            row[f"bound {path}"] = float(hit["drop_upper"].iloc[0]) if planned else math.nan
            row[f"zeroed_pct {path}"] = float(hit["realised_pct"].iloc[0]) if planned else math.nan
        row["paths"] = f"{len(ran)} of {len(group)}"
        row["worst_bound"] = float(ran["drop_upper"].max()) if len(ran) else math.nan
        if len(ran) and not ran["certified"].all():
            verdict = "not confirmed"
        elif len(ran) < len(group):
            verdict = "incomplete"
        else:
            verdict = "confirmed"
        row["verdict"] = verdict
        row["confirmed"] = pd.NA if verdict == "incomplete" else verdict == "confirmed"
        rows.append(row)
    out = pd.DataFrame(rows)
    # What decides first (the verdict and its worst bound), then the bounds per path, then the shares.
    order = ["claim", "verdict", "worst_bound", "held_out_n", "paths"]
    order += [c for c in out.columns if c.startswith("bound ")] + [
        c for c in out.columns if c.startswith("zeroed_pct ")
    ]
    out = out[[*order, "level", "confirmed"]]
    # A count, empty (<NA>) where no path ran yet; an incomplete claim is neither confirmed nor refuted.
    return out.astype({"held_out_n": "Int64", "confirmed": "boolean"})
