"""The score functions of docs/concepts.md#scores: one registry, pure tensor math.

A raw score is a *token statistic* (a number per query token of one head, computed from that
token's attention row, value vector or head output) pooled over the valid tokens of the sequence
(their mean, or the value at the first or the last valid token). Splitting scores this way is what
lets the attention function compute all of them in one pass over query-row chunks, with memory
linear in the sequence length, while each score stays a few lines of readable math.

Normalised scores (``*_ln``, ``*_hn``) are derived from raw ones by one rule (:class:`Ratio`):
divide by the layer mean (or by another score of the same head). When the denominator is 0, the
normalised score is defined as 0. Every raw score here is non-negative, so a zero layer mean
means every numerator in the layer is 0 too (e.g. a one-token sequence has entropy 0 in every
head); 0 keeps such heads at the "inactive" end for the "below" scores and is the raw value itself.

Adding a score is adding one :func:`register` call (``headstats.register_score`` in user code), and,
if it needs a new token statistic, one function taking a :class:`TokenRows`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that compute, not here: the registry (ids, names,
# directions) is read by the command line, which must start without loading torch.

from headstats.names import check_name
from headstats.registry import Registry

Direction = Literal["above", "below"]
Pool = Literal["mean", "first", "last"]


@dataclass
class TokenRows:
    """What one layer's attention exposes for a chunk of query rows ``[start, start + C)``.

    Shapes: B sequences, H query heads, C query rows, S key positions, D head dim. All tensors are
    fp32. The attention rows are kept over the keys ``[key_start, key_start + W)`` only
    (``probs_window``, ``logits_window``): every key outside that window is masked for every row of
    the chunk (causal attention reaches no key after the chunk's last row, a sliding window none
    before its first row's reach), so its probability is exactly 0 and computing it is skipped.
    ``probs`` and ``logits`` are the same rows over all S keys, built when a statistic reads them.
    Both are already masked (a masked key has probability exactly 0 and the finite logit
    ``torch.finfo(torch.float32).min``), so sums over keys need no further masking; every row,
    padded ones included, sees at least itself.
    """

    probs_window: torch.Tensor | None  # (B, H, C, W) A[t, key_start + j]; None when no score needs them
    logits_window: torch.Tensor | None  # (B, H, C, W) pre-softmax logits (after mask and softcap)
    start: int  # position of the chunk's first query row
    kv_values: torch.Tensor  # (B, KVH, C, D) value vectors of the chunk's tokens, per KV head
    group_size: int  # query heads per KV head (GQA); query head h reads KV head h // group_size
    outputs: torch.Tensor  # (B, H, C, D) head outputs O[t] = sum_s A[t, s] V[s]
    first: torch.Tensor  # (B,) index of each sequence's first valid token
    out_proj_gram: torch.Tensor | None = None  # (H, D, D) W_h^T W_h of each head's W_O slice
    key_start: int = 0  # key position of the window's first column
    n_keys: int | None = None  # S, every key position (None: the window holds them all)

    @cached_property
    def probs(self) -> torch.Tensor | None:
        """(B, H, C, S) attention probabilities A[t, s] over every key position."""
        return self._whole(self.probs_window, 0.0)

    @cached_property
    def logits(self) -> torch.Tensor | None:
        """(B, H, C, S) pre-softmax logits z[t, s] over every key position."""
        import torch

        return self._whole(self.logits_window, torch.finfo(torch.float32).min)

    def _whole(self, window: torch.Tensor | None, masked: float) -> torch.Tensor | None:
        import torch

        if window is None or self.n_keys is None or (self.key_start == 0 and window.shape[-1] == self.n_keys):
            return window
        whole = torch.full((*window.shape[:-1], self.n_keys), masked, dtype=window.dtype, device=window.device)
        whole[..., self.key_start : self.key_start + window.shape[-1]] = window
        return whole

    @cached_property
    def output_norm(self) -> torch.Tensor:
        import torch

        return torch.linalg.vector_norm(self.outputs, dim=-1)

    @cached_property
    def log_normaliser(self) -> torch.Tensor:
        """(B, H, C) logsumexp of each row's logits, read off the softmax at the diagonal
        (ln A[t, t] = z[t, t] - lse[t]; the diagonal is never masked) instead of another pass over
        the row; rows whose diagonal probability underflows are recomputed exactly."""
        import torch

        probs, logits = self.probs_window, self.logits_window
        b, h, c, _ = probs.shape
        first = self.start - self.key_start
        diag = torch.arange(first, first + c, device=probs.device).view(1, 1, c, 1).expand(b, h, c, 1)
        p_tt = probs.gather(-1, diag).squeeze(-1)
        lse = logits.gather(-1, diag).squeeze(-1) - torch.log(p_tt)
        tiny = p_tt < 1e-30
        if tiny.any():
            lse[tiny] = torch.logsumexp(logits[tiny], dim=-1)
        return lse


# --- token statistics: (TokenRows) -> (B, H, C) -------------------------------------------------


def first_token_weight(rows: TokenRows) -> torch.Tensor:
    """A[t, first]: how much of query t's attention lands on the sequence's first token (0 where
    the first token lies outside the chunk's key window, where every row has it masked)."""
    import torch

    probs = rows.probs_window
    b, h, c, width = probs.shape
    column = rows.first - rows.key_start
    inside = (column >= 0) & (column < width)
    index = column.clamp(0, width - 1).view(b, 1, 1, 1).expand(b, h, c, 1)
    weight = probs.gather(-1, index).squeeze(-1)
    return torch.where(inside.view(b, 1, 1), weight, torch.zeros_like(weight))


def attention_entropy(rows: TokenRows) -> torch.Tensor:
    """-sum_s A ln A, written as lse(z) - sum_s A z.

    The two are equal for a softmax (ln A = z - lse), and the second needs no logarithm per
    element and no special case for A = 0 (masked keys have A = 0 exactly, so they add nothing,
    which is also why the sum may run over the key window alone).
    """
    import torch

    return rows.log_normaliser - torch.linalg.vecdot(rows.probs_window, rows.logits_window)


def value_norm(rows: TokenRows) -> torch.Tensor:
    """||V[t]||_2, computed once per KV head and shared by the query heads of its group."""
    import torch

    return torch.linalg.vector_norm(rows.kv_values, dim=-1).repeat_interleave(rows.group_size, dim=1)


def output_norm(rows: TokenRows) -> torch.Tensor:
    """||O[t]||_2, the head's output before the output projection."""
    return rows.output_norm


def projected_output_norm(rows: TokenRows) -> torch.Tensor:
    """||W_O[:, h] O[t]||_2 computed as sqrt(O^T (W_h^T W_h) O): a D x D form per head instead of
    materialising the d_model-sized vector of every head and token."""
    import torch

    if rows.out_proj_gram is None:
        raise ValueError("projected_output_norm needs the layer's output projection (out_proj_gram)")
    quad = (torch.matmul(rows.outputs, rows.out_proj_gram) * rows.outputs).sum(-1)
    return quad.clamp_min(0).sqrt()


TokenStat = Callable[[TokenRows], "torch.Tensor"]


# --- the registry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """One score function and the metadata that plots, thresholds and the CLI read."""

    id: str
    name: str
    inactive_when: Direction  # a head is inactive when its score is above / below the threshold
    stat: TokenStat | None = None  # raw scores: the token statistic ...
    pool: Pool | None = None  # ... and how it is pooled over the valid tokens
    ratio: Ratio | None = None  # normalised scores: how they derive from raw ones
    needs_out_proj: bool = False
    # Reads the (rows x keys) attention probabilities or logits. None (the default): :func:`register`
    # finds out by calling the token statistic once on a small input and noting what it reads.
    needs_weights: bool | None = None
    # Reads only the head's value vectors, which query heads sharing a KV head share (GQA): with one
    # KV head per layer the score is the same for every head of a layer (see zeroing.tied_within_layers).
    per_kv_head: bool = False
    description: str = ""
    # The values the score can take: a threshold outside them zeroes every head or none (checked by
    # :func:`check_threshold`). A user's score may take any value unless it says otherwise.
    bounds: tuple[float, float] = (-math.inf, math.inf)

    @property
    def is_random(self) -> bool:
        return self.stat is None and self.ratio is None

    def dependencies(self) -> tuple[str, ...]:
        """Ids of the scores this one is computed from (itself for a raw score)."""
        if self.ratio is None:
            return (self.id,)
        return tuple(dict.fromkeys((self.ratio.numerator, self.ratio.denominator)))


@dataclass(frozen=True)
class Ratio:
    """numerator / denominator, where the denominator is averaged over the heads of the layer
    (``over="layer"``) or taken from the same head (``over="head"``). 0/0 is defined as 0."""

    numerator: str
    denominator: str
    over: Literal["layer", "head"] = "layer"

    def apply(self, raw: dict[str, torch.Tensor]) -> torch.Tensor:
        import torch

        num = raw[self.numerator]
        den = raw[self.denominator]
        if self.over == "layer":
            den = den.mean(dim=-1, keepdim=True).expand_as(num)
        safe = torch.where(den == 0, torch.ones_like(den), den)
        return torch.where(den == 0, torch.zeros_like(num), num / safe)


SCORES: Registry[Score] = Registry("score id")  # in registration order: the column order of every table


def register(score: Score) -> Score:
    """Add a score to the registry; its id becomes a column name in every table and part of the
    file name of every sweep point, so it must be a safe name (:func:`headstats.names.check_name`).
    An id registered already is refused."""
    check_name(score.id, "score id")
    if score.id in SCORES:
        raise ValueError(f"score id {score.id!r} is registered already; give the new one another id")
    if score.ratio is not None:
        for dep in score.dependencies():
            # A ratio may name a raw score registered after it (lthon_ln divides by ahon), so an
            # unknown dependency is refused when the score is used (raw_closure), not here.
            if dep in SCORES and SCORES[dep].ratio is not None:
                raise ValueError(f"{score.id!r}: normalised scores derive from raw scores, not from {dep!r}")
    return SCORES.register(score.id, replace(score, needs_weights=_needs_weights(score)))


register_score = register  # the public name (``headstats.register_score``)


# What a token statistic may read of a TokenRows that only the explicit kernel provides.
WEIGHT_FIELDS = frozenset({"probs", "logits", "probs_window", "logits_window", "log_normaliser"})


def _needs_weights(score: Score) -> bool:
    """Whether ``score`` reads the attention probabilities: as declared, or else (None) what its token
    statistic reads when called on a small input; a ratio or the random score reads none itself. The
    built-in scores declare it, so that the registry loads without torch (the command line's lists)."""
    if score.needs_weights is not None or score.stat is None:
        return bool(score.needs_weights)
    return bool(_fields_read(score.stat) & WEIGHT_FIELDS)


class _ReadRecorder(TokenRows):
    """A :class:`TokenRows` that notes the name of every field a token statistic reads."""

    def __getattribute__(self, name: str) -> object:
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


def _fields_read(stat: TokenStat) -> set[str]:
    """The :class:`TokenRows` fields ``stat`` reads on a 1-sequence, 2-head, 2-token input. A statistic
    that fails there still reports what it read before failing; it fails again, with its own error, when
    it scores a real model."""
    import torch

    b, h, c, d = 1, 2, 2, 2
    logits = torch.zeros(b, h, c, c)
    rows = _ReadRecorder(
        probs_window=torch.softmax(logits, dim=-1),
        logits_window=logits,
        start=0,
        kv_values=torch.ones(b, h, c, d),
        group_size=1,
        outputs=torch.ones(b, h, c, d),
        first=torch.zeros(b, dtype=torch.long),
        out_proj_gram=torch.eye(d).expand(h, d, d),
    )
    object.__setattr__(rows, "_read", set())
    with contextlib.suppress(Exception):  # the statistic's own error surfaces when it scores a model
        stat(rows)
    return object.__getattribute__(rows, "_read")


def _raw_with_ln(
    id: str,
    name: str,
    inactive_when: Direction,
    stat: TokenStat,
    pool: Pool,
    description: str,
    bounds: tuple[float, float] = (0.0, math.inf),
    **kw: bool,
) -> None:
    kw.setdefault("needs_weights", False)
    register(Score(id, name, inactive_when, stat=stat, pool=pool, description=description, bounds=bounds, **kw))
    register(
        Score(
            f"{id}_ln",
            f"{name}, layer-normalised",
            inactive_when,
            bounds=(0.0, math.inf),  # a ratio of non-negative scores
            ratio=Ratio(id, id, "layer"),
            needs_out_proj=kw.get("needs_out_proj", False),
            needs_weights=kw.get("needs_weights", False),
            per_kv_head=kw.get("per_kv_head", False),
            description=f"{id} divided by its mean over the heads of the same layer and sequence",
        )
    )


_raw_with_ln(
    "awft",
    "avg weight of first token",
    "above",
    first_token_weight,
    "mean",
    "mean over valid query rows t of A[t, first]; high = an attention sink",
    bounds=(0.0, 1.0),  # a mean of probabilities
    needs_weights=True,
)
_raw_with_ln(
    "entropy",
    "avg attention entropy",
    "below",
    attention_entropy,
    "mean",
    "mean over valid query rows of -sum_s A[t,s] ln A[t,s]",
    needs_weights=True,
)
_raw_with_ln(
    "ftvvn",
    "first-token value-vector norm",
    "below",
    value_norm,
    "first",
    "||V[first]||_2 of the head's (shared, under GQA) value vectors",
    per_kv_head=True,
)
_raw_with_ln(
    "avvn",
    "avg value-vector norm",
    "below",
    value_norm,
    "mean",
    "mean over valid tokens of ||V[t]||_2",
    per_kv_head=True,
)
register(
    Score(
        "lthon",
        "last-token head-output norm",
        "below",
        stat=output_norm,
        pool="last",
        needs_weights=False,
        description="||O[T]||_2 at the last valid token T",
        bounds=(0.0, math.inf),
    )
)
register(
    Score(
        "lthon_ln",
        "last-token head-output norm, layer-normalised",
        "below",
        ratio=Ratio("lthon", "ahon", "layer"),
        description="||O[T]|| divided by the layer mean of the token-averaged norm (ahon)",
        bounds=(0.0, math.inf),
    )
)
register(
    Score(
        "lthon_hn",
        "last-token head-output norm, head-normalised",
        "below",
        ratio=Ratio("lthon", "ahon", "head"),
        description="||O[T]|| divided by the same head's token-averaged norm (ahon)",
        bounds=(0.0, math.inf),
    )
)
_raw_with_ln(
    "ahon",
    "avg head-output norm",
    "below",
    output_norm,
    "mean",
    "mean over valid tokens of ||O[t]||_2 (ahon_ln is the study's most reliable score)",
)
_raw_with_ln(
    "fhon",
    "full head-output norm",
    "below",
    projected_output_norm,
    "mean",
    "mean over valid tokens of ||W_O[:, h] O[t]||_2, the head's contribution to the residual stream",
    needs_out_proj=True,
)
register(
    Score(
        "random",
        "random baseline",
        "below",
        description="u ~ U(0, 1) in fp32, independent per (sequence, layer, head); zeroes a fraction p when tau = p",
        bounds=(0.0, 1.0),
    )
)


def score_ids() -> tuple[str, ...]:
    """Every registered score id, in registration order: the column order of every table (the
    built-in scores are registered in the order of docs/concepts.md#scores; a user's scores follow)."""
    return tuple(SCORES)


def tied_within_layer(score_ids: Iterable[str], n_heads: int, n_kv_heads: int) -> tuple[str, ...]:
    """The scores among ``score_ids`` that give every query head of a layer the same value when a
    layer of ``n_heads`` query heads has ``n_kv_heads`` KV heads: the statistics of the value vectors
    alone (``per_kv_head``: ``avvn``, ``ftvvn`` and their layer-normalised forms) when a single KV head
    serves every query head (multi-query attention, e.g. Gemma-3 270M). They rank layers, not heads,
    and their layer-normalised forms are exactly 1."""
    if n_kv_heads != 1 or n_heads <= 1:
        return ()
    return tuple(sid for sid in score_ids if get_score(sid).per_kv_head)


def get_score(score_id: str) -> Score:
    """The registered score ``score_id``; an unknown id is a ``ValueError`` that lists the registered ones."""
    return SCORES[score_id]


def resolve(score_ids: Iterable[str] | None) -> tuple[str, ...]:
    """Validate score ids (None = all), keeping the canonical order."""
    if score_ids is None:
        return tuple(SCORES)
    wanted = set()
    for sid in score_ids:
        wanted.add(get_score(sid).id)
    if not wanted:
        raise ValueError("no score ids given: choose from " + ", ".join(SCORES))
    return tuple(s for s in SCORES if s in wanted)


def reads_weights(score_ids: Iterable[str]) -> bool:
    """Whether computing ``score_ids`` reads the attention probabilities (the explicit kernel)."""
    return any(SCORES[r].needs_weights for r in raw_closure(score_ids))


def raw_closure(score_ids: Iterable[str]) -> tuple[str, ...]:
    """The raw (non-random) scores that must be computed to produce ``score_ids``."""
    raw: dict[str, None] = {}
    for sid in score_ids:
        score = get_score(sid)
        if score.is_random:
            continue
        for dep in score.dependencies():
            if dep not in SCORES or SCORES[dep].ratio is not None or SCORES[dep].is_random:
                raise ValueError(f"score {sid!r} derives from {dep!r}, which is not a registered raw score")
            raw[dep] = None
    return tuple(raw)


def check_threshold(score_id: str, threshold: float) -> float:
    """``threshold`` as a float if it lies within the values the score can take (:attr:`Score.bounds`),
    else a ``ValueError``: outside them a threshold zeroes every head or none (``awft`` with -1 zeroes
    every head), which is never what a sweep point means."""
    score = get_score(score_id)
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold of {score_id!r} must be a number, not {threshold!r}") from None
    low, high = score.bounds
    if math.isnan(value) or not low <= value <= high:
        what = "zeroes every head" if (value < low) == (score.inactive_when == "above") else "zeroes no head"
        raise ValueError(
            f"threshold {threshold!r} of {score_id!r} is outside the values the score takes [{low:g}, {high:g}]"
            + ("" if math.isnan(value) else f", so it {what}")
            + (
                "; give p in [0, 1] (the fraction of heads to zero)"
                if score.is_random
                else "; give a threshold inside that range (headstats.thresholds_for_fractions calibrates one)"
            )
        )
    return value


def is_inactive(score_id: str, values: torch.Tensor, threshold: float) -> torch.Tensor:
    """Boolean mask of heads a score calls inactive at ``threshold`` (strict inequality, docs/concepts.md#scores)."""
    if get_score(score_id).inactive_when == "above":
        return values > threshold
    return values < threshold


def pool_rows(
    stat: torch.Tensor, pool: Pool, rows: range, valid: torch.Tensor, first: torch.Tensor, last: torch.Tensor
) -> torch.Tensor:
    """Contribution of one chunk of query rows to a pooled score, as a (B, H) sum.

    ``mean`` returns the sum over the chunk's valid rows (the caller divides by the token count);
    ``first`` / ``last`` return the statistic at the first / last valid token if it lies in the
    chunk, and 0 otherwise, so that summing the contributions of all chunks gives the score.
    """
    import torch

    positions = torch.arange(rows.start, rows.stop, device=stat.device)
    if pool == "mean":
        weight = valid[:, rows.start : rows.stop].to(stat.dtype)
    else:
        target = first if pool == "first" else last
        weight = (positions.unsqueeze(0) == target.unsqueeze(1)).to(stat.dtype)
    return torch.einsum("bhc,bc->bh", stat, weight)
