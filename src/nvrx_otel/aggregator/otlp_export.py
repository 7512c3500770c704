"""OTLP output of the aggregator: its own cursor, its own thread, at least once.

The node log and OTLP progress separately. This exporter reads each spool file from its
own cursor up to what the node log has committed (so it never sees a torn tail or a
record the node log has not written), turns log records, drop records and ended spans into
OTLP requests, and advances its cursor only after every destination acknowledged them.
While an endpoint is down it retries with backoff; the node log keeps flowing, and spool
files stay until both cursors are past them. Cursors and open spans are committed with
the aggregator's state, so a restart resumes without losing anything (it may send a batch
twice; ``nv.nvrx.record.key`` removes such duplicates downstream).

Under spool-budget pressure (a writer whose unexported files would soon make it drop new
records) the oldest file the node log already has is skipped here and the skip is
reported as ``otlp_backlog`` drops: OTLP gives way, the node log never does.

A span whose writer died before ending it is exported ended at the writer's last record,
with status ERROR and ``nv.nvrx.span.truncated = true``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from nvrx_otel import record as rec
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.health import say
from nvrx_otel.aggregator.otlp_encode import encode_logs, encode_spans, to_json
from nvrx_otel.aggregator.otlp_transport import Result, Transport
from nvrx_otel.semconv import DropReasonValues

READ_BYTES: Final = 1 << 20
BATCH_RECORDS: Final = 2048
BACKOFF_MAX_S: Final = 30.0
PRESSURE: Final = 0.5
"""Share of a writer's spool budget its files may fill before the OTLP backlog gives way."""
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LOG_MARK: Final = b'"k":"log"'


@dataclass(frozen=True)
class FileView:
    """What the aggregator's loop knows of one spool file (a snapshot)."""

    name: str
    path: Path
    ino: int
    writer: str
    index: int
    pid: int
    committed: int  # bytes whose records are committed in the node log
    size: int
    final: bool  # the writer adds nothing more
    gone: bool  # the writer process is gone


@dataclass
class _Cursor:
    ino: int
    offset: int = 0
    fd: int = -1


@dataclass
class _Writer:
    resource: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    budget: int = 0
    max_file: int = 0
    last_ts: int = 0
    open_spans: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending_reports: list[dict[str, Any]] = field(default_factory=list)


