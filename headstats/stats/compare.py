"""Comparing a reference model with other models on the same texts: how far, against what margin,
equivalent or not, and which heads moved.

Per (other model, dataset, score) the comparison reads three things, each from a statistic of
:mod:`headstats.stats.distances` or :mod:`headstats.stats.movement`:

- **how far**: W1 between the two score distributions (pooled over texts, layers and heads), raw and
  over the reference's interquartile range (``w1_iqr``, the units every margin and yardstick here is
  in), with a paired cluster-bootstrap interval at ``1 - 2 alpha`` (90% for alpha = 5%;
  :func:`w1_bounds`);
- **whether it moved**: the paired permutation test that swaps the two models' labels within each
  text (or cluster), Holm-adjusted over every test of the comparison, with the permutation count
  chosen from the family size so that Holm can reach :data:`FAMILY_ALPHA`
  (:func:`~headstats.stats.multiple.permutations_for`);
- **whether it is small**: equivalence against a margin by the interval-inclusion rule, which is
  two one-sided tests (TOST) at level alpha each: the ``1 - 2 alpha`` interval wholly below the
  margin is "equivalent within the margin", wholly above it "moved beyond the margin", otherwise
  "undetermined", with the number of texts that would decide (:func:`texts_to_decide`).

The default margin is a yardstick measured on the same texts: the distance the reference itself moves
when its prompts change format (the chat template instead of the compared format). Scores that are
constant by construction for a model (:func:`~headstats.stats.constant.constant_scores`) and the
``random`` baseline leave the tests, with the reason stated once.

For models of one architecture, how far each head moved against a margin is
:mod:`headstats.stats.heads`; here, beside it: the max-T test over heads
(:func:`~headstats.stats.movement.head_shift_test`, family-wise 5% per dataset and score: significance
only, never the headline), the rank correlation of per-head means and the Jaccard overlap of the
inactive heads a score selects at a share, with a cluster-bootstrap interval (:func:`inactive_overlap`).
A layer-normalised score divides by the mean over a layer's heads, so one moved head moves every head of
its layer on it: heads are counted on the scores that look at one head alone (:func:`head_local`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from headstats.engine.scores import get_score
from headstats.stats.constant import constant_across_texts, constant_scores
from headstats.stats.distances import SequenceBlocks, model_distance
from headstats.stats.movement import head_movement, head_shift_test, most_inactive
from headstats.stats.multiple import holm_family, permutations_for
from headstats.stats.overlap import jaccard
from headstats.stats.tables import cluster_codes, cluster_column, model_rows, score_columns, sequence_keys

# A W1 below this share of the reference's IQR is the round-off of summing the rows' weights in another
# order (1e-18 between two identical tables): it is 0, and its permutation p-value 1, not a draw among
# permutations of other round-off.
ROUNDOFF = 1e-9
# How many times the lower bound of W1 removes the bootstrap's estimate of its bias (the basic interval
# removes it once): the bootstrap sees about 0.4 of the bias at equal distributions, less far from them.
# With 3, "moved beyond the margin" at a true distance equal to the margin stayed within 5% plus Monte
# Carlo error at 40-128 texts and margins 0.05-0.3 SD; with 1 it reached 5.6-10.6%
# (benchmarks/compare_margin_size.py; the benchmarks' README has the table).
LOWER_BIAS_STEPS = 3
FAMILY_ALPHA = 0.01  # the Holm-adjusted level the permutation count lets the whole family reach
MOVED = "moved beyond the margin"
EQUIVALENT = "equivalent within the margin"
UNDETERMINED = "undetermined"
RANDOM_REASON = "a seeded U(0,1) draw per (text, layer, head), the same in every model: not a property of heads"

__all__ = [
    "ANECDOTE_SEEDS",
    "EQUIVALENT",
    "FAMILY_ALPHA",
    "MOVED",
    "UNDETERMINED",
    "beside_seeds",
    "compare_distributions",
    "equivalence",
    "head_changes",
    "head_local",
    "in_reference_units",
    "inactive_overlap",
    "left_out_scores",
    "permutation_count",
    "reference_unit",
    "replicate_distances",
    "seed_yardstick",
    "step_distances",
    "texts_to_decide",
    "verdicts",
    "w1_bounds",
    "yardstick_distances",
]


def head_local(score_id: str) -> bool:
    """Whether a score of a head depends on that head alone (raw and head-normalised scores), not on
    the other heads of its layer (layer-normalised ones)."""
    ratio = get_score(score_id).ratio
    return ratio is None or ratio.over == "head"


def permutation_count(family_size: int, alpha: float = FAMILY_ALPHA) -> int:
    """Permutations per test for which Holm over ``family_size`` tests can reach ``alpha``."""
    return permutations_for(max(family_size, 1), alpha)


def equivalence(low: float, high: float, margin: float) -> str:
    """The verdict of the interval-inclusion rule for an interval ``[low, high]`` at ``1 - 2 alpha``
    (TOST at level alpha): below the margin, above it, or straddling it (or no margin)."""
    if not (np.isfinite(margin) and np.isfinite(low) and np.isfinite(high)):
        return UNDETERMINED
    if high < margin:
        return EQUIVALENT
    if low > margin:
        return MOVED
    return UNDETERMINED


def verdicts(table: pd.DataFrame) -> list[str]:
    """:func:`equivalence` of every row of a distance table (``w1_iqr`` with its interval, ``margin``):
    an ``exact`` distance is its own interval, compared with the margin as it is."""
    exact = table["exact"] if "exact" in table else pd.Series(False, index=table.index)
    low = table["w1_iqr_low"].where(~exact, table["w1_iqr"])
    high = table["w1_iqr_high"].where(~exact, table["w1_iqr"])
    return [equivalence(lo, hi, m) for lo, hi, m in zip(low, high, table["margin"], strict=True)]


def texts_to_decide(distance: float, low: float, high: float, margin: float, n_texts: int) -> float:
    """How many texts would decide an undetermined verdict if the distance stayed as observed and the
    interval's half-width on the side facing the margin shrank as ``1 / sqrt(n)`` (the observed
    variance): ``n * (half-width / |distance - margin|)^2``, rounded up; NaN when no number of texts
    would (the distance equals the margin, or it, its interval or the margin is unknown). A figure for
    sizing the next run, not a result."""
    if not all(np.isfinite(v) for v in (distance, low, high, margin)) or distance == margin:
        return math.nan
    half = high - distance if distance < margin else distance - low
    return float(max(n_texts, math.ceil(n_texts * (half / abs(distance - margin)) ** 2)))


def left_out_scores(scores: pd.DataFrame, models: Sequence[str], score_ids: Sequence[str] | None) -> dict[str, str]:
    """Score id -> why it leaves every test of a comparison of ``models``: ``random`` (a seeded draw),
    a score constant by construction for one of the models, or a score a model lacks."""
    why: dict[str, str] = {}
    wanted = None if score_ids is None else {get_score(s).id for s in score_ids}
    for model in models:
        rows = model_rows(scores, model)
        have = [s for s in score_columns(rows) if wanted is None or s in wanted]
        for sid, reason in constant_scores(rows, model, [s for s in have if s != "random"]).items():
            why.setdefault(str(sid), str(reason))
    if wanted is None or "random" in wanted:
        why["random"] = RANDOM_REASON
    return why


def _tested(scores: pd.DataFrame, models: Sequence[str], score_ids: Sequence[str] | None, left: Mapping) -> list[str]:
    common = None
    for model in models:
        have = score_columns(model_rows(scores, model))
        common = have if common is None else [s for s in common if s in have]
    wanted = None if score_ids is None else {get_score(s).id for s in score_ids}
    return [s for s in common or [] if s not in left and (wanted is None or s in wanted)]


def yardstick_distances(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    datasets: Sequence[str],
    score_ids: Sequence[str],
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    n_perm: int = 0,
    n_split: int = 0,
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`~headstats.stats.distances.model_distance` of ``model_a`` (the reference: its IQR is the
    unit) and ``model_b`` per dataset, overall (no depth bins), with the interval of :func:`w1_bounds`
    (each side a one-sided ``1 - alpha`` bound, together a ``1 - 2 alpha`` interval): one row per
    (dataset, score) with a ``dataset`` column. ``exact`` marks a score that is the same on every text
    in both models (:func:`~headstats.stats.constant.constant_across_texts`): its distance does not
    depend on the texts drawn, and it has no interval (NaN bounds)."""
    out = []
    for di, dataset in enumerate(datasets):
        here = scores[scores["dataset"].astype(str) == dataset]
        table = model_distance(
            here,
            model_a,
            model_b,
            list(score_ids),
            depth_bins=0,
            n_boot=0,
            n_perm=n_perm,
            n_split=n_split,
            design="paired",
            seed=seed + 7919 * di,
        )
        scale = table["iqr_a"].where(table["iqr_a"] > 0, 1.0).fillna(1.0)
        nil = table["w1"] <= ROUNDOFF * scale
        table.loc[nil, "w1"] = 0.0
        table.loc[nil, "w1_iqr"] = table.loc[nil, "w1_iqr"].where(table.loc[nil, "w1_iqr"].isna(), 0.0)
        table.loc[nil & table["p_value"].notna(), "p_value"] = 1.0
        a, b = model_rows(here, model_a), model_rows(here, model_b)
        bounds = [
            w1_bounds(a, b, sid, alpha=alpha, n_boot=n_boot, seed=seed + 7919 * di + si)
            for si, sid in enumerate(table["score"])
        ]
        table["ci_low"], table["ci_high"] = [lo for lo, _ in bounds], [hi for _, hi in bounds]
        # a score the same on every text in both models: resampling texts cannot move the distance, so it
        # is exact, and the bootstrap's zero-width "interval" is none
        same = set(constant_across_texts(here, model_a, dataset, list(score_ids))) & set(
            constant_across_texts(here, model_b, dataset, list(score_ids))
        )
        table["exact"] = table["score"].isin(same)
        table.loc[table["exact"], ["ci_low", "ci_high"]] = np.nan
        spread = table["iqr_a"].where(table["iqr_a"] > 0)
        table["w1_iqr_low"], table["w1_iqr_high"] = table["ci_low"] / spread, table["ci_high"] / spread
        table["confidence"] = 1 - 2 * alpha
        out.append(table.assign(dataset=dataset, n_boot=n_boot))
    frame = pd.concat(out, ignore_index=True)
    first = ["model_a", "model_b", "dataset", "score"]
    return frame[first + [c for c in frame.columns if c not in first]]


