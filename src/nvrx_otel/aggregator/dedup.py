"""Storm de-duplication: identical records from many ranks within a window become one.

Opt-in (``nvrx-otel aggregate --dedup-window MS``). The stage sits between the reader and
everything after it (node log, chronological merge, OTLP): the loop hands it each chunk it
reads (:meth:`DedupWindow.add`) and, once the window has passed since the first chunk it
holds, takes them all back rewritten (:meth:`DedupWindow.flush`), in reading order, and
passes them on as if just read. So the node log and OTLP get the same collapsed record.

Records are *identical* when they have the same level, logger, call site (path or file,
line), message text, exception text and attributes. The spool keeps the formatted message
only (``record.py`` has no template and arguments), so "the same message template" is the
same formatted text here: a message that embeds the rank or a step number differs per rank
and is never collapsed. Within one flush, identical records of *distinct* ranks whose times
lie within the window of each other form a group; a rank's second identical record goes to
the second group, and so on (one rank repeating itself is not a storm across ranks: 512
ranks logging the same line three times make three records of 512). A group
of two or more becomes its earliest record with the attributes ``nv.nvrx.dedup.count``,
``.ranks`` (``0-127,130``), ``.first_time`` and ``.last_time`` (ns); the others leave their
chunks and are counted as *collapsed*. Loss reports, records without a rank and
records without an integer time are never collapsed.

Exactly once, across ``kill -9`` too: while the stage holds chunks of a spool file the
file's ``held`` count is above zero, so its committed position (``done``) does not move past
them, its drop ledger waits, the file is not deleted and the OTLP sink reads no further
than the first held chunk (``first_start``). A restart reads a window that was not flushed
and committed again, and collapses it again: no record is both collapsed and written, none
is lost. A window is flushed whole, so after a flush no file has a record held back behind
one passed on. A window straddling a flush gives two collapsed records, not one.

With the chronological merge (``tombstones=True``) the records taken out are also marked
on their chunks (:attr:`Chunk.tombs`, with each collapsed record's group in
:attr:`Chunk.leads`): the merge keeps them as tombstones at their file positions, keyed as
the record they were collapsed into, so it releases them together and a commit holds the
collapsed record exactly when it holds its members' positions (``merge.add_window``).
"""

from __future__ import annotations

import operator
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any, Final

import orjson

from nvrx_otel import semconv
from nvrx_otel.aggregator.reader import Chunk, SpoolFile
from nvrx_otel.nodeline import ranges

MAX_HELD: Final = 100_000
"""Records held at most: a window holding more is flushed early (memory stays bounded)."""

Key = tuple[Any, ...]


class _Group:
    __slots__ = ("first", "last", "leader", "members", "ranks")

    def __init__(self, at: tuple[int, int], rank: int, ts: int) -> None:
        self.leader = at  # (chunk index, record index) of the earliest record
        self.members = [at]
        self.ranks = {rank}
        self.first = self.last = ts


class _Slot:
    """The groups of one key, in the order they were opened. A rank's identical records
    come in its file's order: its first goes to the first group, its second to the
    second, and so on (``pos``), each to the next group whose time span it fits in."""

    __slots__ = ("groups", "pos")

    def __init__(self, first: _Group) -> None:
        self.groups = [first]
        self.pos = {next(iter(first.ranks)): 1}

    def place(self, at: tuple[int, int], rank: int, ts: int, window: int) -> None:
        groups = self.groups
        i = self.pos.get(rank, 0)
        while i < len(groups):
            g = groups[i]
            if max(g.last, ts) - min(g.first, ts) <= window and rank not in g.ranks:
                g.members.append(at)
                g.ranks.add(rank)
                if ts < g.first:
                    g.first = ts
                    g.leader = at
                elif ts > g.last:
                    g.last = ts
                break
            i += 1
        else:
            groups.append(_Group(at, rank, ts))
        self.pos[rank] = i + 1


