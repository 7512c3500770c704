"""The aggregator's side of the writers' drop ledgers and wake-ups.

Drop ledgers (``spool/sidecar.py``): once a writer is gone (no lock on its ledger) and
every one of its spool files is read, the drops its ledger counts beyond those its drop
records hold are reported as one ``dropped <N> records ...`` WARNING, like any drop
report; then the ledger is deleted once that report is committed. A ledger with nothing
left to report is deleted at once. Exactly once across restarts: before writing the
report the aggregator notes in the ledger how many drops it reports and the node log's
inode and length at that point. On a restart the node log is cut back to its committed
length, so a note whose offset is no longer inside the node log (same inode) is a report
that was lost with the cut and is made again; one inside it (or in a log rotated since)
was committed.

Loss tallies (``spool/tally.py``), a writer's count kept in an empty file's name while it
has no ledger (a full file system), are reported the same way; the note is a rename.

Only regular files of the aggregator's own user are taken for ledgers and tallies (see
``spooldir.py``): another user's is said once on stderr and left alone (never reported,
never deleted, never waited for).

Wake-ups (``spool/wake.py``): the FIFO ``.nvrx_aggregator.wake`` in the job directory; a
thread waits on it and wakes the service's loop, which then scans at once.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvrx_otel import record as rec
from nvrx_otel.aggregator.health import Health, say
from nvrx_otel.aggregator.nodelog import NodeLogFile
from nvrx_otel.aggregator.output import Accounting, Output
from nvrx_otel.aggregator.reader import SpoolFile
from nvrx_otel.aggregator.reports import identity_of, loss_report
from nvrx_otel.aggregator.spooldir import SpoolDir
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool import sidecar, tally
from nvrx_otel.spool.paths import WAKE_NAME, parse_name

_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_OPEN_TALLY = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO never blocks
_TAIL = 1 << 20  # where a drop record being written when its writer died would be


class DropLedgers:
    """Reports and deletes the drop ledgers of writers that are gone."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir
        self._after_commit: list[Path] = []  # reported since the last commit began
        self._committing: list[Path] = []  # reported before the commit in progress began
        self._waiting = 0  # ledgers left for later in the last pass (writer alive or unread)
        self._said: set[tuple[str, int]] = set()  # foreign entries said (name, inode)

    def _foreign(self, fd: int, path: Path) -> bool:
        """Whether ``fd`` (opened as ``path``) is not a regular file of this user: said
        once, then left alone."""
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return False
        if (path.name, st.st_ino) not in self._said:
            self._said.add((path.name, st.st_ino))
            why = (
                "not a regular file"
                if not stat.S_ISREG(st.st_mode)
                else f"owned by uid {st.st_uid}, not by this aggregator's user ({os.geteuid()})"
            )
            say(f"ignoring {path.name}: {why}; only its own user's ledgers are read")
        return True

    def forget(self) -> None:
        """The node log was cut back to its last commit: reports since then are gone."""
        self._after_commit = []
        self._committing = []

    def settled(self) -> bool:
        """No ledger was left waiting in the last pass (for the drain)."""
        return self._waiting == 0

    def commit_begins(self) -> None:
        """A commit begins: the reports written so far are in what it commits."""
        self._committing += self._after_commit
        self._after_commit = []

    def committed(self) -> None:
        """The commit that began last is durable: delete the ledgers whose reports it
        holds (the ones reported since it began wait for the next)."""
        for path in self._committing:
            _unlink(path)
        self._committing = []

    def settle(
        self, spool: SpoolDir, out: Output, log: NodeLogFile, health: Health, totals: dict[str, int]
    ) -> bool:
        """Report what the ledgers of finished writers hold; True when a report was written."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return False
        on_disk: dict[str, set[str]] = {}
        for name in names:
            parts = parse_name(name)
            if parts is not None:
                on_disk.setdefault(parts.writer, set()).add(name)
        groups = dict(spool.writers())
        wrote = False
        waiting = 0
        for name in names:
            m = sidecar.NAME.match(name) or tally.NAME.match(name)
            if m is None:
                continue
            path = self.dir / name
            if path in self._after_commit or path in self._committing:
                continue
            writer = m["writer"]
            files = groups.get(writer, [])  # parked ones (no descriptor) too
            if writer in spool.unwaited:
                continue  # lives on after this aggregator (its flushed drops are read)
            if not _all_read(files, on_disk.get(writer, set()), spool):
                waiting += 1
                continue
            if "count" in m.groupdict():
                state = self._settle_tally(path, m, out, log, health, totals)
            else:
                state = self._settle_one(path, writer, files, out, log, health, totals)
            if state == "alive":
                waiting += 1
            wrote = wrote or state == "reported"
        self._waiting = waiting
        return wrote

    def _settle_one(
        self,
        path: Path,
        writer: str,
        files: list[SpoolFile],
        out: Output,
        log: NodeLogFile,
        health: Health,
        totals: dict[str, int],
    ) -> str:
        try:
            fd = os.open(path, _OPEN)
        except OSError:
            return "gone"
        try:
            if self._foreign(fd, path):
                return "foreign"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "alive"
            view = sidecar.read_view(os.pread(fd, sidecar.SIZE, 0))
            if view is None:
                _unlink(path)
                return "deleted"
            written = view.written
            if view.pending and _holds_key(files, f"{writer}-{view.pending_seq:x}", self.dir):
                written += view.pending
            already = view.reported if _committed(view, log) else 0
            missing = view.dropped - written - already
            if missing <= 0:
                _unlink(path)
                return "deleted"
            if log.needs_rotation():
                out.rotate()  # first: the note must name the node log the report goes into
            sidecar.mark_reported(fd, already + missing, log.ino, log.length)
            ident = identity_of(view.identity)
            reason = view.reason or DropReasonValues.WRITE_ERROR.value
            first = view.first_ts or time.time_ns()
            last = max(view.last_ts, first)
            report = loss_report(
                what="dropped",
                count=missing,
                reason=reason,
                pid=view.pid or None,
                identity=ident,
                first_ts=first,
                last_ts=last,
                ts=last,
                key=f"{writer}-ledger-{view.dropped:x}",
            )
            acct = (writer, ident.get("rank"), view.pid, missing, first, last)
            return self._report(writer, report, acct, path, out, health, totals)
        except OSError as exc:
            say(f"cannot settle the drop ledger {path.name}: {exc}")
            return "alive"
        finally:
            os.close(fd)

    def _report(
        self,
        writer: str,
        report: dict[str, Any],
        acct: Accounting,
        path: Path,
        out: Output,
        health: Health,
        totals: dict[str, int],
    ) -> str:
        """Write a ledger's or a tally's loss report to the node log and every loss sink
        (OTLP too), count it, and delete ``path`` once the report is committed."""
        out.loss(writer, report, acct)
        count = acct[3]
        health.dropped += count
        totals["dropped"] = totals.get("dropped", 0) + count
        self._after_commit.append(path)
        return "reported"

    def _settle_tally(
        self,
        path: Path,
        m: re.Match[str],
        out: Output,
        log: NodeLogFile,
        health: Health,
        totals: dict[str, int],
    ) -> str:
        """Report a gone writer's loss tally (``spool/tally.py``): its count is in its name."""
        try:
            fd = os.open(path, _OPEN_TALLY)
        except OSError:
            return "gone"
        try:
            if self._foreign(fd, path):
                return "foreign"
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "alive"
            count = int(m["count"])
            noted = m["ino"] is not None
            if count <= 0 or (noted and _note_committed(int(m["ino"]), int(m["offset"]), log)):
                _unlink(path)
                return "deleted"
            if log.needs_rotation():
                out.rotate()  # first: the note must name the node log the report goes into
            st = os.fstat(fd)
            note = path.with_name(tally.reported_name(path.name, log.ino, log.length))
            os.rename(path, note)  # the note (needs no free block), before the report
            rank = None if m["rank"] == "-" else int(m["rank"])
            pid = int(m["pid"])
            writer = m["writer"]
            first = st.st_mtime_ns  # made at the first drop; each rename since sets ctime
            last = max(st.st_ctime_ns, first)
            report = loss_report(
                what="dropped",
                count=count,
                reason=m["reason"],
                pid=pid,
                identity={} if rank is None else {"rank": rank},
                first_ts=first,
                last_ts=last,
                ts=last,
                key=f"{writer}-tally-{count:x}",
            )
            acct = (writer, rank, pid, count, first, last)
            return self._report(writer, report, acct, note, out, health, totals)
        except OSError as exc:
            say(f"cannot settle the loss tally {path.name}: {exc}")
            return "alive"
        finally:
            os.close(fd)


