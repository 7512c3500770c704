"""The per-process spool writer: append-only, one write per record, fork-safe.

See ``docs/spool-format.md`` for the rules this implements. The hot path takes no lock:
``next()`` on an ``itertools.count`` is atomic under the GIL, and concurrent ``O_APPEND``
writes of whole lines to a local file do not interleave. A lock is taken only to rotate.
"""

from __future__ import annotations

import atexit
import fcntl
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from nvrx_otel import env
from nvrx_otel import record as rec
from nvrx_otel.identity import get_identity, record_fields
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.paths import SpoolFileName, SpoolPathError, check_dir, job_dir

_dumps = orjson.dumps
DEFAULT_MAX_FILE_SIZE: Final = env.SPOOL_FILE_SIZE_KB.default * 1024
DEFAULT_MAX_FILES: Final = env.SPOOL_FILES.default
_RECHECK_NS: Final = 50_000_000  # while dropping, look for freed space at most every 50 ms
_REOPEN_NS: Final = 1_000_000_000  # after a failed open, try again at most every second
_OPEN_FLAGS: Final = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
)


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


def _report(message: str) -> None:
    try:
        print(f"nvrx-otel: {message}", file=sys.stderr, flush=True)
    except Exception:  # stderr gone: the count still goes into the drop record
        pass


