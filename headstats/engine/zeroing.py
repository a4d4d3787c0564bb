"""Zeroing heads inside the forward pass: dynamic, static and random policies (docs/concepts.md#zeroing).

All three are policies of one :class:`~headstats.engine.probe.Probe`: the attention function asks the
policy, in every layer, which heads to zero, and sets those heads' outputs O to 0 at all positions
of the sequence, before the output projection W_O.

- dynamic (``score`` + ``threshold``): the policy sees the layer's scores, computed on the model as
  already intervened in the earlier layers, and zeroes every head whose score crosses the
  threshold in that score's direction (:func:`headstats.engine.scores.is_inactive`);
- random (``score="random"``, ``threshold=p``): the same rule on fp32 U(0, 1) draws, so each head
  of each sequence is zeroed with probability p, independently;
- static (``heads=[(layer, head), ...]``, or ``mask=`` a bool (layers, heads) tensor): the same heads
  for every input; no score is computed. A (batch, layers, heads) ``mask`` zeroes row b's heads in
  the b-th sequence of every batch (a per-input static mask).
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from headstats.engine import scores as S
from headstats.engine.attention import check_supported
from headstats.engine.probe import ForwardRecord, Probe

logger = logging.getLogger("headstats")


def model_shape(model: PreTrainedModel) -> tuple[int, int]:
    """(layers, query heads per layer) of a decoder model."""
    config = model.config.get_text_config()
    return int(config.num_hidden_layers), int(config.num_attention_heads)


def tied_within_layers(model: PreTrainedModel, score_ids: Iterable[str]) -> tuple[str, ...]:
    """The scores among ``score_ids`` that give every query head of a layer the same value on
    ``model``: statistics of the value vectors alone (``avvn``, ``ftvvn``) when each layer has a
    single KV head (multi-query attention, e.g. Gemma-3 270M). They rank layers, not heads, and
    their layer-normalised forms are exactly 1, so no threshold zeroes a head by them."""
    config = model.config.get_text_config()
    heads = int(getattr(config, "num_attention_heads", 1))
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    return S.tied_within_layer(score_ids, heads, kv_heads)


def warn_tied_scores(model: PreTrainedModel, score_ids: Iterable[str], model_name: str) -> tuple[str, ...]:
    """Log a warning naming the scores that cannot rank ``model``'s heads within a layer; returns them."""
    tied = tied_within_layers(model, score_ids)
    if tied:
        logger.warning(
            "%s has one KV head per layer, so %s %s the same for every head of a layer: %s cannot rank heads within "
            "a layer (a layer-normalised form is 1 for every head and zeroes none at any target). Use a score reading "
            "the attention or the head outputs (ahon_ln, awft, entropy_ln) to rank this model's heads.",
            model_name,
            ", ".join(tied),
            "is" if len(tied) == 1 else "are",
            "it" if len(tied) == 1 else "they",
        )
    return tied


@dataclass
class Ablation:
    """What ran inside :func:`ablate_heads`: the zero mask of every forward pass.

    ``records`` holds one :class:`~headstats.engine.probe.ForwardRecord` per forward pass (its
    ``zero_mask`` is (batch, layers, heads), True = zeroed). Masks of all passes are concatenated
    in run order by :meth:`zero_masks`.
    """

    mode: str  # "dynamic", "random" or "static"
    score: str | None
    threshold: float | None
    heads: tuple[tuple[int, int], ...] | None
    num_layers: int
    num_heads: int
    probe: Probe = field(repr=False)

    @property
    def records(self) -> list[ForwardRecord]:
        return self.probe.history

    def zero_masks(self) -> torch.Tensor:
        """(sequences, layers, heads) bool on the CPU, all forward passes in order."""
        masks = [r.zero_mask.cpu() for r in self.records if r.zero_mask is not None]
        if not masks:
            return torch.zeros(0, self.num_layers, self.num_heads, dtype=torch.bool)
        return torch.cat(masks)

    def sample_keys(self) -> torch.Tensor:
        """(sequences,) the sample key of each row of :meth:`zero_masks` (what the random draws used)."""
        keys = [r.sample_keys.cpu() for r in self.records if r.zero_mask is not None]
        return torch.cat(keys) if keys else torch.zeros(0, dtype=torch.long)

    def zeroed_per_sequence(self) -> torch.Tensor:
        """(sequences,) number of heads zeroed in each sequence's forward pass."""
        return self.zero_masks().sum(dim=(1, 2))

    def realised_fraction(self) -> float:
        """Mean of the zero mask over (sequence, layer, head): the fraction of heads actually zeroed.

        It can differ a lot from a calibrated target p, because a dynamic score is re-evaluated on
        the intervened model (zeroing early heads changes later scores)."""
        masks = self.zero_masks()
        if masks.numel() == 0 and self.probe.passes_unseen:
            raise ValueError(
                f"the model ran {self.probe.passes_unseen} forward pass(es) inside ablate_heads(...), but none reached "
                "headstats' attention function, so no head was zeroed (see the UnsupportedModelError each pass raised)"
            )
        if masks.numel() == 0:
            raise ValueError("no forward pass ran inside ablate_heads(...), so nothing was zeroed or measured")
        return float(masks.float().mean())

    def scores(self) -> dict[str, torch.Tensor]:
        """The scores each dynamic decision was taken on, (sequences, layers, heads) per score id
        (only with ``record_scores=True``)."""
        records = [r for r in self.records if r.scores]
        if not records:
            return {}
        return {sid: torch.cat([r.scores[sid].cpu() for r in records]) for sid in records[0].scores}

    def clear(self) -> None:
        """Forget the recorded passes (e.g. between the points of a sweep that reuse one context)."""
        self.probe.history.clear()


