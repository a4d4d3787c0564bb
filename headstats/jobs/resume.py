"""Resume keys: what a partition's results were computed with, checked before a run adds to them.

A key is a job's settings (:meth:`~headstats.options.Spec.settings`: every option not declared
``runtime``) together with what the job knows of its inputs (the model, the task or dataset, the
dtype). Options that name the units a partition holds, rather than how each unit is computed, are
the job's *axes* and stay out of the key, so that a run asking for more units adds them: a sweep's
scores and targets (one point file each), a collection's limit (a larger one extends the same
sample). Every other option is in the key by construction, so a new option cannot be forgotten.

An entry that a stored key lacks reads as that entry of ``defaults`` (the key of the job's default
options): a record written before a setting existed was computed as its default is. A job names
the entries its records spelled otherwise (``renamed``: recorded name -> name).

A key names no local path: a model in a local folder is ``<local>/<folder name>`` (its weights
identified by their content hash, ``revision``), any other absolute path outside the cache and home
by its name alone (:func:`~headstats.io.assets.portable_record`). A stored key is read the same way,
so a key recorded with the folder's path still matches, and a folder moved keeps its results.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from headstats.io import store
from headstats.io.assets import portable_record
from headstats.io.identity import recorded_model
from headstats.options import Spec


def jsonable(value: object) -> object:
    """``value`` as it reads back from JSON (tuples as lists, keys sorted)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def settings_key(spec: Spec, axes: Iterable[str] = (), **inputs: object) -> dict[str, object]:
    """``spec``'s settings, its ``axes`` left out, with ``inputs`` (which replace a setting of the
    same name by the value the job resolved it to, e.g. a truncation capped by the model)."""
    skip = set(axes)
    settings = {name: value for name, value in spec.settings().items() if name not in skip}
    key = portable_record(jsonable({**settings, **inputs}))
    assert isinstance(key, dict)
    return key


def recorded_key(
    record: Mapping[str, object], defaults: Mapping[str, object], renamed: Mapping[str, str] | None = None
) -> dict[str, object]:
    """A stored key with the entries it lacks filled in from ``defaults``, and entries it spelled
    otherwise read under their names (``renamed``: recorded name -> name)."""
    names = renamed or {}
    stored = portable_record({names.get(name, name): value for name, value in record.items()})
    assert isinstance(stored, dict)
    if isinstance(stored.get("model"), str):
        stored["model"] = recorded_model(stored["model"])
    return {**dict(defaults), **stored}


def changed_entries(
    record: Mapping[str, object],
    key: Mapping[str, object],
    defaults: Mapping[str, object],
    renamed: Mapping[str, str] | None = None,
) -> list[str]:
    """The entries in which the stored ``record`` and ``key`` differ, over the entries of both."""
    stored = recorded_key(record, defaults, renamed)
    return sorted(name for name in {*stored, *key} if stored.get(name) != key.get(name))


def check_key(
    partition: Path,
    key: Mapping[str, object],
    defaults: Mapping[str, object],
    *,
    what: str,
    unknown: Iterable[str] = (),
    renamed: Mapping[str, str] | None = None,
) -> None:
    """Refuse to add to ``partition`` when the data it holds were computed under another key.

    ``unknown``: entries the stored key has that are not known yet (the weights' hash before the
    model loads); they are checked by a later call. A partition without data files accepts any key:
    a failed first run must not block the corrected command."""
    if not store.has_data(partition):
        return
    record = (store.read_provenance(partition) or {}).get("settings")
    if not isinstance(record, dict):
        raise store.StoreError(
            f"{str(partition)!r} holds {what} without a headstats settings record (written by another tool); "
            "use a new --out, or delete that directory to start over"
        )
    later = set(unknown) - set(key)
    changed = [name for name in changed_entries(record, key, defaults, renamed) if name not in later]
    if changed:
        stored = recorded_key(record, defaults, renamed)
        detail = "; ".join(f"{name}: {stored.get(name)!r} there, {key.get(name)!r} now" for name in changed)
        raise store.StoreError(
            f"{str(partition)!r} holds {what} of a different run, with other settings ({detail}); adding to it "
            "would mix two runs: use another --out, or delete that directory to start over"
        )


__all__ = ["changed_entries", "check_key", "jsonable", "recorded_key", "settings_key"]
