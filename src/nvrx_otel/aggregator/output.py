"""Where records go once read: the node log (rotating when due) and the record sinks, with
the per-writer accounting that rotation reports need."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from nvrx_otel.aggregator.health import Health, plural, say
from nvrx_otel.aggregator.merge import Released
from nvrx_otel.aggregator.nodelog import (
    Backup,
    NodeLogFile,
    add_stats,
    clean_record_texts,
    format_clean_records,
    format_records,
    record_texts,
)
from nvrx_otel.aggregator.reader import Chunk, SpoolFile
from nvrx_otel.aggregator.reports import loss_report
from nvrx_otel.semconv import DropReasonValues

WRITE_PART: Final = 512
"""Record texts joined and written to the node log at a time (about a chunk's)."""

RecordSink = Callable[[list[dict[str, Any]]], None]
"""Receives every batch of records right after it is in the node log (the OTLP sink's door)."""

Accounting = tuple[str, Any, Any, int, int, int]
"""writer id, rank, pid, records accounted, first ts, last ts"""


class Output:
    """Writes batches of records; ``rotate`` is called (by the service, which commits
    around it) before a batch when the node log has reached its size limit."""

    def __init__(
        self,
        log: NodeLogFile,
        node: str,
        *,
        sinks: Sequence[RecordSink],
        health: Health,
        totals: dict[str, int],
        rotate: Callable[[], None],
    ) -> None:
        self.log = log
        self.node = node
        self.sinks = list(sinks)
        self.health = health
        self.totals = totals
        self.rotate = rotate
        self._sink_errors: set[str] = set()
        # True while a flushed de-duplication window is written: a rotation commits, and a
        # commit between its chunks would hold records collapsed into one not yet written
        self.rotation_held = False
        # Loss reports that come from no spool file (drop ledgers) go to the other sinks here.
        self.loss_sinks: list[Callable[[str, dict[str, Any]], None]] = []

    def chunk(self, chunk: Chunk) -> None:
        """Write a chunk's records (reading order; the file's ``done`` is the caller's)."""
        records = chunk.records
        f = chunk.file
        if not records:
            if chunk.collapsed:  # all collapsed into another writer's record: held there
                rank = f.identity.get("rank")
                add_stats(
                    self.log.stats, f.writer, rank, f.pid, chunk.collapsed, f.last_ts, f.last_ts
                )
                self._collapsed(chunk.collapsed)
            return
        first = _ts(records[0], f.last_ts)
        last = _ts(records[-1], first)
        acct = (f.writer, f.identity.get("rank"), f.pid, chunk.weight, first, last)
        self.write(records, [acct], clean=chunk.clean)
        self._collapsed(chunk.collapsed)  # (in the file written: a rotation came first)

    def released(self, released: Released) -> None:
        """Write records released by the chronological merge and advance each file's
        ``done`` to the last of its records written (to all it read when none is held).
        Released without the records (the merge keeps none when no record sink wants
        them), their texts stand for them. Tombstones (records collapsed into another,
        ``merge.ChronoMerge.add_window``) are not written, but their files' positions
        advance past them and they are counted collapsed, with the record they were
        collapsed into (released together)."""
        if not released.pieces:
            return
        acct: dict[SpoolFile, list[int]] = {}  # weight, first ts, last ts, last end, count
        for p in released.pieces:
            a = acct.get(p.file)
            if a is None:
                acct[p.file] = [p.weight, p.first, p.last, p.end, p.count]
                continue
            a[0] += p.weight
            a[1] = min(a[1], p.first)
            a[2] = max(a[2], p.last)
            a[3] = p.end  # a file's pieces come in file order
            a[4] += p.count
        accounting = [
            (f.writer, f.identity.get("rank"), f.pid, a[0], a[1], a[2]) for f, a in acct.items()
        ]
        if not released.count:  # (never: tombstones come with their record) accounted only
            self._count(accounting, 0, None)
        elif released.records:
            self.write(released.records, accounting, clean=released.clean, texts=released.texts)
        else:
            assert released.texts is not None and not self.sinks  # (the merge's contract)
            self._write_texts(released.texts, accounting, released.count, released.last_ts)
        self._collapsed(sum(p.collapsed for p in released.pieces))
        for f, a in acct.items():
            f.held -= a[4]
            f.done = f.offset if not f.held else a[3]

    def _collapsed(self, count: int) -> None:
        """``count`` records collapsed into others (dedup.py) are accounted in the node log
        now: counted with what is written, so a commit holds them exactly when it holds
        their spool positions (with ``--en-chronological-ordering``, when the merge releases
        their tombstones, with the record they were collapsed into)."""
        if count:
            self.log.collapsed += count
            self.totals["collapsed"] = self.totals.get("collapsed", 0) + count
            self.health.collapsed += count

    def texts(self, chunk: Chunk) -> list[str]:
        """The node-log texts of a chunk's records, one each (for the chronological merge
        to hold beside them)."""
        return (clean_record_texts if chunk.clean else record_texts)(chunk.records, self.node)

    def write(
        self,
        records: list[dict[str, Any]],
        acct: Iterable[Accounting],
        *,
        clean: bool = False,
        texts: list[str] | None = None,
    ) -> None:
        """Append records to the node log (OSError if it cannot be), then hand them to the
        sinks. ``texts``: the records' node-log texts (:meth:`texts`), made already."""
        if texts is not None:
            self._write_texts(texts, acct, len(records), records[-1].get("ts"))
            self._to_sinks(records)
            return
        text = (format_clean_records if clean else format_records)(records, self.node)
        data = text.encode("utf-8", "replace")
        if not self.rotation_held and self.log.needs_rotation():
            self.rotate()
        self.log.write(data)
        self._account(records, acct)

    def _write_texts(
        self, texts: list[str], acct: Iterable[Accounting], count: int, last_ts: int | None
    ) -> None:
        """:meth:`write` of records no sink wants, by their texts alone."""
        if not self.rotation_held and self.log.needs_rotation():
            self.rotate()
        self._put(texts)
        self._count(acct, count, last_ts)

    def _put(self, texts: list[str]) -> None:
        """Append record texts to the node log, each ended by a newline, a part at a time:
        the merge releases a whole cycle's records at once, and buffers that large would
        each be fresh memory from the system (faulted in page by page) and given back."""
        write = self.log.write
        for at in range(0, len(texts), WRITE_PART):
            part = texts[at : at + WRITE_PART]
            part.append("")  # the last text's newline
            write("\n".join(part).encode("utf-8", "replace"))

    def _count(self, acct: Iterable[Accounting], written: int, last_ts: Any) -> None:
        stats = self.log.stats
        for writer, rank, pid, count, first, last in acct:
            add_stats(stats, writer, rank, pid, count, first, last)
        self.health.written += written
        self.totals["written"] += written
        if isinstance(last_ts, int):
            self.health.last_ts = last_ts

    def _account(self, records: list[dict[str, Any]], acct: Iterable[Accounting]) -> None:
        self._count(acct, len(records), records[-1].get("ts"))
        self._to_sinks(records)

    def _to_sinks(self, records: list[dict[str, Any]]) -> None:
        for sink in self.sinks:
            try:
                sink(records)
            except Exception as exc:  # a sink never stops the node log
                key = f"{sink!r}:{type(exc).__name__}"
                if key not in self._sink_errors:
                    self._sink_errors.add(key)
                    say(f"record sink {sink!r} failed: {type(exc).__name__}: {exc}")

    def loss(self, writer: str, report: dict[str, Any], acct: Accounting) -> None:
        """Write a loss report of ``writer`` that no spool file holds (a drop ledger's) to
        the node log, and hand it to every loss sink."""
        self.write([report], [acct])
        for sink in self.loss_sinks:
            sink(writer, report)

    def rotation_reports(self, deleted: list[Backup]) -> None:
        """Report, per writer, the records node-log backups deleted by rotation held."""
        now = time.time_ns()
        records: list[dict[str, Any]] = []
        acct: list[Accounting] = []
        for backup in deleted:
            if not backup.stats:
                say(f"rotation deleted a node-log backup (inode {backup.ino}) of an earlier run")
                continue
            lost = 0
            for writer, (rank, pid, count, first, last) in sorted(backup.stats.items()):
                records.append(
                    loss_report(
                        what="dropped",
                        count=count,
                        reason=DropReasonValues.ROTATION.value,
                        pid=pid,
                        identity={} if rank is None else {"rank": rank},
                        first_ts=first,
                        last_ts=last,
                        ts=now,
                        key=f"rotation-{backup.ino}-{writer}",
                    )
                )
                acct.append((writer, rank, pid, count, first, last))
                lost += count
            self.health.dropped += lost
            self.totals["dropped"] += lost
            # the records collapsed into a deleted record are dropped now, no longer collapsed
            self.totals["collapsed"] = self.totals.get("collapsed", 0) - backup.collapsed
            self.health.collapsed -= min(self.health.collapsed, backup.collapsed)
            say(
                f"rotation deleted a node-log backup holding {plural(lost, 'record')} "
                "(reported in the log)"
            )
        if records:
            self.log.write(format_records(records, self.node).encode("utf-8", "replace"))
            self._account(records, acct)


def _ts(record: dict[str, Any], default: int) -> int:
    ts = record.get("ts")
    return ts if isinstance(ts, int) else default
