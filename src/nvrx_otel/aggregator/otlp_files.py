"""What the OTLP exporter knows of spool files and their writers, and budget pressure.

:class:`FileView` is the aggregator loop's snapshot of one spool file; :class:`WriterState`
what the exporter keeps per writer. OTLP cursors are the node log's reader cursors
(:class:`~nvrx_otel.aggregator.reader.SpoolFile`) that hold no descriptor between reads
(:func:`new_cursor`, :func:`open_view`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvrx_otel import record as rec
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.reader import Chunk, SpoolFile, read_chunk
from nvrx_otel.aggregator.state import WriterState
from nvrx_otel.spool.paths import SpoolFileName

_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
READ_BYTES: Final = 1 << 20


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
    read: int  # bytes the node log has read (the OTLP side reads no further)
    size: int
    final: bool  # the writer adds nothing more
    gone: bool  # the writer process is gone


@dataclass(eq=False)
class Batch:
    """Records (and ended spans) of one spool file from ``start`` to ``end``, queued for OTLP."""

    name: str
    ino: int
    start: int
    end: int
    writer: str
    records: list[dict[str, Any]]
    spans: list[dict[str, Any]]

    @property
    def count(self) -> int:
        return len(self.records) + len(self.spans)


def take_header(w: WriterState, header: dict[str, Any]) -> None:
    """What the exporter keeps of a writer from its spool header."""
    res = header.get("res")
    if isinstance(res, dict):
        w.resource = res
    w.identity = reports.identity_from_header(header)
    budget, max_file = header.get("budget"), header.get("max")
    w.budget = budget if isinstance(budget, int) else 0
    w.max_file = max_file if isinstance(max_file, int) else 0


def take_spans(w: WriterState, spans: list[dict[str, Any]], ended: list[dict[str, Any]]) -> None:
    """Follow a writer's span records: starts wait in its open spans, ends go to ``ended``."""
    for s in spans:
        if s["ts"] > w.last_ts:
            w.last_ts = s["ts"]
        if s["k"] == rec.KIND_SPAN_END:
            w.open_spans.pop(s["span_id"], None)
            ended.append(s)
        else:
            w.open_spans[s["span_id"]] = s


def read_view(cursor: SpoolFile, v: FileView, now_ns: int) -> Chunk | None:
    """Read ``v`` from ``cursor`` up to what the node log read of it (one read, its own
    descriptor). Every tail before that point was judged by the node log already: a tail
    there is one it reported torn, so it is final for this read."""
    if not open_view(cursor, v):
        return None
    try:
        return read_chunk(
            cursor, final=True, limit=READ_BYTES, want_ends=False, now_ns=now_ns,
            end=v.read, spans=True,
        )  # fmt: skip
    except OSError:
        return None
    finally:
        cursor.close()


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


def died_in_spans(
    views: list[FileView],
    writers: dict[str, WriterState],
    offset: Callable[[FileView], int],
    cursors: Mapping[str, SpoolFile],
) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """Per writer that is gone, whose files are all exported, and that still has open
    spans: the writer, its resource and those spans' ``span_start`` records (the caller
    holds the exporter's lock; ``offset`` is the OTLP cursor of a file). A writer with a
    cursor on a file the views do not show yet (the loop hands a batch over before its
    next commit shows the file) is not judged; one with no file left at all is gone."""
    shown = {v.name for v in views}
    unshown = {c.writer for name, c in cursors.items() if name not in shown}
    out = []
    for writer, s in writers.items():
        if not s.open_spans or writer in unshown:
            continue
        mine = [v for v in views if v.writer == writer]
        if all(v.gone and v.final and offset(v) >= v.size for v in mine):
            out.append((writer, s.resource, list(s.open_spans.values())))
    return out
