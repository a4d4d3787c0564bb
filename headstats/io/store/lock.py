"""One writer per partition: a cross-platform file lock held for the whole run.

:func:`writer_lock` takes a ``filelock`` lock on the partition's ``_writer.lock``; a second process
(or thread) writing the same partition stops at once with :class:`PartitionBusy`, naming the first
from ``_writer.holder``. The operating system releases the lock if the holder dies. Under the lock,
the temporary files of killed runs are removed.

:func:`claim` lets several runs share a list of work items in one folder: each item is taken by the
first run that reaches it, and the others go on to the next.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from headstats.io.store.layout import DONE_FILE, HOLDER_FILE, LOCK_FILE, PROVENANCE_FILE, PartitionBusy, has_data

log = logging.getLogger("headstats")


def clean_temporaries(partition: Path) -> list[Path]:
    """Remove the hidden ``.*.tmp`` files killed runs left behind (only safe under the writer lock)."""
    removed = []
    for tmp in partition.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    if removed:
        log.info("removed %d unfinished temporary file(s) of an earlier run from %s", len(removed), partition)
    return removed


def this_holder() -> str:
    """This process as a lock's holder file names it: ``pid 1234 on host, since 2025-01-01T12:00:00+00:00``."""
    since = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return f"pid {os.getpid()} on {socket.gethostname()}, since {since}"


def lock_holder(partition: Path) -> str:
    """Who holds ``partition``'s writer lock, as its holder recorded it."""
    try:
        return (partition / HOLDER_FILE).read_text(errors="replace").strip() or "another process"
    except OSError:
        return "another process"


def take_lock(partition: Path) -> FileLock:
    """The partition's writer lock, taken without waiting; :class:`PartitionBusy` when another holds it."""
    lock = FileLock(str(partition / LOCK_FILE), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise PartitionBusy(
            f"{partition} is being written by another headstats run ({lock_holder(partition)}); wait for it to "
            "finish, or use another --out"
        ) from None
    return lock


@contextlib.contextmanager
def writer_lock(partition: Path) -> Iterator[Path]:
    """Hold the partition's writer lock for the ``with`` block (creating the partition).

    A second writer stops at once with :class:`PartitionBusy`, naming the holder. Once the lock is
    held, stale temporary files of killed runs are removed, and so are the records of a run that
    finished no data file. On exit the lock's files are removed while the lock is still held (a
    contender that opened the old file finds it unlinked and takes the lock afresh), and a run that
    wrote nothing leaves no empty folders."""
    partition.mkdir(parents=True, exist_ok=True)
    lock = take_lock(partition)
    try:
        (partition / HOLDER_FILE).write_text(this_holder())
        clean_temporaries(partition)
        if not has_data(partition):  # records of a run that finished nothing describe no data
            for record in (PROVENANCE_FILE, DONE_FILE):
                with contextlib.suppress(FileNotFoundError):
                    (partition / record).unlink()
        yield partition
    finally:
        for name in (HOLDER_FILE, LOCK_FILE):  # on Windows the lock's own file goes with its release
            with contextlib.suppress(OSError):
                (partition / name).unlink()
        lock.release()
        for folder in (partition, partition.parent):  # a run that wrote nothing leaves no empty folders
            with contextlib.suppress(OSError):
                folder.rmdir()


CLAIM_SUFFIX = "._claim.lock"  # FOLDER/<item>._claim.lock while a run works on the item
CLAIM_HOLDER_SUFFIX = "._claim.holder"  # FOLDER/<item>._claim.holder: who, for the message another run gets


@contextlib.contextmanager
def claim(folder: Path, item: str) -> Iterator[bool]:
    """Hold ``item`` of ``folder`` for the ``with`` block if no other run holds it: yields True when
    this run took it, False when another run (a live process: the operating system releases a dead
    one's claim) works on it (:func:`claim_holder` names that run). The claim's files go when the
    block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{item}{CLAIM_SUFFIX}"
    holder = folder / f"{item}{CLAIM_HOLDER_SUFFIX}"
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        holder.write_text(this_holder())
        yield True
    finally:
        for name in (holder, path):
            with contextlib.suppress(OSError):
                name.unlink()
        lock.release()


def claim_holder(folder: Path, item: str) -> str:
    """Who holds ``item`` of ``folder`` (:func:`claim`), as that run recorded it, else "another run"."""
    try:
        return (folder / f"{item}{CLAIM_HOLDER_SUFFIX}").read_text(errors="replace").strip() or "another run"
    except OSError:
        return "another run"
