"""Health of a running aggregator: counters, the periodic status line, the final summary,
and the spool directories of other jobs it leaves alone."""

from __future__ import annotations

import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nvrx_otel.spool.paths import LOCK_NAME, parse_name

PREFIX = "nvrx-otel aggregate"
"""The prefix of every stderr line of an aggregator, unless its command line names itself
otherwise (:func:`set_prefix`)."""

JOB_MISMATCH_EXIT: Final = 3
"""The exit status when the aggregator wrote nothing while another job's spool directory
under the same root, served by no running aggregator, received records."""


_prefix = PREFIX


def set_prefix(prefix: str) -> None:
    """Start every line said from now on with ``prefix`` (the command the aggregator was
    run as: one prefix per run)."""
    global _prefix
    _prefix = prefix


def prefix() -> str:
    """The prefix of this run's lines."""
    return _prefix


def prefixed(message: str) -> str:
    """``message`` with the run's prefix on each of its lines (a traceback too)."""
    return "\n".join(f"{_prefix}: {line}" for line in message.rstrip("\n").split("\n"))


def say(message: str) -> None:
    """A message on stderr, each line prefixed (never raises: stderr may be gone when the
    job ends)."""
    tell(prefixed(message))


_own_stderr = False


def own_stderr() -> None:
    """This process is the aggregator's own (the CLI), not a training process that runs it
    in a thread: a stderr nobody reads any more may then be silenced for good."""
    global _own_stderr
    _own_stderr = True


