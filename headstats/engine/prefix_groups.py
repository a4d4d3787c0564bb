"""Which sequences share a prefix worth running once: token-id lists grouped by a common prefix
(:func:`shared_prefix_groups`), by arithmetic on the lists alone (no tensors, no torch), so that a plan
can ask it without a model. :mod:`headstats.engine.prefix` runs the groups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A prefix shorter than this is not worth a separate pass and a cache copy per batch.
MIN_PREFIX_TOKENS = 32


@dataclass
class PrefixGroup:
    """Sequences (indices into the caller's list) that start with the same ``length`` tokens."""

    length: int
    members: list[int]


def _common_length(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if n >= limit or x != y:
            break
        n += 1
    return n


def shared_prefix_groups(
    sequences: Sequence[Sequence[int]],
    *,
    keep: Sequence[int] | int = 1,
    min_length: int = MIN_PREFIX_TOKENS,
) -> tuple[list[PrefixGroup], list[int]]:
    """Groups of at least two sequences sharing a prefix of ``min_length`` tokens or more, and the
    indices of the sequences left for whole passes.

    Sequences are sorted by their tokens, so sequences with a common prefix are neighbours and a
    run's common prefix is the minimum of its neighbours' common prefixes. A run is extended while
    its prefix stays at least ``min_length`` tokens and at least half of what it was (so two
    subjects that share only the header do not merge into one short-prefix group). ``keep`` (per
    sequence, or one number) is how many final tokens must stay out of the prefix: at least 1, and
    the evaluator keeps every position whose logits it reads."""
    n = len(sequences)
    keeps = [keep] * n if isinstance(keep, int) else list(keep)
    if len(keeps) != n:
        raise ValueError(f"keep has {len(keeps)} entries for {n} sequences")
    caps = [len(s) - max(1, k) for s, k in zip(sequences, keeps, strict=True)]
    order = sorted(range(n), key=lambda i: list(sequences[i]))
    groups: list[PrefixGroup] = []
    rest: list[int] = []
    members: list[int] = []
    shared = 0

    def close() -> None:
        if len(members) >= 2 and shared >= min_length:
            groups.append(PrefixGroup(shared, list(members)))
        else:
            rest.extend(members)

    for i in order:
        if members:
            prev = members[-1]
            common = min(shared, caps[i], _common_length(sequences[prev], sequences[i], shared))
            if common >= min_length and (len(members) == 1 or 2 * common >= shared):
                members.append(i)
                shared = common
                continue
            close()
        members, shared = [i], max(caps[i], 0)
    if members:
        close()
    return groups, sorted(rest)


__all__ = ["MIN_PREFIX_TOKENS", "PrefixGroup", "shared_prefix_groups"]
