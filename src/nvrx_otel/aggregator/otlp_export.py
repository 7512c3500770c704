"""The OTLP sink: batches of what the aggregator read, sent at least once, own cursors.

The aggregator reads and decodes each spool byte once; the node log writes a batch and this
sink takes the same batch (:meth:`OtlpExport.take`, records and ended spans of one spool
file, with the reader position after them) into a bounded queue. So it sees exactly what
the node log sees, corrupt and drop reports included; the drop ledgers' reports reach it
through :meth:`OtlpExport.report`. Its own thread sends the queue in batches
(:class:`~nvrx_otel.aggregator.otlp_delivery.Delivery` retries with backoff: this class
decides *when*, the exporters *where*). A file's cursor as committed is the position up to
which everything was acknowledged.

A sink that lags (endpoint down, or slower than the node log) refuses batches once its
queue is full and catches up later by reading from its own cursor through the same reader
(:func:`~nvrx_otel.aggregator.reader.read_chunk`), up to what the node log has read; once
it reaches the node log's position it takes the batches again. That second read happens
only while it lags. Cursors hold no descriptor: a catch-up opens a file for one read.
Cursors, open spans and reports not yet sent are committed with the aggregator's state, so
a restart (even after ``kill -9``) resumes without losing anything or a report of a loss
(it may send a batch twice; ``log.record.uid`` removes such duplicates downstream).

Under spool-budget pressure of a *live* writer (one whose files kept only for OTLP would
soon make it drop new records) the oldest such file is skipped here and the skip is
reported as ``otlp_backlog`` drops: OTLP gives way, the node log never does. The files of
writers that have exited press on nothing and are always exported in full.

A span whose writer died before ending it is exported ended at the writer's last record,
with status ERROR and ``nv.nvrx.span.truncated = true``.
"""

from __future__ import annotations

import copy
import operator
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from nvrx_otel.aggregator.health import human_bytes, plural, say
from nvrx_otel.aggregator.otlp_delivery import Delivery, Exporter
from nvrx_otel.aggregator.otlp_files import (
    Batch,
    FileView,
    died_in_spans,
    new_cursor,
    read_view,
    take_header,
    take_spans,
)
from nvrx_otel.aggregator.otlp_losses import rejection
from nvrx_otel.aggregator.otlp_pressure import relieve, victims
from nvrx_otel.aggregator.reader import Chunk, SpoolFile
from nvrx_otel.aggregator.state import OtlpProgress, WriterState
from nvrx_otel.spool.paths import SpoolFileName, parse_name

__all__ = ["FileView", "OtlpExport"]

BATCH_RECORDS: Final = 2048
"""Records (and spans) sent in one request."""
BATCH_BYTES: Final = 2 << 20
"""Spool bytes whose records go into one request (beyond one queued batch): requests stay
under the 4 MiB a collector's OTLP/gRPC receiver takes by default, whatever the records'
size (one record may be up to the record cap)."""
QUEUE_RECORDS: Final = 16 * BATCH_RECORDS
QUEUE_BYTES: Final = 16 << 20
"""The queue holds at most this much; past it the sink lags and catches up by reading."""
_ts_of: Final = operator.itemgetter("ts")