class JsonLines:
    """``--otlp-json``: OTLP/JSON lines, logs and traces in separate files (the shape of
    the collector's file exporter). Always acknowledges unless the disk fails."""

    def __init__(self, directory: Path, node: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.paths = {
            "logs": directory / f"logs_{node}.jsonl",
            "traces": directory / f"traces_{node}.jsonl",
        }
        self.last_error = ""

    def write(self, signal: str, message: Any) -> Result:
        try:
            line = orjson.dumps(to_json(message), option=orjson.OPT_APPEND_NEWLINE)
            with open(self.paths[signal], "ab") as fh:
                fh.write(line)
            return Result.OK
        except OSError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return Result.RETRY


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
        self.cursors: dict[str, _Cursor] = {}
        self.writers: dict[str, _Writer] = {}
        self.views: list[FileView] = []
        self.exported = {"logs": 0, "spans": 0, "truncated": 0}
        self.dropped = 0
        self.retrying = False
        self.dirty = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._deadline = float("inf")
        self._thread: threading.Thread | None = None
        self._backoff = 0.5

    # --- called by the aggregator's loop (any thread) ------------------------------------------

    def update(self, views: list[FileView]) -> None:
        """The current spool files; wakes the exporter when there is something new."""
        with self.lock:
            self.views = views
            live = {v.name for v in views}
            for name in [n for n in self.cursors if n not in live]:
                self._close(self.cursors.pop(name))
        self._wake.set()

    def consumed(self, name: str, ino: int, size: int) -> bool:
        """The OTLP cursor is at the end of this file: it may be deleted."""
        with self.lock:
            c = self.cursors.get(name)
            return c is not None and c.ino == ino and c.offset >= size

    def caught_up(self) -> bool:
        """Everything the node log committed has been exported (or reported dropped)."""
        with self.lock:
            return (
                all(self._offset(v) >= v.committed for v in self.views)
                and not self._pending_truncation()
            )

    def state(self) -> dict[str, Any]:
        """What to commit with the aggregator's state."""
        with self.lock:
            self.dirty = False
            return {
                "cursors": {n: [c.ino, c.offset] for n, c in self.cursors.items()},
                "writers": {
                    w: {
                        "last_ts": s.last_ts,
                        "open": s.open_spans,
                        "res": s.resource,
                        "id": s.identity,
                        "budget": s.budget,
                        "max": s.max_file,
                    }
                    for w, s in self.writers.items()
                },
            }

    def restore(self, saved: dict[str, Any] | None) -> None:
        if not saved:
            return
        with self.lock:
            for name, (ino, offset) in saved.get("cursors", {}).items():
                self.cursors[name] = _Cursor(int(ino), int(offset))
            for w, s in saved.get("writers", {}).items():
                self.writers[w] = _Writer(
                    resource=dict(s.get("res") or {}),
                    identity=dict(s.get("id") or {}),
                    budget=int(s.get("budget") or 0),
                    max_file=int(s.get("max") or 0),
                    last_ts=int(s.get("last_ts") or 0),
                    open_spans=dict(s.get("open") or {}),
                )

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

    def stop(self, deadline: float) -> None:
        """Keep exporting until caught up or ``deadline`` (monotonic), then stop."""
        self._deadline = deadline
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()) + 5.0)
        with self.lock:
            for c in self.cursors.values():
                self._close(c)

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
            if self._stop.is_set() and (self.caught_up() or time.monotonic() >= self._deadline):
                return
            if progressed or self._under_pressure():
                self._wake.set()

    def _pass(self) -> bool:
        with self.lock:
            views = sorted(self.views, key=lambda v: (v.writer, v.index))
        self._relieve(views)
        logs: dict[str, list[dict[str, Any]]] = {}
        spans: dict[str, list[dict[str, Any]]] = {}
        advance: dict[str, int] = {}
        count = 0
        for v in views:
            if count >= BATCH_RECORDS:
                break
            with self.lock:
                cursor = self._cursor(v)
                start = cursor.offset
            if start >= v.committed or cursor.fd < 0:
                continue
            data = os.pread(cursor.fd, min(READ_BYTES, v.committed - start), start)
            cut = data.rfind(b"\n")
            if cut < 0:
                continue
            body = data[: cut + 1]
            count += self._parse(v, body, logs, spans)
            advance[v.name] = start + len(body)
        truncated = self._truncated(views)
        with self.lock:
            reported = {
                w: list(s.pending_reports) for w, s in self.writers.items() if s.pending_reports
            }
        for writer, pending in reported.items():
            logs.setdefault(writer, []).extend(pending)
        if not advance and not truncated and not reported:
            return False
        if not self._send(logs, spans, truncated):
            return False
        with self.lock:
            for writer, pending in reported.items():
                del self.writers[writer].pending_reports[: len(pending)]
        with self.lock:
            for name, offset in advance.items():
                c = self.cursors.get(name)
                if c is not None and offset > c.offset:
                    c.offset = offset
            for writer, _, _ in truncated:
                self.writers[writer].open_spans.clear()
            self.dirty = True
        return True

    def _cursor(self, v: FileView) -> _Cursor:
        """The cursor of ``v`` (caller holds the lock), its descriptor opened on demand."""
        c = self.cursors.get(v.name)
        if c is None or c.ino != v.ino:
            if c is not None:
                self._close(c)
            c = self.cursors[v.name] = _Cursor(v.ino)
        if c.fd < 0:
            try:
                fd = os.open(v.path, _OPEN_FLAGS)
                if os.fstat(fd).st_ino != v.ino:
                    os.close(fd)
                else:
                    c.fd = fd
            except OSError:
                pass
        return c

    def _offset(self, v: FileView) -> int:
        c = self.cursors.get(v.name)
        return c.offset if c is not None and c.ino == v.ino else 0

    @staticmethod
    def _close(c: _Cursor) -> None:
        if c.fd >= 0:
            try:
                os.close(c.fd)
            except OSError:
                pass
            c.fd = -1

    def _parse(
        self,
        v: FileView,
        body: bytes,
        logs: dict[str, list[dict[str, Any]]],
        spans: dict[str, list[dict[str, Any]]],
    ) -> int:
        with self.lock:
            w = self.writers.setdefault(v.writer, _Writer())
        out_logs = logs.setdefault(v.writer, [])
        out_spans = spans.setdefault(v.writer, [])
        n = 0
        for line in body.split(b"\n"):
            if not line:
                continue
            try:
                r = rec.decode(line)
            except ValueError:
                continue  # corrupt: the node log reports it
            kind = r["k"]
            ts = r.get("ts")
            if isinstance(ts, int) and ts > w.last_ts:
                w.last_ts = ts
            if kind == rec.KIND_LOG:
                out_logs.append(r)
                n += 1
            elif kind == rec.KIND_SPAN_END:
                w.open_spans.pop(r.get("span_id", ""), None)
                out_spans.append(r)
                n += 1
            elif kind == rec.KIND_SPAN_START:
                w.open_spans[r.get("span_id", "")] = r
            elif kind == rec.KIND_DROP:
                report, _ = reports.drop_report(r)
                out_logs.append(report)
                n += 1
            elif kind == rec.KIND_HEADER:
                res = r.get("res")
                if isinstance(res, dict):
                    w.resource = res
                w.identity = reports.identity_from_header(r)
                w.budget = int(r.get("budget") or 0)
                w.max_file = int(r.get("max") or 0)
        return n

    def _pending_truncation(self) -> bool:
        return any(
            s.open_spans and self._writer_done(w, self.views) for w, s in self.writers.items()
        )

    def _writer_done(self, writer: str, views: Iterable[FileView]) -> bool:
        """The writer is gone and every byte of its files is exported."""
        mine = [v for v in views if v.writer == writer]
        return all(v.gone and v.final and self._offset(v) >= v.size for v in mine)

    def _truncated(
        self, views: list[FileView]
    ) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
        out = []
        with self.lock:
            for writer, s in self.writers.items():
                if s.open_spans and self._writer_done(writer, views):
                    out.append((writer, s.resource, list(s.open_spans.values())))
        return out

    # --- sending ------------------------------------------------------------------------------

    def _send(
        self,
        logs: dict[str, list[dict[str, Any]]],
        spans: dict[str, list[dict[str, Any]]],
        truncated: list[tuple[str, dict[str, Any], list[dict[str, Any]]]],
    ) -> bool:
        """Send everything; True once every destination acknowledged it (or refused it for
        good, which is reported as dropped). False when the exporter must stop first."""
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
        jobs: list[tuple[str, Any, int]] = []
        if n_logs:
            jobs.append(("logs", encode_logs(log_batch, time.time_ns()), n_logs))
        if n_spans:
            jobs.append(("traces", encode_spans(span_batch, trunc), n_spans))
        refused: set[str] = set()
        for signal, message, count in jobs:
            payload = message.SerializeToString()
            transport = self.logs if signal == "logs" else self.traces
            for dest in (transport, self.json):
                if dest is None:
                    continue
                before = self.dropped
                if not self._deliver(dest, signal, message, payload, count):
                    return False
                if self.dropped != before:
                    refused.add(signal)
        if "logs" not in refused:
            self.exported["logs"] += n_logs
        if "traces" not in refused:
            self.exported["spans"] += n_spans - len(trunc)
            self.exported["truncated"] += len(trunc)
        return True

    def _deliver(
        self, dest: Transport | JsonLines, signal: str, message: Any, payload: bytes, count: int
    ) -> bool:
        while True:
            if isinstance(dest, JsonLines):
                result = dest.write(signal, message)
            else:
                result = dest.send(payload)
            if result is Result.OK:
                if self.retrying:
                    self.on_report(f"OTLP {signal} export works again")
                self.retrying = False
                self._backoff = 0.5
                return True
            if result is Result.REJECTED:
                self.dropped += count
                self.on_report(
                    f"OTLP endpoint refused a {signal} batch of {count} for good "
                    f"({dest.last_error}); counted as dropped"
                )
                return True
            if not self.retrying:
                self.on_report(
                    f"OTLP {signal} export failing ({dest.last_error}); retrying with backoff, "
                    "the node log keeps flowing"
                )
            self.retrying = True
            until = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
            while True:  # wait out the backoff, watching for budget pressure and the stop
                if self._under_pressure():
                    return False  # give way: the next pass skips the oldest backlog first
                now = time.monotonic()
                if self._stop.is_set() and now >= self._deadline:
                    return False
                if now >= until:
                    break
                time.sleep(min(0.2, until - now))

    # --- budget pressure -----------------------------------------------------------------------

    def _victims(self, views: list[FileView]) -> list[tuple[str, FileView]]:
        """Per writer under budget pressure, its oldest file kept only for OTLP."""
        by_writer: dict[str, list[FileView]] = {}
        for v in views:
            by_writer.setdefault(v.writer, []).append(v)
        out = []
        with self.lock:
            for writer, files in by_writer.items():
                w = self.writers.get(writer)
                if w is None or not w.budget:
                    continue
                # Act at half the budget: the other half covers the node log's own lag
                # (a writer's older file becomes final only a while after it moved on).
                excess = sum(v.size for v in files) + w.max_file - w.budget * PRESSURE
                for v in files:  # oldest first, until the writer is back under the mark
                    if excess <= 0:
                        break
                    if v.final and v.committed >= v.size and self._offset(v) < v.size:
                        out.append((writer, v))
                        excess -= v.size
        return out

    def _under_pressure(self) -> bool:
        with self.lock:
            views = list(self.views)
        return bool(self._victims(views))

    def _relieve(self, views: list[FileView]) -> None:
        """Skip (and report) the oldest node-logged file of a writer whose spool files,
        kept only for OTLP, would soon push it over its budget."""
        for writer, victim in self._victims(views):
            with self.lock:
                w = self.writers[writer]
                cursor = self._cursor(victim)
                start = cursor.offset
            skipped = 0
            if cursor.fd >= 0:
                try:
                    skipped = os.pread(cursor.fd, victim.size - start, start).count(_LOG_MARK)
                except OSError:
                    pass
            with self.lock:
                cursor.offset = max(cursor.offset, victim.size)
                self.dirty = True
                self.dropped += skipped
                ident = w.identity
            if skipped:
                now = time.time_ns()
                report = reports.loss_report(
                    what="dropped",
                    count=skipped,
                    reason=DropReasonValues.OTLP_BACKLOG.value,
                    pid=victim.pid,
                    identity=ident,
                    first_ts=now,
                    last_ts=now,
                    ts=now,
                    key=f"{writer}-otlp-backlog-{victim.index}",
                )
                with self.lock:
                    w.pending_reports.append(report)
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
