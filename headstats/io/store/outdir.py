"""Output folders (a report's, a pruned model's, any command's ``--out``): headstats writes only
files it can prove it wrote.

A folder's ``_manifest.json`` lists the files headstats wrote there. A build claims the folder
(:func:`claim_output_folder`), then asks for each file's path (:meth:`OutputFolder.path`) before it
writes it: a file that is there already and that the manifest does not list is the user's, and the
build stops with one line naming it instead of overwriting it. The manifest lists each file before
it is written, so a build that is killed part way leaves files the next build may replace. When the
build ends (:meth:`OutputFolder.finish`) the manifest lists exactly this build's files and the
files only the previous build wrote are removed; nothing else in the folder is ever removed. No path
passes through a link: a link inside the folder (``figures/`` pointing at a user's folder) is refused
before anything is written through it, and never followed when removing.

A folder replaced as a whole (a pruned model: weights, config, tokenizer and its record must agree)
is staged in a hidden folder inside it and moved into place file by file, the ``last`` file (the
record that says the folder is whole) removed first and moved last (:func:`replace_folder`); a
staging folder that a killed run left is removed by the next run.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from headstats.io.store.layout import StoreError
from headstats.io.store.write import make_writable_folder, write_json_atomic

MANIFEST_FILE = "_manifest.json"
STAGING_PREFIX = ".headstats-staging-"
SHOWN = 5  # files named in a refusal; the rest are counted


class OutputFolderError(StoreError):
    """An output folder headstats may not write: a file, a link, or a folder holding the user's files."""


