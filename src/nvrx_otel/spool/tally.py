"""A writer's loss count kept in a file's name, for when its drop ledger cannot be made.

On a full file system neither a spool file nor the drop ledger (4096 bytes, allocated
whole) can be made, but an empty file can: a directory entry takes no data block (tmpfs,
ext4, xfs; it may take an inode). So a writer without a ledger that drops records keeps
the count of those no drop record holds in the *name* of an empty file,
``.<proc>.p<pid>.<writer>.lost.<reason>.r<rank>.<count>``, renamed as the count changes
and removed when it is back to zero (drop records hold them all) or once the ledger is
made (it takes the count over). Like the ledger it is made under a temporary name, locked
(``flock(LOCK_SH)``) while its writer lives, then named; once the writer is gone and its
spool files are read, the aggregator reports the count as dropped (see
docs/spool-format.md, "Loss tally").

The aggregator notes a report it is about to make in the name too (renames the tally to
``<name>.reported.<log inode>.<log offset>``), so a restart tells a report it committed
from one cut back with the node log, as with the ledger.
"""

from __future__ import annotations

import fcntl
import os
import re
from typing import Final

from nvrx_otel.spool.attempt import Attempt

NAME: Final = re.compile(
    r"^\.(?P<proc>.+)\.p(?P<pid>\d+)\.(?P<writer>[0-9a-f]{16})\.lost\.(?P<reason>[a-z_]+)"
    r"\.r(?P<rank>\d+|-)\.(?P<count>\d+)(?:\.reported\.(?P<ino>\d+)\.(?P<offset>\d+))?$"
)
"""Names of loss tallies (they start with ``.``: never taken for spool files)."""
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Tally:
    """The writer's side: ``store(count, reason)`` names the file after the count (never
    raises, never waits: a call that finds another one storing leaves it the work)."""

    def __init__(self, dir_fd: int, proc: str, pid: int, writer: str, rank: object) -> None:
        self.dir_fd = dir_fd  # the writer's directory: names are relative to it, never paths
        self.prefix = f".{proc}.p{pid}.{writer}.lost."
        self.rank = str(rank) if isinstance(rank, int) and rank >= 0 else "-"
        self.fd = -1
        self.name = ""  # the current name (empty: none)
        self.wanted = (0, "")
        self.stored = (0, "")
        self.making = Attempt()
        self.storing = False

    def held(self) -> bool:
        """Whether the tally names the wanted count (or need not exist)."""
        return self.stored == self.wanted

    def store(self, count: int, reason: str) -> bool:
        """Name the tally after ``count`` (0: remove it); False when that failed.

        Never waits: a call that finds another one storing (another thread, or the thread
        a signal handler interrupted) leaves it the work, which stores the newest count
        before it returns. The flag is tested and set with no call between, so neither a
        thread switch nor a signal handler can come between them."""
        self.wanted = (count, reason)
        if self.storing:
            return True
        try:
            self.storing = True
            while self.stored != self.wanted:
                self._store(*self.wanted)
            return True
        except Exception:  # OSError, or a signal handler's (its file is cleared next time)
            return False
        finally:
            self.storing = False

    def _store(self, count: int, reason: str) -> None:
        if self.fd < 0 and self.making.named():  # an interrupted _make got as far as naming
            self.fd = self.making.fd
            self.name = self.making.final
            self.making.tmp = ""
        if count <= 0:
            self.remove()
            self.stored = (count, reason)
            return
        name = f"{self.prefix}{reason}.r{self.rank}.{count}"
        if self.fd < 0:
            self._make(name)
        else:
            old, d = self.name, self.dir_fd
            was, self.name = self.name, name  # first: right also when an exception follows
            try:
                os.rename(old, name, src_dir_fd=d, dst_dir_fd=d)
            except OSError:
                self.name = was
                raise
        self.stored = (count, reason)

    def _make(self, name: str) -> None:
        making = self.making
        tmp, d = f"{self.prefix}tmp", self.dir_fd
        making.start(d, tmp, name)
        try:
            fd = making.fd = os.open(tmp, _OPEN_FLAGS, 0o600, dir_fd=d)
            fcntl.flock(fd, fcntl.LOCK_SH)
            os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException as exc:  # a signal handler's too: no half-made file outlives the call
            try:
                os.unlink(tmp, dir_fd=d)  # first, before any call a handler could interrupt
            except OSError:
                pass
            if isinstance(exc, OSError):  # else the next attempt clears or takes over the rest
                making.clear(lost=False)
            raise
        self.fd = fd
        self.name = name
        making.tmp = ""

    def remove(self) -> None:
        """Remove the tally (its count is held elsewhere now) and close it."""
        name, fd = self.name, self.fd
        self.name, self.fd = "", -1
        if name:
            try:
                os.unlink(name, dir_fd=self.dir_fd)
            except OSError:
                pass
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        self.making.clear()

    def forget_in_child(self) -> None:
        """In a forked child: the tally is the parent's (close only the descriptor)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def reported_name(name: str, log_ino: int, log_offset: int) -> str:
    """The name noting that the count of ``name`` is reported in the node log of inode
    ``log_ino`` from ``log_offset`` on."""
    base = name.split(".reported.", 1)[0]
    return f"{base}.reported.{log_ino}.{log_offset}"
