"""The run file written by a background thread: LogFlow's ``enqueue=True``, fork-safe.

loguru's own ``enqueue=True`` sends every record through a ``multiprocessing`` pipe to a
writer thread. With a thread logging while another forks, it deadlocks: loguru's at-fork
hook takes the writer thread's lock while the logging thread holds the handler lock and
waits for room in the full pipe, which only the writer thread can make
(Delgan/loguru#1065). It also pickles each record (tens of µs).

:class:`QueuedFile` keeps the point of ``enqueue`` — the calling thread does no file I/O —
without a pipe: loguru formats the line in the caller, :meth:`QueuedFile.write` appends it
to an in-process queue (never blocks, so a fork never waits on it), and a daemon thread
writes batches with ``os.write`` on an ``O_APPEND`` descriptor. A forked child drops the
parent's pending lines (the parent writes them) and from then on writes its own lines
directly, one ``os.write`` per line on the shared ``O_APPEND`` descriptor: children write
where their parent does, without a lock shared between processes (or, with
``file_per: worker``, to a file of their own). The descriptor is a
:class:`~nvrx_otel.logging.logflow.runfilewriter.RunFile`, which also rotates the file
while running.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from typing import Any, Final

from nvrx_otel.logging.logflow.runfilewriter import PathFor, RunFile, losses, safe_text

_STOP: Final = object()
_GATHER_S: Final = 0.005
"""How long the writer thread lets lines gather after the first one: waking (and taking
the GIL) once per line costs the logging thread more than the write it saves."""


Encode = Any  # Callable[[loguru.Message], bytes]


def encode_text(message: Any) -> bytes:
    """The formatted line as loguru made it (lone surrogates escaped)."""
    return safe_text(str(message))


def encode_or_fallback(encode: Encode, message: Any) -> bytes:
    """``encode(message)``, or when that fails a line that still keeps the message."""
    try:
        return encode(message)  # type: ignore[no-any-return]
    except Exception as exc:  # telemetry never breaks the log call, nor loses the line
        from nvrx_otel.logging.handler import report_error

        report_error("cannot encode a run-file line", exc, lost=False)
        try:
            text = str(message.record["message"])
        except Exception:
            text = "<the message could not be read>"
        return safe_text(f"<run-file line not encoded: {type(exc).__name__}> {text}\n")


class QueuedFile:
    """A loguru sink object (``write``/``stop``) appending to a run file from a thread.

    ``encode`` turns loguru's message into the bytes of the line (text or JSON);
    ``worker_path``, when given, names the file a forked child writes instead."""

    def __init__(
        self, file: RunFile, encode: Encode = encode_text, worker_path: PathFor | None = None
    ) -> None:
        self.file = file
        self.path = file.path
        self.encode = encode
        self.worker_path = worker_path
        self.owner = os.getpid()
        self.closed = False
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="nvrx-otel-runfile", daemon=True)
        self._thread.start()
        _files.add(self)

    def write(self, message: Any) -> None:
        """Called by loguru in the logging thread with one formatted line."""
        if self.closed:
            return
        data = encode_or_fallback(self.encode, message)
        if os.getpid() == self.owner and self._thread.is_alive():
            self._queue.put(data)
        else:  # a forked child (no writer thread here), or the thread is gone
            self._write([data])

    def _write(self, lines: list[bytes]) -> None:
        try:
            self.file.append_lines(lines)
        except Exception as exc:  # disk full or gone: the spool still has every record
            losses.add(self.file.path, exc, len(lines))

    def flush_queue(self, timeout: float = 10.0) -> bool:
        """Wait until every line queued so far is written (in the owning process)."""
        if self.closed or os.getpid() != self.owner or not self._thread.is_alive():
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def stop(self) -> None:
        """Write what is queued and close (loguru calls this when the handler is removed)."""
        if self.closed:
            return
        if os.getpid() == self.owner and self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(30)
        elif os.getpid() == self.owner:  # the thread died: write what it left
            self._write_left()
        self.closed = True
        self.file.close()

    def _write_left(self) -> None:
        left: list[bytes] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, threading.Event):
                item.set()
            elif isinstance(item, bytes):
                left.append(item)
        if left:
            self._write(left)

    def _drain(self) -> None:
        try:
            self._drain_batches()
        except BaseException as exc:  # never expected: the callers write directly from now
            losses.add(self.file.path, exc, 0)
            self._write_left()

    def _drain_batches(self) -> None:
        q = self._queue
        running = True
        while running:
            batch: list[bytes] = []
            waiters: list[threading.Event] = []
            item = q.get()
            if item is not _STOP and not isinstance(item, threading.Event):
                time.sleep(_GATHER_S)  # let lines gather: one wake-up and write per batch
            while True:
                if item is _STOP:
                    running = False
                elif isinstance(item, threading.Event):
                    waiters.append(item)
                else:
                    batch.append(item)  # type: ignore[arg-type]
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(batch)  # never raises
            for waiter in waiters:
                waiter.set()

    def _after_fork_in_child(self) -> None:
        self._queue = queue.SimpleQueue()  # the parent's pending lines are the parent's
        if self.worker_path is not None and not self.closed:
            try:
                self.file.reopen_as(self.worker_path(os.getpid()), owner=True)
            except OSError:
                pass  # it keeps writing to its parent's file


_files: weakref.WeakSet[QueuedFile] = weakref.WeakSet()


def flush_all(timeout: float = 10.0) -> None:
    """Wait until every queued run-file line of this process is written."""
    for f in list(_files):
        f.flush_queue(timeout)


def _after_fork_in_child() -> None:
    for f in list(_files):
        f._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
