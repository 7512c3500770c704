"""The aggregator service: spool directory in, node log out, progress committed.

One loop: scan the job's spool directory (every check interval, or continuously while
there is a backlog), read and decode each writer's new bytes once, in order, optionally
merge chronologically, write the node log and hand the same batches to the other sinks
(OTLP, ``sinks.py``), then fsync the node log and commit every sink's progress (at least
once a second while busy; ``commit.py``), and only then delete spool files that are final
and consumed by every sink. A restart — after
``kill -9`` too — truncates the node log to the committed length and resumes from the
committed offsets, so every record is in the node log exactly once.

It stops when a fresh wait file appears, on SIGTERM/SIGINT, or on :meth:`Aggregator.shutdown`:
it keeps reading until no writer is left or the drain timeout has passed, writes what it
holds, commits and prints a summary. A second signal within ``SIGNAL_GRACE_S`` is the
same shutdown; a later one exits at once.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from nvrx_otel.aggregator import state as st
from nvrx_otel.aggregator.commit import Progress
from nvrx_otel.aggregator.config import AggregatorConfig
from nvrx_otel.aggregator.drain import WAIT_FILE_REASON, Drain
from nvrx_otel.aggregator.health import JOB_MISMATCH_EXIT, Health, say
from nvrx_otel.aggregator.ledger import DropLedgers, WakeFifo
from nvrx_otel.aggregator.lifecycle import (
    AggregatorError,
    JobLock,
    WaitFile,
    Waker,
    catch_signals,
    lower_priority,
    not_a_directory,
    restore_signals,
)
from nvrx_otel.aggregator.metrics_start import MetricsStart
from nvrx_otel.aggregator.nodelog import NodeLogFile, escape
from nvrx_otel.aggregator.output import Output, RecordSink
from nvrx_otel.aggregator.reader import Chunk, read_chunk
from nvrx_otel.aggregator.sinks import build_sinks, deliver_and_stop
from nvrx_otel.aggregator.spooldir import SpoolDir
from nvrx_otel.identity import get_identity
from nvrx_otel.spool.paths import SpoolPathError, job_dir, safe_component

if TYPE_CHECKING:
    from nvrx_otel.aggregator.otlp_metrics import HealthMetrics
    from nvrx_otel.aggregator.sinks import Sink

__all__ = ["Aggregator", "AggregatorConfig", "AggregatorError", "RecordSink"]

COMMIT_EVERY_S: Final = 1.0
"""While a backlog keeps the loop busy, progress is committed at least this often."""
OTHER_JOBS_EVERY_S: Final = 1.0
"""Other jobs' spool directories are looked at every check interval, at most this often."""
CYCLE_CHUNKS: Final = 16
"""One cycle reads at most this many chunks' worth of bytes, so commits stay frequent."""
ACTIVE_POLL_S: Final = 0.05
"""After a cycle that wrote records the next one comes this soon (not a check interval
later): while ranks log, a record reaches the node log within about this long."""


