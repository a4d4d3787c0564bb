"""Content hashes of the inputs a results folder depends on: weight files and user data files.

A results folder must never hold numbers that are not what its provenance says, so inputs are
identified by what they contain, not by their name: a checkpoint saved again in place, or another
``docs.jsonl`` in another folder, gets another hash. Hashing a multi-gigabyte checkpoint takes
seconds, so each file's hash is cached under the headstats cache, keyed by the file's path, size,
modification and change times and inode: a rerun on unchanged files reads the cache and costs
nothing, and any write to a file (which moves its mtime/ctime) makes it hashed again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
_BLOCK = 1 << 20


def _cache_folder() -> Path:
    from headstats.io.assets import cache_dir

    return cache_dir() / "fingerprints"


def _stat_key(path: Path) -> str:
    st = path.stat()
    raw = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def file_digest(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of a file's bytes, cached by path + size + mtime + ctime + inode."""
    path = Path(path)
    key = _stat_key(path)
    cached = _cache_folder() / key
    try:
        value = cached.read_text().strip()
        if value.startswith("sha256:") and len(value) == 7 + 64:
            return value
    except OSError:
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    value = "sha256:" + digest.hexdigest()
    if _stat_key(path) == key:  # the file did not change while it was read: safe to remember
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f".{key}.{os.getpid()}.tmp")
            tmp.write_text(value)
            os.replace(tmp, cached)
        except OSError:
            pass  # a read-only cache only costs a rehash next time
    return value


def files_digest(files: Iterable[tuple[str, Path]]) -> str:
    """One hash over (name, content hash) pairs, e.g. every weight file of a checkpoint."""
    digest = hashlib.sha256()
    for name, path in sorted(files):
        digest.update(f"{name}\0{file_digest(path)}\n".encode())
    return "sha256:" + digest.hexdigest()


def weight_files(directory: str | os.PathLike) -> list[Path]:
    folder = Path(directory)
    found = {p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern) if p.is_file()}
    return sorted(found)


def data_identity(path: str | os.PathLike, column: str | None) -> dict[str, object]:
    """What makes a user data file's scores what they are: its bytes and the column read."""
    return {"sha256": file_digest(path).removeprefix("sha256:"), "text_column": column}
