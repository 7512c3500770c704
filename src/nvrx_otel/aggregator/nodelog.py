"""The node log: the file the node's records go to (with size rotation).

The line grammar lives in :mod:`nvrx_otel.nodeline` (the logging front end writes it too);
its names are re-exported here for the aggregator's modules.

The file sink appends with ``O_APPEND``, fsyncs on request, and rotates by renaming to
``.1``, ``.2``, ...; how a rotation survives a crash is the service's business (it commits
the plan first), this module only carries out idempotent steps.

The node log's path must name the file written: one deleted, renamed away or replaced
under the aggregator (an operator freeing disk space, a cleanup job) would otherwise take
every later record with it. :meth:`NodeLogFile.follow`, called at each commit, notices
(by device and inode) and moves on to a file at the path, carrying over the bytes written
since the last commit; what was committed before stays where the operator put it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvrx_otel.aggregator.nofollow import open_output
from nvrx_otel.nodeline import clean_record_texts as clean_record_texts
from nvrx_otel.nodeline import escape as escape
from nvrx_otel.nodeline import format_clean_records as format_clean_records
from nvrx_otel.nodeline import format_record as format_record
from nvrx_otel.nodeline import format_records as format_records
from nvrx_otel.nodeline import is_clean as is_clean
from nvrx_otel.nodeline import local_time as local_time
from nvrx_otel.nodeline import record_texts as record_texts
from nvrx_otel.nodeline import source_file as source_file

# --- the file ------------------------------------------------------------------------------


Stats = dict[str, list[Any]]
"""Per writer id: ``[rank or None, pid or None, count, first_ts, last_ts]`` of the records a
node-log file holds (log records plus the counts of loss reports), for rotation reports."""


def add_stats(
    stats: Stats, writer: str, rank: Any, pid: Any, count: int, first: int, last: int
) -> None:
    """Account ``count`` records of ``writer`` (timestamps ``first``..``last``) to ``stats``."""
    entry = stats.get(writer)
    if entry is None:
        stats[writer] = [rank, pid, count, first, last]
        return
    entry[2] += count
    if first < entry[3]:
        entry[3] = first
    if last > entry[4]:
        entry[4] = last


@dataclass
class Backup:
    """A rotated node-log file (``.1`` is the newest) and what it holds."""

    ino: int
    stats: Stats = field(default_factory=dict)
    collapsed: int = 0  # of the records in ``stats``, those collapsed into another (dedup.py)


@dataclass
class RotationPlan:
    """The renames of one rotation, by inode, so a restart can finish it idempotently."""

    unlink: list[tuple[str, int]]  # (name, inode) to delete
    renames: list[tuple[str, str, int]]  # (from name, to name, inode), oldest first
    deleted: list[Backup]  # what the deleted files held (reported as dropped)
    backups: list[Backup]  # the backup list after the rotation, .1 first


def backup_name(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


class NodeLogFile:
    """``<log dir>/nvrx_log_<node id>.log``: append, fsync, truncate, rotate."""

    def __init__(self, path: Path, *, max_bytes: int = 0, backups: int | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = backups
        self.fd = -1
        self.ino = 0
        self.dev = 0
        self.length = 0
        self.committed = 0  # length as of the last commit (the caller's to set)
        self.stats: Stats = {}
        self.collapsed = 0  # records in ``stats`` collapsed into another one here (dedup.py)
        self.backups: list[Backup] = []

    def open(self) -> None:
        """Open (creating) the file for appending; ``length`` is its current size."""
        fd = _open_at(self.path)
        st = os.fstat(fd)
        self.close()
        self.fd, self.ino, self.dev = fd, st.st_ino, st.st_dev
        self.length = self.committed = st.st_size

    def follow(self) -> int | None:
        """If the path no longer names the open file (deleted, renamed away, replaced):
        append to the file at the path (made when missing) the bytes written since the last
        commit, make it the open one and return how many bytes moved; None when the path
        still names the open file. The per-writer counts stay (a rotation that deletes the
        new file reports the old one's records as well: too many, never too few)."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (self.dev, self.ino):
                return None
        except FileNotFoundError:
            pass
        carried = b""
        if self.length > self.committed:
            carried = os.pread(self.fd, self.length - self.committed, self.committed)
        fd = _open_at(self.path)
        try:
            st = os.fstat(fd)
            _write_all(fd, carried)
            os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        self.close()
        self.fd, self.ino, self.dev = fd, st.st_ino, st.st_dev
        self.committed = st.st_size
        self.length = st.st_size + len(carried)
        return len(carried)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def truncate(self, length: int) -> None:
        """Cut the file back to ``length`` bytes (what a restart does with uncommitted text)."""
        os.ftruncate(self.fd, length)
        self.length = self.committed = length

    def write(self, data: bytes) -> None:
        """Append ``data`` whole (a short write is finished; an error raises OSError)."""
        self.length += _write_all(self.fd, data)

    def sync(self) -> None:
        os.fsync(self.fd)

    def needs_rotation(self) -> bool:
        return self.max_bytes > 0 and self.length >= self.max_bytes

    def plan_rotation(self) -> RotationPlan:
        """What rotating now does: ``.log`` becomes ``.1``, ``.n`` becomes ``.n+1``, and the
        backups beyond the number to keep are deleted."""
        on_disk: list[tuple[int, int]] = []  # (n, inode) of existing .1, .2, ...
        n = 1
        while True:
            try:
                on_disk.append((n, os.lstat(backup_name(self.path, n)).st_ino))
            except FileNotFoundError:
                break
            n += 1
        known = {b.ino: b for b in self.backups}
        chain = [Backup(self.ino, self.stats, self.collapsed)]
        chain += [known.get(ino, Backup(ino)) for _, ino in on_disk]
        names = [self.path.name] + [backup_name(self.path, n).name for n, _ in on_disk]
        keep = len(chain) if self.keep is None else self.keep
        unlink = [(names[i], chain[i].ino) for i in range(keep, len(chain))]
        renames = [
            (names[i], backup_name(self.path, i + 1).name, chain[i].ino)
            for i in reversed(range(min(keep, len(chain))))
        ]
        return RotationPlan(unlink, renames, chain[keep:], chain[:keep])

    def apply_rotation(self, plan: RotationPlan) -> None:
        """Carry out ``plan`` (again, after a crash: steps already done are skipped) and
        start a new, empty file."""
        self.close()
        parent = self.path.parent
        for name, ino in plan.unlink:
            if _ino(parent / name) == ino:
                os.unlink(parent / name)
        for src, dst, ino in plan.renames:
            if _ino(parent / src) == ino:
                os.replace(parent / src, parent / dst)
        fd = _open_at(self.path)
        st = os.fstat(fd)
        if any(st.st_ino == ino for _, _, ino in plan.renames):  # cannot happen: renamed away
            os.close(fd)
            raise OSError(f"node log {self.path} was not rotated")
        os.ftruncate(fd, 0)  # anything here was written after the plan and never committed
        self.fd, self.ino, self.dev, self.length, self.committed = fd, st.st_ino, st.st_dev, 0, 0
        self.stats = {}
        self.collapsed = 0
        self.backups = list(plan.backups)


def _open_at(path: Path) -> int:
    """The node log at ``path``, opened (made when missing, its directory too) to append
    and to read back what is not committed yet (:meth:`NodeLogFile.follow`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return open_output(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)  # never a symlink


def _write_all(fd: int, data: bytes) -> int:
    """Append ``data`` whole (a short write is finished; an error raises OSError)."""
    view = memoryview(data)
    written = 0
    while written < len(data):
        written += os.write(fd, view[written:])
    return written


def _ino(path: Path) -> int:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return -1
