"""Pre-registration, one mechanism for every study kind whose verdicts follow a rule stated before the
data (a confirmation's claims, a fine-tuning seed study's design).

A kind names the keys that decide its verdicts (:class:`Registered`: the keys, the values a key had
before it existed, and how to name the items of a list key such as a confirmation's claims). Before
its first unit runs, :func:`register` records them under the results folder
(``_registration.json``, :func:`headstats.io.store.read_registration`) and refuses a run whose file
changed them since: a study's rule is fixed before it runs, and a changed file is another study with
its own results folder. Its report reads :func:`amendments` (the keys changed since, each named
``margin: 0.12 -> 0.2``), so a file edited after its results is called an amendment on the report's
first screen, never followed silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headstats.io import store
from headstats.io.assets import portable_record
from headstats.options import SpecError


def keys_record(keys: Mapping[str, object]) -> dict:
    """``{"keys": ..., "sha256": ...}``: the deciding keys as JSON reads them back, a local path in them
    named as every record names it (``<local>/<file>``: a study moved to another machine keeps its
    registration, and no record names a local folder), with their hash."""
    plain = portable_record(json.loads(json.dumps(dict(keys), sort_keys=True, default=list)))
    assert isinstance(plain, dict)
    return {"keys": plain, "sha256": hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()}


@dataclass(frozen=True)
class Registered:
    """What a study registers: its deciding ``keys`` (nested tables allowed), the value each key had
    before it existed (``defaults``: a record, or a file, that lacks a key ran as its default), and for list keys
    whose items are named one by one (``items``: key -> how to name an item), a confirmation's claims."""

    keys: Mapping[str, object]
    defaults: Mapping[str, object] = field(default_factory=dict)
    items: Mapping[str, Callable[[object], str]] = field(default_factory=dict)

    @property
    def record(self) -> dict:
        return keys_record(self.keys)


def flat_keys(keys: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested tables as dotted keys (``collect.scores``), so a change names the key it is in."""
    out: dict[str, object] = {}
    for name, value in keys.items():
        if isinstance(value, Mapping):
            out.update(flat_keys(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def changed_keys(then: Mapping[str, object], now: Mapping[str, object], registered: Registered) -> list[str]:
    """The keys ``now`` (the file's) changed from ``then`` (the record's): ``key: old -> new`` in key
    order, then each named item of a list key withdrawn and added (``claim m ahon_ln@0.02 withdrawn``)."""
    defaults = json.loads(json.dumps(dict(registered.defaults), default=list))
    recorded = portable_record(dict(then))
    assert isinstance(recorded, dict)  # a path an earlier record wrote reads as the file names it now
    # a key either side leaves out ran as its default (nested tables' defaults key by key)
    before = {**flat_keys(defaults), **flat_keys(recorded)}
    after = {**flat_keys(defaults), **flat_keys(now)}
    out = [
        f"{key}: {json.dumps(before.get(key))} -> {json.dumps(after.get(key))}"
        for key in sorted(set(before) | set(after))
        if key not in registered.items and before.get(key) != after.get(key)
    ]
    for key, name in registered.items.items():
        old = [name(item) for item in before.get(key) or [] if isinstance(item, dict)]
        new = [name(item) for item in after.get(key) or [] if isinstance(item, dict)]
        out += [f"{item} withdrawn" for item in old if item not in new]
        out += [f"{item} added" for item in new if item not in old]
    return out


def amendments(results: Path, registered: Registered) -> list[str] | None:
    """The deciding keys the file changed since the first unit recorded them under ``results``, empty
    when none; None when no registration is recorded there."""
    recorded = store.read_registration(results)
    if recorded is None:
        return None
    return changed_keys(recorded["keys"], registered.record["keys"], registered)


def register(results: Path, registered: Registered, *, file: str, what: str) -> dict:
    """Record ``registered`` under ``results`` before a study's first unit, or check it against the
    record there: a file whose deciding keys changed since is refused, naming them (``what``: the
    kind's words for what is fixed, "a confirmation's claims and rule"). Returns the record."""
    changed = amendments(results, registered)
    if changed:
        raise SpecError(
            "results",
            f"{file} changed since its first run ({'; '.join(changed)}): {what} are fixed before it runs; "
            "restore them, or give the changed file its own results folder",
            label="",
        )
    if changed is None:
        record = {**registered.record, "file": file}
        store.write_json_atomic(record, store.ensure_writable(results) / store.REGISTRATION_FILE)
        return record
    return store.read_registration(results) or {}


__all__ = ["Registered", "amendments", "changed_keys", "flat_keys", "keys_record", "register"]
