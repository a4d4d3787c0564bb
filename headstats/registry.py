"""One registry type for everything headstats looks up by name: study kinds, and any other table of
named entries a layer keeps.

An entry is registered with its object, or lazily as ``"module:object"``: the module is imported on the
first lookup of that name, so that listing a registry costs nothing and a heavy entry loads only when
used. Looking up a name that is not registered lists every name that is; a lazy entry whose module
does not define its object says which file to fix.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to registered objects; looking up a name not registered lists every name that is."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T | str] = {}
        self._lazy: set[str] = set()

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name``; a name registered already is refused."""
        if name in self._entries and name not in self._lazy:
            raise ValueError(f"{self.what} {name!r} is registered already; give the new one another name")
        self._lazy.discard(name)
        self._entries[name] = entry
        return entry

    def register_lazy(self, name: str, target: str) -> None:
        """Add ``name`` as ``"package.module:object"``, imported on its first lookup."""
        module, sep, attribute = target.partition(":")
        if not (sep and module and attribute):
            raise ValueError(f"{self.what} {name!r}: give its entry as 'package.module:object', not {target!r}")
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered already; give the new one another name")
        self._entries[name] = target
        self._lazy.add(name)

    def get(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.what} {name!r}: registered are {', '.join(self._entries)}") from None
        if name in self._lazy:
            entry = self._entries[name] = self._resolve(name, str(entry))
            self._lazy.discard(name)
        return entry  # type: ignore[return-value]

    def _resolve(self, name: str, target: str) -> T:
        module_name, _, attribute = target.partition(":")
        module = importlib.import_module(module_name)
        if not hasattr(module, attribute):
            where = Path(module.__file__ or module_name).as_posix()
            raise LookupError(
                f"{self.what} {name!r} is registered as {target!r}, but {where} defines no {attribute!r}: "
                f"define it there, or register {name!r} with the module that does"
            )
        return getattr(module, attribute)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return [(name, self.get(name)) for name in self._entries]

    def values(self) -> list[T]:
        return [self.get(name) for name in self._entries]
