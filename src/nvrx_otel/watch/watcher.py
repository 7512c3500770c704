"""The watcher: a process beside each spooling rank that records how the rank ended.

Started by ``capture.start`` (``python -m nvrx_otel.watch.watcher``, in a session of its
own, deaf to SIGTERM, SIGINT and SIGHUP so that it outlives the signals that kill its rank),
it writes, through a spool writer of its own carrying the rank's identity and pid:

- every line the rank (its native code and children included) writes to fd 1 and 2,
  which arrive here on pipes: each chunk goes first to the original destination, then to
  the recorder. Forwarding never waits for recording: a recorder more than
  ``BACKLOG`` bytes behind sheds chunks and counts their lines as dropped;
- the Python stacks ``faulthandler`` dumps on its pipes at a fatal signal, SIGTERM or the
  stacks signal, one record per dump;
- how the rank ended (``ending.py``), once its pidfd says it died.

It exits when the rank is dead and every writer of the captured pipes (the rank's
children too) has closed them. Its own failures go to the rank's original stderr.
"""

from __future__ import annotations

import collections
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

import orjson

from nvrx_otel import levels
from nvrx_otel import record as rec
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.truncate import MARK
from nvrx_otel.spool.writer import SpoolWriter
from nvrx_otel.watch import notes
from nvrx_otel.watch.dumps import StderrDumps, dump_record
from nvrx_otel.watch.ending import Ending, read_stat, reaped_status
from nvrx_otel.watch.lines import LineSplitter

SPEC_VAR: Final = "NVRX_OTEL_WATCH_SPEC"
"""The watcher's orders, JSON, in its environment only (never a rank's)."""

LOGGER: Final = "nvrx_otel.capture"
"""The logger name of captured lines."""

READ_SIZE: Final = 1 << 20
BACKLOG: Final = 64 << 20
"""Bytes the recorder may be behind before chunks are shed from recording."""
DUMP_QUIET_S: Final = 0.2
"""A dump is complete when its pipe has been quiet this long (or the rank died)."""
REAP_WAIT_S: Final = 2.0
"""How long the watcher waits for the rank's parent to reap it (for its exit status)."""
STREAMS_WAIT_S: Final = 1.0
"""How long the end waits for the captured streams to close (children may hold them)."""
_SHED = DropReasonValues.CAPTURE_BACKLOG.value


def _say(message: str) -> None:
    try:
        os.write(2, f"nvrx-otel watcher: {message}\n".encode(errors="replace"))
    except OSError:
        pass


class Notes:
    """The notes pipe, read by whoever needs the notes first (a recorder about to record
    a line, or the main loop)."""

    def __init__(self, fd: int, ending: Ending) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.expected = notes.Expected()
        self.ending = ending
        self._lock = threading.Lock()
        self._rest = b""

    def drain(self) -> None:
        with self._lock:
            while True:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # nothing more now (EAGAIN), or the pipe is gone
                    return
                if not data:
                    return
                data = self._rest + data
                whole, _, self._rest = data.rpartition(b"\n")
                for note in notes.parse(whole):
                    self._take(note)

    def _take(self, note: dict[str, Any]) -> None:
        kind = note.get("k")
        if kind == "expect":
            stream, hashes = note.get("s"), note.get("h")
            if isinstance(stream, int) and isinstance(hashes, list):
                self.expected.add(stream, hashes)
        elif kind == "exc":
            self.ending.exception = str(note.get("t") or "exception")
        elif kind == "exit":
            self.ending.exited = True

    def expected_line(self, stream: int, line: bytes) -> bool:
        with self._lock:
            return self.expected.take(stream, line)


