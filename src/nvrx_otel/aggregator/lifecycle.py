"""Process plumbing of the service: the job lock, the wait file, signals, waking the loop
and lowering the CPU priority."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final

from nvrx_otel.aggregator.health import prefixed, say
from nvrx_otel.proctime import TICK_NS
from nvrx_otel.spool.paths import LOCK_NAME


class AggregatorError(RuntimeError):
    """The aggregator cannot start; the message says why."""


class JobLock:
    """``<job dir>/.nvrx_aggregator.lock``, held with ``flock(LOCK_EX | LOCK_NB)`` while an
    aggregator serves the job directory; it holds the owner's pid for the error message."""

    def __init__(self, job_dir: Path) -> None:
        self.path = job_dir / LOCK_NAME
        self.fd = -1

    def acquire(self) -> None:
        """Take the lock, or raise AggregatorError naming the aggregator that has it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise AggregatorError(f"cannot open the aggregator lock {self.path}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise AggregatorError(
                f"another aggregator{who} already serves {self.path.parent}: it holds "
                f"{self.path}; not starting a second one"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing releases the flock; the file stays (unlinking races)
            self.fd = -1


class WaitFile:
    """The wait file: it counts once made or touched after the aggregator started.

    ``since_ns`` is that start: for the command-line aggregator its process's start as the
    kernel recorded it, so a wait file the workload touched while the aggregator's Python
    was still starting up counts (a fast job on a busy node finishes before that). A file
    whose modification time is older than the start, less one clock tick and one coarse
    file-system tick, is *stale*: it predates the job and is ignored until it is made or
    touched again, which is judged by the file's identity (inode, mtime) rather than by
    comparing clocks. Without ``since_ns`` every file there at the start is stale."""

    SLACK_NS: Final = 2 * TICK_NS
    """The start is known to a clock tick, file times to a coarse kernel tick."""

    def __init__(self, path: Path | None, since_ns: int | None = None) -> None:
        self.path = path
        seen = self._stat()
        made_since = (
            seen is not None and since_ns is not None and seen[1] >= since_ns - self.SLACK_NS
        )
        self.stale = None if made_since else seen

    def _stat(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def fresh(self) -> bool:
        """A wait file exists that was made or touched after the start."""
        seen = self._stat()
        return seen is not None and seen != self.stale

    def problems(self) -> list[str]:
        """What to tell people at the start: a wait file that cannot appear yet, or one
        that is stale."""
        out = []
        wait_dir = self.path.parent if self.path is not None else None
        if wait_dir is not None and not wait_dir.is_dir():
            what = "is not a directory" if wait_dir.exists() else "does not exist"
            out.append(
                f"the wait file's directory {wait_dir} {what}: {self.path} cannot "
                "appear until it is made (SIGTERM or SIGINT stop this aggregator meanwhile)"
            )
        if self.stale is not None:
            out.append(
                f"wait file {self.path} is older than this aggregator: "
                "ignoring it until it is made again"
            )
        return out


class Waker:
    """Sleeps that end early when :meth:`wake` is called (from a thread or a signal handler)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        try:
            os.write(self._w, b"x")
        except OSError:  # the pipe is full (already woken) or closed (already stopped)
            pass

    def sleep(self, timeout: float) -> None:
        if timeout <= 0 or self._r < 0:
            return
        ready, _, _ = select.select([self._r], [], [], timeout)
        if ready:
            try:
                while os.read(self._r, 4096):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._r = self._w = -1


SIGNAL_GRACE_S: Final = 5.0
"""A second SIGTERM/SIGINT this soon after the first is taken for the same shutdown and
ignored: Slurm signals every process of a step, and a job script's ``trap`` forwards the
signal it got as well. One that comes later exits the process at once."""


WORKLOAD_SIGNALS: Final = (signal.SIGUSR1, signal.SIGUSR2)
"""Signals meant for the training processes, which Slurm sends to every process of a step
(``scancel -s USR1``, ``sbatch --signal=USR1@<seconds>`` before a time limit, submitit's
SIGUSR2): the aggregator keeps reading through them instead of dying of their default
action, which would leave what the ranks spooled since its last read in the spool."""


def catch_signals(on_first: Callable[[str], None]) -> dict[int, Any]:
    """SIGTERM/SIGINT call ``on_first(name)``; another within ``SIGNAL_GRACE_S`` is
    ignored, a later one exits the process at once (committed progress makes that safe).
    ``WORKLOAD_SIGNALS`` are said on stderr and otherwise ignored. Returns the previous
    handlers; nothing is installed outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    first: list[float] = []  # when the first signal came (monotonic)

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not first:
            first.append(time.monotonic())
            on_first(name)
        elif time.monotonic() - first[0] < SIGNAL_GRACE_S:
            _tell(f"{name} again within {SIGNAL_GRACE_S:g} s of the first: still draining")
        else:
            _tell("second signal: exiting at once")
            os._exit(128 + signum)

    def not_ours(signum: int, frame: FrameType | None) -> None:
        _tell(f"{signal.Signals(signum).name}: a signal for the workload, still aggregating")

    previous: dict[int, Any] = {
        s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)
    }
    previous.update({s: signal.signal(s, not_ours) for s in WORKLOAD_SIGNALS})
    return previous


def _tell(message: str) -> None:
    """One line on stderr from a signal handler: a plain ``write`` (``say`` goes through
    the buffered ``sys.stderr``, which a handler must not re-enter), never raising."""
    try:
        os.write(2, f"{prefixed(message)}\n".encode())
    except OSError:
        pass


def restore_signals(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def lower_priority(increment: int) -> None:
    """Lower the calling thread's CPU priority (on Linux a thread's own; threads it starts
    inherit it), so an aggregator inside a training process slows nothing else."""
    if increment <= 0:
        return
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))
    except OSError as exc:
        say(f"cannot lower the CPU priority: {exc}")


def not_a_directory(path: Path) -> Path | None:
    """``path`` or the nearest existing directory above it, when that exists as something
    other than a directory (a file named as the log directory)."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None
