"""Reconfiguring the loguru front end while running, opt-in (``reload_signal``).

A signal of the user's choice (none by default: SIGUSR1 is Slurm's and Lightning's requeue
signal) either toggles DEBUG on the run file, the spool and the console, or reads the
configuration files and the environment again and applies their levels. The signal
handler only writes a byte to a pipe; a daemon thread does the work, so nothing runs in
the interrupted frame (which may hold loguru's or logging's locks). Only the process that
installed it acts on the signal: a forked child inherits the handler and the pipe, and the
signal sent to the child does nothing there (it must not reach the parent's thread).

No record is lost across the switch: the handlers stay as they are and only their filter
changes. Each handler's filter is a :class:`Switch` whose ``current`` function is replaced
in one assignment, so every record is judged whole by the old settings or by the new. The
price, paid only when a reload signal is configured: the handlers take every level the
switch can turn on (DEBUG for ``debug``, all for ``reload``), so loguru builds a record for
calls the filter then refuses (a few µs per disabled call instead of loguru's early exit).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from nvrx_otel import env

Filter = Callable[[Any], bool]


class Switch:
    """A handler's filter that a reload replaces in one assignment."""

    __slots__ = ("current",)

    def __init__(self, current: Filter) -> None:
        self.current = current

    def __call__(self, record: Any) -> bool:
        return self.current(record)


def floored(floor: int, inner: Filter | None) -> Filter:
    """A filter taking records at ``floor`` or above that ``inner`` (if any) also takes."""
    if inner is None:
        return lambda record: bool(record["level"].no >= floor)
    return lambda record: bool(record["level"].no >= floor and inner(record))


def signal_number(name: str) -> int:
    """The number of a checked signal name (``SIGHUP``, ``SIGRTMIN+3``)."""
    if name.startswith("SIGRTMIN+"):
        return int(signal.SIGRTMIN) + int(name.split("+", 1)[1])
    return int(getattr(signal, name))


class Reloader:
    """The signal handler, its pipe and the thread that runs ``action`` once per signal."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name = name
        self.number = signal_number(name)
        self.action = action
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(self.read_fd, True)
        self.previous: Any = signal.getsignal(self.number)
        self.pid = os.getpid()
        self.handled = 0  # signals whose action has run (tests wait on it)
        self.thread = threading.Thread(target=self._run, name="nvrx-otel-reload", daemon=True)
        self.thread.start()
        signal.signal(self.number, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        if os.getpid() != self.pid:  # a forked child inherited the handler and the pipe:
            return  # the signal is not the installing process's, and must not reach it
        try:
            os.write(self.write_fd, b"r")
        except OSError:
            pass  # the pipe is full: a reload is pending anyway
        previous = self.previous
        if callable(previous):
            previous(signum, frame)

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                return
            if not data or b"x" in data:
                return
            for _ in range(data.count(b"r")):
                try:
                    self.action()
                except Exception as exc:  # a bad reload never stops logging
                    env.warn_once(f"{self.name}: cannot reconfigure logging: {exc}")
                self.handled += 1  # after the action and what it said

    def uninstall(self) -> None:
        """Put the previous handler back and stop the thread."""
        if os.getpid() != self.pid:
            return
        try:
            if signal.getsignal(self.number) == self._handler:
                signal.signal(self.number, self.previous)
        except (ValueError, TypeError):
            pass  # not the main thread: the handler stays, its thread is gone
        try:
            os.write(self.write_fd, b"x")
        except OSError:
            pass
        self.thread.join(5)
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
