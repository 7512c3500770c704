"""Committing the aggregator's progress and recovering from it (the service's other half).

A commit fsyncs the node log, then writes one state document (``state.py``) with every
sink's cursors: the node log's per spool file (``done``: every record up to there is in
it), its committed length and rotation state, and the OTLP sink's. Only after a commit are
spool files deleted, and only those every sink's *committed* cursor is past. A restart, or
:meth:`Progress._resume` after a write or commit error, cuts the node log back to the
committed length and resumes every sink from its own cursors. The node log's rotation is
done between commits so that a crash at any step is finished by the restart.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nvrx_otel.aggregator import state as st
from nvrx_otel.aggregator.dedup import DedupWindow
from nvrx_otel.aggregator.health import Health, plural, say
from nvrx_otel.aggregator.ledger import DropLedgers
from nvrx_otel.aggregator.lifecycle import AggregatorError, JobLock, Waker
from nvrx_otel.aggregator.merge import ChronoMerge
from nvrx_otel.aggregator.nodelog import Backup, NodeLogFile, RotationPlan
from nvrx_otel.aggregator.output import Output
from nvrx_otel.aggregator.reader import SpoolFile
from nvrx_otel.aggregator.spooldir import SpoolDir
from nvrx_otel.spool.paths import SpoolPathError, check_dir, check_root

if TYPE_CHECKING:
    from nvrx_otel.aggregator.commit_thread import CommitThread
    from nvrx_otel.aggregator.config import AggregatorConfig
    from nvrx_otel.aggregator.otlp_files import FileView
    from nvrx_otel.aggregator.sinks import Sink


class Progress:
    """Commit and recovery of :class:`~nvrx_otel.aggregator.service.Aggregator` (a mixin:
    the attributes below are the service's)."""

    config: AggregatorConfig
    job_dir: Path
    log_path: Path
    health: Health
    _state: st.StateStore
    _log: NodeLogFile
    _out: Output
    _spool: SpoolDir
    _sinks: dict[str, Sink]
    _ledgers: DropLedgers
    _lock: JobLock
    _merge: ChronoMerge | None
    _dedup: DedupWindow | None
    _totals: dict[str, int]
    _dirty: bool
    _broken: bool
    _resume_error: str
    _last_commit: float
    _backlog_bytes: int
    _waker: Waker
    _committing: tuple[CommitThread, _Pending] | None  # a commit whose durable part runs
    _landed: bool  # a commit took effect since consumed files were last deleted

    def _new_merge(self) -> ChronoMerge | None:
        if not self.config.chrono:
            return None
        # the records themselves are held only for the record sinks that want them
        keep = bool(self._out.sinks)
        return ChronoMerge(self.config.hold_window_ms * 1_000_000, keep_records=keep)

    def _new_dedup(self) -> DedupWindow | None:
        if self.config.dedup_window_ms <= 0:
            return None
        # with the merge, what is taken out stays there as tombstones (merge.add_window)
        return DedupWindow(self.config.dedup_window_ms, tombstones=self.config.chrono)

    def _recover(self) -> None:
        """Resume from the last commit: node log truncated to the committed length,
        an interrupted rotation finished, spool files resumed at their offsets."""
        try:
            saved = self._state.load()
        except st.StateError as exc:
            say(
                f"{exc}; starting over: every spool file is read from its start, so records "
                "already in the node log may appear in it twice"
            )
            saved = None
        if saved is not None:
            self._totals.update(saved.totals)
        self._ledgers.forget()
        try:
            self._log.open()
        except OSError as exc:
            raise AggregatorError(f"cannot open the node log {self.log_path}: {exc}") from None
        lp = saved.log if saved is not None else None
        deleted: list[Backup] = []
        if lp is not None and lp.path == str(self.log_path):
            self._log.backups = lp.backups
            if lp.rotating is not None:
                self._log.apply_rotation(lp.rotating)
                deleted = lp.rotating.deleted
            elif self._log.ino == lp.ino:
                if self._log.length > lp.length:
                    if not self._broken:  # a resume after a write error has said so
                        say(
                            f"cutting {plural(self._log.length - lp.length, 'uncommitted byte')}"
                            f" from {self.log_path}: their records are written again"
                        )
                    self._log.truncate(lp.length)
                elif self._log.length < lp.length:
                    say(
                        f"node log {self.log_path} is shorter ({plural(self._log.length, 'byte')}) "
                        f"than committed ({plural(lp.length, 'byte')}): something else cut it"
                    )
                self._log.stats = lp.stats
                self._log.collapsed = lp.collapsed
            else:
                say(f"node log {self.log_path} was replaced since the last commit; appending")
        elif lp is not None:
            say(f"the previous aggregator of this job wrote {lp.path}; this one writes here")
        self._spool.scan()
        if saved is not None:
            self._spool.restore(saved.files)
            for name, sink in self._sinks.items():
                sink.restore(saved.sinks.get(name))
        if deleted:
            self._out.rotation_reports(deleted)
        # Commit before writing anything: a first run killed before its first regular
        # commit must still leave the length the node log had, for the restart to cut to.
        self._commit()

    def _commit(self, rotating: RotationPlan | None = None) -> None:
        """Commit now, on this thread (after the commit in progress, if any)."""
        self._await_commit()
        pending = self._begin_commit(rotating)
        self._log.sync()
        self._state.write(pending.data)
        self._end_commit(pending)

    def _commit_soon(self) -> None:
        """Begin a commit whose fsync and state write run on a thread of their own
        (``commit_thread``): it takes effect in :meth:`_poll_commit` once durable."""
        from nvrx_otel.aggregator.commit_thread import CommitThread

        assert self._committing is None
        pending = self._begin_commit(None)
        fd = os.dup(self._log.fd)  # the loop may reopen or rotate the node log meanwhile
        try:
            thread = CommitThread(fd, pending.data, self._state, self._waker.wake)
        except BaseException:
            os.close(fd)
            raise
        self._committing = (thread, pending)

    def _poll_commit(self) -> bool:
        """Let the commit in progress take effect if it is durable; True when one did.
        Raises what it failed with (OSError: the loop resumes from the last commit)."""
        if self._committing is None or not self._committing[0].done():
            return False
        self._await_commit()
        return True

    def _await_commit(self) -> None:
        """Wait for the commit in progress (if any) and let it take effect."""
        if self._committing is None:
            return
        thread, pending = self._committing
        self._committing = None
        error = thread.wait()
        if error is not None:
            raise error
        self._end_commit(pending)

    def _drop_commit(self) -> None:
        """Wait for the commit in progress to end, whatever came of it (it takes no effect
        here: a resume reads the state back from disk, and a close leaves it there)."""
        if self._committing is not None:
            self._committing[0].wait()
            self._committing = None

    def _begin_commit(self, rotating: RotationPlan | None) -> _Pending:
        """What a commit commits, taken now: the state encoded, the positions it holds."""
        moved = self._log.follow()
        if moved is not None:
            say(
                f"node log {self.log_path} was deleted or replaced while in use: writing to "
                f"a file at its path again ({plural(moved, 'byte')} written since the last commit "
                "carried over; what was committed before stays in the old file, if any)"
            )
        tracked = [f for f in self._spool.tracked if not f.vanished]
        files = {f.name: st.FileProgress(f.ino, f.done, f.hdr_crc) for f in tracked}
        log = st.LogProgress(
            path=str(self.log_path),
            ino=self._log.ino,
            length=self._log.length,
            stats=self._log.stats,
            collapsed=self._log.collapsed,
            backups=self._log.backups,
            rotating=rotating,
        )
        sinks = {name: sink.state() for name, sink in self._sinks.items()}
        self._ensure_job_dir()
        state = st.State(files=files, log=log, totals=dict(self._totals), sinks=sinks)
        data = self._state.prepare(state)  # encoded: later changes are the next commit's
        self._ledgers.commit_begins()
        self._dirty = False  # what is written from now on is the next commit's
        self._last_commit = time.monotonic()
        return _Pending(data, self._log.length, [(f, f.done) for f in self._spool.tracked])

    def _end_commit(self, pending: _Pending) -> None:
        """A commit is durable: it takes effect."""
        self._landed = True
        self._log.committed = pending.length
        for f, done in pending.done:
            f.committed = done
        self._ledgers.committed()
        for sink in self._sinks.values():
            sink.committed()
        self._backlog_bytes = self._spool.backlog()
        if self._sinks:
            views = self._views()
            for sink in self._sinks.values():
                sink.update(views)

    def _ensure_job_dir(self) -> None:
        """Make the job directory again if it was removed while served (a tmp cleaner, an
        operator): progress can then be committed, and writers that rotate can create their
        next files again (they count what they could not write and report it). The files
        already open are still read through their descriptors until their writers finish."""
        if self.job_dir.is_dir():
            return
        try:
            self._make_job_dir()
            self._lock.release()
            self._lock.acquire()
        except (SpoolPathError, AggregatorError) as exc:  # to the loop's commit-error path
            raise OSError(str(exc)) from None
        say(f"spool directory {self.job_dir} was removed while in use: made it again")

    def _make_job_dir(self) -> None:
        """The spool root and the job directory, made when missing (SpoolPathError when
        one is unusable: a symlink, another owner, writable by others, not writable)."""
        check_root(self.config.spool_root)
        check_dir(self.job_dir, create=True)

    def _views(self) -> list[FileView]:
        """The spool files as the sinks see them."""
        from nvrx_otel.aggregator.otlp_files import FileView

        spool = self._spool
        dedup = self._dedup
        return [
            FileView(
                name=f.name,
                path=spool.path / f.name,
                ino=f.ino,
                writer=f.writer,
                index=f.parts.index,
                pid=f.pid,
                committed=f.committed,
                read=_read(f, dedup),
                size=f.size,
                final=f.final,
                gone=spool.writer_gone(f.writer),
            )
            for f in spool.tracked
            if not f.vanished
        ]

    def _delete_consumed(self) -> None:
        deleted = False
        for f in list(self._spool.tracked):
            if (
                f.final
                and not f.held
                and not f.tail
                and f.committed == f.offset == f.size
                and all(s.consumed(f.name, f.ino, f.size) for s in self._sinks.values())
            ):
                deleted = self._spool.delete(f) or deleted
        if deleted:
            self._dirty = True

    def _rotate(self) -> None:
        """Rotate the node log so that a crash at any step is finished by the restart:
        commit, commit the plan, carry it out, report what it deleted, commit."""
        self._commit()
        plan = self._log.plan_rotation()
        self._commit(rotating=plan)
        self._log.apply_rotation(plan)
        self._out.rotation_reports(plan.deleted)
        self._commit()

    def _resume(self) -> bool:
        """After a write or commit error: forget everything since the last commit and
        recover as a restart would; False (and retried later) while that fails."""
        self._drop_commit()
        self._spool.close()
        self._log.close()
        self._merge = self._new_merge()
        if self._dedup is not None:
            self._dedup.forget()
        self._dedup = self._new_dedup()
        self._dirty = False
        try:
            self._recover()
        except (AggregatorError, OSError) as exc:
            message = f"cannot resume yet: {exc}"
            if message != self._resume_error:  # retried every interval: said once
                say(message + " (retrying)")
                self._resume_error = message
            return False
        self._resume_error = ""
        self._broken = False
        return True


@dataclass
class _Pending:
    """A commit begun: its encoded state, and what takes effect once it is durable."""

    data: bytes
    length: int  # the node log's committed length
    done: list[tuple[SpoolFile, int]]  # each file's position up to which it is in the log


def _read(f: SpoolFile, dedup: DedupWindow | None) -> int:
    """How far the sinks may read ``f``: not into what the de-duplication window holds (they
    get it from the loop, collapsed, once the window is flushed)."""
    if dedup is not None:
        start = dedup.first_start(f)
        if start is not None:
            return start
    return f.offset
