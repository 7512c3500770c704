"""The per-process spool writer: append-only, one write per record, fork-safe.

See ``docs/spool-format.md`` for the rules this implements. The hot path takes no lock:
``next()`` on an ``itertools.count`` is atomic under the GIL, and concurrent ``O_APPEND``
writes of whole lines to a local file do not interleave. A lock is taken only on the slow
path (``slowpath.py``: the next file, the budget, drop records), and never waited for by
the thread that holds it (a signal handler that logs while its thread rotates drops and
counts its record instead of deadlocking).

Records over the size cap (``NVRX_OTEL_MAX_RECORD_KB``) are cut on the slow path
(``truncate.py``); every drop is also counted in the writer's drop ledger
(``sidecar.py``), so the count survives ``os._exit`` and ``kill -9`` (on a file system
too full for a ledger, in a tally's name: ``tally.py``).

An exception may surface at any line of the slow path (a signal handler that raises, as
timeouts do): the record of the call that got the exception is counted as dropped, and
the slow path picks up where it was interrupted (``slowpath.py``).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from nvrx_otel import env
from nvrx_otel import record as rec
from nvrx_otel.identity import get_identity, record_fields
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool import rotation, truncate
from nvrx_otel.spool.drops import DropCount
from nvrx_otel.spool.paths import open_dir
from nvrx_otel.spool.slowpath import WriterSlowPath

DEFAULT_MAX_FILE_SIZE: Final = env.SPOOL_FILE_SIZE_KB.default * 1024
DEFAULT_MAX_FILES: Final = env.SPOOL_FILES.default
_WRITE_ERROR: Final = DropReasonValues.WRITE_ERROR.value


def _write_appending(fd: int, data: bytes, offset: int) -> int:
    return os.write(fd, data)


append: Callable[[int, bytes, int], int] = (
    os.pwrite if sys.platform.startswith("linux") else _write_appending
)
"""``append(fd, line, size)``: one append ``write`` of ``line`` to the ``O_APPEND`` file
``fd`` whose length is ``size``. On Linux this is ``pwrite``, which on an ``O_APPEND``
descriptor appends whatever the offset (pwrite(2), BUGS) and, unlike ``write``, takes no
file-position lock: in a process with more than one thread (data loaders, exporters) that
lock costs about 45 ns per record. The offset given is the writer's own count of the
file's length, so the line lands at the end either way."""


