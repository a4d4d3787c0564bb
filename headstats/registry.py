"""One registry type for everything headstats looks up by name: score ids, tasks, embedded models,
report sections, study kinds and command-line commands.

A :class:`Registry` is a mapping from names to objects. An entry is registered with its object, or
lazily as ``"module:object"``: the module is imported on the first lookup of that name, so that
listing a registry costs nothing and a heavy entry loads only when used. Looking up a name that is
not registered (``registry[name]``) lists every name that is; ``registry.get(name)`` is None for it,
as for a dict. A lazy entry whose module does not define its object says which file to fix, and
:func:`import_registering` imports every module of a package, each of which must register an entry,
so that a module added without its registration fails the import, naming its file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name that is not registered; the message lists every name that is. A ``KeyError`` for the
    mapping protocol, and a ``ValueError`` because it is a bad value a user gave."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(MutableMapping[str, T]):
    """Names to registered objects; looking up a name not registered lists every name that is.

    :meth:`register` refuses a name that is taken; item assignment (``registry[name] = entry``)
    replaces the entry, and ``del registry[name]`` removes it (a test that swaps an entry for a while)."""

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

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise self.unknown(name)
        entry = self._entries[name]
        if name in self._lazy:
            entry = self._entries[name] = self._resolve(name, str(entry))
            self._lazy.discard(name)
        return entry  # type: ignore[return-value]

    def unknown(self, name: object) -> UnknownName:
        """The error for a name that is not registered, listing every name that is."""
        return UnknownName(f"unknown {self.what} {name!r}: registered are {', '.join(self._entries)}")

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

    def __setitem__(self, name: str, entry: T) -> None:
        self._lazy.discard(name)
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        if name not in self._entries:
            raise self.unknown(name)
        self._lazy.discard(name)
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<{self.what} registry: {', '.join(self._entries)}>"


def import_registering(
    package: str,
    path: Iterable[str],
    registry: Registry,
    module_of: Callable[[object], str],
    how: str,
    *,
    machinery: Iterable[str] = (),
) -> None:
    """Import every module of ``package`` (its ``__path__``, ``path``); each one not named in
    ``machinery`` must register an entry of ``registry`` (``module_of(entry)`` is the module that
    defines it), else an ``ImportError`` names the module's file and says ``how`` to register one."""
    folder = package.replace(".", "/")
    for module in pkgutil.iter_modules(path):
        name = f"{package}.{module.name}"
        importlib.import_module(name)
        if module.name in machinery or name in {module_of(entry) for entry in registry.values()}:
            continue
        raise ImportError(
            f"{folder}/{module.name}.py registers no {registry.what}: end it with {how}, or move what it holds "
            f"out of {folder}/"
        )
