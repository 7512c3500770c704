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

With storm de-duplication (``dedup.py``) a flushed window comes in whole
(:meth:`ChronoMerge.add_window`): the records collapsed into another wait as tombstones at
their file positions, under the same key as the record they were collapsed into, so one
``pop`` releases a group whole and the commit after it holds the collapsed record exactly
when it holds its members' positions. Tombstones are never written; their pieces count
them as collapsed.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Final

from nvrx_otel.aggregator.reader import Chunk, SpoolFile


class _Block:
    """The records of one chunk with their keys, end offsets and (when the chunk holds
    loss reports) the writer records each accounts for. With the de-duplication stage
    (:meth:`ChronoMerge.add_window`) it may also hold tombstones: records collapsed into
    another, kept at their file positions so that their positions are released with the
    record they were collapsed into; they are never written."""

    __slots__ = (
        "clean",
        "collapsed",
        "ends",
        "file",
        "keys",
        "records",
        "stamps",
        "texts",
        "tombs",
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
        *,
        records: list[dict[str, Any]] | None = None,
        tombs: list[int] | None = None,
    ) -> None:
        self.file = chunk.file
        if records is None:
            records = chunk.records
        # without the records (None) the texts and the timestamps stand for them
        self.records: list[dict[str, Any]] | None = records if stamps is None else None
        self.stamps = stamps
        self.texts = texts
        self.keys = keys
        self.ends = ends
        self.weights = weights
        self.clean = chunk.clean
        # in the last record's weight (none with tombstones: each is in its own)
        self.collapsed = 0 if tombs is not None else chunk.collapsed
        self.tombs = tombs  # indices of the tombstones, in order (None: none)


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
    count: int = 0  # records released (tombstones left out)
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
        ends = chunk.ends
        assert ends is not None and len(ends) == len(records)
        stamps = _stamps(records)
        prev = self._last_key(chunk.file.writer)
        weights = None
        if chunk.reports or chunk.collapsed:
            weights = [1] * len(records)
            for i, count in chunk.reports.items():
                weights[i] = count
            weights[-1] += chunk.collapsed  # records collapsed into others (dedup.py)
        self._queue(chunk, _running(stamps, prev), stamps, ends, weights, texts)

    def add_window(self, chunks: Sequence[tuple[Chunk, list[str] | None]]) -> None:
        """:meth:`add` the chunks of a flushed de-duplication window (``dedup.py``), in
        reading order, with their tombstones (:attr:`Chunk.tombs`: records collapsed into
        another, queued at their file positions and never written).

        A collapsed record and its tombstones get one key, so one :meth:`pop` releases
        them together and the commit after it holds both the record and its members'
        positions, or neither. The key is the smallest that breaks no writer's order: the
        largest running key of the group's entries, carried along each writer's queue to
        its later groups (groups whose writers cross each other share the larger key)."""
        if not any(c.tombs or c.leads for c, _ in chunks):
            for chunk, texts in chunks:
                self.add(chunk, texts)
            return
        entries = [_entries(chunk, texts) for chunk, texts in chunks]
        # the running keys as they would be without groups, each group's largest, and the
        # order of the groups along each writer's queue
        last: dict[str, int | None] = {}
        top: dict[int, int] = {}
        after: dict[int, set[int]] = {}  # group -> the next groups of its writers
        chain: dict[str, int] = {}  # writer -> its last group so far
        for chunk, e in zip((c for c, _ in chunks), entries, strict=True):
            if e is None:
                continue
            w = chunk.file.writer
            keys = _running(e.stamps, last[w] if w in last else self._last_key(w))
            last[w] = keys[-1]
            before = chain.get(w)
            for i, g in e.links:
                k = keys[i]
                if top.get(g, k) <= k:
                    top[g] = k
                if before is not None and before != g:
                    after.setdefault(before, set()).add(g)
                before = chain[w] = g
        key = _group_keys(top, after)
        last = {}
        for chunk, e in zip((c for c, _ in chunks), entries, strict=True):
            if e is None:
                continue
            w = chunk.file.writer
            raised = list(e.stamps)
            for i, g in e.links:
                raised[i] = key[g]  # (never below the running key: see _group_keys)
            keys = _running(raised, last[w] if w in last else self._last_key(w))
            last[w] = keys[-1]
            self._queue(
                chunk, keys, e.stamps, e.ends, e.weights, e.texts, records=e.records, tombs=e.tombs
            )

    def _last_key(self, writer: str) -> int | None:
        queue = self._queues.get(writer)
        return None if queue is None else queue.last_key()

    def _queue(
        self,
        chunk: Chunk,
        keys: list[int],
        stamps: list[int],
        ends: list[int],
        weights: list[int] | None,
        texts: list[str] | None,
        *,
        records: list[dict[str, Any]] | None = None,
        tombs: list[int] | None = None,
    ) -> None:
        """Queue a block of ``len(keys)`` entries behind the earlier ones of its writer."""
        f = chunk.file
        n = len(keys)
        if texts is not None and len(texts) != n:
            texts = None  # (never: one text per record) released without, formatted then
        if self.keep_records:
            block = _Block(chunk, keys, ends, weights, texts, records=records, tombs=tombs)
        elif texts is None:
            raise ValueError("records that are not kept need one node-log text each")
        else:
            block = _Block(chunk, keys, ends, weights, texts, stamps, tombs=tombs)
        queue = self._queues.get(f.writer)
        if queue is None:
            queue = self._queues[f.writer] = _Queue()
        queue.blocks.append(block)
        f.held += n
        self.held += n

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
        dead: list[int] = []  # where the tombstones are among those released
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
                    piece = _piece(block, lo, hi)
                    if block.tombs is not None:
                        a = bisect_left(block.tombs, lo)
                        b = bisect_left(block.tombs, hi, a)
                        piece.collapsed = b - a
                        at = len(keys) - lo
                        dead += [at + t for t in block.tombs[a:b]]
                    out.pieces.append(piece)
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
        if queues > 1 or dead:  # each writer's part is in order already; a stable sort keeps it
            order: Sequence[int] = range(count)
            if queues > 1:
                order = sorted(order, key=keys.__getitem__)
            if dead:  # tombstones are not written
                gone = set(dead)
                order = [i for i in order if i not in gone]
                count = out.count = len(order)
            last = order[-1] if order else -1
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


