"""Chronological merge: records of all writers in timestamp order within a hold window.

Each writer's records wait in their own queue, keyed by the running maximum of their
timestamps: keys never decrease along a writer's queue, so the records that are due (key
older than ``now - hold window``) are a prefix of each queue. Released prefixes are put in
key order by one stable sort; since a writer's keys never decrease and the sort is
stable, a writer's own records always keep their order, even when its threads stamped
them out of order (such a record is placed right behind its predecessor). A record read
late still goes before newer records of other writers as long as it arrives within the
window.

Records wait as the blocks the reader made (one per chunk), not one tuple each: a record
is touched once when released, which is most of what the merge costs. A block may also
carry its records' node-log texts, made while the chunk was just read (in the CPU's cache:
formatting them when released, after the other writers' chunks were read, costs nearly
twice as much); they are released in the same order as the records. When nothing needs the
records once they are in the node log (``keep_records=False``: no record sink), a block
keeps only their texts and timestamps: the records are freed as soon as they are read, as
without the merge, instead of piling up for a cycle (a catch-up holds thousands at a time,
and the memory they free at once goes back to the system, only to be faulted in again by
the next cycle's).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Final

from nvrx_otel.aggregator.reader import Chunk, SpoolFile


class _Block:
    """The records of one chunk with their keys, end offsets and (when the chunk holds
    loss reports) the writer records each accounts for."""

    __slots__ = (
        "clean",
        "collapsed",
        "ends",
        "file",
        "keys",
        "records",
        "stamps",
        "texts",
        "weights",
    )

    def __init__(
        self,
        chunk: Chunk,
        keys: list[int],
        ends: list[int],
        weights: list[int] | None,
        texts: list[str] | None = None,
        stamps: list[int] | None = None,
    ) -> None:
        self.file = chunk.file
        # without the records (None) the texts and the timestamps stand for them
        self.records: list[dict[str, Any]] | None = chunk.records if stamps is None else None
        self.stamps = stamps
        self.texts = texts
        self.keys = keys
        self.ends = ends
        self.weights = weights
        self.clean = chunk.clean
        self.collapsed = chunk.collapsed  # in the last record's weight


@dataclass
class Piece:
    """Released records of one block: how they are accounted to their file."""

    file: SpoolFile
    count: int  # records released
    weight: int  # writer records they account for (loss reports count for more)
    first: int  # smallest key
    last: int  # largest key
    end: int  # file offset after the last one
    collapsed: int = 0  # of ``weight``, records collapsed into another (dedup.py)


@dataclass
class Released:
    """What one ``pop`` releases: records in key order and their pieces."""

    records: list[dict[str, Any]] = field(default_factory=list)  # empty when not kept
    pieces: list[Piece] = field(default_factory=list)
    clean: bool = True  # every piece from a clean chunk (nodelog.is_clean)
    texts: list[str] | None = None  # the records' node-log texts, when every block had them
    count: int = 0  # records released
    last_ts: int | None = None  # the last one's timestamp (``ts``; None when not an int)


class _Queue:
    __slots__ = ("blocks", "pos")

    def __init__(self) -> None:
        self.blocks: deque[_Block] = deque()
        self.pos = 0  # records of blocks[0] already released

    def last_key(self) -> int | None:
        return self.blocks[-1].keys[-1] if self.blocks else None


class ChronoMerge:
    """Holds records until they are older than the window, then releases them in order.

    At most ``max_held`` records (about 1 KiB of memory each, a few hundred bytes without
    the records) are held: beyond that all are released at once, so a burst larger than
    the window can hold may be ordered only within the part that was held.

    ``keep_records=False``: :meth:`add` must be given every chunk's texts, and the records
    are not kept (:attr:`Released.records` stays empty)."""

    def __init__(self, hold_ns: int, *, max_held: int = 200_000, keep_records: bool = True) -> None:
        self.hold_ns = hold_ns
        self.max_held = max_held
        self.keep_records = keep_records
        self.held = 0
        self._queues: dict[str, _Queue] = {}  # in the order writers were first seen

    def add(self, chunk: Chunk, texts: list[str] | None = None) -> None:
        """Queue a chunk's records (and their node-log ``texts``, one per record, when
        given) behind the earlier ones of the same writer. ValueError without them when
        the records are not kept."""
        records = chunk.records
        if not records:
            return
        f = chunk.file
        ends = chunk.ends
        assert ends is not None and len(ends) == len(records)
        queue = self._queues.get(f.writer)
        if queue is None:
            queue = self._queues[f.writer] = _Queue()
        try:
            stamps = [d["ts"] + 0 for d in records]  # ints (a float or str fails below)
            if {*map(type, stamps)} != _INT_ONLY:  # (checked in C: this is per record)
                raise TypeError
        except (KeyError, TypeError):
            stamps = [_ts(d) for d in records]
        prev = queue.last_key()
        # the running maximum (builtin max of two ints: no Python call per record)
        keys = list(accumulate(stamps, max, initial=stamps[0] if prev is None else prev))
        del keys[0]
        weights = None
        if chunk.reports or chunk.collapsed:
            weights = [1] * len(records)
            for i, count in chunk.reports.items():
                weights[i] = count
            weights[-1] += chunk.collapsed  # records collapsed into others (dedup.py)
        if texts is not None and len(texts) != len(records):
            texts = None  # (never: one text per record) released without, formatted then
        if self.keep_records:
            block = _Block(chunk, keys, ends, weights, texts)
        elif texts is None:
            raise ValueError("records that are not kept need one node-log text each")
        else:
            block = _Block(chunk, keys, ends, weights, texts, stamps)
        queue.blocks.append(block)
        f.held += len(records)
        self.held += len(records)

    def pop(self, now_ns: int | None) -> Released:
        """Release, in order, every record older than ``now_ns - hold``; all with None
        (and all while more than ``max_held`` are held). The caller lowers each piece's
        ``file.held``."""
        out = Released()
        if not self.held:
            return out
        everything = now_ns is None or self.held > self.max_held
        cutoff = 0 if now_ns is None else now_ns - self.hold_ns
        keys: list[int] = []
        records: list[dict[str, Any]] | None = None if not self.keep_records else out.records
        stamps: list[int] = []  # the records' timestamps, when not kept
        texts: list[str] | None = []
        queues = 0
        for queue in self._queues.values():
            taken = len(keys)
            blocks = queue.blocks
            while blocks:
                block = blocks[0]
                lo = queue.pos
                n = len(block.keys)
                hi = n if everything else bisect_right(block.keys, cutoff, lo, n)
                if hi > lo:
                    out.pieces.append(_piece(block, lo, hi))
                    out.clean = out.clean and block.clean
                    whole = lo == 0 and hi == n
                    keys += block.keys if whole else block.keys[lo:hi]
                    if block.records is not None:
                        assert records is not None  # (kept: every block has them)
                        records += block.records if whole else block.records[lo:hi]
                    elif block.stamps is not None:
                        stamps += block.stamps if whole else block.stamps[lo:hi]
                    if block.texts is None:
                        texts = None
                    elif texts is not None:
                        texts += block.texts if whole else block.texts[lo:hi]
                if hi < n:
                    queue.pos = hi
                    break  # the rest of this writer's records are newer
                blocks.popleft()
                queue.pos = 0
            queues += len(keys) > taken
        count = out.count = len(keys)
        self.held -= count
        last = count - 1
        if queues > 1:  # each writer's part is in order already; a stable sort keeps it
            order = sorted(range(count), key=keys.__getitem__)
            last = order[-1]
            if records:
                out.records = [records[i] for i in order]
            if texts is not None:
                texts = [texts[i] for i in order]
        out.texts = texts
        if count:
            ts = out.records[-1].get("ts") if records else stamps[last] if stamps else None
            out.last_ts = ts if type(ts) is int else None
        return out

    def oldest_ts(self) -> int | None:
        """The smallest key still held (when the next record becomes due)."""
        keys = [q.blocks[0].keys[q.pos] for q in self._queues.values() if q.blocks]
        return min(keys) if keys else None


def _piece(block: _Block, lo: int, hi: int) -> Piece:
    weights = block.weights
    return Piece(
        file=block.file,
        count=hi - lo,
        weight=hi - lo if weights is None else sum(weights[lo:hi]),
        first=block.keys[lo],
        last=block.keys[hi - 1],
        end=block.ends[hi - 1],
        collapsed=block.collapsed if hi == len(block.keys) else 0,
    )


_INT_ONLY: Final = {int}


def _ts(d: dict[str, Any]) -> int:
    ts = d.get("ts")
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else 0
