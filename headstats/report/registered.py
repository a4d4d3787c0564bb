"""What a report of a pre-registered study says first about its registration
(:mod:`headstats.jobs.registration`): nothing when the file's deciding keys are those its first run
recorded; that it is an amendment, naming the changed keys, when they are not; that no record shows
the rule predates the results when none was recorded. One wording for every kind that registers."""

from __future__ import annotations

from pathlib import Path

from headstats.io import store
from headstats.io.assets import portable_name

AMENDMENTS_SHOWN = 3  # changed keys the abstract names; the report's body lists every one


def record_name(results: str | Path) -> str:
    """The registration record of a study with results in ``results``, as a report names it (no local path)."""
    return f"{portable_name(results)}/{store.REGISTRATION_FILE}"


def registration_line(changed: list[str] | None, results: str | Path, ran: bool, *, more: str = "below") -> str:
    """The abstract's first words when the file's deciding keys are not those its first run recorded
    (an amendment after results: ``changed``, the keys named), or when no record says what they were
    (``changed`` None) and results exist (``ran``); empty otherwise. ``more``: where every changed
    key is listed."""
    record = f"`{record_name(results)}`"
    if changed:
        shown = "; ".join(changed[:AMENDMENTS_SHOWN])
        if len(changed) > AMENDMENTS_SHOWN:
            shown += f"; {len(changed) - AMENDMENTS_SHOWN} more {more}"
        return (
            f"**Amended after results, not pre-registered**: {shown} (the first run recorded the "
            f"others in {record}); the verdicts below use the amended rule. "
        )
    if changed is None and ran:
        return (
            f"**No pre-registration record** ({record} is missing): the rule below is the file's current one, "
            "which nothing shows predates the results. "
        )
    return ""


__all__ = ["AMENDMENTS_SHOWN", "record_name", "registration_line"]