class OtlpExport:
    """The OTLP sink of one aggregator (see the module docstring)."""

    def __init__(
        self,
        *,
        exporters: list[Exporter] | None = None,
        on_report: Callable[[str], None] = say,
        has_endpoint: bool = False,
        label: str = "OTLP",
    ) -> None:
        self.has_endpoint = has_endpoint  # health metrics go to the same endpoint
        self.label = label
        self.on_report = on_report
        self.lock = threading.Lock()
        # Per spool file the reader position after everything queued or acknowledged.
        self.cursors: dict[str, SpoolFile] = {}
        # Cursors as of the last state handed out, and as of the last one committed: a
        # spool file may be deleted only once a committed cursor is past it.
        self._handed: dict[str, tuple[int, int]] = {}
        self._durable: dict[str, tuple[int, int]] = {}
        self.writers: dict[str, WriterState] = {}
        self.views: list[FileView] = []
        self.exported = {"logs": 0, "spans": 0, "truncated": 0}
        self.skipped = 0  # records skipped for budget pressure (otlp_backlog)
        self.rejected = 0  # log records the endpoint refused or rejected for good
        self.reads = 0  # reads of its own (while lagging): bytes the loop had read already
        self.dirty = False
        self._queue: deque[Batch] = deque()
        self._queued = [0, 0]  # records and bytes in the queue
        self._ahead: set[str] = set()  # files taken past the last views (those are stale)
        self.delivery = Delivery(
            list(exporters or []),
            on_report=on_report,
            give_way=self._under_pressure,
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def dropped(self) -> int:
        """Records counted as dropped on the OTLP side (refused or rejected for good, or
        skipped); each is reported to the endpoint later (``otlp_losses``)."""
        return self.delivery.dropped + self.rejected + self.skipped

    # --- called by the aggregator's loop ----------------------------------------------------

    def take(self, chunk: Chunk, start: int) -> None:
        """A batch the loop read from ``chunk.file`` at ``start`` (and wrote to the node log).
        Queued when it continues this sink's cursor and the queue has room; otherwise the
        sink lags and reads those bytes itself later."""
        f = chunk.file
        records = chunk.records
        spans = chunk.spans or []
        with self.lock:
            if self._queued[0] >= QUEUE_RECORDS or self._queued[1] >= QUEUE_BYTES:
                return
            c = self.cursors.get(f.name)
            at = (f.ino, 0) if c is None or c.ino != f.ino else (c.ino, c.offset)
            if at != (f.ino, start):
                return
            cursor = copy.copy(f)  # the reader's state after these bytes
            cursor.fd = -1
            cursor.identity = dict(f.identity)
            self.cursors[f.name] = cursor
            self._ahead.add(f.name)
            self._enqueue(Batch(f.name, f.ino, start, chunk.end, f.writer, records, []), spans, f)
        self._wake.set()

    def report(self, writer: str, record: dict[str, Any]) -> None:
        """A loss report the node log got outside any spool file (a drop ledger's)."""
        with self.lock:
            self.writers.setdefault(writer, WriterState()).pending_reports.append(record)
            self.dirty = True
        self._wake.set()

    def update(self, views: list[FileView]) -> None:
        """The current spool files; wakes the exporter when there is something new."""
        with self.lock:
            self.views = views
            self._ahead.clear()
            live = {v.name for v in views}
            for name in [n for n in self.cursors if n not in live]:
                del self.cursors[name]
        self._wake.set()

    def consumed(self, name: str, ino: int, size: int) -> bool:
        """The committed OTLP cursor is at the end of this file: it may be deleted."""
        with self.lock:
            c = self._durable.get(name)
            return c is not None and c[0] == ino and c[1] >= size

    def caught_up(self) -> bool:
        """Everything the node log committed has been exported (or reported dropped)."""
        with self.lock:
            return (
                not self._queue
                and all(self._offset(v) >= v.committed for v in self.views)
                and not died_in_spans(self.views, self.writers, self._offset, self.cursors)
                and not any(w.pending_reports for w in self.writers.values())
            )

    def state(self) -> OtlpProgress:
        """What to commit with the aggregator's state: per file, the position up to which
        everything was acknowledged (where the first batch still queued starts)."""
        with self.lock:
            self.dirty = False
            pending: dict[str, tuple[int, int]] = {}
            for b in self._queue:
                pending.setdefault(b.name, (b.ino, b.start))
            handed = {n: (c.ino, c.offset) for n, c in self.cursors.items()}
            handed.update((n, p) for n, p in pending.items() if n in handed)
            self._handed = handed
            return OtlpProgress(
                cursors=dict(handed),
                writers={w: s.copy() for w, s in self.writers.items()},
                skipped=self.skipped,
            )

    def committed(self) -> None:
        """The last :meth:`state` is committed: its cursors now decide what may be deleted."""
        with self.lock:
            self._durable = self._handed

    def restore(self, saved: OtlpProgress | None) -> None:
        if saved is None:
            return
        with self.lock:
            self.writers.update((w, s.copy()) for w, s in saved.writers.items())
            for name, (ino, offset) in saved.cursors.items():
                parts = parse_name(name)
                if parts is not None:
                    c = self.cursors[name] = new_cursor(name, parts, ino)
                    c.offset = offset
                    self._durable[name] = (ino, offset)
                    w = self.writers.get(parts.writer)
                    if w is not None:
                        c.identity = dict(w.identity)
            self.skipped = saved.skipped

    def summary(self) -> str:
        e = self.exported
        text = (
            f"{self.label}: exported {plural(e['logs'], 'log record')}, "
            f"{plural(e['spans'], 'span')}, {plural(e['truncated'], 'truncated span')}; "
            f"{self.dropped} dropped"
        )
        if not self.caught_up():
            with self.lock:
                queued = self._queued[0]
                unread = sum(max(0, v.read - self._offset(v)) for v in self.views)
            text += (
                f"; not caught up: {plural(queued, 'record')} queued or in flight and "
                f"{human_bytes(unread)} of spool not yet read for {self.label} were not "
                "delivered; they stay in the spool for the next run"
            )
        return text

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"nvrx-otel-{self.label.lower()}", daemon=True
        )
        self._thread.start()

    def drain_by(self, deadline: float) -> None:
        """The aggregator drains until ``deadline`` (monotonic): export what is left by then,
        cutting any retry backoff short."""
        self.delivery.drain_by(deadline)
        self._wake.set()

    def stop(self, deadline: float) -> None:
        """Keep exporting until caught up or ``deadline`` (monotonic), then stop. The
        deadline bounds the wait: a request still in flight then (a receiver that never
        answers) is left to its daemon thread, unacknowledged, so its records stay in the
        spool for the next run, as everything not delivered does."""
        self.delivery.drain_by(deadline)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    # --- the queue (the caller holds the lock) ------------------------------------------------

    def _enqueue(self, batch: Batch, spans: list[dict[str, Any]], f: SpoolFile) -> None:
        """Queue ``batch``, keeping the writer's state (resource, open spans) up to date."""
        w = self.writers.setdefault(batch.writer, WriterState())
        header = f.header
        if header is not None and not w.budget:
            take_header(w, header)
        try:  # the common case in one C loop: every record has an int ts
            latest = max(map(_ts_of, batch.records), default=w.last_ts)
        except (KeyError, TypeError):
            latest = None
        if isinstance(latest, int):
            if latest > w.last_ts:
                w.last_ts = latest
        else:
            for r in batch.records:
                ts = r.get("ts")
                if isinstance(ts, int) and ts > w.last_ts:
                    w.last_ts = ts
        take_spans(w, spans, batch.spans)
        self._queue.append(batch)
        self._queued[0] += batch.count
        self._queued[1] += batch.end - batch.start

    def queued_of(self, name: str) -> list[Batch]:
        """The queued batches of spool file ``name`` (the caller holds the lock)."""
        return [b for b in self._queue if b.name == name]

    def unqueue(self, batches: list[Batch]) -> None:
        """Take ``batches`` out of the queue unsent (the caller holds the lock)."""
        for b in batches:
            self._queue.remove(b)
            self._queued[0] -= b.count
            self._queued[1] -= b.end - b.start

    def _offset(self, v: FileView) -> int:
        c = self.cursors.get(v.name)
        return c.offset if c is not None and c.ino == v.ino else 0

    def cursor(self, v: FileView) -> SpoolFile:
        """The cursor of ``v``; a new one for a new inode."""
        c = self.cursors.get(v.name)
        if c is None or c.ino != v.ino:
            parts = parse_name(v.name) or SpoolFileName(v.writer, v.index, v.pid, "proc")
            c = self.cursors[v.name] = new_cursor(v.name, parts, v.ino)
            w = self.writers.get(v.writer)
            if w is not None:
                c.identity = dict(w.identity)
        return c

    # --- the exporter thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(1.0)
            self._wake.clear()
            try:
                progressed = self._pass()
            except Exception as exc:  # never let the exporter thread die silently
                self.on_report(f"OTLP export error: {type(exc).__name__}: {exc}")
                progressed = False
            if self._stop.is_set() and (self.caught_up() or self.delivery.expired()):
                return
            if progressed or self._under_pressure():
                self._wake.set()

    def _pass(self) -> bool:
        with self.lock:
            views = sorted(self.views, key=lambda v: (v.writer, v.index))
        relieve(self, views)
        self._catch_up(views)
        with self.lock:
            batches: list[Batch] = []
            count = size = 0
            for b in self._queue:
                if count >= BATCH_RECORDS or (batches and size + b.end - b.start > BATCH_BYTES):
                    break
                batches.append(b)
                count += b.count
                size += b.end - b.start
            whole = len(batches) == len(self._queue)
            truncated = (
                died_in_spans(views, self.writers, self._offset, self.cursors) if whole else []
            )
            reported = {
                w: list(s.pending_reports) for w, s in self.writers.items() if s.pending_reports
            }
            resources = {w: s.resource for w, s in self.writers.items()}
            last_ts = {w: s.last_ts for w, s in self.writers.items()}
        if not batches and not truncated and not reported:
            return False
        logs: dict[str, list[dict[str, Any]]] = {}
        spans: dict[str, list[dict[str, Any]]] = {}
        for writer, pending in reported.items():
            logs.setdefault(writer, []).extend(pending)
        for b in batches:
            logs.setdefault(b.writer, []).extend(b.records)
            spans.setdefault(b.writer, []).extend(b.spans)
        trunc = [(res, start, last_ts[w]) for w, res, starts in truncated for start in starts]
        lost = self.delivery.export(logs, spans, trunc, resources, self.exported)
        if lost is None:
            return False
        with self.lock:  # what was refused is reported with the same commit that passes it
            rejected = rejection(logs, self.writers, lost)
            self.rejected += rejected.records
            for _ in batches:
                b = self._queue.popleft()
                self._queued[0] -= b.count
                self._queued[1] -= b.end - b.start
            for writer, pending in reported.items():
                del self.writers[writer].pending_reports[: len(pending)]
            for writer, _, _ in truncated:
                self.writers[writer].open_spans.clear()
            for writer, report in rejected.reports:
                self.writers.setdefault(writer, WriterState()).pending_reports.append(report)
            self.dirty = True
        if rejected.given_up:
            self.on_report(
                f"{self.label} endpoint refused the report of "
                f"{plural(rejected.given_up, 'record')} it refused before: they are reported in "
                "the node log only"
            )
        return True

    def _catch_up(self, views: list[FileView]) -> None:
        """While lagging: read what the node log read past this sink's cursors into the
        queue (as long as it has room)."""
        now_ns = time.time_ns()
        for v in views:
            with self.lock:
                if self._queued[0] >= BATCH_RECORDS or self._queued[1] >= QUEUE_BYTES:
                    return
                if v.name in self._ahead:
                    continue  # the loop's batches feed it (and the view is older)
                was = self.cursor(v)
                if was.offset >= v.read and was.offset <= v.size:
                    continue
                cursor = copy.copy(was)
            self.reads += 1
            chunk = read_view(cursor, v, now_ns)
            with self.lock:
                if self.cursors.get(v.name) is not was:
                    continue  # the loop's batches continued it meanwhile
                self.cursors[v.name] = cursor
                if chunk is None:
                    continue
                batch = Batch(v.name, v.ino, was.offset, chunk.end, v.writer, chunk.records, [])
                self._enqueue(batch, chunk.spans or [], cursor)

    # --- budget pressure -----------------------------------------------------------------------

    def _under_pressure(self) -> bool:
        with self.lock:
            return bool(victims(self.views, self.writers, self.sent))

    def sent(self, v: FileView) -> int:
        """Where ``v`` is sent up to: the start of its first queued batch, else its cursor."""
        for b in self._queue:
            if b.name == v.name and b.ino == v.ino:
                return b.start
        return self._offset(v)
