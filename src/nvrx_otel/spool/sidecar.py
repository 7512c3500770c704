"""A writer's drop ledger: a small memory-mapped file that outlives the process.

A writer that drops records first tells its spool files (a ``k: "drop"`` record once it
can write again, or at exit). A process that ends without that chance (``os._exit``,
``kill -9``) would take the count with it; so each writer also keeps its cumulative drop
count in ``.<proc>.p<pid>.<writer>.drops`` next to its spool files. The file is allocated
whole when made and ``mmap``-ed: an update is a store into shared memory, no system call,
and the page cache keeps it whatever way the process ends. The writer holds
``flock(LOCK_SH)`` on it while it lives. Once the writer is gone and its spool files are
consumed, the aggregator reports ``dropped - written`` (drops no drop record holds) and
deletes the file (see docs/spool-format.md, "Drop ledger").

Layout (little-endian, 4096 bytes): see ``_FIELDS``; then the writer's identity fields as
JSON (for the report's rank), NUL-padded.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re
import struct
from dataclasses import dataclass
from typing import Any, Final

import orjson

from nvrx_otel.spool.attempt import Attempt

SIZE: Final = 4096
MAGIC: Final = b"NVRXDRP1"
_FIELDS: Final = struct.Struct("<8sQQQQQQQQQQ16s")
"""magic, dropped (cumulative), written (in drop records), pending (in a drop record being
written), pending seq (that record's key seq), first ts, last ts, reported (by the
aggregator), report log inode, report log offset, pid, reason"""
_DROPPED: Final = 8
_WRITTEN: Final = 16
_PENDING: Final = 24
_FIRST_TS: Final = 40
_REPORTED: Final = 56
_REASON: Final = 88
_IDENTITY: Final = 128
_Q = struct.Struct("<Q")
_QQ = struct.Struct("<QQ")
_OPEN_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

NAME = re.compile(r"^\.(?P<proc>.+)\.p(?P<pid>\d+)\.(?P<writer>[0-9a-f]{16})\.drops$")
"""Names of drop ledgers (they start with ``.``: never taken for spool files)."""


def ledger_name(proc: str, pid: int, writer: str) -> str:
    return f".{proc}.p{pid}.{writer}.drops"


class DropLedger:
    """The writer's side: made once per writer, updated in place on the drop path. It is
    made relative to the writer's directory descriptor ``dir_fd`` (never by path)."""

    __slots__ = ("dir_fd", "fd", "map", "name")

    def __init__(self, fd: int, mapped: mmap.mmap, dir_fd: int, name: str) -> None:
        self.fd = fd
        self.map = mapped
        self.dir_fd = dir_fd
        self.name = name

    @classmethod
    def create(
        cls,
        dir_fd: int,
        proc: str,
        pid: int,
        writer: str,
        identity: dict[str, Any],
        attempt: Attempt,
    ) -> DropLedger:
        """Make, lock and map the ledger in the directory open as ``dir_fd`` (OSError when
        it cannot be made).

        ``attempt`` notes the pieces as they are made; the caller clears ``attempt.tmp``
        once it holds the ledger. An attempt an exception interrupted is taken over when
        it got as far as its name (made, locked, named), else cleared first."""
        name = ledger_name(proc, pid, writer)
        if attempt.named() and attempt.final == name and attempt.dir_fd == dir_fd:
            mapped = mmap.mmap(attempt.fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            return cls(attempt.fd, mapped, dir_fd, name)
        tmp = f"{name}.tmp"
        attempt.start(dir_fd, tmp, name)
        try:
            fd = attempt.fd = os.open(tmp, _OPEN_FLAGS, 0o600, dir_fd=dir_fd)
            try:
                os.posix_fallocate(fd, 0, SIZE)  # a full disk later cannot stop updates
            except (AttributeError, OSError):
                os.pwrite(fd, bytes(SIZE), 0)
            ident = orjson.dumps(identity)[: SIZE - _IDENTITY]
            head = _FIELDS.pack(MAGIC, 0, 0, 0, 0, 0, 0, 0, 0, 0, pid, b"")
            os.pwrite(fd, head, 0)
            os.pwrite(fd, ident, _IDENTITY)
            fcntl.flock(fd, fcntl.LOCK_SH)
            mapped = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:  # a signal handler's too: no half-made file outlives the call
            try:
                os.unlink(tmp, dir_fd=dir_fd)  # first, before any call a handler could interrupt
            except OSError:
                pass
            if isinstance(exc, OSError):  # else the next attempt clears or takes over the rest
                attempt.clear(lost=False)
            raise
        return cls(fd, mapped, dir_fd, name)

    def dropped(self, total: int, first_ts: int, last_ts: int) -> None:
        """The cumulative drop count and the time range of the drops (no system call)."""
        _QQ.pack_into(self.map, _FIRST_TS, max(first_ts, 0), max(last_ts, 0))
        _Q.pack_into(self.map, _DROPPED, total)

    def reason(self, reason: str) -> None:
        self.map[_REASON : _REASON + 16] = reason.encode()[:16].ljust(16, b"\0")

    def writing(self, count: int, seq: int) -> None:
        """A drop record of ``count`` with key seq ``seq`` is about to be written."""
        _QQ.pack_into(self.map, _PENDING, count, seq)

    def written(self, total: int) -> None:
        """Drop records now hold ``total`` drops; none is being written."""
        _Q.pack_into(self.map, _WRITTEN, total)
        _QQ.pack_into(self.map, _PENDING, 0, 0)

    def close(self, *, remove: bool = False) -> None:
        """Unmap and close (``remove``: also delete it, when it holds nothing to report)."""
        if remove:
            try:
                os.unlink(self.name, dir_fd=self.dir_fd)
            except OSError:
                pass
        try:
            self.map.close()
        except (OSError, ValueError, BufferError):
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass

    def forget_in_child(self) -> None:
        """In a forked child: drop the parent's mapping and descriptor (its lock stays)."""
        self.close()


@dataclass
class LedgerView:
    """A drop ledger as the aggregator reads it."""

    dropped: int
    written: int
    pending: int
    pending_seq: int
    first_ts: int
    last_ts: int
    reported: int
    report_ino: int
    report_offset: int
    pid: int
    reason: str
    identity: dict[str, Any]


def read_view(data: bytes) -> LedgerView | None:
    """Parse a ledger's bytes; None when they are not one."""
    if len(data) < _IDENTITY or data[:8] != MAGIC:
        return None
    fields = _FIELDS.unpack_from(data, 0)
    raw = data[_IDENTITY:SIZE].rstrip(b"\0")
    try:
        identity = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        identity = {}
    ints = [int(x) for x in fields[1:11]]
    return LedgerView(
        dropped=ints[0],
        written=ints[1],
        pending=ints[2],
        pending_seq=ints[3],
        first_ts=ints[4],
        last_ts=ints[5],
        reported=ints[6],
        report_ino=ints[7],
        report_offset=ints[8],
        pid=ints[9],
        reason=bytes(fields[11]).rstrip(b"\0").decode("ascii", "replace"),
        identity=identity if isinstance(identity, dict) else {},
    )


def mark_reported(fd: int, reported: int, log_ino: int, log_offset: int) -> None:
    """The aggregator's note: ``reported`` drops are in its node log from ``log_offset`` on."""
    os.pwrite(fd, struct.pack("<QQQ", reported, log_ino, log_offset), _REPORTED)