class SpoolWriter(WriterSlowPath):
    """Appends lines to ``<directory>/<proc>.p<pid>.<writer>.<index>.jsonl`` files.

    The writer appends bytes; the lines come from ``record`` (the codec). ``emit``,
    ``write_line`` and ``close`` never raise: a record that cannot be written is counted
    and reported in a ``drop`` record as soon as writing works again (or at exit).

    Public state, for front ends that build whole lines themselves:

    - ``counter``: ``next(writer.counter)`` numbers a record (its ``key``'s ``seq``,
      ``record.record_key``); every record the writer emits takes one, across its files.
    - The *append window* ``fd``, ``size``, ``limit``: while ``size + len(line) <=
      limit`` a caller may append a whole ``line`` without the writer's lock as
      ``write_line`` does: ``n = append(fd, line, size)``, then ``size += n`` when ``n``
      is the line's length, else ``finish_short_write(fd, line, n, ts)``; an ``OSError``
      goes to ``write_failed(exc, ts)``. Anything else (the window closed, ``limit`` -1)
      goes through ``write_line``, which rotates, enforces the budget and reports drops.
      The logging fast path does this inline: a call saved is ~3% of a log call.
    - ``identity_suffix``, ``identity_fields``, ``writer_id``: what its lines end with
      and their keys start with; ``watch_starts`` says when they change.
    """

    def __init__(
        self,
        directory: Path,
        *,
        proc: str | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        budget: int | None = None,
        max_record: int | None = None,
    ) -> None:
        self.directory = directory
        # Opened once: every file is made relative to it (see slowpath.py).
        self.dir_fd = open_dir(directory, create=True)
        self._old_dir_fds: list[int] = []
        self.proc = proc
        self.limit = -1
        self.fd = -1
        self.configure(max_file_size, budget, max_record)
        # Reentrant, so that a signal handler logging while its own thread holds it finds
        # ``_busy`` set (and drops) instead of waiting for itself forever.
        self._lock = threading.RLock()
        self._busy = False
        # Objects that cache pieces of this writer's lines (the logging fast path): told
        # whenever the writer (re)starts with a new id and identity.
        self._start_watchers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._start()
        _all_writers.add(self)

    def configure(
        self, max_file_size: int, budget: int | None, max_record: int | None = None
    ) -> None:
        """Set the file size, the budget (None: the default number of files) and the
        record cap (None: ``NVRX_OTEL_MAX_RECORD_KB``); never above a file's size."""
        self.max_file_size = max(4096, max_file_size)
        default_budget = DEFAULT_MAX_FILES * self.max_file_size * env.SPOOL_SCALE.get()
        self.budget = max(self.max_file_size, default_budget if budget is None else budget)
        if max_record is None:
            max_record = env.max_record_bytes()
        self.max_record = max(1024, min(max_record, self.max_file_size))
        self._refresh_limit()

    def watch_starts(self, watcher: Any) -> None:
        """Call ``watcher.writer_started()`` after each later (re)start of this writer: a
        forked child's, or a new process name's (new writer id, identity and key)."""
        self._start_watchers.add(watcher)

    def rename(self, proc: str) -> None:
        """Take the process name ``proc`` (NVRx's file prefix) from the next file on: a
        new writer id and identity (only while no file is open)."""
        if self.fd < 0 and proc != self.proc:
            self.proc = proc
            self._start()

    # -- state that a forked child must replace ------------------------------------------

    def _start(self) -> None:
        ident = get_identity()
        self.writer_id = os.urandom(8).hex()
        self.pid = os.getpid()
        self.counter = itertools.count()
        self.fd = -1
        self.size = 0
        # The append window (see the class docstring): how large the current file may grow
        # on the lock-free path, or -1 while the slow path must run first (no file, drops
        # to report, a torn line to end).
        self.limit = -1
        self._files = rotation.Files()
        self._need_newline = False
        self._next_try_ns = 0
        self.drops = DropCount()
        self._woke_ns = 0
        self._announce = False  # a new file: wake the aggregator after its first record
        self._errors_reported: set[str] = set()
        # The identity table's fields, with pid after the first (node), as records hold them.
        node, *rest = record_fields(ident).items()
        base: dict[str, Any] = dict([node, ("pid", self.pid), *rest])
        self.identity_fields = base
        # The same fields as bytes, to splice onto a line that ends in "}" (hot path).
        self.identity_suffix = rec.identity_suffix(base)
        self._resource = ident.resource_attributes()  # once per writer, not per record
        self._proc_name = self.proc or (
            f"rank{ident.workload_rank}" if ident.workload_rank is not None else "proc"
        )
        for watcher in list(self._start_watchers):
            watcher.writer_started()

    def take_resource(self, resource: dict[str, Any]) -> bool:
        """Carry ``resource`` (the identity's, with new run tags) in the headers of the
        files made from now on; True when this writer has made a file already (its header,
        the resource of every record in it, keeps the attributes from before)."""
        self._resource = resource  # one assignment: the next header reads one or the other
        return self._files.index >= 0

    def write_for(self, identity_fields: dict[str, Any], resource: dict[str, Any]) -> None:
        """Give this writer's records (and the headers of its files) another process's
        identity and resource: a watcher writes what it captured of its rank as the rank's
        records. Call before the first record."""
        self.identity_fields = dict(identity_fields)
        self.identity_suffix = rec.identity_suffix(self.identity_fields)
        self._resource = dict(resource)

    def count_lost(self, n: int, reason: str) -> None:
        """Count ``n`` records that never reached this writer (a watcher shed them) as
        dropped for ``reason``; never raises."""
        if n > 0:
            self._count_drop(time.time_ns(), reason, n)

    def restart_in_child(self) -> None:
        """In a forked child: drop the parent's descriptors (its locks stay the parent's)."""
        self._lock = threading.RLock()
        self._busy = False
        self.drops.forget_in_child()
        self._files.close_retired(self.fd)
        self._start()

    # -- the hot path -----------------------------------------------------------------------

    def emit(self, record: dict[str, Any]) -> None:
        """Append one record (a ``record.LogRecord``-shaped dict without v/seq/key/identity)."""
        record["v"] = rec.SCHEMA_VERSION
        record["key"] = rec.record_key(self.writer_id, next(self.counter))
        self.write_line(rec.spliced_line(record, self.identity_suffix), record.get("ts", 0))

    def flush(self) -> None:
        """Write a pending drop record now (records are in the file when ``emit`` returns);
        never raises."""
        if self.drops.pending and self.pid == os.getpid():
            try:
                self._make_room(0)
            except Exception:  # counted already; the next record tries again
                pass

    def next_key(self) -> str:
        """The next record's ``key``, ``<writer>-<seq>`` (for front ends that build whole
        lines themselves)."""
        return rec.record_key(self.writer_id, next(self.counter))

    def write_line(self, line: bytes, ts: int) -> None:
        """Append one encoded line; counts it as dropped if it cannot be written."""
        announce = False
        if self.size + len(line) > self.limit:
            try:
                if len(line) > self.max_record:
                    cut = truncate.fit(line, self.max_record)
                    if cut is None:
                        self._count_drop(ts, _WRITE_ERROR)
                        return
                    line = cut
                reason = self._make_room(len(line))
            except BaseException as exc:  # a signal handler's, surfacing mid-rotation
                self._count_drop(ts, _WRITE_ERROR)
                if not isinstance(exc, Exception):
                    raise
                self._report_once(f"spooling a record was interrupted: {type(exc).__name__}")
                return
            if reason:
                self._count_drop(ts, reason)
                return
            announce = self._announce
        fd = self.fd
        newline = self._need_newline
        if newline:
            line = b"\n" + line
        try:
            n = append(fd, line, self.size)
        except OSError as exc:
            self.write_failed(exc, ts)
            return
        if n < len(line):
            self.finish_short_write(fd, line, n, ts)
            return
        self.size += n
        if newline:
            self._need_newline = False
            self._refresh_limit()
        if announce:
            self._announced()

    def finish_short_write(self, fd: int, line: bytes, written: int, ts: int) -> None:
        """Complete a record after a short write (a regular file only does that when full)."""
        try:
            while written < len(line):
                written += os.write(fd, line[written:])
        except OSError as exc:
            self.size += written
            self.write_failed(exc, ts, torn=True)
            return
        self._need_newline = False
        self.size += written
        self._refresh_limit()

    def write_failed(self, exc: OSError, ts: int, *, torn: bool = False) -> None:
        """Count a record that could not be written; a torn piece stays alone on its line.

        A torn piece is counted by the reader as one corrupt record, so it is not also
        counted here as dropped (each record is accounted for exactly once)."""
        self._need_newline = True
        self.limit = -1
        if not torn:
            self._count_drop(ts, _WRITE_ERROR)
        self._report_once(f"cannot write spool file in {self.directory}: {exc}")

    @property
    def current_path(self) -> Path | None:
        """The live spool file, if one is open."""
        return self.directory / self._files.live_name if self.fd >= 0 else None


_all_writers: weakref.WeakSet[SpoolWriter] = weakref.WeakSet()
"""Every writer of the process (also those made outside ``registry.get_writer``)."""


def take_identity_resource() -> bool:
    """Every writer of this process carries the identity's resource attributes as they are
    now in the files it makes from now on (:meth:`SpoolWriter.take_resource`); True when one
    of them has made a file already."""
    resource = get_identity().resource_attributes()
    begun = False
    for writer in list(_all_writers):
        if writer.pid == os.getpid():
            begun = writer.take_resource(resource) or begun
    return begun


def _after_fork_in_child() -> None:
    for writer in list(_all_writers):
        writer.restart_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