class _Entries:
    """A chunk's records and tombstones in file order (:meth:`ChronoMerge.add_window`)."""

    __slots__ = ("ends", "links", "records", "stamps", "texts", "tombs", "weights")

    def __init__(self, chunk: Chunk, texts: list[str] | None) -> None:
        records = chunk.records
        ends = chunk.ends
        assert ends is not None and len(ends) == len(records)
        stamps = _stamps(records) if records else []
        reports = chunk.reports
        leads = chunk.leads or {}
        tombs = chunk.tombs or []
        if texts is not None and len(texts) != len(records):
            texts = None
        self.records = records
        self.ends = ends
        self.stamps = stamps
        self.texts = texts
        self.tombs: list[int] | None = None
        self.weights: list[int] | None = None
        self.links = sorted(leads.items())  # (entry index, group) of the group's entries
        if reports:
            self.weights = [1] * len(records)
            for i, count in reports.items():
                self.weights[i] = count
        if not tombs:
            return
        n = len(tombs)
        if not records:  # all collapsed into others (most of a storm's batches)
            self.records = [_TOMB] * n
            self.ends = [t[1] for t in tombs]
            self.stamps = [t[2] for t in tombs]
            self.texts = None if texts is None else [""] * n
            self.tombs = list(range(n))
            self.weights = [1] * n
            self.links = [(i, t[3]) for i, t in enumerate(tombs)]
            return
        # the tombstones go in before the record each stood before (in file order)
        n += len(records)
        where = [0] * len(records)  # record index -> entry index
        self.records = []
        self.ends = []
        self.stamps = []
        self.texts = None if texts is None else []
        self.tombs = []
        weights = self.weights
        self.weights = [1] * n  # a tombstone accounts for its own record
        links: list[tuple[int, int]] = []
        j = 0
        for at, end, ts, gid in [*tombs, (len(records), 0, 0, -1)]:
            while j < at:
                e = len(self.records)
                where[j] = e
                self.records.append(records[j])
                self.ends.append(ends[j])
                self.stamps.append(stamps[j])
                if self.texts is not None:
                    assert texts is not None
                    self.texts.append(texts[j])
                if weights is not None:
                    self.weights[e] = weights[j]
                j += 1
            if gid < 0:
                break
            links.append((len(self.records), gid))
            self.tombs.append(len(self.records))
            self.records.append(_TOMB)
            self.ends.append(end)
            self.stamps.append(ts)
            if self.texts is not None:
                self.texts.append("")
        links += [(where[i], gid) for i, gid in leads.items()]
        self.links = sorted(links)


def _entries(chunk: Chunk, texts: list[str] | None) -> _Entries | None:
    if not chunk.records and not chunk.tombs:
        return None
    return _Entries(chunk, texts)


def _group_keys(top: dict[int, int], after: dict[int, set[int]]) -> dict[int, int]:
    """Each group's key: the largest of ``top`` (its entries' running keys) over itself and
    every group before it along some writer's queue (``after``: a group's next groups). A
    writer's keys never decrease, so none of its groups may have a smaller key than one
    before it. Taken from the largest down: what that reaches and nothing larger has
    reached gets its key (linear in the groups and their links)."""
    key: dict[int, int] = {}
    for g in sorted(top, key=top.__getitem__, reverse=True):
        if g in key:
            continue
        k = key[g] = top[g]
        stack = [g]
        while stack:
            for h in after.get(stack.pop(), ()):
                if h not in key:
                    key[h] = k
                    stack.append(h)
    return key


def _running(stamps: list[int], prev: int | None) -> list[int]:
    """The running maximum of ``stamps`` from ``prev`` (builtin max of two ints: no Python
    call per record)."""
    keys = list(accumulate(stamps, max, initial=stamps[0] if prev is None else prev))
    del keys[0]
    return keys


def _stamps(records: list[dict[str, Any]]) -> list[int]:
    """The records' ``ts`` (0 for one that is not an int)."""
    try:
        stamps = [d["ts"] + 0 for d in records]  # ints (a float or str fails below)
        if {*map(type, stamps)} != _INT_ONLY:  # (checked in C: this is per record)
            raise TypeError
    except (KeyError, TypeError):
        stamps = [_ts(d) for d in records]
    return stamps


_TOMB: Final[dict[str, Any]] = {}
"""What stands for a tombstone among a block's records (never written)."""


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