class Stream:
    """One captured descriptor: a forwarding thread and a recording thread."""

    def __init__(self, name: str, number: int, read_fd: int, dest_fd: int, w: Watcher) -> None:
        self.name = name
        self.level = name.upper()  # STDOUT, STDERR
        self.number = number
        self.read_fd = read_fd
        self.dest_fd = dest_fd
        self.w = w
        self.queue: collections.deque[tuple[int, bytes] | None] = collections.deque()
        self.queued = 0
        self.ready = threading.Condition(threading.Lock())
        self.splitter = LineSplitter(max(256, w.writer.max_record - 1024))
        self.dumps = StderrDumps() if number == 2 else None
        self.forwarder = threading.Thread(target=self._forward, name=f"{name}-forward")
        self.recorder = threading.Thread(target=self._record, name=f"{name}-record")
        self.forwarder.start()
        self.recorder.start()

    # -- forwarding: the rank's bytes reach their destination first --------------------------

    def _forward(self) -> None:
        try:
            while True:
                try:
                    data = os.read(self.read_fd, READ_SIZE)
                except InterruptedError:
                    continue
                if not data:
                    break
                ts = time.time_ns()
                self._send(data)
                with self.ready:
                    if self.queued > BACKLOG:
                        self.w.writer.count_lost(data.count(b"\n") or 1, _SHED)
                        continue
                    self.queue.append((ts, data))
                    self.queued += len(data)
                    self.ready.notify()
        except Exception as exc:  # keep the rank's output flowing is all that matters
            _say(f"forwarding {self.name} failed: {exc!r}")
        finally:
            with self.ready:
                self.queue.append(None)
                self.ready.notify()

    def _send(self, data: bytes) -> None:
        fd = self.dest_fd
        if fd < 0:
            return
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
            except BlockingIOError:
                select.select([], [fd], [])
                continue
            except InterruptedError:
                continue
            except OSError:  # the destination is gone (a closed pipe): recording goes on
                self.dest_fd = -1
                return
            view = view[n:]

    # -- recording ----------------------------------------------------------------------------

    def _record(self) -> None:
        while True:
            with self.ready:
                while not self.queue:
                    self.ready.wait()
                item = self.queue.popleft()
                if item is not None:
                    self.queued -= len(item[1])
            if item is None:
                break
            ts, data = item
            self.w.notes.drain()
            try:
                for line in self.splitter.feed(data):
                    self._line(line.data, line.cut, ts)
            except Exception as exc:
                _say(f"recording {self.name} failed: {exc!r}")
        ts = time.time_ns()
        for line in self.splitter.finish():
            self._line(line.data, line.cut, ts)
        if self.dumps is not None:
            done = self.dumps.finish()
            if done is not None:
                self.w.writer.emit(done)

    def _line(self, data: bytes, cut: int, ts: int) -> None:
        if not data.strip() or self.w.notes.expected_line(self.number, data):
            return  # a blank line says nothing; an expected one is a record already
        text = data.decode("utf-8", "replace")
        if self.dumps is not None:
            held, done = self.dumps.take(text, ts)
            if done is not None:
                self.w.writer.emit(done)
            if held:
                return
        if cut:
            text += MARK % cut
        self.w.writer.emit(
            {
                "k": rec.KIND_LOG,
                "ts": ts,
                "sev": levels.STREAMS[self.level],
                "lvl": self.level,
                "lg": LOGGER,
                "msg": text,
                "file": self.name,
                "line": 0,
                "attrs": {"log.iostream": self.name},
            }
        )

    def join(self, timeout: float | None = None) -> None:
        self.forwarder.join(timeout)
        if not self.forwarder.is_alive():
            self.recorder.join(timeout)


class Dump:
    """One faulthandler pipe: bytes until it is quiet, then one record."""

    def __init__(self, fd: int, signal_name: str | None, reason: str) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.signal = signal_name
        self.reason = reason
        self.data = bytearray()
        self.last = 0.0
        self.first_ns = 0

    def read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # nothing more now (EAGAIN), or the pipe is gone
                return
            if not data:
                return
            if not self.data:
                self.first_ns = time.time_ns()
            self.data += data
            self.last = time.monotonic()

    def take(self, now: float, force: bool) -> dict[str, Any] | None:
        if not self.data or (not force and now - self.last < DUMP_QUIET_S):
            return None
        text = self.data.decode("utf-8", "replace")
        self.data.clear()
        return dump_record(text, self.first_ns, signal=self.signal, reason=self.reason)


