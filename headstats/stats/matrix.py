"""W1 between every pair of a list of models (a fine-tuning chain, a scale series) for one score and
depth bin, with each model's noise floor: the matrix behind a series' heatmap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from headstats.stats.distances import DEFAULT_SPLITS, model_distance, noise_floor
from headstats.stats.multiple import holm
from headstats.stats.tables import ALL_DEPTHS, cluster_column, depth_labels


@dataclass
class DistanceMatrix:
    """W1 between every pair of a list of models for one score and depth bin."""

    score: str
    depth: str
    w1: pd.DataFrame  # models x models, symmetric, 0 on the diagonal
    noise_floor: pd.Series  # per model: its split-half floor
    p_value: pd.DataFrame | None  # models x models, None when no permutations were run
    p_holm: pd.DataFrame | None = None  # the same, Holm-adjusted over the matrix's pairs
    cluster: str = "sample_id"  # the resampled unit
    n_splits: int = 0  # random halvings behind each floor

    def pair_floor(self) -> pd.DataFrame:
        """The floor a pair's distance is judged against: the larger of the two models' floors."""
        f = self.noise_floor.to_numpy()
        return pd.DataFrame(np.maximum.outer(f, f), index=self.w1.index, columns=self.w1.columns)


def distance_matrix(
    scores: pd.DataFrame,
    models: Sequence[str],
    score_id: str,
    *,
    depth: str = ALL_DEPTHS,
    depth_bins: int = 5,
    n_perm: int = 0,
    n_split: int = DEFAULT_SPLITS,
    floor_quantile: float = 0.95,
    cluster: str | None = None,
    seed: int = 0,
    progress: bool = False,
) -> DistanceMatrix:
    """W1 matrix over ``models`` (a fine-tuning chain, a scale series) for one score and depth bin
    (``"all"`` or a label of :func:`depth_labels`), with each model's noise floor (clusters as in
    :func:`model_distance`)."""
    models = list(dict.fromkeys(models))
    if len(models) < 2:
        raise ValueError("a distance matrix needs at least two models")
    labels = [ALL_DEPTHS, *depth_labels(depth_bins)]
    if depth not in labels:
        raise ValueError(f"depth must be one of {', '.join(labels)}, not {depth!r}")
    unit = cluster_column(scores, cluster)
    w1 = pd.DataFrame(0.0, index=models, columns=models)
    pv = pd.DataFrame(np.nan, index=models, columns=models) if n_perm > 0 else None
    pairs = list(combinations(models, 2))
    for a, b in tqdm(pairs, desc=f"W1 matrix {score_id}", unit="pair", disable=not progress):
        res = model_distance(
            scores,
            a,
            b,
            [score_id],
            depth_bins=depth_bins,
            n_boot=0,
            n_perm=n_perm,
            n_split=0,
            cluster=unit,
            seed=seed,
        )
        row = res[res["depth"] == depth].iloc[0]
        w1.loc[a, b] = w1.loc[b, a] = row["w1"]
        if pv is not None:
            pv.loc[a, b] = pv.loc[b, a] = row["p_value"]
    ph = None
    if pv is not None:
        adjusted = holm([pv.loc[a, b] for a, b in pairs])
        ph = pd.DataFrame(np.nan, index=models, columns=models)
        for (a, b), p in zip(pairs, adjusted, strict=True):
            ph.loc[a, b] = ph.loc[b, a] = p
    floors = {}
    for m in models:
        nf = noise_floor(
            scores,
            m,
            [score_id],
            depth_bins=depth_bins,
            n_split=n_split,
            quantile=floor_quantile,
            cluster=unit,
            seed=seed,
        )
        floors[m] = float(nf.loc[nf["depth"] == depth, "floor"].iloc[0])
    return DistanceMatrix(score_id, depth, w1, pd.Series(floors, name="noise_floor"), pv, ph, unit, max(n_split, 0))