def _listing(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def safe_relative(rel: str) -> bool:
    """Whether ``rel`` is a relative path that stays inside its folder (no ``..``, not absolute)."""
    pure = PurePosixPath(rel)
    return bool(rel) and "\0" not in rel and not pure.is_absolute() and ".." not in pure.parts


def read_manifest(root: Path, name: str = MANIFEST_FILE) -> tuple[set[str], dict]:
    """The files (relative paths) the manifest in ``root`` lists, and the whole manifest; empty when
    there is none or it cannot be read. Entries that would leave ``root`` are ignored."""
    try:
        data = json.loads((root / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set(), {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list):
        return set(), data if isinstance(data, dict) else {}
    return {rel for rel in files if isinstance(rel, str) and safe_relative(rel) and rel != name}, data


def _link_on_the_way(root: Path, rel: str) -> Path | None:
    """The first link among ``rel``'s components under ``root`` (the file itself included), if any."""
    path = root
    for part in PurePosixPath(rel).parts:
        path = path / part
        if path.is_symlink():
            return path
        if not path.exists():
            return None
    return None


@dataclass
class OutputFolder:
    """A claimed output folder: what its previous build wrote (``previous``) and what this one has
    written so far (``written``); see the module docstring for the rule."""

    root: Path
    option: str = "--out"
    manifest: str = MANIFEST_FILE
    force: bool = False
    previous: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    ours: set[str] = field(default_factory=set)  # present files proven ours by other means (a legacy record)

    def _where(self) -> str:
        return f"{self.option} {self.root}"

    def in_the_way(self, rels: Iterable[str]) -> list[str]:
        """Those of ``rels`` that exist in the folder and that headstats cannot prove it wrote."""
        known = self.previous | self.written | self.ours
        return sorted(
            rel
            for rel in rels
            if rel not in known and ((self.root / rel).exists() or (self.root / rel).is_symlink()) and not self.force
        )

    def check(self, rels: Iterable[str]) -> None:
        """Refuse, before anything is written, links on the way to ``rels`` and user files in their place."""
        rels = list(rels)
        for rel in rels:
            if not safe_relative(rel):
                raise OutputFolderError(f"{rel!r} is not a path inside {self._where()}")
            link = _link_on_the_way(self.root, rel)
            if link is not None:
                raise OutputFolderError(
                    f"{self._where()}: {link.relative_to(self.root).as_posix()} is a link; headstats does not write "
                    f"through links: remove the link or give another {self.option}"
                )
        blocking = self.in_the_way(rels)
        if blocking:
            raise OutputFolderError(
                f"{self._where()} holds {len(blocking)} file(s) that headstats did not write ({self.manifest} does "
                f"not list them) where it would write: {_listing(blocking)}; move them away or give another "
                f"{self.option}"
            )

    def path(self, rel: str) -> Path:
        """The path of the file ``rel`` that the build is about to write, once it may: checked
        (:meth:`check`) and listed in the manifest before it is written."""
        self.check([rel])
        if rel not in self.written:
            self.written.add(rel)
            self._save_manifest(self.previous | self.written)
        return self.root / rel

    def _save_manifest(self, files: set[str], extra: dict | None = None) -> None:
        data: dict[str, object] = {"written_by": "headstats", "files": sorted(files)}
        data.update(extra or {})
        write_json_atomic(data, self.root / self.manifest)

    def finish(self, extra: dict | None = None) -> list[str]:
        """Record this build's files (and ``extra`` keys) as the manifest and remove the files only
        the previous build wrote; returns those removed. A link is never followed."""
        stale = []
        for rel in sorted(self.previous - self.written):
            path = self.root / rel
            if _link_on_the_way(self.root, rel) is None and path.is_file():
                path.unlink()
                stale.append(rel)
        self._save_manifest(self.written, extra)
        self.previous = set(self.written)
        return stale

    def foreign(self, skip: Iterable[str] = ()) -> list[str]:
        """The files in the folder that no headstats build listed (hidden files and links skipped, and
        everything under the subfolders ``skip``, which another job writes)."""
        known = self.previous | self.written | {self.manifest}
        skipped = [Path(s).parts for s in skip]
        out = []
        for path in self.root.rglob("*"):
            rel = path.relative_to(self.root)
            hidden = any(p.startswith(".") for p in rel.parts)
            if any(rel.parts[: len(parts)] == parts for parts in skipped):
                continue
            if path.is_file() and not path.is_symlink() and not hidden and rel.as_posix() not in known:
                out.append(rel.as_posix())
        return sorted(out)


def claim_output_folder(
    path: str | os.PathLike,
    *,
    option: str = "--out",
    manifest: str = MANIFEST_FILE,
    expect: Iterable[str] = (),
    force: bool = False,
    marker: str | None = None,
) -> OutputFolder:
    """Create (if needed) and claim the output folder ``path`` for a build that will write the
    files ``expect`` (relative paths) and possibly others, each asked for with
    :meth:`OutputFolder.path`. Refused with one line: a file at ``path``, a folder that cannot be
    created or written, a link on the way to an expected file, or an expected file that is the
    user's. ``marker``: a file whose presence, in a folder without a manifest, proves an earlier
    headstats build wrote the folder (a pruned model's ``pruning.json``), so the files this build
    writes over count as its own. ``force``: overwrite (never delete) files in the way."""
    root = Path(path).expanduser()
    if root.exists() and not root.is_dir():
        raise OutputFolderError(f"{option} {path} is a file, not a folder; give a new folder or one headstats wrote")
    try:
        make_writable_folder(root)
    except OSError as err:
        raise OutputFolderError(
            f"{option} {path} cannot be created or written ({err.strerror or err}); give a folder you can write"
        ) from err
    previous, _ = read_manifest(root, manifest)
    folder = OutputFolder(root, option, manifest, force, previous)
    if not previous and marker is not None and (root / marker).is_file():
        folder.ours = {marker, *(rel for rel in expect)}
    folder.check(expect)
    return folder


def clean_staging(root: Path) -> list[str]:
    """Remove the staging folders a killed :func:`replace_folder` left in ``root``; returns their names."""
    removed = []
    for path in root.glob(f"{STAGING_PREFIX}*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def replace_folder(
    folder: OutputFolder, write: Callable[[Path], object], *, last: str | None = None, legacy: Iterable[str] = ()
) -> list[str]:
    """Replace the headstats files of ``folder`` with what ``write`` writes into a staging folder,
    leaving every other file as it is; returns the files written. ``last``: the file that says the
    folder is whole (removed before the others move in, moved in after them), so a run killed part
    way leaves a folder a reader refuses as incomplete, never one that mixes two builds. ``legacy``:
    names an earlier build wrote before it kept a manifest, which this one may overwrite."""
    clean_staging(folder.root)
    stage = folder.root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    stage.mkdir()
    try:
        write(stage)
        rels = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
        if folder.ours:
            folder.ours |= set(legacy) | set(rels)
        folder.check(rels)
        folder.written |= set(rels)
        folder._save_manifest(folder.previous | folder.written)  # listed before any moves in
        if last is not None and (folder.root / last).is_file():
            (folder.root / last).unlink()
        for rel in sorted(rels, key=lambda r: r == last):
            (folder.root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / rel, folder.root / rel)
        folder.finish()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return rels


__all__ = [
    "MANIFEST_FILE",
    "OutputFolder",
    "OutputFolderError",
    "claim_output_folder",
    "clean_staging",
    "read_manifest",
    "replace_folder",
    "safe_relative",
]
