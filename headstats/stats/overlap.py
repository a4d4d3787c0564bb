"""Do two score functions find the same inactive heads?

At a matched selection rate p (5%, 10%, 20%), each score is thresholded at its own quantile in its
own direction, exactly as an intervention calibrates it (:mod:`headstats.stats.thresholds`,
pooled over the rows of one model on one dataset), and selects the (sequence, layer, head) triples
it would zero. Two levels of agreement:

- *triples*: Jaccard (IoU) of the selected (sequence, layer, head) sets;
- *heads*: a head is "usually selected" by a score when it is selected in at least half of the
  sequences (``usually=0.5``); IoU of the two sets of usually-selected heads.

Jaccard is symmetric and hides direction, so the table also reports the share of the heads one score
finds that the other misses: ``missed_by_a`` = |H_b \\ H_a| / |H_b|. The study's headline reads here
as: with a = ``awft`` (attention sink) and b = ``ahon_ln`` (output norm), ``missed_by_a`` is large.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from headstats.engine.scores import get_score
from headstats.stats.tables import model_rows, scores_of
from headstats.stats.thresholds import thresholds_for_fractions


def _pair(a: ArrayLike | set, b: ArrayLike | set) -> tuple[set, set] | tuple[np.ndarray, np.ndarray]:
    """Two sets, or two boolean masks over the same items (a mask mixed with a set becomes the set
    of its True positions)."""
    if isinstance(a, (set, frozenset)) or isinstance(b, (set, frozenset)):
        as_set = [
            set(x) if isinstance(x, (set, frozenset)) else set(np.flatnonzero(np.asarray(x, bool))) for x in (a, b)
        ]
        return as_set[0], as_set[1]
    ma, mb = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if ma.shape != mb.shape:
        raise ValueError(f"masks must cover the same items: shapes {ma.shape} and {mb.shape}")
    return ma, mb


def jaccard(a: ArrayLike | set, b: ArrayLike | set) -> float:
    """|A ∩ B| / |A ∪ B| of two sets, or of two boolean masks over the same items.

    NaN when both are empty: two scores that select nothing neither agree nor disagree.
    """
    x, y = _pair(a, b)
    if isinstance(x, set):
        union = len(x | y)
        return len(x & y) / union if union else float("nan")
    union = np.count_nonzero(x | y)
    return np.count_nonzero(x & y) / union if union else float("nan")


def missed_share(found: ArrayLike | set, other: ArrayLike | set) -> float:
    """Share of the items in ``found`` that ``other`` does not contain: |F \\ O| / |F| (NaN if F is empty)."""
    f, o = _pair(found, other)
    if isinstance(f, set):
        return len(f - o) / len(f) if f else float("nan")
    n = np.count_nonzero(f)
    return np.count_nonzero(f & ~o) / n if n else float("nan")


def select(values: np.ndarray, score_id: str, rate: float) -> np.ndarray:
    """The rows a score would zero at target fraction ``rate``, thresholded at its own quantile of
    ``values`` (the calibration rule of docs/concepts.md#zeroing, strict inequality in the score's direction)."""
    score = get_score(score_id)
    frame = pd.DataFrame({score.id: np.asarray(values, dtype=np.float64)})
    # random's threshold is p itself (u ~ U(0,1) below p), not a quantile of the stored draws
    tau = float(thresholds_for_fractions(frame, score.id, [rate])[0])
    v = frame[score.id].to_numpy()
    return v > tau if score.inactive_when == "above" else v < tau


def overlap_row(
    model: str,
    dataset: str,
    rate: float,
    a_id: str,
    b_id: str,
    sa: np.ndarray,
    sb: np.ndarray,
    ua: np.ndarray,
    ub: np.ndarray,
) -> dict:
    """One row of :func:`score_overlap`: two scores' selections at ``rate`` compared over (text, layer,
    head) triples (``sa``, ``sb``) and over the heads they usually select (``ua``, ``ub``)."""
    return {
        "model": model,
        "dataset": dataset,
        "rate": rate,
        "score_a": a_id,
        "score_b": b_id,
        "selected_a": float(sa.mean()),
        "selected_b": float(sb.mean()),
        "iou_triples": jaccard(sa, sb),
        "triples_missed_by_a": missed_share(sb, sa),
        "triples_missed_by_b": missed_share(sa, sb),
        "heads_a": int(ua.sum()),
        "heads_b": int(ub.sum()),
        "iou_heads": jaccard(ua, ub),
        "missed_by_a": missed_share(ub, ua),
        "missed_by_b": missed_share(ua, ub),
    }


def _groups(rows: pd.DataFrame) -> Iterable[tuple[str, pd.DataFrame]]:
    if "dataset" in rows.columns:
        yield from ((str(d), g) for d, g in rows.groupby("dataset", sort=True, observed=True))
    else:
        yield "", rows


def _usual(selected: np.ndarray, heads: np.ndarray, n_heads: int, usually: float) -> np.ndarray:
    share = np.bincount(heads, weights=selected.astype(np.float64), minlength=n_heads)
    share /= np.maximum(np.bincount(heads, minlength=n_heads), 1)
    return share >= usually


def score_overlap(
    scores: pd.DataFrame,
    score_a: str,
    score_b: str,
    rates: Sequence[float] = (0.05, 0.10, 0.20),
    *,
    models: Sequence[str] | None = None,
    usually: float = 0.5,
) -> pd.DataFrame:
    """Agreement of two scores at matched selection rates, per (model, dataset, rate).

    Columns: ``model, dataset, rate, score_a, score_b, selected_a, selected_b`` (realised fractions of
    rows), ``iou_triples``, ``triples_missed_by_a`` (share of b's triples a does not select),
    ``triples_missed_by_b``, ``heads_a``, ``heads_b`` (counts of usually-selected heads), ``iou_heads``,
    ``missed_by_a`` (share of b's usual heads that are not a's), ``missed_by_b``.
    """
    a_id, b_id = get_score(score_a).id, get_score(score_b).id
    if not 0 < usually <= 1:
        raise ValueError(f"usually must lie in (0, 1], not {usually}")
    if "model" not in scores.columns:
        raise ValueError("the score table has no 'model' column: read it with headstats.read_scores(ROOT)")
    models = list(dict.fromkeys(models)) if models is not None else sorted(scores["model"].astype(str).unique())
    out = []
    for model in models:
        rows = model_rows(scores, model)
        scores_of(rows, model, [a_id, b_id])
        for dataset, group in _groups(rows):
            group = group[group[a_id].notna() & group[b_id].notna()]
            heads, head_keys = pd.MultiIndex.from_arrays(
                [group["layer"].to_numpy(), group["head"].to_numpy()]
            ).factorize()
            va, vb = group[a_id].to_numpy(np.float64), group[b_id].to_numpy(np.float64)
            for rate in rates:
                if not 0 <= rate <= 1:
                    raise ValueError(f"selection rates are fractions in [0, 1], not {rate}")
                sa, sb = select(va, a_id, rate), select(vb, b_id, rate)
                ua = _usual(sa, heads, len(head_keys), usually)
                ub = _usual(sb, heads, len(head_keys), usually)
                out.append(overlap_row(model, dataset, float(rate), a_id, b_id, sa, sb, ua, ub))
    return pd.DataFrame(out)


def overlap_matrix(
    scores: pd.DataFrame,
    model: str,
    score_ids: Sequence[str] | None = None,
    rate: float = 0.10,
    *,
    dataset: str | None = None,
    level: str = "heads",
    usually: float = 0.5,
) -> pd.DataFrame:
    """IoU between every pair of scores of one model at one selection rate (score ids x score ids).

    ``level`` is ``"triples"`` or ``"heads"`` (usually-selected heads). ``dataset`` picks one of the
    model's datasets (required when it has several).
    """
    if level not in ("heads", "triples"):
        raise ValueError(f"level must be 'heads' or 'triples', not {level!r}")
    rows = model_rows(scores, model)
    if "dataset" in rows.columns:
        datasets = sorted(rows["dataset"].astype(str).unique())
        if dataset is None and len(datasets) > 1:
            raise ValueError(f"model {model!r} has several datasets ({', '.join(datasets)}): pick one with dataset=")
        dataset = dataset if dataset is not None else datasets[0]
        if dataset not in datasets:
            raise ValueError(f"model {model!r} has no dataset {dataset!r}; it has {', '.join(datasets)}")
        rows = rows[rows["dataset"].astype(str) == dataset]
    sids = scores_of(rows, model, score_ids)
    heads, head_keys = pd.MultiIndex.from_arrays([rows["layer"].to_numpy(), rows["head"].to_numpy()]).factorize()
    masks = {}
    for sid in sids:
        values = rows[sid].to_numpy(np.float64)
        if not np.isfinite(values).all():
            raise ValueError(f"{sid!r} has missing or non-finite values for model {model!r}; the table is incomplete")
        selected = select(values, sid, rate)
        masks[sid] = _usual(selected, heads, len(head_keys), usually) if level == "heads" else selected
    matrix = pd.DataFrame(np.nan, index=sids, columns=sids)
    for i, si in enumerate(sids):
        for sj in sids[i:]:
            matrix.loc[si, sj] = matrix.loc[sj, si] = jaccard(masks[si], masks[sj])
    return matrix
