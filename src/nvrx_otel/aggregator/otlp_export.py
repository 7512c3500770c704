"""OTLP output of the aggregator: its own cursors, its own thread, at least once.

The node log and OTLP progress separately but read alike: this exporter reads each spool
file through the node log's reader (:func:`~nvrx_otel.aggregator.reader.read_chunk`), with
its own cursor, up to what the node log has committed. So it decodes, validates, tears and
reports exactly as the node log does: the same corrupt and drop reports reach OTLP, and
OTLP never sees a record the node log has not written. Log records, loss reports and ended
spans become OTLP requests (:class:`~nvrx_otel.aggregator.otlp_delivery.Delivery` sends
them, retrying with backoff); a cursor advances only after every destination acknowledged
what it read. Cursors hold no descriptor between passes: a file is opened for one read.
Cursors, open spans and reports not yet sent are committed with the aggregator's state, so
a restart (even after ``kill -9``) resumes without losing anything or a report of a loss
(it may send a batch twice; ``nv.nvrx.record.key`` removes such duplicates downstream).

Under spool-budget pressure of a *live* writer (one whose unexported files would soon make
it drop new records) the oldest file the node log already has is skipped here and the
skip is reported as ``otlp_backlog`` drops: OTLP gives way, the node log never does. The
files of writers that have exited press on nothing and are always exported in full.

A span whose writer died before ending it is exported ended at the writer's last record,
with status ERROR and ``nv.nvrx.span.truncated = true``.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nvrx_otel import record as rec
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.health import say
from nvrx_otel.aggregator.otlp_delivery import (
    Delivery,
    Destination,
    EndpointDestination,
    JsonLines,
)
from nvrx_otel.aggregator.otlp_encode import encode_logs, encode_spans
from nvrx_otel.aggregator.otlp_files import (
    FileView,
    WriterState,
    count_logs,
    died_in_spans,
    new_cursor,
    open_view,
    victims,
)
from nvrx_otel.aggregator.otlp_transport import Transport
from nvrx_otel.aggregator.reader import SpoolFile, read_chunk
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.paths import SpoolFileName, parse_name

__all__ = ["FileView", "JsonLines", "OtlpExport", "build_export"]

READ_BYTES: Final = 1 << 20
BATCH_RECORDS: Final = 2048


@dataclass
class _Read:
    """What one pass read: per writer its log records and reports, and its ended spans."""

    logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    spans: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    cursors: dict[str, tuple[SpoolFile, SpoolFile]] = field(default_factory=dict)  # was, now
    count: int = 0


class OtlpExport:
    """The OTLP side of one aggregator (see the module docstring)."""

    def __init__(
        self,
        *,
        logs: Transport | None = None,
        traces: Transport | None = None,
        json: JsonLines | None = None,
        on_report: Callable[[str], None] = say,
    ) -> None:
        self.logs = logs
        self.traces = traces
        self.json = json
        self.on_report = on_report
        self.lock = threading.Lock()
        self.cursors: dict[str, SpoolFile] = {}
        # Cursors as of the last state handed out, and as of the last one committed: a
        # spool file may be deleted only once a committed cursor is past it (a skip or a
        # delivery not yet committed would otherwise die with the file on a kill -9).
        self._handed: dict[str, tuple[int, int]] = {}
        self._durable: dict[str, tuple[int, int]] = {}
        self.writers: dict[str, WriterState] = {}
        self.views: list[FileView] = []
        self.exported = {"logs": 0, "spans": 0, "truncated": 0}
        self.skipped = 0  # records skipped for budget pressure (otlp_backlog)
        self.dirty = False
        destinations: list[Destination] = []
        if logs is not None or traces is not None:
            transports = {"logs": logs, "traces": traces}
            destinations.append(EndpointDestination({k: v for k, v in transports.items() if v}))
        if json is not None:
            destinations.append(json)
        self.delivery = Delivery(destinations, on_report=on_report, give_way=self._under_pressure)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def dropped(self) -> int:
        """Records counted as dropped on the OTLP side (refused for good, or skipped)."""
        return self.delivery.dropped + self.skipped

    # --- called by the aggregator's loop (any thread) ------------------------------------------

    def update(self, views: list[FileView]) -> None:
        """The current spool files; wakes the exporter when there is something new."""
        with self.lock:
            self.views = views
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
                all(self._offset(v) >= v.committed for v in self.views)
                and not self._pending_truncation()
                and not any(w.pending_reports for w in self.writers.values())
            )

    def state(self) -> dict[str, Any]:
        """What to commit with the aggregator's state."""
        with self.lock:
            self.dirty = False
            self._handed = {n: (c.ino, c.offset) for n, c in self.cursors.items()}
            return {
                "cursors": {n: [ino, offset] for n, (ino, offset) in self._handed.items()},
                "writers": {w: s.to_json() for w, s in self.writers.items()},
                "skipped": self.skipped,
            }

    def committed(self) -> None:
        """The last :meth:`state` is committed: its cursors now decide what may be deleted."""
        with self.lock:
            self._durable = self._handed

    def restore(self, saved: dict[str, Any] | None) -> None:
        if not saved:
            return
        with self.lock:
            for w, s in saved.get("writers", {}).items():
                self.writers[w] = WriterState.from_json(s)
            for name, (ino, offset) in saved.get("cursors", {}).items():
                parts = parse_name(name)
                if parts is not None:
                    c = self.cursors[name] = new_cursor(name, parts, int(ino))
                    c.offset = int(offset)
                    self._durable[name] = (int(ino), int(offset))
                    w = self.writers.get(parts.writer)
                    if w is not None:
                        c.identity = dict(w.identity)
            self.skipped = int(saved.get("skipped") or 0)

    def summary(self) -> str:
        e = self.exported
        text = (
            f"OTLP: exported {e['logs']} log records, {e['spans']} spans, "
            f"{e['truncated']} truncated spans; {self.dropped} dropped"
        )
        if not self.caught_up():
            text += "; not caught up: the rest stays in the spool for the next run"
        return text

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvrx-otel-otlp", daemon=True)
        self._thread.start()

    def drain_by(self, deadline: float) -> None:
        """The aggregator drains until ``deadline`` (monotonic): export what is left by then,
        cutting any retry backoff short."""
        self.delivery.drain_by(deadline)
        self._wake.set()

    def stop(self, deadline: float) -> None:
        """Keep exporting until caught up or ``deadline`` (monotonic), then stop."""
        self.delivery.drain_by(deadline)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()) + 5.0)

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
        self._relieve(views)
        read = _Read()
        now_ns = time.time_ns()
        for v in views:
            if read.count >= BATCH_RECORDS:
                break
            self._read(v, read, now_ns)
        truncated = self._truncated(views)
        with self.lock:
            reported = {
                w: list(s.pending_reports) for w, s in self.writers.items() if s.pending_reports
            }
        for writer, pending in reported.items():
            read.logs.setdefault(writer, [])[:0] = pending
        if not read.cursors and not truncated and not reported:
            return False
        if not self._send(read.logs, read.spans, truncated):
            return False
        with self.lock:
            for writer, pending in reported.items():
                del self.writers[writer].pending_reports[: len(pending)]
            for name, (was, cursor) in read.cursors.items():
                if self.cursors.get(name) is was:  # not replaced or forgotten meanwhile
                    self.cursors[name] = cursor
            for writer, _, _ in truncated:
                self.writers[writer].open_spans.clear()
            self.dirty = True
        return True

    def _read(self, v: FileView, read: _Read, now_ns: int) -> None:
        """Read what the node log committed of ``v`` past the OTLP cursor into ``read``."""
        with self.lock:
            was = self._cursor(v)
            cursor = copy.copy(was)
            w = self.writers.setdefault(v.writer, WriterState())
        if cursor.offset >= v.committed and cursor.offset <= v.size:
            return
        if not open_view(cursor, v):
            return
        try:
            # Up to the committed offset every tail was judged by the node log already: a
            # tail there is one it reported torn, so it is final for this read.
            chunk = read_chunk(
                cursor, final=True, limit=READ_BYTES, want_ends=False, now_ns=now_ns,
                end=v.committed, spans=True,
            )  # fmt: skip
        except OSError:
            return
        finally:
            cursor.close()
        if chunk is None:
            if cursor.offset != was.offset:
                read.cursors[v.name] = (was, cursor)
            return
        header = cursor.header
        if header is not None and not w.budget:
            res = header.get("res")
            with self.lock:
                if isinstance(res, dict):
                    w.resource = res
                w.identity = reports.identity_from_header(header)
                w.budget = header.get("budget") or 0
                w.max_file = header.get("max") or 0
        logs = read.logs.setdefault(v.writer, [])
        logs.extend(chunk.records)
        read.count += len(chunk.records)
        spans = read.spans.setdefault(v.writer, [])
        with self.lock:
            for r in chunk.records:
                ts = r.get("ts")
                if isinstance(ts, int) and ts > w.last_ts:
                    w.last_ts = ts
            for s in chunk.spans or ():
                if s["ts"] > w.last_ts:
                    w.last_ts = s["ts"]
                if s["k"] == rec.KIND_SPAN_END:
                    w.open_spans.pop(s["span_id"], None)
                    spans.append(s)
                    read.count += 1
                else:
                    w.open_spans[s["span_id"]] = s
        read.cursors[v.name] = (was, cursor)

    def _cursor(self, v: FileView) -> SpoolFile:
        """The cursor of ``v`` (caller holds the lock); a new one for a new inode."""
        c = self.cursors.get(v.name)
        if c is None or c.ino != v.ino:
            parts = parse_name(v.name) or SpoolFileName(v.writer, v.index, v.pid, "proc")
            c = self.cursors[v.name] = new_cursor(v.name, parts, v.ino)
            w = self.writers.get(v.writer)
            if w is not None:
                c.identity = dict(w.identity)
        return c

    def _offset(self, v: FileView) -> int:
        c = self.cursors.get(v.name)
        return c.offset if c is not None and c.ino == v.ino else 0

    def _pending_truncation(self) -> bool:
        return bool(died_in_spans(self.views, self.writers, self._offset))

    def _truncated(self, views: list[FileView]) -> list[tuple[str, dict[str, Any], list[Any]]]:
        with self.lock:
            return died_in_spans(views, self.writers, self._offset)

    # --- sending ------------------------------------------------------------------------------

    def _send(
        self,
        logs: dict[str, list[dict[str, Any]]],
        spans: dict[str, list[dict[str, Any]]],
        truncated: list[tuple[str, dict[str, Any], list[dict[str, Any]]]],
    ) -> bool:
        """Send everything; True once every destination acknowledged it (or refused it for
        good, which is counted as dropped). False when the exporter must stop first."""
        resources = {w: s.resource for w, s in self.writers.items()}
        log_batch = [(resources.get(w, {}), rs) for w, rs in logs.items() if rs]
        span_batch = [(resources.get(w, {}), rs) for w, rs in spans.items() if rs]
        trunc = [
            (res, start, self.writers[w].last_ts)
            for w, res, starts in truncated
            for start in starts
        ]
        n_logs = sum(len(rs) for _, rs in log_batch)
        n_spans = sum(len(rs) for _, rs in span_batch) + len(trunc)
        if n_logs:
            sent = self.delivery.send("logs", encode_logs(log_batch, time.time_ns()), n_logs)
            if sent is None:
                return False
            if sent:
                self.exported["logs"] += n_logs
        if n_spans:
            sent = self.delivery.send("traces", encode_spans(span_batch, trunc), n_spans)
            if sent is None:
                return False  # the logs go again with them: duplicates, never losses
            if sent:
                self.exported["spans"] += n_spans - len(trunc)
                self.exported["truncated"] += len(trunc)
        return True

    # --- budget pressure -----------------------------------------------------------------------

    def _under_pressure(self) -> bool:
        with self.lock:
            return bool(victims(self.views, self.writers, self._offset))

    def _relieve(self, views: list[FileView]) -> None:
        """Skip (and report) the oldest node-logged file of a live writer whose spool files,
        kept only for OTLP, would soon push it over its budget. The skip and its report are
        committed together (the report waits in the writer's state until it is sent)."""
        with self.lock:
            chosen = victims(views, self.writers, self._offset)
        for writer, victim in chosen:
            with self.lock:
                w = self.writers[writer]
                start = self._cursor(victim).offset
            skipped = count_logs(victim, start)
            now = time.time_ns()
            report = reports.loss_report(
                what="dropped",
                count=skipped,
                reason=DropReasonValues.OTLP_BACKLOG.value,
                pid=victim.pid,
                identity=w.identity,
                first_ts=now,
                last_ts=now,
                ts=now,
                key=f"{writer}-otlp-backlog-{victim.index}",
            )
            with self.lock:
                cursor = self._cursor(victim)
                cursor.offset = max(cursor.offset, victim.size)
                self.skipped += skipped
                if skipped:
                    w.pending_reports.append(report)
                self.dirty = True
            self.on_report(
                f"OTLP backlog: skipped {skipped} records of {victim.name} (already in the node "
                "log) so its writer stays within its spool budget"
            )


def build_export(config: Any, node_id: str) -> OtlpExport | None:
    """The exporter an aggregator config asks for (``--otlp-endpoint``, the
    ``OTEL_EXPORTER_OTLP_*`` variables, ``--otlp-json``), or None when OTLP is off."""
    from nvrx_otel.aggregator.otlp_transport import otlp_enabled, resolve
    from nvrx_otel.spool.paths import safe_component

    endpoint: str | None = config.otlp_endpoint
    json_dir: Path | None = config.otlp_json
    if not otlp_enabled(endpoint=endpoint) and json_dir is None:
        return None
    logs = traces = None
    if otlp_enabled(endpoint=endpoint):
        logs = Transport("logs", resolve("logs", base_endpoint=endpoint))
        traces = Transport("traces", resolve("traces", base_endpoint=endpoint))
    json = JsonLines(json_dir, safe_component(node_id)) if json_dir is not None else None
    return OtlpExport(logs=logs, traces=traces, json=json)