def w1_bounds(
    a: pd.DataFrame, b: pd.DataFrame, score_id: str, *, alpha: float = 0.05, n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """One-sided ``1 - alpha`` bounds of W1 between two models' rows ``a`` and ``b`` of one dataset on
    the texts both scored, from one paired cluster bootstrap (the same resampled clusters for both
    models). W1 is biased upwards, most when the two distributions are close: the bootstrap's own
    estimate of that bias (the mean of the resampled distances minus the observed one) is taken at the
    observed distance, farther from zero than the truth, so it falls short of the bias at the truth
    (for equal distributions it is about 0.4 of it: for a normal difference d with sd s,
    ``E|d + e| - E|d|`` with e ~ N(0, s) is ``(sqrt 2 - 1) s sqrt(2/pi)``). The lower bound is therefore
    the basic bootstrap's, ``2 W1 - q(1 - alpha)``, which removes that estimate once, less
    :data:`LOWER_BIAS_STEPS` ``- 1`` more of it; the upper bound is the larger of the basic and the
    percentile bootstrap's. Each side's one-sided level was checked by simulation at a true distance
    equal to the margin (``benchmarks/compare_margin_size.py``; ``test_the_verdicts_keep_their_level...``)."""
    keys = pd.Index(a["sample_id"].unique()).intersection(pd.Index(b["sample_id"].unique()))
    if len(keys) < 2:
        return float("nan"), float("nan")
    ka, kb = keys.get_indexer(a["sample_id"]), keys.get_indexer(b["sample_id"])
    a, b, ka, kb = a[ka >= 0], b[kb >= 0], ka[ka >= 0], kb[kb >= 0]
    n = len(keys)
    data = SequenceBlocks(
        np.concatenate([a[score_id].to_numpy(np.float64), b[score_id].to_numpy(np.float64)]),
        np.concatenate([ka, kb + n]),
        2 * n,
    )
    observed = data.distance(np.r_[np.ones(n), np.zeros(n)], np.r_[np.zeros(n), np.ones(n)])
    text_cluster = np.zeros(n, dtype=np.int64)
    text_cluster[ka] = cluster_codes(a, cluster_column(a))
    units, uniques = pd.factorize(text_cluster)
    counts = np.random.default_rng(seed).multinomial(len(uniques), np.full(len(uniques), 1 / len(uniques)), size=n_boot)
    weights = counts[:, units].astype(np.float64)
    zeros = np.zeros_like(weights)
    boot = data.distances(np.hstack([weights, zeros]), np.hstack([zeros, weights]))
    boot = boot[np.isfinite(boot)]
    if not np.isfinite(observed) or boot.size == 0:
        return float("nan"), float("nan")
    q_lo, q_hi = np.quantile(boot, [alpha, 1 - alpha])
    bias = max(float(boot.mean()) - observed, 0.0)
    low = 2 * observed - q_hi - (LOWER_BIAS_STEPS - 1) * bias
    return float(max(0.0, low)), float(max(2 * observed - q_lo, q_hi))


def compare_distributions(
    scores: pd.DataFrame,
    reference: str,
    others: Sequence[str],
    datasets: Sequence[str],
    score_ids: Sequence[str] | None = None,
    *,
    margins: pd.DataFrame | float | None = None,
    alpha: float = 0.05,
    family_alpha: float = FAMILY_ALPHA,
    n_boot: int = 1000,
    n_split: int = 100,
    seed: int = 0,
) -> tuple[pd.DataFrame, dict[str, dict[str, str]]]:
    """The distribution-level comparison of ``reference`` with each of ``others`` on ``datasets``:
    one row per (other, dataset, score) with ``w1``, ``w1_iqr`` and its interval at ``1 - 2 alpha``
    (``w1_iqr_low``, ``w1_iqr_high``), the permutation ``p_value`` and ``p_holm`` (Holm over every
    row: the family), ``n_perm`` (:func:`permutation_count` of the family size), ``margin``, its
    ``margin_source``, the ``verdict`` (:func:`equivalence`), ``texts_to_decide`` and the split-half
    ``noise_floor`` over the reference's IQR (``noise_iqr``: a description of resampling noise at half
    the texts, never a decision). ``margins``: one number for every row (``w1_iqr`` units), or a table
    with ``dataset``, ``score``, ``margin`` (e.g. from :func:`yardstick_distances`). Also returns, per
    other model, the scores left out of its tests and why (:func:`left_out_scores`)."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie strictly between 0 and 0.5, not {alpha}")
    left = {other: left_out_scores(scores, [reference, other], score_ids) for other in others}
    tested = {other: _tested(scores, [reference, other], score_ids, left[other]) for other in others}
    for other, sids in tested.items():
        if not sids:
            raise ValueError(
                f"no score is left to compare between {reference!r} and {other!r}: every requested score is "
                "constant by construction or missing in one of them"
            )
    n_perm = permutation_count(len(datasets) * sum(len(s) for s in tested.values()), family_alpha)
    tables = [
        yardstick_distances(
            scores, reference, other, datasets, tested[other], alpha=alpha, n_boot=n_boot, n_perm=n_perm,
            n_split=n_split, seed=seed + 104729 * i,
        )
        for i, other in enumerate(others)
    ]  # fmt: skip
    table = holm_family(tables)
    table["noise_iqr"] = table["noise_floor"] / table["iqr_a"].where(table["iqr_a"] > 0)
    table = _with_margins(table, margins)
    table["verdict"] = verdicts(table)
    table["texts_to_decide"] = [
        texts_to_decide(d, lo, hi, m, n) if v == UNDETERMINED else np.nan
        for d, lo, hi, m, n, v in zip(
            table["w1_iqr"], table["w1_iqr_low"], table["w1_iqr_high"], table["margin"], table["n_seq_a"],
            table["verdict"], strict=True,
        )
    ]  # fmt: skip
    table["moved"] = table["p_holm"] <= family_alpha
    table["alpha"] = alpha
    return table, left


def _with_margins(table: pd.DataFrame, margins: pd.DataFrame | float | None) -> pd.DataFrame:
    if margins is None:
        return table.assign(margin=np.nan, margin_source="none")
    if isinstance(margins, pd.DataFrame):
        keep = margins[["dataset", "score", "margin"]].assign(margin_source="format change")
        return table.merge(keep, on=["dataset", "score"], how="left").fillna({"margin_source": "none"})
    if not np.isfinite(margins) or margins <= 0:
        raise ValueError(f"a margin is a positive distance in W1/IQR units, not {margins}")
    return table.assign(margin=float(margins), margin_source="given")


def _head_means_by_cluster(rows: pd.DataFrame, sid: str, heads: pd.MultiIndex, texts: pd.MultiIndex):
    """Per text (rows of ``texts``): the sum of ``sid`` over its rows for each head, as a texts x heads
    matrix of sums and one of counts (finite values only)."""
    ti = texts.get_indexer(sequence_keys(rows))
    hi = heads.get_indexer(pd.MultiIndex.from_arrays([rows["layer"].to_numpy(), rows["head"].to_numpy()]))
    values = rows[sid].to_numpy(dtype=np.float64)
    keep = (ti >= 0) & (hi >= 0) & np.isfinite(values)
    sums, counts = np.zeros((len(texts), len(heads))), np.zeros((len(texts), len(heads)))
    np.add.at(sums, (ti[keep], hi[keep]), values[keep])
    np.add.at(counts, (ti[keep], hi[keep]), 1.0)
    return sums, counts


def inactive_overlap(
    scores: pd.DataFrame,
    model_a: str,
    model_b: str,
    score_id: str,
    *,
    dataset: str,
    rate: float = 0.1,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Do the inactive heads stay inactive? The Jaccard index of the ``ceil(rate * heads)`` heads with
    the most inactive mean ``score_id`` in each model (on the texts both scored of ``dataset``), with
    a percentile interval from resampling the texts with replacement (the same texts for both models):
    ``jaccard``, ``jaccard_low``, ``jaccard_high``, ``n_selected``."""
    sid = get_score(score_id).id
    a = model_rows(scores, model_a)
    b = model_rows(scores, model_b)
    a, b = a[a["dataset"].astype(str) == dataset], b[b["dataset"].astype(str) == dataset]
    heads = pd.MultiIndex.from_frame(a[["layer", "head"]].drop_duplicates()).sort_values()
    texts = sequence_keys(a).unique().intersection(sequence_keys(b).unique())
    if len(texts) == 0:
        raise ValueError(f"{model_a!r} and {model_b!r} scored no common text of {dataset!r}")
    sa, ca = _head_means_by_cluster(a, sid, heads, texts)
    sb, cb = _head_means_by_cluster(b, sid, heads, texts)

    def overlap(weights: np.ndarray) -> float:
        with np.errstate(invalid="ignore", divide="ignore"):
            ma, mb = (weights @ sa) / (weights @ ca), (weights @ sb) / (weights @ cb)
        return jaccard(most_inactive(ma, sid, rate), most_inactive(mb, sid, rate))

    observed = overlap(np.ones(len(texts)))
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(texts), np.full(len(texts), 1.0 / len(texts)), size=n_boot).astype(np.float64)
    boot = np.array([overlap(w) for w in draws])
    boot = boot[np.isfinite(boot)]
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail]) if boot.size else (np.nan, np.nan)
    return {
        "jaccard": float(observed),
        "jaccard_low": float(low),
        "jaccard_high": float(high),
        "n_selected": math.ceil(rate * len(heads)),
    }