class Aggregator(Progress):
    """The node's aggregator for one job; ``run()`` in the foreground or ``start_thread()``.

    ``sinks`` receive every batch of records once it is in the node log."""

    def __init__(self, config: AggregatorConfig, *, sinks: Sequence[RecordSink] = ()) -> None:
        ident = get_identity()
        self.config = config
        self.node_id = config.node_id or ident.node_id
        self.job_id = config.job_id if config.job_id is not None else ident.job_id
        self.job_dir = job_dir(config.spool_root, self.job_id).absolute()
        name = config.log_name or f"nvrx_log_{safe_component(self.node_id)}.log"
        self.log_path = (config.log_dir / name).absolute()
        # Progress is committed next to the node log while the spool's file system is full.
        self.fallback_state = self.log_path.with_name(
            f".{self.log_path.name}.{safe_component(self.job_id or 'nojob')}.state.json"
        )
        self._state = st.StateStore(self.job_dir, self.fallback_state)
        self.health = Health()
        self.exit_code: int | None = None
        self._log = NodeLogFile(
            self.log_path, max_bytes=config.max_log_bytes, backups=config.log_backups
        )
        self._totals = {"written": 0, "dropped": 0, "corrupt": 0, "collapsed": 0}
        self._out = Output(
            self._log,
            escape(self.node_id),
            sinks=sinks,
            health=self.health,
            totals=self._totals,
            rotate=self._rotate,
        )
        self._spool = SpoolDir(self.job_dir, settle_s=config.settle_s)
        self._sinks = build_sinks(config, self.node_id)
        self._out.loss_sinks.extend(sink.report for sink in self._sinks.values())
        self._backlog_bytes = 0
        self._health_metrics = MetricsStart(
            config, self.health, self._sinks, lambda: self._backlog_bytes
        )
        self._merge = self._new_merge()
        self._dedup = self._new_dedup()
        self._lock = JobLock(self.job_dir)
        self._wait = WaitFile(None)
        self._waker = Waker()
        self._ledgers = DropLedgers(self.job_dir)
        self._fifo = WakeFifo(self.job_dir, self._waker.wake)
        self._opened = False
        self._resume_error = ""  # the last reason a resume failed (said once)
        self._write_error = ""  # the last write or commit error, until a cycle succeeds
        self._drain = Drain(config.drain_timeout)
        self._thread: threading.Thread | None = None
        self._dirty = False
        self._last_commit = 0.0
        self._committing = None
        self._landed = False  # a commit took effect since consumed files were last deleted
        self._broken = False
        self._cycles = 0

    def __del__(self) -> None:
        waker = getattr(self, "_waker", None)
        if waker is not None:
            waker.close()

    # --- lifecycle --------------------------------------------------------------------------

    def open(self) -> None:
        """Take the job directory's lock and recover the committed state (idempotent).
        Raises :class:`AggregatorError` with the reason when that is impossible."""
        if self._opened:
            return
        # first: a wait file made after this (or after since_ns) is fresh
        self._wait = WaitFile(self.config.wait_file, self.config.since_ns)
        blocked = not_a_directory(self.log_path.parent)
        if blocked is not None:
            raise AggregatorError(
                f"cannot write the node log {self.log_path}: {blocked} is not a directory"
            )
        try:
            self._make_job_dir()
        except SpoolPathError as exc:
            raise AggregatorError(str(exc)) from None
        self._lock.acquire()
        try:
            self._recover()
        except BaseException as exc:
            self._close()
            if isinstance(exc, OSError):
                raise AggregatorError(f"cannot resume from {self.job_dir}: {exc}") from None
            raise
        for line in self._wait.problems():
            say(line)
        self._scan_other_jobs()
        self._opened = True

    def run(self, *, install_signals: bool = False) -> int:
        """Aggregate until told to stop; returns the exit code (0, or 1 after an error)."""
        self.open()
        previous = catch_signals(self.request_stop) if install_signals else {}
        try:
            self._fifo.start()
            lower_priority(self.config.nice)
            for sink in self._sinks.values():
                sink.start()
            self._health_metrics.defer()
            self._loop()
            self.exit_code = 1 if self._broken else 0  # records it could not deliver stay
            if not self.exit_code and self.health.mismatch():
                self.exit_code = JOB_MISMATCH_EXIT
        except Exception:  # a bug, or storage gone for good: committed progress stays valid
            say("failed:\n" + traceback.format_exc().rstrip())
            self.exit_code = 1
        finally:
            restore_signals(previous)
            self._close()
        return self.exit_code

    def start_thread(self) -> threading.Thread:
        """Open (errors raise here, in the caller) and run in a daemon thread."""
        self.open()
        thread = threading.Thread(target=self.run, name="nvrx-otel-aggregator", daemon=True)
        self._thread = thread
        thread.start()
        return thread

    def request_stop(self, reason: str) -> None:
        """Begin the drain (safe from a signal handler or another thread; see ``drain.py``)."""
        self._drain.request(reason)
        self._waker.wake()

    @property
    def stop_reason(self) -> str | None:
        return self._drain.reason

    @property
    def _deadline(self) -> float:
        return self._drain.deadline

    def shutdown(self, timeout: float | None = None, *, unwaited: Iterable[str] = ()) -> None:
        """Drain (within the drain timeout), stop and wait for the thread to end.

        ``unwaited``: writer ids the drain reads to the end of but does not wait for (the
        calling process's own, which live on after this)."""
        if unwaited:
            self._spool.unwaited = self._spool.unwaited | frozenset(unwaited)
        self.request_stop("shutdown")
        thread = self._thread
        if thread is not None:
            thread.join(self.config.drain_timeout + 60 if timeout is None else timeout)
        elif self._opened:
            self._close()

    @property
    def _otlp(self) -> Sink | None:
        """The OTLP endpoint's sink, else the OTLP/JSON one (None when OTLP is off)."""
        return self._sinks.get("otlp") or self._sinks.get("otlp_json")

    @property
    def _metrics(self) -> HealthMetrics | None:
        return self._health_metrics.metrics

    def _close(self) -> None:
        self._drop_commit()  # its fsync and state write end before the lock is let go
        self._fifo.stop()
        self._health_metrics.stop(self._deadline)
        for sink in self._sinks.values():
            sink.stop(time.monotonic())
        self._spool.close()
        self._log.close()
        self._lock.release()
        self._opened = False

    # --- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        cfg = self.config
        status_every = cfg.status_interval if cfg.status_interval > 0 else float("inf")
        next_status = time.monotonic() + status_every
        next_scan = 0.0
        next_other_scan = time.monotonic() + cfg.check_interval  # open() has just looked
        backlog = announced = False
        while True:
            now = time.monotonic()
            if self.stop_reason is None and self._wait.fresh():
                self.request_stop(WAIT_FILE_REASON)
            stopping = self.stop_reason is not None
            if self._drain.retell():
                for sink in self._sinks.values():
                    sink.drain_by(self._deadline)
            if stopping and not announced:
                announced = True
                say(
                    f"draining ({self.stop_reason}): reading until no writer is left, "
                    f"{self._drain.bound()}"
                )
            if stopping and now >= self._deadline:
                break
            if self._broken and not self._resume():
                self._waker.sleep(min(cfg.check_interval, max(self._deadline - now, 0.0)))
                continue
            if backlog or stopping or now >= next_scan or self._fifo.take():
                self._spool.scan()
                next_scan = now + cfg.check_interval
            if now >= next_other_scan:  # soon after the ranks write to another job's spool
                self._scan_other_jobs()
                next_other_scan = now + max(cfg.check_interval, OTHER_JOBS_EVERY_S)
            written = self.health.written
            try:
                backlog = self._cycle()
            except OSError as exc:
                message = (
                    f"cannot write the node log or commit: {exc}; resuming from the last commit"
                )
                if message == self._write_error:  # the same again: said once, retried calmly
                    self._waker.sleep(min(cfg.check_interval, max(self._deadline - now, 0.0)))
                else:
                    say(message)
                    self._write_error = message
                self._broken = True
                backlog = False
                continue
            self._write_error = ""
            now = time.monotonic()
            if self.health.written != written:
                self._drain.read_on(now)
            if stopping and (now >= self._deadline or (not backlog and self._drained())):
                break
            if now >= next_status:
                self._status()
                next_status = now + status_every
            self._health_metrics.when_due(now, backlog)
            if not backlog:
                active = self.health.written != written  # ranks are logging: look again soon
                self._waker.sleep(self._idle_time(now, next_status, stopping, active))
        self._finish()

    def _idle_time(
        self, now: float, next_status: float, stopping: bool, active: bool = False
    ) -> float:
        timeout = min(self.config.check_interval, next_status - now)
        if active:
            timeout = min(timeout, ACTIVE_POLL_S)
        if stopping:
            timeout = min(timeout, 0.1, self._deadline - now)
        if self._dedup is not None:
            wait = self._dedup.wait_s()
            if wait is not None:
                timeout = min(timeout, max(wait, 0.01))
        if self._merge is not None and self._merge.held:
            due = self._merge.oldest_ts()
            if due is not None:
                ahead = (due + self._merge.hold_ns - time.time_ns()) / 1e9
                timeout = min(timeout, max(ahead, 0.01))
        return timeout

    def _cycle(self) -> bool:
        """Read what is new, write it, commit when due; True while a backlog remains."""
        spool = self._spool
        spool.new_cycle()
        now = time.monotonic()
        now_ns = time.time_ns()
        want_ends = self._merge is not None
        backlog = False
        budget = self.config.chunk_bytes * CYCLE_CHUNKS
        groups = list(spool.writers())
        written = self.health.written
        self._cycles += 1
        turn = self._cycles % len(groups) if groups else 0
        for _, files in groups[turn:] + groups[:turn]:  # a bounded cycle starts round-robin
            if budget <= 0:
                backlog = True
                break
            for f in files:
                if f.fd < 0:  # parked: reopened when there is something to read
                    f.final = spool.final(f, now)
                    if spool.current_size(f) <= f.offset + f.tail and not (f.tail and f.final):
                        continue
                    if not spool.reopen(f):
                        break  # cannot be opened now (descriptors): tried again next cycle
                else:
                    f.final = spool.final(f, now)
                before = f.offset
                chunk = read_chunk(
                    f,
                    final=f.final,
                    limit=self.config.chunk_bytes,
                    want_ends=want_ends,
                    now_ns=now_ns,
                    spans=bool(self._sinks),
                )
                if chunk is not None:
                    self._take(chunk, before)
                budget -= f.offset - before
                more = f.offset + f.tail < f.size
                if spool.over_cap() or (f.final and not more and not f.tail):
                    spool.park(f)  # descriptors stay bounded; a finished file needs none
                if more or budget <= 0:
                    backlog = True  # more to read in this file, or the cycle's budget is spent
                    break  # the rest of this file before the writer's next file
        dedup = self._dedup
        if (
            dedup is not None
            and dedup.holding
            and (
                dedup.due()  # a drain with every writer gone and read waits for no window
                or (self.stop_reason is not None and not backlog and self._spool.drained())
            )
        ):
            self._flush_dedup()
        if self._merge is not None:
            released = self._merge.pop(time.time_ns())
            if released.pieces:  # (records, or tombstones: positions move either way)
                self._out.released(released)
                # the files' positions moved past what the last commit held (it may have
                # begun while these records were held): they are the next commit's
                self._dirty = True
        if (not backlog or self.stop_reason is not None) and self._ledgers.settle(
            spool, self._out, self._log, self.health, self._totals
        ):
            self._dirty = True
        self._dirty = self._dirty or any(sink.dirty for sink in self._sinks.values())
        # a commit took effect (the one begun last is durable now, or a rotation's, made on
        # this thread: while the node log rotates more often than the loop commits, those
        # are the only ones): what it consumed goes; and with nothing to commit, files
        # become final with time alone: delete them all the same
        self._poll_commit()  # (one durable now takes effect: _end_commit sets _landed)
        if self._landed or not self._dirty:
            self._landed = False
            self._delete_consumed()
        # Caught up: commit, unless this cycle wrote records and the last commit is recent
        # (cycles come every ACTIVE_POLL_S while ranks log: each commit costs fsyncs). The
        # fsyncs run on a thread of their own while the loop reads on; one commit at a time.
        quiet = self.health.written == written or self.stop_reason is not None
        due = time.monotonic() - self._last_commit >= COMMIT_EVERY_S
        if self._dirty and self._committing is None and (due or (not backlog and quiet)):
            self._commit_soon()
        elif self._sinks:  # finality and liveness change with time alone
            views = self._views()
            for sink in self._sinks.values():
                sink.update(views)
        return backlog

    def _take(self, chunk: Chunk, start: int) -> None:
        """The batch read from ``chunk.file`` at ``start``: held by the de-duplication
        window when there is one, else passed on."""
        self.health.writers.add(chunk.file.writer)
        if self._dedup is not None:
            self._dedup.add(chunk, start)
        else:
            self._pass_on(chunk, start)

    def _flush_dedup(self) -> None:
        """Pass on what the de-duplication window holds, identical records collapsed."""
        dedup = self._dedup
        assert dedup is not None
        if self._merge is None and self._log.needs_rotation():
            self._rotate()  # now, while the window's files are held: its commit is whole
        chunks = dedup.flush()  # its collapsed records are counted as their batches are written
        # The window is written whole before any commit (a rotation's too): a group's
        # records lie in several chunks, and a commit between them would hold some of
        # them collapsed and their record not yet written (the log may pass its size
        # limit by one window; the next write rotates it)
        self._out.rotation_held = True
        try:
            if self._merge is not None:
                self._pass_on_merged(chunks)
            else:
                for chunk, start in chunks:
                    self._pass_on(chunk, start)
        finally:
            self._out.rotation_held = False
            dedup.passed()

    def _pass_on(self, chunk: Chunk, start: int) -> None:
        """A batch read from ``chunk.file`` at ``start``: to the node log, then the sinks."""
        merged = self._merge is not None and bool(chunk.records)
        if merged:  # formatted now, while in the CPU's cache
            assert self._merge is not None
            self._merge.add(chunk, self._out.texts(chunk))
        self._passed(chunk, start, merged)

    def _pass_on_merged(self, chunks: list[tuple[Chunk, int]]) -> None:
        """:meth:`_pass_on` a flushed window's batches to the chronological merge at once:
        it keys a collapsed record and the records taken out for it (tombstones) alike,
        so that they are released, written and committed together."""
        merge = self._merge
        assert merge is not None
        out = self._out
        merge.add_window([(c, out.texts(c)) for c, _ in chunks if c.records or c.tombs])
        for chunk, start in chunks:
            self._passed(chunk, start, bool(chunk.records or chunk.tombs))

    def _passed(self, chunk: Chunk, start: int, merged: bool) -> None:
        """The rest of passing a batch on: its losses counted, its records to the node log
        unless the merge holds them, its file's position, the sinks."""
        f = chunk.file
        self.health.dropped += chunk.dropped
        self.health.corrupt += chunk.corrupt
        self._totals["dropped"] += chunk.dropped
        self._totals["corrupt"] += chunk.corrupt
        self._dirty = True
        if not merged:  # (a batch whose records all collapsed into others: accounted at once)
            self._out.chunk(chunk)
        if not f.held:
            f.done = chunk.end
        for sink in self._sinks.values():
            sink.take(chunk, start)

    # --- stopping and health ----------------------------------------------------------------

    def _drained(self) -> bool:
        if not all(sink.caught_up() for sink in self._sinks.values()):
            return False
        if not self._ledgers.settled():
            return False
        if self._dedup is not None and self._dedup.holding:
            return False
        return self._spool.drained()

    def _finish(self) -> None:
        reason = self.stop_reason or "stopped"
        live = backlog = 0
        if self._broken:
            reason += (
                "; the node log could not be written or progress committed (exit status 1): "
                f"records not in it stay in {self.job_dir}"
            )
        else:
            if self._dedup is not None:
                self._flush_dedup()
            if self._merge is not None:
                self._out.released(self._merge.pop(None))
            self._commit()
            deadline = self._deadline  # the sinks deliver what they hold within the drain
            if deadline == float("inf"):
                deadline = time.monotonic() + self.config.drain_timeout
            deliver_and_stop(self._sinks, deadline)
            # what the sinks delivered in the drain is committed before deleting: a file
            # goes only once every sink's committed cursor is past it
            self._commit()
            self._delete_consumed()
            self._commit()
            live = self._spool.live_writers()
            backlog = self._spool.backlog()
        self._scan_other_jobs()
        say(
            self.health.summary(
                reason=reason,
                log_path=self.log_path,
                live=live,
                job_dir=self.job_dir,
                drain=self.config.drain_timeout,
                backlog=backlog,
            )
        )

    def _status(self) -> None:
        held = self._dedup.held if self._dedup is not None else 0
        say(
            self.health.status(
                backlog=self._spool.backlog(), live=self._spool.live_writers(), held=held
            )
        )

    def _scan_other_jobs(self) -> None:
        for line in self.health.scan_other_jobs(self.config.spool_root, self.job_dir):
            say(line)
