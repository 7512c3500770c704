"""The spool writer's slow path: making room for a record, reporting drops, closing.

``SpoolWriter`` (``writer.py``) appends on its lock-free hot path while its append window
is open; everything else comes here, under the writer's lock: opening the next file when
the live one is full (``rotation.py``) as long as the writer's files fit its budget,
waking the node's aggregator under budget pressure (``wake.py``), counting the records
that could not be written and writing the ``drop`` record that reports them
(``drops.py``), saying on stderr, once, what went wrong, and closing the files.

The directory is opened once (``paths.open_dir``) and every file is made relative to its
descriptor: a path swapped for a symlink after start cannot redirect a file. It is opened
again by path, with the same checks, only after the writer was closed or when the
directory was removed (a cleanup job; the aggregator makes it again).

An exception may surface at any line of this path (a signal handler that raises, as
timeouts do): making a file is an ``attempt.Attempt`` the next call clears or takes over,
and the switch to a new file is a run of plain assignments (see ``_open_next``).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from nvrx_otel import record as rec
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool import rotation, wake
from nvrx_otel.spool.drops import DropCount
from nvrx_otel.spool.paths import SpoolFileName, SpoolPathError, dir_gone, open_dir

_RECHECK_NS: Final = 50_000_000  # while dropping, look for freed space at most every 50 ms
_REOPEN_NS: Final = 1_000_000_000  # after a failed open, try again at most every second
_BUDGET: Final = DropReasonValues.BUDGET.value
_WRITE_ERROR: Final = DropReasonValues.WRITE_ERROR.value


def _report(message: str) -> None:
    try:
        print(f"nvrx-otel: {message}", file=sys.stderr, flush=True)
    except Exception:  # stderr gone: the count still goes into the drop record
        pass


class WriterSlowPath:
    """The part of ``SpoolWriter`` that runs outside the append window (see its
    docstring): the writer's state below is set by ``SpoolWriter._start``."""

    directory: Path
    dir_fd: int
    _old_dir_fds: list[int]
    fd: int
    size: int
    limit: int
    max_file_size: int
    max_record: int
    budget: int
    writer_id: str
    pid: int
    counter: itertools.count[int]
    drops: DropCount
    identity_fields: dict[str, Any]
    _lock: threading.RLock
    _busy: bool
    _files: rotation.Files
    _need_newline: bool
    _next_try_ns: int
    _woke_ns: int
    _announce: bool
    _errors_reported: set[str]
    _resource: dict[str, Any]
    _proc_name: str

    def _refresh_limit(self) -> None:
        """Open the append window when nothing needs the slow path (see ``SpoolWriter``).

        The lock-free path may fill at most one record cap from here: a line longer than
        the cap can never pass its one comparison, so the cap costs the hot path nothing
        (the slow path runs once per cap's worth of bytes to move the window on)."""
        ok = self.fd >= 0 and not self.drops.pending and not self._need_newline
        self.limit = min(self.max_file_size, self.size + self.max_record) if ok else -1

    def open_now(self) -> bool:
        """Make the first spool file now, before any record (True once one is open): from
        then on the aggregator counts this writer as live and drains only after it has
        exited — for a watcher, which writes what it has to say when its rank has gone."""
        return self.fd >= 0 or self._make_room(0) == ""

    def _make_room(self, needed: int) -> str:
        """Ensure a file with room is open and no drop is pending; else the drop reason."""
        now = time.monotonic_ns()
        if now < self._next_try_ns:
            return _BUDGET if self.fd >= 0 else _WRITE_ERROR
        with self._lock:
            if self._busy:  # this very thread is in here: a signal handler interrupted it
                return _WRITE_ERROR
            try:  # (``_busy`` set inside: an exception before it must not leave it set)
                self._busy = True
                drops = self.drops
                if drops.ledger is None and now >= drops.next_ledger_ns:
                    drops.open_ledger(
                        self._dir(),
                        self.directory,
                        self._proc_name,
                        self.pid,
                        self.writer_id,
                        self.identity_fields,
                        self._report_once,
                        now,
                    )
                ok = self._make_room_locked(needed, now)
            finally:
                self._busy = False
                self._refresh_limit()
        if ok:
            return ""
        return _BUDGET if self.fd >= 0 else _WRITE_ERROR

    def _make_room_locked(self, needed: int, now: int) -> bool:
        if self.fd >= 0 and self.size + needed <= self.max_file_size and not self.drops.pending:
            return True  # another thread made room
        if self.fd >= 0 and self.size + needed <= self.max_file_size:
            return self._flush_drops()
        self._dir()
        if not self._room_in_budget():
            self._next_try_ns = now + _RECHECK_NS
            self._wake(now)
            if self.fd < 0:
                return False
            self.drops.reason = self.drops.reason or _BUDGET
            return False
        if not self._open_next():
            self._next_try_ns = now + _REOPEN_NS
            return False
        self._next_try_ns = 0
        if 2 * self._files.total() + self.max_file_size > self.budget:
            self._wake(now)  # past half the budget: the aggregator should not wait
        return self._flush_drops()

    def _announced(self) -> None:
        """The first record of a new file is in: wake the aggregator, which would otherwise
        find the file only at its next scan (a check interval away)."""
        self._announce = False
        self._wake(time.monotonic_ns())

    def _wake(self, now: int) -> None:
        """Wake the node's aggregator (at most every 50 ms; never blocks)."""
        if now - self._woke_ns >= _RECHECK_NS:
            self._woke_ns = now
            wake.poke(self.dir_fd)

    def _room_in_budget(self) -> bool:
        alive, used = self._files.count(self.dir_fd, self.fd >= 0, self.size)
        # The live file is deleted only once the writer has moved on: when it is all that
        # is left (one record larger than the rest of the budget), rotate regardless, or
        # the writer would wait for space that cannot be freed.
        only_live = alive == 1 and self.fd >= 0
        return used + self.max_file_size <= self.budget or only_live

    def _dir(self) -> int:
        """The directory's descriptor; opened again (by path, checked as at the start) only
        after ``close`` or when the directory was removed, never because its path came to
        name another one. An earlier descriptor stays open (a ledger or a tally made in
        it may still use it) until ``close``."""
        fd = self.dir_fd
        if fd >= 0 and not dir_gone(fd):
            return fd
        try:
            new = open_dir(self.directory, create=False)
        except SpoolPathError as exc:
            self._report_once(str(exc))
            return fd
        if fd >= 0:
            self._old_dir_fds.append(fd)
        self.dir_fd = new
        return new

    def _close_dirs(self) -> None:
        fds = [self.dir_fd, *self._old_dir_fds]
        self.dir_fd = -1
        self._old_dir_fds = []
        rotation.close_quietly(fds)

    def _open_next(self) -> bool:
        files = self._files
        files.settle()  # a move an exception interrupted: finish it first
        index = files.next_index()
        name = SpoolFileName(self.writer_id, index, self.pid, self._proc_name).name
        header = rec.header_line(
            writer_id=self.writer_id,
            index=index,
            ts=time.time_ns(),
            pid=self.pid,
            ppid=os.getppid(),
            proc=self._proc_name,
            budget=self.budget,
            max_file_size=self.max_file_size,
            resource=self._resource,
        )
        size = len(header)
        files.tried = index
        try:
            fd = rotation.create(self._dir(), name, header, files.making)
        except OSError as exc:
            files.tried = index - 1  # nothing of it is left: the index is free again
            self._report_once(f"cannot create spool file in {self.directory}: {exc}")
            return False
        # The switch: plain assignments, no call between them, so an exception (a signal
        # handler's, which surfaces only at calls and loops) cannot leave it half done.
        # Until ``making.tmp`` is cleared the next attempt would undo the new file.
        old, made = self.fd, files.made
        if old >= 0 and made:
            made[-1] = (made[-1][0], self.size)
        files.made = [*made, (name, size)]
        files.index = index
        files.old = old
        self.fd = fd
        self.size = size
        self._need_newline = False
        files.making.tmp = ""
        files.settle()
        self._announce = True
        return True

    def lost(self) -> None:
        """Count one record a front end could not hand over (it caught an exception in the
        log call, a signal handler's for one) as dropped."""
        self._count_drop(time.time_ns(), _WRITE_ERROR)

    def _count_drop(self, ts: int, reason: str, n: int = 1) -> None:
        self.limit = -1  # the next record takes the slow path and reports the drop first
        drops = self.drops
        drops.count(ts, reason, n)
        if drops.unrecorded:
            self._report_once(
                f"cannot keep the count of dropped records in {self.directory}",
                "they are reported only if writing works again before the process ends",
            )

    def _flush_drops(self) -> bool:
        """Write the pending drop record (caller holds the lock and has room)."""
        if not self.drops.pending:
            return True
        newline = self._need_newline
        done, whole = self.drops.write_record(
            self.fd, next(self.counter), self.writer_id, self.identity_fields, newline=newline
        )
        self.size += done
        if done == whole:
            self._need_newline = False
            return True
        if done:
            self._need_newline = done > newline  # a torn piece stays alone on its line
        return False

    def _report_once(self, message: str, outcome: str = "") -> None:
        """Say ``message`` on stderr, once, with what becomes of the records."""
        if message not in self._errors_reported:
            self._errors_reported.add(message)
            if not outcome:
                outcome = (
                    "records are counted and reported as dropped"
                    if self.drops.ledger is not None
                    else "records are counted and reported as dropped if the count can be"
                    " kept in the spool directory"
                )
            _report(f"{message} ({outcome})")

    def close(self) -> None:
        """Write a pending drop record (over budget if need be) and close the files."""
        with self._lock:
            if self._busy:
                return  # a signal handler of the thread inside the slow path: exit does it
            try:
                self._busy = True
                self._close_locked()
            finally:
                self._busy = False

    def _close_locked(self) -> None:
        if self.drops.pending and self.fd < 0:
            self._open_next()
        if self.drops.pending and self.fd >= 0:
            self._flush_drops()
        self._files.close_retired(self.fd)
        self.fd = self.limit = -1
        self.drops.close()
        self._close_dirs()