class SpoolWriter:
    """Appends records to ``<directory>/<proc>.p<pid>.<writer>.<index>.jsonl`` files.

    ``emit`` never raises: a record that cannot be written is counted and reported in
    a ``drop`` record as soon as writing works again (or at exit).
    """

    def __init__(
        self,
        directory: Path,
        *,
        proc: str | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        budget: int | None = None,
    ) -> None:
        check_dir(directory, create=True)
        self.directory = directory
        self.proc = proc
        self.max_file_size = max(4096, max_file_size)
        default_budget = DEFAULT_MAX_FILES * self.max_file_size
        self.budget = max(self.max_file_size, default_budget if budget is None else budget)
        self._lock = threading.Lock()
        # Objects that cache pieces of this writer's lines (the logging fast path): told
        # whenever the writer (re)starts with a new id and identity.
        self._start_watchers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._start()
        _all_writers.add(self)

    def watch_starts(self, watcher: Any) -> None:
        """Call ``watcher.writer_started()`` after each later (re)start of this writer: a
        forked child's, or a new process name's (new writer id, identity and key)."""
        self._start_watchers.add(watcher)

    # -- state that a forked child must replace ------------------------------------------

    def _start(self) -> None:
        ident = get_identity()
        self.writer_id = os.urandom(8).hex()
        self.key_head = self.writer_id.encode()  # the records' keys are b"<key_head>-<seq>"
        self.pid = os.getpid()
        self._seq = itertools.count()
        self._fd = -1
        self._index = -1
        self._size = 0
        # How large the current file may grow on the lock-free path: max_file_size, or -1
        # while the slow path must run first (no file, drops to report, a torn line to end).
        self._limit = -1
        self._files: list[tuple[str, int]] = []  # (name, bytes) of files this writer made
        self._retired: list[int] = []  # fds of older files, closed one rotation later
        self._need_newline = False
        self._next_try_ns = 0
        self._dropped = 0
        self._drop_reason = ""
        self._drop_first = 0
        self._drop_last = 0
        self._errors_reported: set[str] = set()
        # The identity table's fields, with pid after the first (node), as records hold them.
        node, *rest = record_fields(ident).items()
        base: dict[str, Any] = dict([node, ("pid", self.pid), *rest])
        self.identity_fields = base
        # The same fields as bytes, to splice onto a line that ends in "}" (hot path).
        self.identity_suffix = b"," + orjson.dumps(base)[1:] + b"\n"
        self._resource = ident.attributes()
        self._proc_name = self.proc or (
            f"rank{ident.workload_rank}" if ident.workload_rank is not None else "proc"
        )
        for watcher in list(self._start_watchers):
            watcher.writer_started()

    def _after_fork_in_child(self) -> None:
        """In a forked child: drop the parent's descriptors (its locks stay the parent's)."""
        self._lock = threading.Lock()
        for fd in [self._fd, *self._retired]:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._start()

    # -- the hot path -----------------------------------------------------------------------

    def emit(self, record: dict[str, Any]) -> None:
        """Append one record (a ``record.LogRecord``-shaped dict without v/seq/key/identity)."""
        record["v"] = rec.SCHEMA_VERSION
        record["key"] = f"{self.writer_id}-{next(self._seq):x}"
        try:
            body = _dumps(record)
        except (TypeError, orjson.JSONEncodeError):
            body = rec.encode(record)[:-1]
        # The identity fields are spliced on as bytes, not merged into the dict.
        self.write_line(body[:-1] + self.identity_suffix, record.get("ts", 0))

    def next_key(self) -> str:
        """The next record's ``key``, ``<writer>-<seq>`` (for front ends that build whole
        lines themselves)."""
        return f"{self.writer_id}-{next(self._seq):x}"

    def write_line(self, line: bytes, ts: int) -> None:
        """Append one encoded line; counts it as dropped if it cannot be written."""
        if self._size + len(line) > self._limit and not self._make_room(len(line)):
            self._count_drop(ts, DropReasonValues.BUDGET.value if self._fd >= 0 else "")
            return
        fd = self._fd
        newline = self._need_newline
        if newline:
            line = b"\n" + line
        try:
            n = append(fd, line, self._size)
        except OSError as exc:
            self.write_failed(exc, ts)
            return
        if n < len(line):
            self.finish_short_write(fd, line, n, ts)
            return
        self._size += n
        if newline:
            self._need_newline = False
            self._refresh_limit()

    def _refresh_limit(self) -> None:
        """Open the lock-free path when nothing needs the slow one (see ``_limit``)."""
        ok = self._fd >= 0 and not self._dropped and not self._need_newline
        self._limit = self.max_file_size if ok else -1

    def finish_short_write(self, fd: int, line: bytes, written: int, ts: int) -> None:
        """Complete a record after a short write (a regular file only does that when full)."""
        try:
            while written < len(line):
                written += os.write(fd, line[written:])
        except OSError as exc:
            self._size += written
            self.write_failed(exc, ts, torn=True)
            return
        self._need_newline = False
        self._size += written
        self._refresh_limit()

    def write_failed(self, exc: OSError, ts: int, *, torn: bool = False) -> None:
        """Count a record that could not be written; a torn piece stays alone on its line.

        A torn piece is counted by the reader as one corrupt record, so it is not also
        counted here as dropped (each record is accounted for exactly once)."""
        self._need_newline = True
        self._limit = -1
        if not torn:
            self._count_drop(ts, DropReasonValues.WRITE_ERROR.value)
        self._report_once(f"cannot write spool file in {self.directory}: {exc}")

    # -- rotation, budget and drops -----------------------------------------------------------

    def _make_room(self, needed: int) -> bool:
        """Ensure a file with room is open and no drop is pending; False means drop."""
        now = time.monotonic_ns()
        if now < self._next_try_ns:
            return False
        with self._lock:
            ok = self._make_room_locked(needed, now)
            self._refresh_limit()
            return ok

    def _make_room_locked(self, needed: int, now: int) -> bool:
        if self._fd >= 0 and self._size + needed <= self.max_file_size and not self._dropped:
            return True  # another thread made room
        if self._fd >= 0 and self._size + needed <= self.max_file_size:
            return self._flush_drops()
        if not self._room_in_budget():
            self._next_try_ns = now + _RECHECK_NS
            if self._fd < 0:
                return False
            self._drop_reason = self._drop_reason or DropReasonValues.BUDGET.value
            return False
        if not self._open_next():
            self._next_try_ns = now + _REOPEN_NS
            return False
        self._next_try_ns = 0
        return self._flush_drops()

    def _room_in_budget(self) -> bool:
        alive: list[tuple[str, int]] = []
        for name, size in self._files:
            if name == self._current_name() and self._fd >= 0:
                alive.append((name, self._size))
                continue
            try:
                os.stat(self.directory / name)
            except FileNotFoundError:
                continue  # consumed and deleted by the aggregator
            except OSError:
                pass
            alive.append((name, size))
        self._files = alive
        used = sum(size for _, size in alive)
        return used + self.max_file_size <= self.budget

    def _current_name(self) -> str:
        return self._files[-1][0] if self._files else ""

    def _open_next(self) -> bool:
        index = self._index + 1
        name = SpoolFileName(self.writer_id, index, self.pid, self._proc_name).name
        tmp = self.directory / f".{name}.tmp"
        header = rec.encode(
            {
                "v": rec.SCHEMA_VERSION,
                "k": rec.KIND_HEADER,
                "w": self.writer_id,
                "f": index,
                "ts": time.time_ns(),
                "pid": self.pid,
                "ppid": os.getppid(),
                "proc": self._proc_name,
                "budget": self.budget,
                "max": self.max_file_size,
                "res": self._resource,
            }
        )
        try:
            fd = os.open(tmp, _OPEN_FLAGS, 0o600)
        except OSError as exc:
            self._report_once(f"cannot create spool file in {self.directory}: {exc}")
            return False
        try:
            os.write(fd, header)
            fcntl.flock(fd, fcntl.LOCK_SH)
            os.rename(tmp, self.directory / name)
        except OSError as exc:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._report_once(f"cannot create spool file in {self.directory}: {exc}")
            return False
        old = self._fd
        if old >= 0:
            if self._files:
                self._files[-1] = (self._files[-1][0], self._size)
            try:
                fcntl.flock(old, fcntl.LOCK_UN)  # the old file is complete: writer moved on
            except OSError:
                pass
            # Another thread may still be inside os.write(old): close it one rotation later.
            for stale in self._retired:
                try:
                    os.close(stale)
                except OSError:
                    pass
            self._retired = [old]
        self._fd, self._index, self._size = fd, index, len(header)
        self._files.append((name, len(header)))
        self._need_newline = False
        return True

    def _count_drop(self, ts: int, reason: str) -> None:
        self._limit = -1  # the next record takes the slow path and reports the drop first
        if not self._dropped:
            self._drop_first = ts
            self._drop_reason = reason or DropReasonValues.WRITE_ERROR.value
        self._dropped += 1
        self._drop_last = ts

    def _flush_drops(self) -> bool:
        """Write the pending drop record (caller holds the lock and has room)."""
        if not self._dropped:
            return True
        count, self._dropped = self._dropped, 0
        drop = {
            "v": rec.SCHEMA_VERSION,
            "k": rec.KIND_DROP,
            "ts": time.time_ns(),
            "count": count,
            "first_ts": self._drop_first,
            "last_ts": self._drop_last,
            "reason": self._drop_reason,
        }
        drop["key"] = self.next_key()
        drop.update(self.identity_fields)
        line = rec.encode(drop)
        if self._need_newline:
            line = b"\n" + line
        try:
            os.write(self._fd, line)
        except OSError:
            self._dropped += count  # still pending; the next attempt reports all of them
            return False
        self._need_newline = False
        self._size += len(line)
        return True

    def _report_once(self, message: str) -> None:
        if message not in self._errors_reported:
            self._errors_reported.add(message)
            _report(message + " (records are counted and reported as dropped)")

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def current_path(self) -> Path | None:
        """The live spool file, if one is open."""
        return self.directory / self._current_name() if self._fd >= 0 else None

    def close(self) -> None:
        """Write a pending drop record (over budget if need be) and close the files."""
        with self._lock:
            if self._dropped and self._fd < 0:
                self._open_next()
            if self._dropped and self._fd >= 0:
                self._flush_drops()
            for fd in [self._fd, *self._retired]:
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._fd, self._retired = -1, []
            self._limit = -1