def _all_read(files: list[SpoolFile], names: set[str], spool: SpoolDir) -> bool:
    """Every spool file of the writer is tracked, final and read to its end (one that
    cannot be read at all is not waited for: ``SpoolDir.unreadable``)."""
    if any(name not in spool.by_name and name not in spool.unreadable for name in names):
        return False  # a file the last scan did not see yet
    return all(f.final and f.offset >= f.size and not f.tail and not f.held for f in files)


def _committed(view: sidecar.LedgerView, log: NodeLogFile) -> bool:
    if not view.reported:
        return False
    return _note_committed(view.report_ino, view.report_offset, log)


def _note_committed(ino: int, offset: int, log: NodeLogFile) -> bool:
    """Whether a report noted at ``offset`` of the node log of inode ``ino`` was committed:
    it is still inside the (cut back) node log, or that log rotated since."""
    if ino != log.ino:
        return True  # the node log rotated since, which commits first
    return log.length > offset


def _holds_key(files: list[SpoolFile], key: str, directory: Path) -> bool:
    """Whether the writer's newest file ends with a record of ``key`` (its last drop
    record, when it died while writing it, or could not write it: a full disk). A parked
    file (its descriptor closed once read) is opened by name for the look."""
    if not files:
        return True  # consumed and deleted: it was read (as a drop record) if it was there
    f = files[-1]
    fd = f.fd
    try:
        if fd < 0:
            fd = os.open(directory / f.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            if os.fstat(fd).st_ino != f.ino:
                return True  # the name means another file now: as if deleted
        size = os.fstat(fd).st_size
        tail = os.pread(fd, min(size, _TAIL), max(0, size - _TAIL))
    except OSError:
        return True
    finally:
        if fd >= 0 and fd != f.fd:
            os.close(fd)
    at = tail.rfind(f'"key":"{key}"'.encode())
    if at < 0:
        return False
    end = tail.find(b"\n", at)
    if end < 0:
        return False  # torn: a piece the reader counts as one corrupt line, not the drops
    line = tail[tail.rfind(b"\n", 0, at) + 1 : end]
    try:
        return rec.decode(line).get("key") == key
    except ValueError:
        return False


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class WakeFifo:
    """Listens on the job directory's wake FIFO; ``on_wake`` is called for every poke."""

    def __init__(self, job_dir: Path, on_wake: Callable[[], Any]) -> None:
        self.path = job_dir / WAKE_NAME
        self.on_wake = on_wake
        self.poked = False
        self._fd = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Make the FIFO (when missing) and start listening; a failure is said, not fatal."""
        try:
            try:
                os.mkfifo(self.path, 0o600)
            except FileExistsError:
                pass
            fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(f"{self.path} is not a FIFO")
        except OSError as exc:
            say(f"writers cannot wake this aggregator: {exc}")
            return
        self._fd = fd
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvrx-otel-wake", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._fd
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                while os.read(fd, 4096):
                    pass
            except OSError:  # drained (EAGAIN)
                pass
            self.poked = True
            self.on_wake()

    def take(self) -> bool:
        """Whether a writer poked since the last call."""
        poked, self.poked = self.poked, False
        return poked

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
