"""Making a file so that an exception surfacing at any line cannot break the writer.

A Python signal handler runs between bytecodes of the main thread, so one that raises (a
timeout, as watchdogs and timeout decorators do) makes its exception surface wherever the
writer happens to be, in the middle of making a file too. Making a file takes several
system calls (open a temporary name, write, lock, rename into place); an :class:`Attempt`
notes each piece as it is acquired, so the next attempt first clears what an interrupted
one left (closes its descriptor, which also drops its lock, and removes the temporary
name) or takes over a finished one.

One gap no Python code can close: the exception may surface after ``os.open`` returned
and before its descriptor was stored. :meth:`Attempt.clear` then finds that descriptor by
its path in ``/proc/self/fd`` (Linux; elsewhere it stays open until the process ends).
The paths hold the writer's random id, so no other descriptor can match.

The names are relative to the writer's directory descriptor (``dir_fd``): the directory
is opened once and never looked up by path again (see ``paths.open_dir``).
"""

from __future__ import annotations

import os


class Attempt:
    """One file being made: its temporary and final names in the directory ``dir_fd``
    and its descriptor (-1 until stored). ``tmp`` is empty when no attempt is unfinished."""

    __slots__ = ("dir_fd", "fd", "final", "tmp")

    def __init__(self) -> None:
        self.tmp = ""
        self.final = ""
        self.fd = -1
        self.dir_fd = -1

    def start(self, dir_fd: int, tmp: str, final: str) -> None:
        """Note the names before anything is made (an interrupted attempt is cleared first)."""
        if self.tmp:
            self.clear()
        self.fd = -1
        self.dir_fd = dir_fd
        self.final = final
        self.tmp = tmp

    def named(self) -> bool:
        """Whether the interrupted attempt got as far as its final name (its descriptor is
        known and names the file at ``final``)."""
        if not self.tmp or self.fd < 0:
            return False
        try:
            a = os.fstat(self.fd)
            b = os.stat(self.final, dir_fd=self.dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    def clear(self, *, lost: bool = True) -> None:
        """Undo an unfinished attempt: close its descriptor, remove its temporary name. A
        file that got its final name stays (complete, and unlocked now). ``lost``: the
        descriptor may have been lost (an exception right after ``os.open``; never with an
        ``OSError``, which comes from the call itself), so look for it in /proc when it is
        not known (a scan of every descriptor: only then)."""
        if not self.tmp:
            return
        try:
            os.unlink(self.tmp, dir_fd=self.dir_fd)  # first: nobody takes it for a file being made
        except OSError:
            pass
        fd, self.fd = self.fd, -1  # forgotten before closing: never closed twice
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        elif lost:
            close_leaked(self.dir_fd, (self.tmp, self.final))
        self.tmp = ""


def close_leaked(dir_fd: int, names: tuple[str, ...]) -> None:
    """Close this process's descriptors open on any of ``names`` in the directory
    ``dir_fd`` (or on them deleted)."""
    try:
        fds = os.listdir("/proc/self/fd")
        directory = os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        return
    targets: set[str] = set()
    for name in names:
        real = os.path.join(directory, name)
        targets.update((real, f"{real} (deleted)"))
    for name in fds:
        try:
            if os.readlink(f"/proc/self/fd/{name}") in targets:
                os.close(int(name))
        except (OSError, ValueError):
            pass