def _check_threshold(score: str, threshold: object) -> float:
    if threshold is None:
        raise ValueError(
            f"score {score!r} needs a threshold: pass threshold=..., e.g. "
            "headstats.threshold_for_fraction(score_table, score, p)"
        )
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise ValueError(f"threshold must be a real number, not {threshold!r}")
    value = float(threshold)
    if not math.isfinite(value):
        raise ValueError(f"threshold must be finite, not {value}")
    return S.check_threshold(score, value)


def _check_heads(heads: Iterable[object], num_layers: int, num_heads: int) -> tuple[tuple[int, int], ...]:
    checked: dict[tuple[int, int], None] = {}
    for item in heads:
        try:
            layer, head = item  # type: ignore[misc]
        except (TypeError, ValueError):
            raise ValueError(f"heads must be (layer, head) pairs, got {item!r}") from None
        if (
            isinstance(layer, bool)
            or isinstance(head, bool)
            or not (isinstance(layer, numbers.Integral) and isinstance(head, numbers.Integral))
        ):
            raise ValueError(f"heads must be pairs of integers, got {item!r}")
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise ValueError(
                f"head ({layer}, {head}) is out of range: the model has {num_layers} layers (0..{num_layers - 1}) "
                f"and {num_heads} heads per layer (0..{num_heads - 1})"
            )
        checked[(int(layer), int(head))] = None
    return tuple(checked)


def _check_mask(mask: object, num_layers: int, num_heads: int) -> torch.Tensor:
    """A bool (layers, heads) or (batch, layers, heads) zero mask, True = zeroed."""
    if not isinstance(mask, torch.Tensor):
        try:
            mask = torch.as_tensor(mask)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"mask must be a bool tensor of shape (layers, heads) or (batch, layers, heads), got "
                f"{type(mask).__name__}"
            ) from None
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = zero the head), got dtype {mask.dtype}: pass mask.bool()")
    if mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != (num_layers, num_heads):
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}: give (layers, heads) = ({num_layers}, {num_heads}) for every input, "
            f"or (batch, layers, heads) = (B, {num_layers}, {num_heads}) for one mask per sequence of a batch"
        )
    return mask


def ablate_heads(
    model: PreTrainedModel,
    score: str | None = None,
    threshold: float | None = None,
    heads: Iterable[tuple[int, int]] | None = None,
    seed: int = 0,
    *,
    mask: torch.Tensor | None = None,
    record_scores: bool = False,
    materialise: bool = False,
) -> AblationContext:
    """Zero attention heads of ``model`` for every forward pass run inside the ``with`` block.

    ``with ablate_heads(model, score="ahon_ln", threshold=t) as ab:`` zeroes, per sequence and layer,
    every head whose score crosses ``t`` (dynamic); ``score="random", threshold=p, seed=s`` zeroes each
    head with probability p (draws fixed by seed, sample key, layer, head); ``heads=[(layer, head), ...]``
    zeroes the same heads for every input (static, no scores computed); ``mask=`` does the same from a
    bool (layers, heads) tensor (True = zeroed), or, shaped (batch, layers, heads), zeroes row b's heads
    in the b-th sequence of each forward pass (whose batch must then have B sequences). The yielded
    :class:`Ablation` records the zero masks; ``ab.realised_fraction()`` is the fraction zeroed.
    Leaving the block restores the model's attention implementation, so it computes exactly what it
    did before. ``record_scores=True`` also keeps the scores each dynamic decision was taken on.
    ``materialise=True`` runs the explicit attention kernel even where the fused one would do, so
    that the pass is comparable bit for bit with a pass whose scores read the probabilities.

    Run the model with its 2-D ``attention_mask`` (padding must be known). Dynamic and random zeroing
    decide from whole sequences, so they run without a KV cache; static zeroing (``heads=``, ``mask=``)
    also runs with one, e.g. ``model.generate(...)`` inside the block, and then gives the tokens of the
    model with those heads pruned.
    The arguments are checked at the call; the returned object can be entered again (each ``with``
    block yields a new :class:`Ablation`, with the passes of that block only).
    """
    check_supported(model)  # before reading its config: a TransformerLens model has none
    num_layers, num_heads = model_shape(model)
    given = [name for name, value in (("score", score), ("heads", heads), ("mask", mask)) if value is not None]
    if len(given) != 1:
        raise ValueError(
            "give either score= (with threshold=) for dynamic or random zeroing, or heads=[(layer, head), ...] or "
            "mask= (a bool (layers, heads) or (batch, layers, heads) tensor) for static zeroing"
            + (f", not both ({' and '.join(given)} given)" if given else "")
        )
    if mask is not None:
        if threshold is not None:
            raise ValueError("static zeroing (mask=...) takes no threshold")
        mask = _check_mask(mask, num_layers, num_heads)
        if mask.dim() == 2:  # one mask for every input: exactly the (layer, head) pairs form
            heads = [(int(layer), int(head)) for layer, head in mask.nonzero().tolist()]
        else:
            return _per_sequence_mask(model, mask, seed, materialise)
    if heads is not None:
        if threshold is not None:
            raise ValueError("static zeroing (heads=...) takes no threshold")
        return _static_heads(model, _check_heads(heads, num_layers, num_heads), seed, materialise)
    assert score is not None
    return _dynamic(model, score, threshold, seed, record_scores, materialise)


