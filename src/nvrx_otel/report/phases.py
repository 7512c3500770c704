"""Per phase (a span name of the conventions: checkpoint saves, fault-tolerance
operations, startup and imports) the durations across ranks: p50 / p99 / max.

Percentiles are *nearest-rank*: the p-th percentile of n sorted durations is the one at
position ``ceil(p/100 x n)`` (1-based), always a duration that occurred. Memory is one
8-byte integer per span of these names (the durations must all be known for exact
percentiles) plus count / total / max per phase and rank; the spans themselves are not
kept. Spans the aggregator ended for a process that died (``truncated``) have no real
duration and are left out.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from nvrx_otel import semconv
from nvrx_otel.report.model import PhaseStats
from nvrx_otel.report.otlp import Span

NS = 1e9


def nearest_rank(sorted_values: Sequence[int], p: float) -> int:
    """The ``p``-th percentile (0 < p <= 100) of ascending values, nearest-rank."""
    n = len(sorted_values)
    return sorted_values[max(0, math.ceil(p / 100 * n) - 1)]


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
        if span.truncated or name not in semconv.SPANS:
            return
        d = span.duration_ns
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
        """One row per phase seen, in the conventions' order."""
        out = []
        for name, spec in semconv.SPANS.items():
            durations = self.durations.get(name)
            if not durations:
                continue
            ordered = sorted(durations)
            longest, rank = self.longest[name]
            out.append(
                PhaseStats(
                    name=name,
                    group=spec.group,
                    count=len(ordered),
                    ranks=len(self.per_rank[name]),
                    p50_s=nearest_rank(ordered, 50) / NS,
                    p99_s=nearest_rank(ordered, 99) / NS,
                    max_s=longest / NS,
                    max_rank=rank,
                )
            )
        return out
