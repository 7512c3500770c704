"""Reading one spool file: new bytes by ``os.pread``, complete lines only, torn tails.

A :class:`SpoolFile` remembers its inode and how far it has been read. :func:`read_chunk`
turns the complete lines after that point into records:

- a line that is not a schema-1 record, or one whose fields do not have their types
  (``record.valid``), is corrupt; a run of corrupt lines becomes one
  ``corrupt <N> records ...`` WARNING placed where the run was (invalid UTF-8 and lone
  surrogates are replaced by ``record.decode``, not corrupt);
- a tail without ``\\n`` waits while its file is not *final*; once it is (the writer is
  gone, or has moved on to a newer file) the tail is one corrupt record. The caller
  decides finality *before* reading, so bytes a writer finished just before it died are
  read whole, never reported as corrupt;
- a writer's ``k: "drop"`` record becomes a ``dropped <N> records ...`` WARNING;
- the header is remembered (it says who writes the file); span records are skipped, or
  collected in :attr:`Chunk.spans` for a reader that exports them;
- a file shorter than what was already read was truncated under the reader (writers never
  truncate): the records of the writer that were cut are reported as corrupt (the gap in
  the writer's sequence numbers, ``record.seq_of``) and the records read before are not
  read again.

Every reader of the aggregator (the node log, OTLP) reads through :func:`read_chunk`, each
with its own :class:`SpoolFile` cursor, so they decode, report and tear alike.

Liveness: writers hold ``flock(LOCK_SH)`` on their live file. :func:`writer_gone` probes
with ``flock(LOCK_EX | LOCK_NB)`` on the reader's own descriptor and releases at once.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate, islice
from operator import add
from typing import Any, Final

import orjson

from nvrx_otel import env
from nvrx_otel import record as rec
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.nodelog import is_clean
from nvrx_otel.aggregator.resync import last_seq, resync, unusable_header
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.paths import SpoolFileName

MAX_LINE: Final = 2 * env.MAX_RECORD_KB_LIMIT * 1024
"""A line longer than this is not a record the writer made (writers cap a record at
``NVRX_OTEL_MAX_RECORD_KB``, at most half of this): it is skipped as one corrupt record,
read in blocks and never held whole, so the aggregator's memory stays bounded whatever a
spool file holds."""
_SKIP_BLOCK: Final = 1 << 20
_HEADER_PROBE: Final = 64 << 10


@dataclass(eq=False)
class SpoolFile:
    """One spool file as the aggregator tracks it (by inode, not by name)."""

    name: str
    parts: SpoolFileName
    fd: int
    ino: int
    offset: int = 0  # bytes read and turned into records or reports
    done: int = 0  # bytes whose records are all in the node log
    hdr_crc: int = 0
    header: dict[str, Any] | None = None
    identity: dict[str, Any] = field(default_factory=dict)  # rank fields for reports
    last_ts: int = 0  # ts of the last record read (start of a corrupt run's time range)
    size: int = 0  # size at the last read
    tail: int = 0  # bytes after the last complete line at the last read
    newer_since: float | None = None  # monotonic time a newer file of its writer appeared
    vanished: bool = False  # its name is gone or now names another file
    unreadable: bool = False  # it can never be opened (not a regular file, not ours)
    held: int = 0  # records read but still held by the chronological merge
    committed: int = 0  # ``done`` as of the last commit
    final: bool = False  # the writer adds nothing more (as decided in the last cycle)
    seen_gone: bool = False  # no writer held its lock at the last probe
    long_scan: int = 0  # an over-long line at ``offset`` has no ``\n`` before this offset
    seq: int = -1  # sequence number of the last writer record read (record.seq_of)
    resync: int = -1  # after a truncation: records up to this sequence number were read
    resync_bad: int = 0  # lines after the cut that were not records, before the next record
    last_len: int = 0  # length of the last line read, which ends at ``offset`` (0: unknown)
    last_crc: int = 0  # its crc32: the bytes before ``offset`` must still be that line

    @property
    def writer(self) -> str:
        return self.parts.writer

    @property
    def pid(self) -> int:
        return self.parts.pid

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class Chunk:
    """Records read from one file in one go."""

    file: SpoolFile
    records: list[dict[str, Any]]
    ends: list[int] | None  # per record, the file offset just after it (chronological mode)
    end: int  # offset after everything consumed (records, reports, skipped lines)
    clean: bool = False  # no string needs escaping, no exc, no null (nodelog.is_clean)
    reports: dict[int, int] = field(default_factory=dict)  # record index -> count it accounts
    corrupt: int = 0
    dropped: int = 0
    spans: list[dict[str, Any]] | None = None  # span records, when asked for
    collapsed: int = 0  # records taken out, collapsed into an identical one (``dedup.py``)
    # For the chronological merge (``dedup.py`` with tombstones): the records taken out, each
    # as (index in ``records`` it stood before, file offset after it, its ts, its group), and
    # the collapsed records kept here (index in ``records`` -> group). The merge releases a
    # group's record and its taken-out records' positions together.
    tombs: list[tuple[int, int, int, int]] | None = None
    leads: dict[int, int] | None = None

    @property
    def weight(self) -> int:
        """Writer records this chunk accounts for: log records, the reported losses and the
        records collapsed into another."""
        return len(self.records) - len(self.reports) + sum(self.reports.values()) + self.collapsed


def read_header(fd: int) -> bytes:
    """The first bytes of a spool file, enough to hold its header line."""
    head = os.pread(fd, 4096, 0)
    if b"\n" not in head and len(head) == 4096:
        head = os.pread(fd, _HEADER_PROBE, 0)
    return head


def header_crc(head: bytes) -> int:
    """crc32 of a file's first line (0 if it has none yet): a file recreated under the same
    name on a reused inode has another header (its open time differs)."""
    cut = head.find(b"\n")
    return 0 if cut < 0 else zlib.crc32(head[: cut + 1])


def writer_gone(f: SpoolFile) -> bool:
    """True when no writer holds its lock on ``f`` (probe and release at once)."""
    try:
        fcntl.flock(f.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True  # cannot probe a file we hold open: treat its writer as gone
    try:
        fcntl.flock(f.fd, fcntl.LOCK_UN)
    except OSError:
        pass
    return True


def _window(f: SpoolFile, limit: int, end: int | None) -> tuple[bytes, int, bool]:
    """Bytes from ``f.offset`` holding at least one complete line if the file has one
    within MAX_LINE (and before ``end``), the file size seen (at most ``end``), and whether
    the file still holds what was read: it is not shorter than ``f.offset`` and, when new
    bytes follow, the last line read still ends there (read in the same ``pread``). A file
    cut and grown back past the offset has other bytes there."""
    size = os.fstat(f.fd).st_size
    if size < f.offset:
        return b"", size, False
    if end is not None:
        size = min(size, end)
    want = min(limit, max(0, size - f.offset))
    if not want:
        return b"", size, True
    back = min(f.last_len, f.offset)
    data = os.pread(f.fd, want + back, f.offset - back)
    if back:
        if len(data) < back or zlib.crc32(data[:back]) != f.last_crc:
            return b"", size, False
        data = data[back:]
    while b"\n" not in data and len(data) == want and want < MAX_LINE and f.offset + want < size:
        want = min(MAX_LINE, want * 4, size - f.offset)
        data = os.pread(f.fd, want, f.offset)
    return data, size, True


def _skip_long_line(f: SpoolFile, start: int, size: int) -> int | None:
    """Offset just past the ``\\n`` ending an over-long line starting at ``start``, looked
    for a block at a time (resuming where the last look ended)."""
    pos = max(start + MAX_LINE, f.long_scan)
    while pos < size:
        block = os.pread(f.fd, _SKIP_BLOCK, pos)
        if not block:
            break
        cut = block.find(b"\n")
        if cut >= 0:
            f.long_scan = 0
            return pos + cut + 1
        pos += len(block)
    f.long_scan = pos
    return None


def read_chunk(
    f: SpoolFile,
    *,
    final: bool,
    limit: int,
    want_ends: bool,
    now_ns: int,
    end: int | None = None,
    spans: bool = False,
) -> Chunk | None:
    """Read up to about ``limit`` new bytes of ``f`` as records; None when nothing changed.

    ``final``: the writer will add nothing (decided before this call), so a tail without
    ``\\n`` at the end of the file is one corrupt record instead of waiting.
    ``end``: read nothing at or after this offset (the file ends there for this call).
    ``spans``: collect span records in :attr:`Chunk.spans` instead of skipping them.
    """
    data, size, intact = _window(f, limit, end)
    f.size = size
    start = f.offset
    if not intact:  # truncated under us: writers never do that; read on from the cut
        f.resync = max(f.resync, f.seq)
        f.resync_bad = 0
        start = f.offset = f.done = f.long_scan = f.last_len = 0
        data, size, _ = _window(f, limit, end)
    skipped = lost = 0
    if f.resync >= 0:
        skipped, seq, bad = resync(data, f.resync)
        if seq >= 0:
            # the lines after the cut that were not records are reported as corrupt
            lost = max(0, seq - f.resync - 1 - f.resync_bad - bad)
            f.resync = -1
            f.resync_bad = 0
        if skipped:
            start = f.offset = f.done = start + skipped
            data = data[skipped:]
    cut = data.rfind(b"\n")
    skipped_to: int | None = None
    if cut < 0 and len(data) >= MAX_LINE:
        del data
        skipped_to = _skip_long_line(f, start, size)
        if skipped_to is None:
            if not final:
                f.tail = size - start
                return None
            skipped_to = size  # the writer is done: the unended line is one corrupt record
        data = b""
    at_eof = start + len(data) >= size
    body = data[: cut + 1] if cut >= 0 else b""
    tail_len = len(data) - len(body)
    f.tail = tail_len if at_eof else 0
    torn = (final and at_eof and tail_len > 0) or skipped_to is not None
    if not body and not torn:
        return None
    lines = body.split(b"\n")
    lines.pop()
    records: list[dict[str, Any]] = []
    ends: list[int] | None = [] if want_ends else None
    chunk = Chunk(file=f, records=records, ends=ends, end=start + len(body), clean=is_clean(body))
    out_spans: list[dict[str, Any]] | None = [] if spans else None
    chunk.spans = out_spans
    if lost > 0:  # the records the truncation cut, before the first one after it
        _report_corrupt(chunk, lost, start, f.last_ts, now_ns, None)
    checks_get = rec.checks().get
    check_of = rec.check_of
    append = records.append
    loads = orjson.loads
    decode = rec.decode
    version = rec.SCHEMA_VERSION
    log_kind = rec.KIND_LOG
    shape: tuple[str, ...] = ()  # the keys of the last record checked, and its check
    check: Callable[[dict[str, Any]], bool] = _no_check
    # The common case first: valid log records, in a loop that does nothing else. At the
    # first line that is anything else (or raises) the full loop below takes over there.
    taken = 0
    if not records:
        try:
            for ln in lines:
                d = loads(ln)
                if d["k"] != log_kind:
                    break
                keys = tuple(d)
                if keys != shape:  # (a call site's records share their keys, in one order)
                    check = checks_get(keys) or check_of(keys)
                    shape = keys
                if d["v"] != version or not check(d):
                    break
                append(d)
        except Exception:
            pass
        taken = len(records)
    pos = start
    if taken:  # the offset after each line taken: the lengths before it, and the newlines
        if ends is not None:
            sums = accumulate(map(len, islice(lines, taken)), initial=start)
            ends += map(add, islice(sums, 1, None), range(1, taken + 1))
            pos = ends[-1]
        else:
            pos = start + sum(map(len, islice(lines, taken))) + taken
        lines = lines[taken:]
    run = 0  # corrupt lines in the current run
    run_end = 0
    for ln in lines:
        pos += len(ln) + 1
        # record.decode's rules, its common case inlined: this loop is the hot path
        try:
            d = loads(ln)
            kind = d["k"]
            keys = tuple(d)
            if keys != shape:  # (a call site's records share their keys, in one order)
                check = checks_get(keys) or check_of(keys)
                shape = keys
            if d["v"] != version or not check(d):
                raise ValueError
        except Exception:
            if not ln:
                continue  # an empty line (a write that failed before any byte): nothing lost
            try:
                d = decode(ln)
            except ValueError:
                if unusable_header(ln):
                    continue  # not a record: nothing lost; the file just has no header
                run += 1
                run_end = pos
                continue
            kind = d["k"]
        if run:
            _report_corrupt(chunk, run, run_end, _ts_of(d, f), now_ns, d)
            run = 0
        if kind == log_kind:
            append(d)
            if ends is not None:
                ends.append(pos)
        elif kind == rec.KIND_DROP:
            _report_drop(chunk, d, pos)
        elif kind == rec.KIND_HEADER and f.header is None:
            f.header = d
            f.identity = reports.identity_from_header(d) | f.identity
            ts = d.get("ts")
            if isinstance(ts, int) and not f.last_ts:
                f.last_ts = ts
        elif out_spans is not None and kind in _SPAN_KINDS:
            out_spans.append(d)
        # span records and repeated headers are not node-log records
    if torn:
        run += 1
        run_end = skipped_to if skipped_to is not None else size
        chunk.end = run_end
    if run:
        _report_corrupt(chunk, run, run_end, _mtime_ns(f, now_ns), now_ns, None)
    if records:
        last = records[-1]
        ts = last.get("ts")
        if isinstance(ts, int):
            f.last_ts = ts
        if last.get("lg") != reports.LOGGER:
            f.identity = reports.identity_of(last) or f.identity
    if chunk.end > start:
        f.seq = max(f.seq, last_seq(records, out_spans, f.seq))
        if f.resync >= 0:  # still no record after the cut: its lines were all corrupt
            f.resync_bad += chunk.corrupt
    if body and chunk.end == start + len(body):
        at = body.rfind(b"\n", 0, len(body) - 1) + 1
        f.last_len = len(body) - at
        f.last_crc = zlib.crc32(body[at:])
    elif chunk.end != start:
        f.last_len = 0  # ends after a torn or skipped line: nothing to compare
    f.offset = chunk.end
    if f.tail and chunk.end != start + len(body):
        f.tail = 0
    return chunk


_SPAN_KINDS: Final = frozenset({rec.KIND_SPAN_START, rec.KIND_SPAN_END})


def _no_check(d: dict[str, Any]) -> bool:
    return False  # (never called: the first record's keys differ from the empty shape)


def _ts_of(d: dict[str, Any], f: SpoolFile) -> int:
    ts = d.get("ts")
    return ts if isinstance(ts, int) else f.last_ts


def _mtime_ns(f: SpoolFile, default: int) -> int:
    try:
        return os.fstat(f.fd).st_mtime_ns
    except OSError:
        return default


def _append_report(chunk: Chunk, report: dict[str, Any], count: int, end: int) -> None:
    chunk.reports[len(chunk.records)] = count
    chunk.records.append(report)
    if chunk.ends is not None:
        chunk.ends.append(end)


def _report_corrupt(
    chunk: Chunk,
    count: int,
    end: int,
    last_ts: int,
    now_ns: int,
    following: dict[str, Any] | None,
) -> None:
    """Report a run of ``count`` corrupt lines ending at ``end``: who wrote them comes from
    the record before (or ``following``, or the file's header), their time range from the
    records around them (the file's mtime for a tail)."""
    f = chunk.file
    before = chunk.records[-1] if chunk.records else None
    first_ts = before.get("ts") if before is not None else f.last_ts
    first = first_ts if isinstance(first_ts, int) and first_ts else last_ts
    identity = f.identity
    for neighbour in (before, following):
        if neighbour is not None and neighbour.get("lg") != reports.LOGGER:
            identity = reports.identity_of(neighbour) or identity
            break
    report = reports.loss_report(
        what="corrupt",
        count=count,
        reason=DropReasonValues.CORRUPT.value,
        pid=f.pid,
        identity=identity,
        first_ts=first,
        last_ts=max(first, last_ts),
        ts=first or now_ns,
        key=f"{f.writer}-corrupt-{f.parts.index}-{end}",
    )
    chunk.corrupt += count
    # its identity may come from an earlier chunk or the header, whose bytes this chunk's
    # cleanness (nodelog.is_clean) did not see: its text takes the careful path
    chunk.clean = False
    _append_report(chunk, report, count, end)


def _report_drop(chunk: Chunk, drop: dict[str, Any], end: int) -> None:
    report, count = reports.drop_report(drop)
    if "pid" not in report:
        report["pid"] = chunk.file.pid
    chunk.dropped += count
    _append_report(chunk, report, count, end)
