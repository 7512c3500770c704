"""Identical messages within a short window collapse into one line (as Ray's console
de-duplication does).

A record joins the *group* of the first earlier record with the same level and text (the
whole message, traceback included) when it is at most :data:`WINDOW_NS` later than that
first record; a record later than that starts a new group. A group is shown once, at its
first record's place, with how many records it holds and from which ranks: ``[repeated 127x
across ranks 0-127]``. A record the aggregator's own window collapsed (``nvrx-otel
aggregate --dedup-window``) counts as the records it stands for, from its ranks, so it
reads the same (and joins the view's groups the same way). Loss reports never collapse. The
records are already in time order, so a group is complete once a record later than its
window arrives; groups still open wait (at most :data:`PENDING_MAX` of them, the oldest
shown first when more are waiting).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Final

from nvrx_otel.nodeline import ranges as ranges
from nvrx_otel.view.entry import Entry

WINDOW_NS: Final = 2_000_000_000
"""2 s: records this close to the first of their group join it."""
PENDING_MAX: Final = 20_000
"""Groups waiting for their window to pass; beyond this the oldest is shown as it stands."""
_EMPTY: Final[set[int]] = set()
_EMPTY_NODES: Final[set[str | None]] = set()


class Group:
    """A record and the identical ones that joined it."""

    __slots__ = ("count", "entry", "infra", "nodes", "ranks", "unknown")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.count = 1
        # who sent it: filled when a second record joins (most groups stay single)
        self.ranks: set[int] = _EMPTY
        self.infra: set[int] = _EMPTY
        self.unknown = 0
        self.nodes: set[str | None] = _EMPTY_NODES
        if entry.collapsed is not None:  # the aggregator collapsed records into it
            self.ranks, self.infra, self.nodes = set(), set(), set()
            self._note(entry)
            self.count = entry.collapsed.count

    def add(self, entry: Entry) -> None:
        if self.nodes is _EMPTY_NODES:
            self.ranks, self.infra, self.nodes = set(), set(), set()
            self._note(self.entry)
        self.count += 1 if entry.collapsed is None else entry.collapsed.count
        self._note(entry)

    def _note(self, entry: Entry) -> None:
        c = entry.collapsed
        if c is not None:
            self.nodes.add(entry.node)
            if c.ranks:
                self.ranks.update(c.ranks)
            else:
                self.unknown += c.count
            return
        if entry.rank is not None:
            self.ranks.add(entry.rank)
        elif entry.irank is not None:
            self.infra.add(entry.irank)
        else:
            self.unknown += 1
        self.nodes.add(entry.node)

    def summary(self) -> str:
        """``repeated 127x across ranks 0-127`` (empty for a group of one)."""
        if self.count < 2:
            return ""
        parts = []
        if self.ranks:
            parts.append(_ranks("rank", self.ranks))
        if self.infra:
            parts.append(_ranks("infra rank", self.infra))
        if self.unknown:
            parts.append("rank ?" if not parts else "?")
        single = len(self.ranks) + len(self.infra) + (1 if self.unknown else 0) == 1
        where = ("from " if single else "across ") + ", ".join(parts)
        nodes = f" on {len(self.nodes)} nodes" if len(self.nodes) > 1 else ""
        return f"repeated {self.count}x {where}{nodes}"


def _ranks(word: str, numbers: set[int]) -> str:
    return f"{word}{'s' if len(numbers) > 1 else ''} {ranges(numbers)}"


class Dedup:
    """Records in time order in (:meth:`push`), groups out in time order of their first
    record."""

    def __init__(self, window_ns: int = WINDOW_NS, pending_max: int = PENDING_MAX) -> None:
        self.window_ns = window_ns
        self.pending_max = pending_max
        self.queue: deque[Group] = deque()
        self.open: dict[tuple[str, str], Group] = {}

    def push(self, entry: Entry) -> list[Group]:
        """Take the next record; the groups it completes."""
        out = self.flush(entry.ts_ns - self.window_ns)
        if entry.loss is not None:
            group = Group(entry)
            self.queue.append(group)
        else:
            key = (entry.level, entry.text)
            joined = self.open.get(key)
            if joined is not None and entry.ts_ns - joined.entry.ts_ns <= self.window_ns:
                joined.add(entry)
            else:
                group = Group(entry)
                self.queue.append(group)
                self.open[key] = group
        while len(self.queue) > self.pending_max:
            out.append(self._pop())
        return out

    def flush(self, before_ns: int | None = None) -> list[Group]:
        """The waiting groups whose first record is earlier than ``before_ns`` (all when
        None)."""
        out: list[Group] = []
        queue = self.queue
        while queue and (before_ns is None or queue[0].entry.ts_ns < before_ns):
            out.append(self._pop())
        return out

    def _pop(self) -> Group:
        group = self.queue.popleft()
        entry = group.entry
        key = (entry.level, entry.text)
        if self.open.get(key) is group:
            del self.open[key]
        return group


def dedup(entries: Iterable[Entry], window_ns: int = WINDOW_NS) -> Iterator[Group]:
    """Groups of ``entries`` (in time order), each once its window has passed."""
    d = Dedup(window_ns)
    for entry in entries:
        yield from d.push(entry)
    yield from d.flush()


def singles(entries: Iterable[Entry]) -> Iterator[Group]:
    """Every entry as a group of its own (``--no-dedup``)."""
    for entry in entries:
        yield Group(entry)
