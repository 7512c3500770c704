"""What the OTLP exporter knows of spool files and their writers, and budget pressure.

:class:`FileView` is the aggregator loop's snapshot of one spool file; :class:`WriterState`
what the exporter keeps per writer. OTLP cursors are the node log's reader cursors
(:class:`~nvrx_otel.aggregator.reader.SpoolFile`) that hold no descriptor between reads
(:func:`new_cursor`, :func:`open_view`). :func:`victims` says which files the OTLP backlog
gives up when a live writer's spool files would soon push it over its budget.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nvrx_otel.aggregator.reader import SpoolFile
from nvrx_otel.spool.paths import SpoolFileName

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
class WriterState:
    """What the exporter keeps of one writer (committed with the aggregator's state)."""

    resource: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    budget: int = 0
    max_file: int = 0
    last_ts: int = 0
    open_spans: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending_reports: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The form committed with the aggregator's state."""
        return {
            "last_ts": self.last_ts,
            "open": dict(self.open_spans),
            "res": self.resource,
            "id": self.identity,
            "budget": self.budget,
            "max": self.max_file,
            "reports": list(self.pending_reports),
        }

    @classmethod
    def from_json(cls, s: dict[str, Any]) -> WriterState:
        return cls(
            resource=dict(s.get("res") or {}),
            identity=dict(s.get("id") or {}),
            budget=int(s.get("budget") or 0),
            max_file=int(s.get("max") or 0),
            last_ts=int(s.get("last_ts") or 0),
            open_spans=dict(s.get("open") or {}),
            pending_reports=list(s.get("reports") or []),
        )


def new_cursor(name: str, parts: SpoolFileName, ino: int) -> SpoolFile:
    """A reader cursor of the OTLP side: no descriptor until a read opens one."""
    return SpoolFile(name=name, parts=parts, fd=-1, ino=ino)


def open_view(cursor: SpoolFile, v: FileView) -> bool:
    """Open ``v`` for one read into ``cursor`` (False when it is gone or another file)."""
    try:
        fd = os.open(v.path, _OPEN_FLAGS)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_ino != v.ino:
            os.close(fd)
            return False
    except OSError:
        os.close(fd)
        return False
    cursor.fd = fd
    return True


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


def died_in_spans(
    views: list[FileView], writers: dict[str, WriterState], offset: Callable[[FileView], int]
) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """Per writer that is gone, whose files are all exported, and that still has open
    spans: the writer, its resource and those spans' ``span_start`` records (the caller
    holds the exporter's lock; ``offset`` is the OTLP cursor of a file)."""
    out = []
    for writer, s in writers.items():
        if not s.open_spans:
            continue
        mine = [v for v in views if v.writer == writer]
        if all(v.gone and v.final and offset(v) >= v.size for v in mine):
            out.append((writer, s.resource, list(s.open_spans.values())))
    return out
