"""Ranks that went silent while the others kept progressing: the signature of a hung
collective.

Per restart cycle, each rank's *last record* is the latest time among its log records
and its spans' starts and ends. A rank is **silent** when the median of the other ranks'
last records (of the same cycle) is later than its own by more than

    threshold = max(MIN_S, INTERVALS x the median over the cycle's ranks of their mean
                    interval between records)

(5 s, or ten typical record intervals when the job logs more slowly than every half
second), unless its own last log record is an ERROR or worse (it failed: see the first
failure) . Each silent rank is reported with its last log record and its *open span*:
the span the aggregator ended for it, with ``nv.nvrx.span.truncated``, when its process
died inside one (the innermost: the latest started). A process still alive when the files
were read has its open spans in its spool only, and none is shown.

Memory: a few numbers and two records per rank and cycle.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from typing import Final

from nvrx_otel.report.failures import ERROR_SEVERITY
from nvrx_otel.report.model import LogLine, OpenSpan, Silent
from nvrx_otel.report.otlp import Span
from nvrx_otel.view.entry import Entry

MIN_S: Final = 5.0
"""A rank is never silent for less than 5 s behind the others."""
INTERVALS: Final = 10.0
"""... nor for less than ten of the job's typical intervals between a rank's records."""


def median_without(values: list[int], i: int) -> float:
    """The median of sorted ``values`` without the one at index ``i`` (no copy)."""
    m = len(values) - 1

    def at(k: int) -> int:
        return values[k] if k < i else values[k + 1]

    return float(at(m // 2)) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2


def log_line(e: Entry) -> LogLine:
    return LogLine(e.ts_ns, e.level, e.first_line, e.node, e.rank, e.origin)


@dataclass(slots=True)
class RankActivity:
    """What one rank did in one cycle."""

    node: str | None
    first_ns: int
    last_ns: int
    count: int = 0
    last_log: Entry | None = None
    open_span: Span | None = None


class Activity:
    """Takes every record with a workload rank."""

    def __init__(self) -> None:
        self.ranks: dict[tuple[int, int], RankActivity] = {}  # (cycle, rank)

    def _touch(self, cycle: int, rank: int, node: str | None, ts: int) -> RankActivity:
        a = self.ranks.get((cycle, rank))
        if a is None:
            a = self.ranks[(cycle, rank)] = RankActivity(node, ts, ts)
        if ts > a.last_ns:
            a.last_ns = ts
        elif ts < a.first_ns:
            a.first_ns = ts
        a.count += 1
        return a

    def log(self, e: Entry) -> None:
        if e.rank is None or e.loss is not None:
            return
        # A record the aggregator collapsed was logged by each rank it stands for.
        for rank in e.collapsed.ranks if e.collapsed is not None else (e.rank,):
            a = self._touch(e.cycle or 0, rank, e.node, e.ts_ns)
            if a.last_log is None or e.ts_ns >= a.last_log.ts_ns:
                a.last_log = e

    def span(self, s: Span) -> None:
        if s.rank is None:
            return
        cycle = s.cycle or 0
        if s.truncated:  # its end is the process's last record, already counted
            a = self._touch(cycle, s.rank, s.node, s.start_ns)
            if a.open_span is None or s.start_ns >= a.open_span.start_ns:
                a.open_span = s
            return
        self._touch(cycle, s.rank, s.node, s.start_ns)
        self._touch(cycle, s.rank, s.node, s.ts_ns)

    def silent(self, min_s: float = MIN_S, intervals: float = INTERVALS) -> list[Silent]:
        """The silent ranks of every cycle, the longest silent first."""
        by_cycle: dict[int, dict[int, RankActivity]] = {}
        for (cycle, rank), a in self.ranks.items():
            by_cycle.setdefault(cycle, {})[rank] = a
        out = []
        for cycle, ranks in by_cycle.items():
            if len(ranks) < 2:
                continue
            gaps = [(a.last_ns - a.first_ns) / (a.count - 1) for a in ranks.values() if a.count > 1]
            typical = statistics.median(gaps) / 1e9 if gaps else 0.0
            threshold = max(min_s, intervals * typical)
            lasts = sorted(a.last_ns for a in ranks.values())
            for rank, a in ranks.items():
                others = median_without(lasts, bisect.bisect_left(lasts, a.last_ns))
                behind = (others - a.last_ns) / 1e9
                if behind <= threshold:
                    continue
                if a.last_log is not None and a.last_log.severity >= ERROR_SEVERITY:
                    continue
                s = a.open_span
                out.append(
                    Silent(
                        rank=rank,
                        node=a.node,
                        cycle=cycle,
                        last_ns=a.last_ns,
                        behind_s=behind,
                        threshold_s=threshold,
                        last_record=None if a.last_log is None else log_line(a.last_log),
                        open_span=None
                        if s is None
                        else OpenSpan(s.name, s.start_ns, s.ts_ns, s.span_id, s.truncated),
                    )
                )
        out.sort(key=lambda s: (-s.behind_s, s.cycle, s.rank))
        return out