def tell(line: str) -> None:
    """Write ``line`` to stderr; never raises. Stderr is only for people: a closed stderr
    or a pipe whose reader is gone (``EPIPE``; SIGPIPE is ignored by Python) loses the line,
    never the aggregator. In the aggregator's own process a broken pipe on descriptor 2 is
    replaced by ``/dev/null`` so that later lines, and the interpreter's flush at exit
    (which would otherwise turn the exit status into 120), write nowhere without error."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except BrokenPipeError:
        if _own_stderr:
            _silence_fd2()
    except Exception:  # stderr closed: the node log and the state still hold the facts
        pass


def _silence_fd2() -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.dup2(null, 2)
    except OSError:
        pass
    finally:
        os.close(null)
    try:
        sys.stderr.flush()  # what the failed write left buffered goes nowhere now
    except Exception:
        pass


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@dataclass
class Health:
    """Counters of this run (the state file keeps totals across restarts)."""

    started: float = field(default_factory=time.monotonic)
    written: int = 0  # lines written to the node log (records and loss reports)
    dropped: int = 0  # records reported dropped (writers' drops and rotation)
    corrupt: int = 0  # records reported corrupt
    collapsed: int = 0  # records collapsed into an identical one of another rank (dedup.py)
    last_ts: int = 0  # timestamp of the last record written
    writers: set[str] = field(default_factory=set)
    other_jobs: dict[str, tuple[int, int]] = field(default_factory=dict)  # dir -> files, bytes
    receiving: set[str] = field(default_factory=set)  # other jobs' dirs that got records
    _scanned_other_jobs: bool = False
    _mark_time: float = field(default_factory=time.monotonic)
    _mark_written: int = 0

    def rate(self) -> float:
        """Records per second since the previous call (the status interval)."""
        now = time.monotonic()
        span = max(now - self._mark_time, 1e-9)
        rate = (self.written - self._mark_written) / span
        self._mark_time, self._mark_written = now, self.written
        return rate

    def status(self, *, backlog: int, live: int, held: int = 0) -> str:
        lag = (time.time_ns() - self.last_ts) / 1e9 if backlog and self.last_ts else 0.0
        return (
            f"status: lag {max(lag, 0.0):.1f} s, backlog {human_bytes(backlog)}, "
            f"{self.rate():.0f} records/s, {self.written} written, {self.dropped} dropped, "
            f"{self.corrupt} corrupt, {plural(len(self.writers), 'writer')} ({live} live)"
            + (f", {self.collapsed} collapsed" if self.collapsed else "")
            + (f", {held} held by the dedup window" if held else "")
        )

    def summary(
        self,
        *,
        reason: str,
        log_path: Path,
        live: int,
        job_dir: Path,
        drain: float,
        backlog: int = 0,
    ) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        text = (
            f"stopped ({reason}) after {elapsed:.1f} s: wrote {plural(self.written, 'record')} "
            f"to {log_path} ({self.written / elapsed:.0f} records/s); reported {self.dropped} "
            f"dropped and {plural(self.corrupt, 'corrupt record')}; "
            f"{plural(len(self.writers), 'writer')}"
        )
        if self.collapsed:
            text += (
                f"; collapsed {plural(self.collapsed, 'record')} into identical ones of other "
                "ranks (--dedup-window; emitted = kept + collapsed + dropped + corrupt)"
            )
        if live:
            text += (
                f"; {plural(live, 'writer')} {'was' if live == 1 else 'were'} still running "
                f"after the {drain:g} s drain timeout: "
                f"what they write next stays in {job_dir} for the next aggregator"
            )
        if backlog:
            text += f"; {human_bytes(backlog)} not yet in the node log stay in {job_dir}"
        if self.other_jobs:
            text += (
                f"; left alone: spool files of other jobs in {', '.join(sorted(self.other_jobs))}"
            )
        if self.receiving:
            text += (
                f"; records went to other jobs' spool directories while it ran: "
                f"{', '.join(sorted(self.receiving))}"
            )
            if self.mismatch():
                text += (
                    f" and none to its own (exit status {JOB_MISMATCH_EXIT}): the ranks' job id "
                    "is not this aggregator's"
                )
        return text

    def mismatch(self) -> bool:
        """This aggregator wrote nothing while another job's spool directory under the
        same root, which no running aggregator serves, received records: the ranks' job id
        is not this aggregator's."""
        return self.written == 0 and bool(self.receiving)

    def scan_other_jobs(self, root: Path, own: Path) -> list[str]:
        """Lines about the other jobs' directories under the spool root: one for each that
        holds spool files when first seen, and one, at once, for each that receives records
        while this aggregator runs and no running aggregator serves it."""
        found: list[str] = []
        first_scan = not self._scanned_other_jobs
        self._scanned_other_jobs = True
        for path, name, files, size in other_job_dirs(root, own):
            seen = self.other_jobs.get(path)
            self.other_jobs[path] = (files, size)
            grew = not first_scan if seen is None else (files > seen[0] or size > seen[1])
            if grew and path not in self.receiving and not served(Path(path)):
                self.receiving.add(path)
                none = ", which has received none so far" if self.written == 0 else ""
                held = f"{plural(files, 'spool file')}, {human_bytes(size)}"
                found.append(
                    f"{path} is receiving records of another job ({held}) while this "
                    f"aggregator serves {own}{none}: the ranks' job id (SLURM_JOB_ID, "
                    f"TORCHELASTIC_RUN_ID, ...) is not this aggregator's; start it with "
                    f"--job-id {name} or the ranks' environment"
                )
            elif seen is None:
                found.append(
                    f"{path} holds {plural(files, 'spool file')} ({human_bytes(size)}) of "
                    f"another job; this aggregator serves {own} and leaves them alone"
                )
        return found


def other_job_dirs(root: Path, own: Path) -> list[tuple[str, str, int, int]]:
    """The other jobs' directories under the spool root that hold spool files, by name:
    (path, name, files, bytes)."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.name == own.name or not entry.is_dir(follow_symlinks=False):
            continue
        counted = spool_files_in(entry.path)
        if counted is not None and counted[0]:
            found.append((entry.path, entry.name, *counted))
    return found


def spool_files_in(path: str) -> tuple[int, int] | None:
    """How many spool files ``path`` holds and their bytes (None when it cannot be listed)."""
    files = size = 0
    try:
        for sub in os.scandir(path):
            if parse_name(sub.name) is not None:
                files += 1
                size += sub.stat(follow_symlinks=False).st_size
    except OSError:
        return None
    return files, size


def plural(n: int, noun: str) -> str:
    """``1 writer``, ``2 writers``, ``0 writers`` (``-s`` suffices for every noun said)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def served(job_dir: Path) -> bool:
    """Whether a running aggregator serves ``job_dir`` (its lock file names a live
    process; the lock itself is never touched: taking it would stop that one starting)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # no FIFO, no link
    try:
        fd = os.open(job_dir / LOCK_NAME, flags)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        return False
    finally:
        os.close(fd)
    if not text.isdigit():
        return False
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True