def head_changes(
    scores: pd.DataFrame,
    reference: str,
    other: str,
    datasets: Sequence[str],
    score_ids: Sequence[str],
    *,
    rate: float = 0.1,
    alpha: float = 0.05,
    n_perm: int = 9999,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (dataset, score) of two models of one architecture: the per-head max-T test (family-wise
    ``alpha`` over the heads), the rank correlation of per-head means (``spearman``, beside the
    reference's own split-half agreement ``split_half``) and the inactive-set overlap at ``rate``
    (:func:`inactive_overlap`). Returns (one row per dataset and score with ``n_significant``, the heads
    the test tells apart from the reference: significance only, not size, and ``head_local``; every
    head's test row of :func:`~headstats.stats.movement.head_shift_test`). How far each head moved,
    against a margin, is :func:`headstats.stats.heads.head_shifts`."""
    summary, heads = [], []
    for di, dataset in enumerate(datasets):
        movement = head_movement(scores, reference, other, list(score_ids), dataset=dataset, rate=rate, seed=seed)
        for si, sid in enumerate(score_ids):
            test = head_shift_test(
                scores, reference, other, sid, dataset=dataset, n_perm=n_perm, alpha=alpha, seed=seed + 31 * si + di
            )
            heads.append(test.assign(head_local=head_local(sid)))
            rank = movement[movement["score"] == sid].iloc[0]
            overlap = inactive_overlap(
                scores, reference, other, sid, dataset=dataset, rate=rate, n_boot=n_boot, seed=seed + 17 * si + di
            )
            summary.append(
                {
                    "model_a": reference,
                    "model_b": other,
                    "dataset": dataset,
                    "score": sid,
                    "head_local": head_local(sid),
                    "n_significant": int(test["moved"].sum()),
                    "n_heads": len(test),
                    "spearman": float(rank["spearman"]),
                    "split_half": float(rank["split_half"]),
                    **overlap,
                    "rate": rate,
                    "n_perm": int(test["n_perm"].iloc[0]),
                }
            )
    return pd.DataFrame(summary), pd.concat(heads, ignore_index=True)


ANECDOTE_SEEDS = 6  # fewer seeds than this make the replicate-vs-replicate distance an anecdote, not a yardstick


def in_reference_units(table: pd.DataFrame, unit: pd.DataFrame) -> pd.DataFrame:
    """A :func:`yardstick_distances` table of two models other than the reference with ``w1_iqr`` and
    its interval in the reference's IQR (``unit``: ``dataset``, ``score``, ``iqr_ref``), so that every
    distance of a comparison reads in one unit and against one margin."""
    out = table.merge(unit, on=["dataset", "score"], how="left")
    spread = out["iqr_ref"].where(out["iqr_ref"] > 0)
    out["w1_iqr"] = out["w1"] / spread
    out["w1_iqr_low"], out["w1_iqr_high"] = out["ci_low"] / spread, out["ci_high"] / spread
    return out


def reference_unit(distances: pd.DataFrame) -> pd.DataFrame:
    """The reference's IQR per (dataset, score) of a :func:`compare_distributions` table."""
    return (
        distances[["dataset", "score", "iqr_a"]]
        .drop_duplicates(["dataset", "score"])
        .rename(columns={"iqr_a": "iqr_ref"})
    )


def step_distances(
    scores: pd.DataFrame,
    order: Sequence[str],
    datasets: Sequence[str],
    unit: pd.DataFrame,
    margins: pd.DataFrame | float | None,
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per step of an ordered series ``order`` (models, the first the start): W1/IQR between each model
    and the one before it per (dataset, score) of ``unit`` in the reference's IQR, with the interval of
    :func:`w1_bounds` and the verdict against the same margin as the distances from the reference
    (``step`` counts from 1; ``model_a`` is the step's start, ``model_b`` its end)."""
    sids = list(unit["score"].drop_duplicates())
    tables = []
    for i, (before, after) in enumerate(itertools.pairwise(order)):
        table = yardstick_distances(
            scores, before, after, datasets, sids, alpha=alpha, n_boot=n_boot, seed=seed + 15485863 * (i + 1)
        )
        tables.append(in_reference_units(table, unit).assign(step=i + 1))
    if not tables:
        return pd.DataFrame()
    table = _with_margins(pd.concat(tables, ignore_index=True), margins)
    table["verdict"] = verdicts(table)
    return table


def replicate_distances(
    scores: pd.DataFrame,
    groups: Mapping[str, Sequence[str]],
    datasets: Sequence[str],
    unit: pd.DataFrame,
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """The seed yardstick: W1/IQR (in the reference's IQR, ``unit``) between every pair of seed
    replicates of each group (``groups``: the model a group replicates -> its replicates, that model
    first), per (dataset, score), with ``group`` naming the replicated model and ``n_seeds`` the
    group's size."""
    sids = list(unit["score"].drop_duplicates())
    tables = []
    for g, (group, members) in enumerate(groups.items()):
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                table = yardstick_distances(
                    scores, members[i], members[j], datasets, sids, alpha=alpha, n_boot=n_boot,
                    seed=seed + 32452843 * (g + 1) + 101 * i + j,
                )  # fmt: skip
                tables.append(in_reference_units(table, unit).assign(group=group, n_seeds=len(members)))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def seed_yardstick(replicates: pd.DataFrame) -> pd.DataFrame:
    """Per (replicated model, dataset, score) of :func:`replicate_distances`: the seeds, the pairs, and
    the median and largest replicate-vs-replicate W1/IQR (seeds are the unit: one number per pair of
    seeds, not per text)."""
    if replicates.empty:
        return pd.DataFrame(columns=["group", "dataset", "score", "n_seeds", "n_pairs", "seed_median", "seed_max"])
    grouped = replicates.groupby(["group", "dataset", "score"], sort=False)
    return grouped.agg(
        n_seeds=("n_seeds", "first"),
        n_pairs=("w1_iqr", "size"),
        seed_median=("w1_iqr", "median"),
        seed_max=("w1_iqr", "max"),
    ).reset_index()


def beside_seeds(distances: pd.DataFrame, yardstick: pd.DataFrame, reference: str) -> pd.DataFrame:
    """``distances`` with the seed yardstick beside each row: that of the compared model's own replicates
    when it has some, else the reference's (``seed_group`` says which; none: NaN), and ``beyond_seeds``,
    whether the distance's lower bound lies above the largest replicate-vs-replicate distance."""
    out = distances.copy()
    own = set(yardstick["group"])
    out["seed_group"] = [b if b in own else reference if reference in own else None for b in out["model_b"]]
    keep = yardstick.rename(columns={"group": "seed_group"})
    out = out.merge(keep, on=["seed_group", "dataset", "score"], how="left")
    out["beyond_seeds"] = out["w1_iqr_low"] > out["seed_max"]
    return out