def _static_heads(
    model: PreTrainedModel, static: tuple[tuple[int, int], ...], seed: int, materialise: bool
) -> AblationContext:
    """Static zeroing of the checked (layer, head) pairs ``static`` in every input."""
    num_layers, num_heads = model_shape(model)
    mask = torch.zeros(num_layers, num_heads, dtype=torch.bool)
    for layer, head in static:
        mask[layer, head] = True
    mask = mask.to(next(model.parameters()).device)

    def static_policy(layer: int, _scores: dict[str, torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
        return mask[layer].unsqueeze(0).expand(len(keys), num_heads)

    def static_ablation() -> Ablation:
        # No score ids: the attention function then computes attention only (the fast path).
        probe = Probe(
            model,
            (),
            static_policy,
            seed=seed,
            keep_history=True,
            record_scores=False,
            materialise=materialise,
            cached=True,
        )
        return Ablation("static", None, None, static, num_layers, num_heads, probe)

    return AblationContext(static_ablation)


def _dynamic(
    model: PreTrainedModel, score: str, threshold: float | None, seed: int, record_scores: bool, materialise: bool
) -> AblationContext:
    """Dynamic zeroing by ``score`` at ``threshold`` (random zeroing when the score is ``random``)."""
    num_layers, num_heads = model_shape(model)
    sid = S.get_score(score).id
    tau = _check_threshold(sid, threshold)

    def dynamic_policy(layer: int, scores: dict[str, torch.Tensor], _keys: torch.Tensor) -> torch.Tensor:
        return S.is_inactive(sid, scores[sid], tau)

    mode = "random" if S.get_score(sid).is_random else "dynamic"

    def dynamic_ablation() -> Ablation:
        probe = Probe(
            model,
            (sid,),
            dynamic_policy,
            seed=seed,
            keep_history=True,
            record_scores=record_scores,
            materialise=materialise,
        )
        return Ablation(mode, sid, tau, None, num_layers, num_heads, probe)

    return AblationContext(dynamic_ablation)


def _per_sequence_mask(model: PreTrainedModel, mask: torch.Tensor, seed: int, materialise: bool) -> AblationContext:
    """Static zeroing with a (batch, layers, heads) mask: row b is the b-th sequence's mask."""
    batch, num_layers, num_heads = mask.shape
    mask = mask.to(next(model.parameters()).device)

    def policy(layer: int, _scores: dict[str, torch.Tensor], keys: torch.Tensor) -> torch.Tensor:
        if len(keys) != batch:
            raise ValueError(
                f"mask has one row per sequence ({batch}) but this forward pass has {len(keys)} sequences: run "
                f"batches of {batch} inside this ablate_heads(...), or give a (layers, heads) mask for every input"
            )
        return mask[:, layer]

    def make() -> Ablation:
        probe = Probe(
            model, (), policy, seed=seed, keep_history=True, record_scores=False, materialise=materialise, cached=True
        )
        return Ablation("static", None, None, None, num_layers, num_heads, probe)

    return AblationContext(make)


class AblationContext:
    """What :func:`ablate_heads` returns: a context manager that zeroes heads inside each ``with``
    block it is entered in, yielding a new :class:`Ablation` each time."""

    def __init__(self, make: Callable[[], Ablation]) -> None:
        self._make = make
        self._active: Ablation | None = None

    def __enter__(self) -> Ablation:
        if self._active is not None:
            raise RuntimeError("this ablate_heads(...) is already active; leave its with block before entering again")
        ablation = self._make()
        ablation.probe.__enter__()
        self._active = ablation
        return ablation

    def __exit__(self, *exc: object) -> None:
        ablation, self._active = self._active, None
        if ablation is not None:
            ablation.probe.__exit__(*exc)
