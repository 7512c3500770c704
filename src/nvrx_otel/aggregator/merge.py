"""Chronological merge: records of all writers in timestamp order within a hold window.

Each writer's records wait in their own queue, keyed by the running maximum of their
timestamps: keys never decrease along a writer's queue, so the records that are due (key
older than ``now - hold window``) are a prefix of each queue. Released prefixes are put in
key order by one stable sort; since a writer's keys never decrease and the sort is
stable, a writer's own records always keep their order, even when its threads stamped
them out of order (such a record is placed right behind its predecessor). A record read
late still goes before newer records of other writers as long as it arrives within the
window.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, repeat
from operator import itemgetter
from typing import Any

from nvrx_otel.aggregator.reader import Chunk, SpoolFile

Entry = tuple[int, dict[str, Any], SpoolFile, int, int, bool]
"""One held record: (key, record, file, end offset in the file, writer records it accounts
for (1, or a loss report's count), from a clean chunk (``nodelog.is_clean``)). A plain
tuple: one is made per record on the hot path."""

_KEY = itemgetter(0)


class _Queue:
    __slots__ = ("entries", "keys", "start")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.keys: list[int] = []
        self.start = 0

    def take(self, upto: int) -> list[Entry]:
        taken = self.entries[self.start : upto]
        self.start = upto
        if self.start > 4096 and self.start * 2 > len(self.entries):
            del self.entries[: self.start]
            del self.keys[: self.start]
            self.start = 0
        return taken


class ChronoMerge:
    """Holds records until they are older than the window, then releases them in order.

    At most ``max_held`` records (about 1 KiB of memory each) are held: beyond that all are
    released at once, so a burst larger than the window can hold may be ordered only
    within the part that was held."""

    def __init__(self, hold_ns: int, *, max_held: int = 200_000) -> None:
        self.hold_ns = hold_ns
        self.max_held = max_held
        self.held = 0
        self._queues: dict[str, _Queue] = {}  # in the order writers were first seen

    def add(self, chunk: Chunk) -> None:
        """Queue a chunk's records behind the earlier ones of the same writer."""
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
            if any(s.__class__ is not int for s in stamps):
                raise TypeError
        except (KeyError, TypeError):
            stamps = [_ts(d) for d in records]
        prev = queue.keys[-1] if len(queue.keys) > queue.start else stamps[0]
        keys = list(accumulate(stamps, _max_ts, initial=prev))[1:]
        weights = [1] * len(records)
        for i, count in chunk.reports.items():
            weights[i] = count
        n = len(records)
        queue.entries.extend(
            zip(keys, records, repeat(f, n), ends, weights, repeat(chunk.clean, n), strict=True)
        )
        queue.keys.extend(keys)
        f.held += len(records)
        self.held += len(records)

    def pop(self, now_ns: int | None) -> list[Entry]:
        """Release, in order, every record older than ``now_ns - hold``; all with None
        (and all while more than ``max_held`` are held). The caller lowers each released
        record's ``file.held``."""
        if not self.held:
            return []
        everything = now_ns is None or self.held > self.max_held
        cutoff = 0 if now_ns is None else now_ns - self.hold_ns
        taken: list[Entry] = []
        for queue in self._queues.values():
            n = len(queue.keys)
            upto = n if everything else bisect_right(queue.keys, cutoff, queue.start, n)
            if upto > queue.start:
                taken.extend(queue.take(upto))
        self.held -= len(taken)
        taken.sort(key=_KEY)
        return taken

    def oldest_ts(self) -> int | None:
        """The smallest key still held (when the next record becomes due)."""
        keys = [q.keys[q.start] for q in self._queues.values() if len(q.keys) > q.start]
        return min(keys) if keys else None


def _max_ts(a: int, b: int) -> int:
    return a if a > b else b


def _ts(d: dict[str, Any]) -> int:
    ts = d.get("ts")
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else 0
