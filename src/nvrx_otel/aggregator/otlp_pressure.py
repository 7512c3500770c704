"""Budget pressure: the OTLP backlog gives way to a live writer's spool budget.

Under spool-budget pressure of a *live* writer (one whose files kept only for OTLP would
soon make it drop new records), :func:`victims` names the oldest such file and
:func:`relieve` skips it on the OTLP side and reports the skip as ``otlp_backlog`` drops:
OTLP gives way, the node log never does. The files of writers that have exited press on
nothing and are always exported in full.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.health import plural
from nvrx_otel.aggregator.otlp_files import FileView, new_cursor, open_view
from nvrx_otel.aggregator.state import WriterState
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.paths import SpoolFileName

if TYPE_CHECKING:
    from nvrx_otel.aggregator.otlp_export import OtlpExport

PRESSURE: Final = 0.5
"""Share of a writer's spool budget its files may fill before the OTLP backlog gives way."""
_LOG_MARK: Final = b'"k":"log"'


def victims(
    views: list[FileView], writers: dict[str, WriterState], offset: Callable[[FileView], int]
) -> list[tuple[str, FileView]]:
    """Per live writer under budget pressure, its oldest file kept only for OTLP (the
    caller holds the exporter's lock; ``offset`` is the OTLP cursor of a file)."""
    by_writer: dict[str, list[FileView]] = {}
    for v in views:
        by_writer.setdefault(v.writer, []).append(v)
    out = []
    for writer, files in by_writer.items():
        w = writers.get(writer)
        if w is None or not w.budget or all(v.gone for v in files):
            continue  # a writer that has exited presses on nothing
        # Act at half the budget: the other half covers the node log's own lag
        # (a writer's older file becomes final only a while after it moved on).
        excess = sum(v.size for v in files) + w.max_file - w.budget * PRESSURE
        for v in files:  # oldest first, until the writer is back under the mark
            if excess <= 0:
                break
            if v.final and v.committed >= v.size and offset(v) < v.size:
                out.append((writer, v))
                excess -= v.size
    return out


def count_logs(v: FileView, start: int) -> int:
    """Log records in ``v`` from ``start`` to its end (0 when it cannot be read)."""
    probe = new_cursor(v.name, SpoolFileName(v.writer, v.index, v.pid, ""), v.ino)
    if not open_view(probe, v):
        return 0
    try:
        return os.pread(probe.fd, v.size - start, start).count(_LOG_MARK)
    except OSError:
        return 0
    finally:
        probe.close()


def backlog_report(writer: str, w: WriterState, victim: FileView, skipped: int) -> dict[str, Any]:
    """The ``otlp_backlog`` loss report of a file skipped for budget pressure."""
    now = time.time_ns()
    return reports.loss_report(
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


def relieve(sink: OtlpExport, views: list[FileView]) -> None:
    """Skip (and report) the oldest node-logged file of a live writer whose spool files,
    kept only for OTLP, would soon push it over its budget. The skip and its report are
    committed together (the report waits in the writer's state until it is sent)."""
    with sink.lock:
        chosen = victims(views, sink.writers, sink.sent)
    for writer, victim in chosen:
        with sink.lock:
            queued = sink.queued_of(victim.name)
            skipped = sum(b.count for b in queued)
            start = sink.cursor(victim).offset
        skipped += count_logs(victim, start)
        with sink.lock:
            w = sink.writers[writer]
            sink.unqueue(queued)
            cursor = sink.cursor(victim)
            cursor.offset = max(cursor.offset, victim.size)
            sink.skipped += skipped
            if skipped:
                w.pending_reports.append(backlog_report(writer, w, victim, skipped))
            sink.dirty = True
        sink.on_report(
            f"OTLP backlog: skipped {plural(skipped, 'record')} of {victim.name} (already in "
            "the node log) so its writer stays within its spool budget"
        )