class DedupWindow:
    """Holds the chunks read within a window; :meth:`flush` collapses and returns them."""

    def __init__(
        self,
        window_ms: int,
        *,
        max_held: int = MAX_HELD,
        clock: Callable[[], float] = time.monotonic,
        tombstones: bool = False,
    ) -> None:
        self.window_s = window_ms / 1000
        self.tombstones = tombstones  # mark what is taken out (Chunk.tombs, Chunk.leads)
        self.window_ns = window_ms * 1_000_000
        self.max_held = max_held
        self.clock = clock
        self.held = 0  # records held
        self.collapsed = 0  # records collapsed into others since the start (this run)
        self.groups = 0  # collapsed records made since the start (this run)
        self._chunks: list[tuple[Chunk, int]] = []  # (chunk, offset it was read from)
        self._starts: dict[SpoolFile, int] = {}  # per file, where its first held chunk starts
        self._opened: float | None = None

    def add(self, chunk: Chunk, start: int) -> None:
        """Hold a chunk read from ``chunk.file`` at ``start`` (in reading order)."""
        f = chunk.file
        if self._opened is None:
            self._opened = self.clock()
        self._chunks.append((chunk, start))
        self._starts.setdefault(f, start)
        f.held += 1  # one per chunk: the file's committed position waits for the flush
        self.held += len(chunk.records)

    def due(self) -> bool:
        """The window has passed since the first chunk held (or too much is held)."""
        if self._opened is None:
            return False
        return self.held > self.max_held or self.clock() - self._opened >= self.window_s

    def wait_s(self) -> float | None:
        """Seconds until :meth:`due` (None when nothing is held)."""
        if self._opened is None:
            return None
        return max(0.0, self._opened + self.window_s - self.clock())

    def first_start(self, f: SpoolFile) -> int | None:
        """Where the first chunk held of ``f`` starts (None when none is held)."""
        return self._starts.get(f)

    @property
    def holding(self) -> bool:
        return bool(self._chunks)

    def flush(self) -> list[tuple[Chunk, int]]:
        """Every chunk held, in reading order, with identical records collapsed; each file's
        ``held`` is lowered by what :meth:`add` raised it."""
        chunks = self._chunks
        self._chunks = []
        self._opened = None
        self.held = 0
        for chunk, _ in chunks:
            chunk.file.held -= 1
        self._collapse([c for c, _ in chunks])
        return chunks

    def passed(self) -> None:
        """The chunks of the last :meth:`flush` are passed on: :meth:`first_start` no longer
        holds the OTLP sink back (it did until now, so that it takes them from the loop
        rather than reading them itself)."""
        self._starts = {}

    def forget(self) -> None:
        """Drop what is held without passing it on (a resume re-reads it from the spool)."""
        for chunk, _ in self._chunks:
            chunk.file.held -= 1
        self._chunks = []
        self._starts = {}
        self._opened = None
        self.held = 0

    # --- collapsing ---------------------------------------------------------------------------

    def _collapse(self, chunks: list[Chunk]) -> None:
        window = self.window_ns
        # per key: the one record seen so far (chunk index, record index, rank, ts), or its
        # groups once a second came; most records stay alone, so no group is made for them
        seen: dict[Key, tuple[int, int, int, int] | _Slot] = {}
        slots: list[_Slot] = []
        for ci, chunk in enumerate(chunks):
            loss = chunk.reports
            for ri, d in enumerate(chunk.records):
                rank = d.get("rank")
                ts = d.get("ts")
                if rank.__class__ is not int or ts.__class__ is not int or (loss and ri in loss):
                    continue  # no rank or time, or a loss report: never collapsed
                try:
                    site: Key = _SITE(d)
                    key = site if site[4] is not None else _key_of_odd(d)  # null path: file
                except KeyError:
                    key = _key_of_odd(d)
                if "attrs" in d or "exc" in d:
                    key = _with_extras(key, d)
                if key is None:
                    continue
                slot = seen.get(key)
                if slot is None:
                    seen[key] = (ci, ri, rank, ts)
                    continue
                if isinstance(slot, tuple):
                    slot = seen[key] = _Slot(_Group((slot[0], slot[1]), slot[2], slot[3]))
                    slots.append(slot)
                slot.place((ci, ri), rank, ts, window)
        groups = [g for slot in slots for g in slot.groups if len(g.members) > 1]
        gone: dict[int, set[int]] = {}
        # with tombstones: (chunk, record) -> group of the records taken out, and the leaders
        links: dict[tuple[int, int], int] = {}
        leads: list[tuple[tuple[int, int], int]] = []
        tombstones = self.tombstones
        for gid, g in enumerate(groups):
            ci, ri = g.leader
            chunk = chunks[ci]
            leader = chunk.records[ri]
            attrs = dict(leader.get("attrs") or {})
            attrs[semconv.DEDUP_COUNT] = len(g.members)
            attrs[semconv.DEDUP_RANKS] = ranges(g.ranks)
            attrs[semconv.DEDUP_FIRST_TIME] = g.first
            attrs[semconv.DEDUP_LAST_TIME] = g.last
            merged = dict(leader)
            merged["attrs"] = attrs
            chunk.records[ri] = merged
            chunk.clean = False  # its line ends with the repeat note (nodeline.repeat_note)
            for at in g.members:
                if at != g.leader:
                    gone.setdefault(at[0], set()).add(at[1])
                    if tombstones:
                        links[at] = gid
            if tombstones:
                leads.append((g.leader, gid))
            self.collapsed += len(g.members) - 1
            self.groups += 1
        if leads:
            _mark(chunks, gone, links, leads)
        for ci, indices in gone.items():
            _remove(chunks[ci], indices)