# --- the per-process writer ---------------------------------------------------------------

_writers: dict[Path, SpoolWriter] = {}
_all_writers: weakref.WeakSet[SpoolWriter] = weakref.WeakSet()
_registry_lock = threading.Lock()


def get_writer(
    directory: Path,
    *,
    proc: str | None = None,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    budget: int | None = None,
) -> SpoolWriter:
    """The process's writer for ``directory`` (created on first use; a SpoolPathError
    says why a directory cannot be used). Settings of a later call replace earlier ones."""
    key = directory.absolute()
    with _registry_lock:
        writer = _writers.get(key)
        if writer is None:
            writer = _writers[key] = SpoolWriter(
                key, proc=proc, max_file_size=max_file_size, budget=budget
            )
        else:
            writer.max_file_size = max(4096, max_file_size)
            writer._refresh_limit()
            writer.budget = max(
                writer.max_file_size,
                DEFAULT_MAX_FILES * writer.max_file_size if budget is None else budget,
            )
            if proc is not None and proc != writer.proc and writer._fd < 0:
                writer.proc = proc
                writer._start()
        return writer


def writer_for_root(
    root: str | os.PathLike[str],
    *,
    proc: str | None = None,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    budget: int | None = None,
) -> SpoolWriter:
    """The process's writer for this job's directory under the spool ``root``.

    Refuses a root that is a symlink, and a job directory that is a symlink, foreign-owned
    or not writable: :class:`SpoolPathError` says which and why.
    """
    if Path(root).is_symlink():
        raise SpoolPathError(f"spool directory {root} is a symlink; refusing to use it")
    directory = job_dir(root, get_identity().job_id)
    check_dir(directory, create=True)
    return get_writer(directory, proc=proc, max_file_size=max_file_size, budget=budget)


def close_writers() -> None:
    """Flush pending drop records and close every writer of this process."""
    with _registry_lock:
        writers = list(_writers.values())
    for writer in writers:
        writer.close()


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for writer in list(_all_writers):  # every writer, also those made outside get_writer
        writer._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(close_writers)
