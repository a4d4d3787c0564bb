"""Statistics of a pruning frontier (pandas in, pandas out; docs/statistics.md#certified).

A frontier point is a model pruned by one score's ranking at one share of heads, answering the same
held-out questions as the unpruned model. From those answers and the timings:

- :func:`baseline_rows`, :func:`task_drops`: per task, the paired accuracy drop with Tango's
  one-sided upper bound, the changed answers and the minimum detectable drop;
- :func:`speedups`: pruned / unpruned tokens/s and KV-cache bytes, per batch;
- :func:`add_questions_to_certify`, :func:`add_family_bounds`: the questions a point would need to be
  certified, and each bound at the family-wise level (Bonferroni over the planned sequences);
- :func:`certified_shares`: the largest share of each score certified by the fixed-sequence reading;
- :func:`unfinished`: the models whose points are not all written yet;
- :func:`frontier_table`: one row per model, score and share with the numbers of the main table;
- :func:`speed_noise`: the measured speed-ups beside the roof and beside an identical copy's;
- :func:`certification_counts`: how many (model, score, share, task) cells are certified, and what
  the others would need.

Drops and bounds are fractions of questions (0.01 = 1 point), as in :mod:`headstats.stats.paired`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from headstats.stats.paired import (
    drop_bound,
    drop_bound_from_counts,
    minimum_detectable_drop,
    questions_to_certify,
)

CONFIDENCE = 0.95  # each point's one-sided bound


def baseline_rows(base: pd.DataFrame) -> pd.DataFrame:
    """The unpruned model's row per task of its answers ``base`` (``task``, ``correct``): its accuracy,
    a drop and bound of 0, and the minimum detectable drop at that many questions."""
    rows = [
        {
            "task": task,
            "n": len(frame),
            "accuracy": frame["correct"].mean(),
            "drop": 0.0,
            "upper": 0.0,
            "lost": 0,
            "gained": 0,
            "mdd_80": minimum_detectable_drop(len(frame)),
        }
        for task, frame in base.groupby("task")
    ]
    return pd.DataFrame(rows)


def task_drops(base: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """Per task of the pruned model's ``answers``, paired on ``question_id`` with the unpruned ``base``:
    accuracy, drop (baseline - pruned), Tango's one-sided 95% upper bound, the answers lost and
    gained, and the minimum detectable drop."""
    rows = []
    for task, frame in answers.groupby("task"):
        merged = base[base["task"] == task].merge(frame, on="question_id", suffixes=("_base", ""))
        bound = drop_bound(merged["correct_base"].to_numpy(), merged["correct"].to_numpy())
        rows.append(
            {
                "task": task,
                "n": bound.n,
                "accuracy": frame["correct"].mean(),
                "drop": bound.drop,
                "upper": bound.upper,
                "lost": bound.lost,
                "gained": bound.gained,
                "mdd_80": minimum_detectable_drop(bound.n),
            }
        )
    return pd.DataFrame(rows)


def speedups(speed: pd.DataFrame) -> pd.DataFrame:
    """Pruned / unpruned tokens/s and KV-cache bytes per model, score, share and batch (at share 0:
    the unpruned model against an identical copy, the measurement's own noise). ``speed``: one row
    per model, score, share, batch and ``role`` (unpruned / pruned)."""
    keys = ["model", "score", "share", "batch"]
    u = speed[speed["role"] == "unpruned"].set_index(keys)
    p = speed[speed["role"] == "pruned"].set_index(keys)
    out = pd.DataFrame(
        {
            "prefill_speedup": p["prefill_tokens_per_s"] / u["prefill_tokens_per_s"],
            "decode_speedup": p["decode_tokens_per_s"] / u["decode_tokens_per_s"],
            "kv_ratio": p["kv_cache_bytes"] / u["kv_cache_bytes"],
            "prefill_tok_s_unpruned": u["prefill_tokens_per_s"],
            "decode_tok_s_unpruned": u["decode_tokens_per_s"],
        }
    )
    return out.reset_index()


NEVER = "never: observed drop >= tolerated"


def add_questions_to_certify(points: pd.DataFrame, max_drop: float) -> pd.DataFrame:
    """``points`` with ``n_to_certify``: the questions per task at which a pruned point's bound would
    reach ``max_drop`` (accuracy points) if its shares of lost and gained answers stayed as observed, and
    ``n_to_certify_note`` where no number does: :data:`NEVER` where the observed drop already reaches the
    tolerated one, or more than :func:`~headstats.stats.paired.questions_to_certify` searches (those rows'
    ``n_to_certify`` is empty: no infinity stands in the table as a count). Empty for the unpruned rows."""
    needed = [
        questions_to_certify(r.lost, r.gained, r.n, max_drop) if r.score != "none" else math.nan
        for r in points.itertuples()
    ]
    notes = [
        ""
        if math.isfinite(n) or r.score == "none"
        else NEVER
        if 100 * (r.lost - r.gained) / r.n >= max_drop
        else "more than 10,000,000 questions"
        for r, n in zip(points.itertuples(), needed, strict=True)
    ]
    return points.assign(n_to_certify=[n if math.isfinite(n) else math.nan for n in needed], n_to_certify_note=notes)


def add_family_bounds(points: pd.DataFrame, family: int, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """``points`` with ``upper_fw``: each drop's one-sided upper bound at level (1 - confidence) /
    ``family`` (Bonferroni over the family's fixed sequences, so the largest certified share of any
    of them holds at 1 - confidence family-wise); 0 for the unpruned rows."""
    level = 1.0 - (1.0 - confidence) / family
    upper = [
        drop_bound_from_counts(int(r.lost), int(r.gained), int(r.n), level).upper if r.score != "none" else 0.0
        for r in points.itertuples()
    ]
    return points.assign(upper_fw=upper)


def certified_shares(
    points: pd.DataFrame, max_drop: float, shares: Sequence[float] | None = None, upper: str = "upper"
) -> pd.DataFrame:
    """Largest share of each model and score certified by the fixed-sequence reading, per task and
    on every task at once (a share counts for "all" when certified on each task). ``shares``: the
    planned grid; a share not measured yet ends the sequence like one not certified; ``upper``: the
    column of bounds to read (``upper_fw`` for the family-wise reading)."""
    rows = []
    pruned = points[points["score"] != "none"]
    for (model, score), group in pruned.groupby(["model", "score"]):
        tasks = sorted(group["task"].unique())
        grid = sorted(s for s in (shares if shares is not None else group["share"].unique()) if s > 0)
        for task in [*tasks, "all"]:
            best = 0.0
            for share in grid:
                at = group[group["share"] == share]
                sel = at if task == "all" else at[at["task"] == task]
                if len(sel) == 0 or not (sel[upper] <= max_drop).all():
                    break
                best = share
            rows.append({"model": model, "score": score, "task": task, "certified_share": best})
    return pd.DataFrame(rows)


def both_certified_shares(points: pd.DataFrame, max_drop: float, shares: Sequence[float] | None = None) -> pd.DataFrame:
    """:func:`certified_shares` read at the plain bounds (``certified_share``) and at the family-wise
    ones (``certified_share_fw``; ``points`` needs ``upper_fw``)."""
    plain = certified_shares(points, max_drop, shares)
    wise = certified_shares(points, max_drop, shares, "upper_fw")
    return plain.merge(wise.rename(columns={"certified_share": "certified_share_fw"}), on=["model", "score", "task"])


def unfinished(points: pd.DataFrame, models: Sequence[str], planned: int) -> dict[str, int]:
    """Models with a baseline but fewer than ``planned`` pruned points: model -> points done."""
    done = points[points["score"] != "none"].drop_duplicates(["model", "score", "share"]).groupby("model").size()
    return {m: int(done.get(m, 0)) for m in models if done.get(m, 0) < planned}


def frontier_table(table: pd.DataFrame, speed_batches: Sequence[int]) -> pd.DataFrame:
    """One row per model, score and share of the pruned points in ``table`` (points merged with
    :func:`speedups`): heads removed, parameter ratio, speed-ups per batch, KV-cache ratio and bytes
    saved, the roofs (1 / (1 - share of prefill FLOPs, or of decode bytes at the smallest batch,
    removed)), and per task the drop and its upper bound (``<task> drop``, ``<task> upper``)."""
    rows = []
    small = min(speed_batches)
    pruned = table[table["score"] != "none"]
    for (model, score, share), group in pruned.groupby(["model", "score", "share"]):
        first = group.iloc[0]
        row = {
            "model": model,
            "score": score,
            "share": share,
            "heads removed": int(first["n_removed"]),
            "params": first["params_ratio"],
        }
        for batch in speed_batches:
            at = group[group["batch"] == batch].iloc[0]
            row[f"prefill x (b{batch})"] = at["prefill_speedup"]
            row[f"decode x (b{batch})"] = at["decode_speedup"]
        row["KV cache"] = first["kv_ratio"]
        if "kv_bytes_saved_per_token" in group:
            row["KV saved (B/token)"] = first["kv_bytes_saved_per_token"]
        row["roof prefill x"] = 1 / (1 - first["prefill_flops_removed"])
        row[f"roof decode x (b{small})"] = 1 / (1 - first[f"decode_bytes_removed_b{small}"])
        for task, at in group.groupby("task"):
            row[f"{task} drop"] = at.iloc[0]["drop"]
            row[f"{task} upper"] = at.iloc[0]["upper"]
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class SpeedNoise:
    """One model's measured speed-ups beside its roof and an identical copy's ratios (the noise)."""

    top_share: float  # the largest share measured
    roof: float  # 1 / (1 - prefill FLOPs removed) at that share
    low: float  # the smallest measured ratio (prefill and decode, every batch)
    high: float  # the largest
    copy_low: float  # the identical copy's smallest ratio
    copy_high: float  # and largest
    ratios: int  # the measured ratios
    outside: bool  # whether any measured ratio leaves the copy's range
    above_roof: int  # ratios above their own point's roof (which removing FLOPs cannot give)
    rate_span: float  # the largest max / min of the unpruned model's prefill rate at one batch size


def speed_noise(group: pd.DataFrame) -> SpeedNoise | None:
    """The reading of one model's rows (one per score, share and batch; score 'none' is the copy);
    None when there is no copy or no pruned point."""
    noise, measured = group[group["score"] == "none"], group[group["score"] != "none"]
    if noise.empty or measured.empty:
        return None
    cols = ["prefill_speedup", "decode_speedup"]
    top = measured["share"].max()
    roof = 1 / (1 - measured.loc[measured["share"] == top, "prefill_flops_removed"].max())
    ratios, lo, hi = measured[cols].to_numpy().ravel(), noise[cols].min().min(), noise[cols].max().max()
    roofs = 1 / (1 - measured["prefill_flops_removed"].to_numpy())
    return SpeedNoise(
        top_share=float(top),
        roof=float(roof),
        low=float(ratios.min()),
        high=float(ratios.max()),
        copy_low=float(lo),
        copy_high=float(hi),
        ratios=len(ratios),
        outside=bool(((ratios < lo) | (ratios > hi)).any()),
        above_roof=int((measured[cols].to_numpy() > roofs[:, None]).sum()),
        rate_span=float(group.groupby("batch")["prefill_tok_s_unpruned"].agg(lambda r: r.max() / r.min()).max()),
    )


@dataclass(frozen=True)
class CertificationCounts:
    """How many (model, score, share, task) cells a frontier certifies, and what the others need."""

    questions: pd.Series  # per task, the unpruned model's fewest questions
    certified: int
    cells: int
    need_low: float  # the fewest questions an uncertified, reachable cell needs (NaN: none)
    need_high: float  # the most
    beyond: int  # cells whose observed drop already reaches the tolerated drop (n_to_certify_note NEVER)


def certification_counts(table: pd.DataFrame, max_drop: float) -> CertificationCounts:
    """The counts over ``table``'s pruned cells (needs ``n_to_certify``) at ``max_drop`` (a fraction).
    The range to size a rerun by counts only uncertified cells that lost no fewer answers than they
    gained (one that gained more would "certify" within a few dozen questions at its lucky shares)."""
    cells = table[table["score"] != "none"].drop_duplicates(["model", "score", "share", "task"])
    passed = cells["upper"] <= max_drop
    finite = cells["n_to_certify"].notna()
    reachable = cells.loc[~passed & finite & (cells["lost"] >= cells["gained"]), "n_to_certify"]
    return CertificationCounts(
        questions=table[table["score"] == "none"].groupby("task")["n"].min(),
        certified=int(passed.sum()),
        cells=len(cells),
        need_low=float(reachable.min()) if len(reachable) else math.nan,
        need_high=float(reachable.max()) if len(reachable) else math.nan,
        beyond=int((cells["n_to_certify_note"] == NEVER).sum()),
    )