class Watcher:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.pid = int(spec["pid"])
        self.writer = SpoolWriter(
            Path(spec["dir"]),
            proc=spec["proc"],
            max_file_size=int(spec["max_file_size"]),
            budget=int(spec["budget"]),
            max_record=int(spec["max_record"]),
        )
        self.writer.write_for(spec["identity"], spec["resource"])
        # A file now, not at the first record: the rank's end is what this writer records,
        # and an aggregator that saw no live writer once the rank was gone would not wait.
        self.writer.open_now()
        self.ending = Ending(self.pid)
        self.notes = Notes(int(spec["notes"]), self.ending)
        self.dumps = [Dump(int(fd), sig, reason) for fd, sig, reason in spec["dumps"]]
        self.start_time = int(spec["start"])
        self.record_ending = bool(spec.get("ending", True))
        self.streams = [Stream(name, n, int(r), int(d), self) for name, n, r, d in spec["streams"]]

    def _pidfd(self) -> int | None:
        fd = int(self.spec.get("pidfd", -1))
        if fd >= 0:
            return fd  # the rank's own, made before the watcher started
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return None
        stat = read_stat(self.pid)
        if stat is None or stat.start_time != self.start_time:  # gone already, pid reused
            os.close(fd)
            return None
        return fd

    def _alive(self) -> bool:
        stat = read_stat(self.pid)
        return stat is not None and stat.start_time == self.start_time and stat.state != "Z"

    def run(self) -> None:
        pidfd = self._pidfd()
        watched = [self.notes.fd, *(d.fd for d in self.dumps)]
        if pidfd is not None:
            watched.append(pidfd)
        poller = select.poll()
        for fd in watched:
            poller.register(fd, select.POLLIN)
        while True:
            events = poller.poll(100)
            died = any(fd == pidfd for fd, _ in events)
            if pidfd is None and not self._alive():
                died = True
            self._step(force=False)
            if died:
                break
            for fd, ev in events:  # a pipe whose writers are all gone: stop polling it
                if (
                    fd != pidfd
                    and ev & (select.POLLHUP | select.POLLERR)
                    and not ev & select.POLLIN
                ):
                    poller.unregister(fd)
        self._died(pidfd)

    def _status(self, pidfd: int | None) -> int | None:
        """The rank's wait status: from its zombie, else (reaped) from its pidfd, waiting
        up to ``REAP_WAIT_S`` for its parent to reap it."""
        deadline = time.monotonic() + REAP_WAIT_S
        while True:
            stat = read_stat(self.pid)
            if (
                stat is not None
                and stat.start_time == self.start_time
                and stat.exit_code is not None
            ):
                return stat.exit_code
            if pidfd is None:
                return None
            status = reaped_status(pidfd)
            if status is not None or time.monotonic() > deadline:
                return status
            time.sleep(0.02)

    def _step(self, force: bool) -> None:
        self.notes.drain()
        now = time.monotonic()
        for d in self.dumps:
            d.read()
            record = d.take(now, force)
            if record is not None:
                self.writer.emit(record)
                if d.signal:
                    self.ending.dumps.append(d.signal)
                if d.reason == "fatal":
                    self.ending.fatal = record["exc_type"]

    def _died(self, pidfd: int | None) -> None:
        seen = time.time_ns()
        self.ending.status = self._status(pidfd)
        self._step(force=True)
        deadline = time.monotonic() + STREAMS_WAIT_S  # the rank's last lines first, mostly
        for s in self.streams:
            s.join(max(0.0, deadline - time.monotonic()))
        if self.record_ending:
            self.writer.emit(self.ending.record(seen))
        for s in self.streams:
            s.join()
        self.writer.close()


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        spec = orjson.loads(os.environ.pop(SPEC_VAR))
        watcher = Watcher(spec)
    except Exception as exc:
        _say(f"cannot start: {exc!r}")
        sys.exit(2)
    try:
        watcher.run()
    except Exception as exc:
        _say(f"failed: {exc!r}")
        sys.exit(1)


if __name__ == "__main__":
    main()
