"""Streams → one chronological sequence, in bounded memory.

Each stream is near time-ordered (a node log's ranks are interleaved by the aggregator's
batches, an OTLP file's requests by their export), so each goes through a *reorder
window*: a record is held until the stream has shown a record :data:`REORDER_WINDOW_NS`
later than it (or the hold is full, :data:`HOLD_MAX` records over all streams), then a
heap merges the streams by time. A record more than the window out of order in its
stream is shown late, where it was read, never dropped. Memory is the held records plus
one read chunk per stream, however long the files.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Final

from nvrx_otel.view.entry import Entry

REORDER_WINDOW_NS: Final = 5_000_000_000
"""5 s: the aggregator writes each rank's records within its check interval (1 s) and
its hold window (2 s) of each other, unless it is behind."""
HOLD_MAX: Final = 50_000
"""Records held for reordering over all streams (each stream holds at least 1000): about
15 MB."""


def _ts(entry: Entry) -> int:
    return entry.ts_ns


def reorder(
    entries: Iterable[Entry], window_ns: int = REORDER_WINDOW_NS, hold: int = HOLD_MAX
) -> Iterator[Entry]:
    """``entries`` in time order wherever they are less than ``window_ns`` out of order,
    holding at most ``hold`` of them (ties keep their order)."""
    heap: list[tuple[int, int, Entry]] = []
    push, pop = heapq.heappush, heapq.heappop
    newest = -(1 << 63)
    for seq, entry in enumerate(entries):
        ts = entry.ts_ns
        if ts > newest:
            newest = ts
        push(heap, (ts, seq, entry))
        limit = newest - window_ns
        while heap and (heap[0][0] <= limit or len(heap) > hold):
            yield pop(heap)[2]
    while heap:
        yield pop(heap)[2]


def merge(
    streams: list[Iterable[Entry]], window_ns: int = REORDER_WINDOW_NS, hold: int = HOLD_MAX
) -> Iterator[Entry]:
    """All streams' entries in one time order (see the module for the window)."""
    if not streams:
        return iter(())
    each = max(1000, hold // len(streams))
    return heapq.merge(*(reorder(s, window_ns, each) for s in streams), key=_ts)
