"""Per phase (every span name: the conventions' checkpoint saves, fault-tolerance
operations, startup and imports, and the program's own) the durations across ranks:
p50 / p99 / max. Beyond :data:`NAMES_MAX` names, further names share one row,
:data:`OTHER`.

Percentiles are *nearest-rank*: the p-th percentile of n sorted durations is the one at
position ``ceil(p/100 x n)`` (1-based), always a duration that occurred. Memory is one
8-byte integer per span of these names (the durations must all be known for exact
percentiles; they are sorted up to :data:`SORT_MAX` of them, selected in passes beyond)
plus count / total / max per phase and rank; the spans themselves are not kept. Spans the
aggregator ended for a process that died (``truncated``) have no real duration and are
left out.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nvrx_otel import semconv
from nvrx_otel.report.model import PhaseStats
from nvrx_otel.report.otlp import Span

NS = 1e9


SORT_MAX: Final = 200_000
"""Up to this many durations a phase's are sorted (a list of Python integers, about 7 MB);
beyond it a percentile is selected in passes over the array (no list of them all)."""
_BUCKETS: Final = 1024
NAMES_MAX: Final = 200
"""Span names with a row of their own (f-string span names would otherwise grow without
bound)."""
OTHER: Final = "(other span names)"
USER_GROUP: Final = "spans"
"""The group of a span name that is not the conventions'."""


def nearest_rank(sorted_values: Sequence[int], p: float) -> int:
    """The ``p``-th percentile (0 < p <= 100) of ascending values, nearest-rank."""
    return sorted_values[rank_of(len(sorted_values), p)]


def rank_of(n: int, p: float) -> int:
    """The 0-based position of the nearest-rank ``p``-th percentile of ``n`` values."""
    return max(0, math.ceil(p / 100 * n) - 1)


def kth(values: array[int], k: int) -> int:
    """The ``k``-th smallest (0-based) of ``values``, without sorting them: each pass
    counts the values of the range known to hold it in :data:`_BUCKETS` buckets and keeps
    the one bucket that does, until the range is one value or few enough to sort."""
    lo, hi = min(values), max(values)
    below = 0  # values under lo
    while lo < hi:
        width = (hi - lo) // _BUCKETS + 1
        counts = [0] * _BUCKETS
        for v in values:
            if lo <= v <= hi:
                counts[(v - lo) // width] += 1
        acc = below
        for b, c in enumerate(counts):
            if acc + c > k:
                lo, hi = lo + b * width, min(hi, lo + (b + 1) * width - 1)
                below = acc
                if c <= SORT_MAX:
                    inside = sorted(v for v in values if lo <= v <= hi)
                    return inside[k - below]
                break
            acc += c
    return lo


def percentile(values: array[int], p: float) -> int:
    """The nearest-rank ``p``-th percentile of ``values`` (any order)."""
    k = rank_of(len(values), p)
    if len(values) <= SORT_MAX:
        return sorted(values)[k]
    return kth(values, k)


@dataclass(slots=True)
class RankPhase:
    """One rank's spans of one phase."""

    count: int = 0
    total_ns: int = 0
    max_ns: int = 0
    node: str | None = None


class Phases:
    """Takes every span; :meth:`stats` gives the table."""

    def __init__(self) -> None:
        self.durations: dict[str, array[int]] = {}
        self.longest: dict[str, tuple[int, int | None]] = {}
        self.per_rank: dict[str, dict[int, RankPhase]] = {}

    def add(self, span: Span) -> None:
        name = span.name
        if span.truncated:
            return
        d = span.duration_ns
        durations = self.durations.get(name)
        if durations is None:
            if len(self.durations) >= NAMES_MAX and name not in semconv.SPANS:
                name = OTHER
                durations = self.durations.get(name)
            if durations is None:
                durations = self.durations[name] = array("q")
                self.per_rank[name] = {}
        durations.append(d)
        if d >= self.longest.get(name, (-1, None))[0]:
            self.longest[name] = (d, span.rank)
        rank = span.rank
        if rank is not None:
            ranks = self.per_rank[name]
            rp = ranks.get(rank)
            if rp is None:
                rp = ranks[rank] = RankPhase(node=span.node)
            rp.count += 1
            rp.total_ns += d
            if d > rp.max_ns:
                rp.max_ns = d

    def stats(self) -> list[PhaseStats]:
        """One row per phase seen: the conventions' in their order, then the others by
        name (:data:`OTHER` last)."""
        out = []
        others = sorted(n for n in self.durations if n not in semconv.SPANS and n != OTHER)
        names = [n for n in semconv.SPANS if n in self.durations] + others
        if OTHER in self.durations:
            names.append(OTHER)
        for name in names:
            durations = self.durations[name]
            spec = semconv.SPANS.get(name)
            longest, rank = self.longest[name]
            out.append(
                PhaseStats(
                    name=name,
                    group=spec.group if spec is not None else USER_GROUP,
                    count=len(durations),
                    ranks=len(self.per_rank[name]),
                    p50_s=percentile(durations, 50) / NS,
                    p99_s=percentile(durations, 99) / NS,
                    max_s=longest / NS,
                    max_rank=rank,
                )
            )
        return out
