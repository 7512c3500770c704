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