_SITE: Final = operator.itemgetter("msg", "line", "lvl", "lg", "path")
"""What makes records identical, in the common case (every field there)."""


def _key_of_odd(d: dict[str, Any]) -> Key | None:
    """:data:`_SITE` of a record missing some of its fields (``file`` for ``path``); None
    (never collapsed) when its ``file`` is not a text: readers show that field as it is,
    without checking its type, and a list or an object cannot be a key."""
    site = d.get("path") or d.get("file")
    if site is not None and site.__class__ is not str:
        return None
    return (d.get("msg"), d.get("line"), d.get("lvl"), d.get("lg"), site)


def _with_extras(key: Key | None, d: dict[str, Any]) -> Key | None:
    """``key`` with the exception text and the attributes; None when the attributes cannot
    be compared (never collapsed)."""
    if key is None:
        return None
    attrs = d.get("attrs")
    if attrs:
        try:
            attrs = orjson.dumps(attrs, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            return None
    return (*key, d.get("exc"), attrs)


def _mark(
    chunks: list[Chunk],
    gone: dict[int, set[int]],
    links: dict[tuple[int, int], int],
    leads: list[tuple[tuple[int, int], int]],
) -> None:
    """Give each chunk its tombstones (the records about to be taken out: where each stood
    among the records left, its end offset, time and group) and its collapsed records'
    groups (:attr:`Chunk.tombs`, :attr:`Chunk.leads`), for the chronological merge."""
    taken: dict[int, list[int]] = {}
    for ci, indices in gone.items():
        chunk = chunks[ci]
        records = chunk.records
        ends = chunk.ends
        order = taken[ci] = sorted(indices)
        chunk.tombs = [
            # the k-th taken out stood before the record left at ri - k
            (ri - k, chunk.end if ends is None else ends[ri], records[ri]["ts"], links[ci, ri])
            for k, ri in enumerate(order)
        ]
    for (ci, ri), gid in leads:
        chunk = chunks[ci]
        if chunk.leads is None:
            chunk.leads = {}
        chunk.leads[ri - bisect_left(taken.get(ci, ()), ri)] = gid


def _remove(chunk: Chunk, indices: set[int]) -> None:
    """Take the records at ``indices`` (collapsed into another) out of ``chunk``; they stay
    in its weight (:attr:`Chunk.collapsed`), so per-writer accounting still holds them."""
    keep = [i for i in range(len(chunk.records)) if i not in indices]
    chunk.records = [chunk.records[i] for i in keep]
    if chunk.ends is not None:
        chunk.ends = [chunk.ends[i] for i in keep]
    if chunk.reports:
        where = {old: new for new, old in enumerate(keep)}
        chunk.reports = {where[i]: n for i, n in chunk.reports.items()}
    chunk.collapsed += len(indices)
