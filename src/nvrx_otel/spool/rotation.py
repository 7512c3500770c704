"""A writer's files on disk: making the next one, and what its files take of the budget.

A new file is made under a hidden temporary name, gets its header line and the writer's
shared lock, and only then takes its real name: a reader never sees a file without its
header or with no writer holding it. The aggregator deletes files once consumed, so what
a writer's files take is found by looking which of them still exist.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final

_OPEN_FLAGS: Final = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
)


def create(directory: Path, name: str, header: bytes) -> int:
    """A new spool file ``directory/name`` holding ``header``, locked (``LOCK_SH``) by the
    returned descriptor; ``OSError`` when it cannot be made (nothing is left behind)."""
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, _OPEN_FLAGS, 0o600)
    try:
        os.write(fd, header)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.rename(tmp, directory / name)
    except OSError:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return fd


def still_there(
    directory: Path, files: list[tuple[str, int]], live: str, live_size: int
) -> list[tuple[str, int]]:
    """The ``(name, bytes)`` of ``files`` not yet consumed and deleted; the ``live`` file
    (empty name: none) counts with ``live_size``."""
    alive: list[tuple[str, int]] = []
    for name, size in files:
        if live and name == live:
            alive.append((name, live_size))
            continue
        try:
            os.stat(directory / name)
        except FileNotFoundError:
            continue  # consumed and deleted by the aggregator
        except OSError:
            pass
        alive.append((name, size))
    return alive


class Files:
    """The files a writer made that still count against its budget (``made``: name and
    bytes, oldest first, the newest one live) and the descriptors of older ones it keeps
    open one rotation longer (another thread may still be inside a ``write`` to them)."""

    def __init__(self) -> None:
        self.made: list[tuple[str, int]] = []
        self.index = -1  # index of the newest file (its name's ``<index>``)
        self.retired: list[int] = []

    @property
    def live_name(self) -> str:
        return self.made[-1][0] if self.made else ""

    def total(self) -> int:
        """Bytes of the files as last counted."""
        return sum(size for _, size in self.made)

    def count(self, directory: Path, live: bool, live_size: int) -> tuple[int, int]:
        """How many files are left and their bytes, forgetting those consumed (the live
        file, when ``live``, counts with ``live_size``)."""
        self.made = still_there(directory, self.made, self.live_name if live else "", live_size)
        return len(self.made), self.total()

    def moved_on(self, old: int, old_size: int, fd: int, name: str, size: int) -> None:
        """The writer moved from descriptor ``old`` (-1: none; ``old_size`` bytes) to the
        new file ``name`` of ``size`` bytes on ``fd``."""
        if old >= 0:
            if self.made:
                self.made[-1] = (self.made[-1][0], old_size)
            try:
                fcntl.flock(old, fcntl.LOCK_UN)  # the old file is complete: writer moved on
            except OSError:
                pass
            self.close_retired()
            self.retired = [old]
        self.index += 1
        self.made.append((name, size))

    def close_retired(self, *also: int) -> None:
        """Close the retired descriptors (and ``also``, where >= 0)."""
        for fd in [*also, *self.retired]:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.retired = []
