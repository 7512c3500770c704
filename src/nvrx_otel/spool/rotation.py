"""A writer's files on disk: making the next one, and what its files take of the budget.

A new file is made under a hidden temporary name, gets its header line and the writer's
shared lock, and only then takes its real name: a reader never sees a file without its
header or with no writer holding it. Names are relative to the writer's directory
descriptor (opened once: ``paths.open_dir``), never looked up by path, and never through
a symlink (``O_NOFOLLOW``, ``O_EXCL``). The aggregator deletes files once consumed, so what
a writer's files take is found by looking which of them still exist.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Final

from nvrx_otel.spool.attempt import Attempt

_OPEN_FLAGS: Final = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
)


def create(dir_fd: int, name: str, header: bytes, attempt: Attempt) -> int:
    """A new spool file ``name`` in the directory open as ``dir_fd`` holding ``header``,
    locked (``LOCK_SH``) by the returned descriptor; ``OSError`` when it cannot be made
    (nothing is left behind).

    ``attempt`` notes the pieces as they are made: until the caller stores the descriptor
    and clears ``attempt.tmp``, an exception surfacing anywhere (a signal handler's) leaves
    them for the next ``attempt.start`` to clear."""
    tmp = f".{name}.tmp"
    attempt.start(dir_fd, tmp, name)
    try:
        fd = attempt.fd = os.open(tmp, _OPEN_FLAGS, 0o600, dir_fd=dir_fd)
        if os.write(fd, header) != len(header):  # a full disk: never a torn header
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:  # a signal handler's too: no half-made file outlives the call
        try:
            os.unlink(tmp, dir_fd=dir_fd)  # first, before any call a handler could interrupt
        except OSError:
            pass
        if isinstance(exc, OSError):  # else the next attempt clears or takes over the rest
            attempt.clear(lost=False)
        raise
    return fd


def still_there(
    dir_fd: int, files: list[tuple[str, int]], live: str, live_size: int
) -> list[tuple[str, int]]:
    """The ``(name, bytes)`` of ``files`` not yet consumed and deleted; the ``live`` file
    (empty name: none) counts with ``live_size``."""
    alive: list[tuple[str, int]] = []
    for name, size in files:
        if live and name == live:
            alive.append((name, live_size))
            continue
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # consumed and deleted by the aggregator
        except OSError:
            pass
        alive.append((name, size))
    return alive


class Files:
    """The files a writer made that still count against its budget (``made``: name and
    bytes, oldest first, the newest one live), the descriptors of older ones it keeps open
    one rotation longer (another thread may still be inside a ``write`` to them), and the
    file being made (``making``).

    The writer switches to a new file by plain assignments (see ``WriterSlowPath._open_next``)
    and leaves ``old``, the descriptor it moved from, to :meth:`settle`: an exception that
    surfaces in between leaves it for the next call."""

    def __init__(self) -> None:
        self.made: list[tuple[str, int]] = []
        self.index = -1  # index of the newest file (its name's ``<index>``)
        self.tried = -1  # index of the newest file an attempt was started for
        self.retired: list[int] = []
        self.old = -1
        self.making = Attempt()

    @property
    def live_name(self) -> str:
        return self.made[-1][0] if self.made else ""

    def next_index(self) -> int:
        """The index of the next file: past any an interrupted attempt may have named."""
        return max(self.index, self.tried) + 1

    def total(self) -> int:
        """Bytes of the files as last counted."""
        return sum(size for _, size in self.made)

    def count(self, dir_fd: int, live: bool, live_size: int) -> tuple[int, int]:
        """How many files are left and their bytes, forgetting those consumed (the live
        file, when ``live``, counts with ``live_size``)."""
        self.made = still_there(dir_fd, self.made, self.live_name if live else "", live_size)
        return len(self.made), self.total()

    def settle(self) -> None:
        """Finish a move to a new file: unlock the ``old`` one (it is complete: the writer
        moved on) and keep its descriptor until the next move. Safe to repeat."""
        old = self.old
        if old < 0:
            return
        try:
            fcntl.flock(old, fcntl.LOCK_UN)
        except OSError:
            pass
        retired = self.retired
        while retired:
            fd = retired.pop()  # forgotten before closing: never closed twice
            try:
                os.close(fd)
            except OSError:
                pass
        self.retired = [old]
        self.old = -1

    def close_retired(self, *also: int) -> None:
        """Close the retired descriptors (and ``also``, where >= 0)."""
        fds = [*also, self.old, *self.retired]
        self.retired = []
        self.old = -1
        close_quietly(fds)


def close_quietly(fds: list[int]) -> None:
    """Close each descriptor of ``fds`` that is >= 0, ignoring errors (forget them first)."""
    for fd in fds:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
