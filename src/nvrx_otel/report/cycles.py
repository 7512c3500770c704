"""Restart cycles and the time each took to recover.

A record's cycle is its resource's ``nv.nvrx.restart.cycle`` (a span's own attribute of
that name first). Records without one (the launcher's) belong to the cycle their time
falls in and do not stretch it; when no record has a cycle, they are all cycle 0. A cycle
after the first *resumed* at the end of its first ``nv.nvrx.ftl.run_start`` span (the
workload reports it is running) or, without one, at its first record of a workload rank.
Its **time to recover** runs from the previous cycle's first failure (its last record
when nothing failed) to that moment.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvrx_otel import semconv
from nvrx_otel.report.model import Cycle, Failure
from nvrx_otel.report.otlp import Span
from nvrx_otel.view.entry import Entry


@dataclass(slots=True)
class _Seen:
    start_ns: int
    end_ns: int
    first_rank_ns: int | None = None
    run_start_ns: int | None = None


class Cycles:
    """Takes every record."""

    def __init__(self) -> None:
        self.seen: dict[int, _Seen] = {}
        self.loose: dict[int, _Seen] = {}  # records without a cycle, as cycle 0

    def _touch(self, cycle: int | None, start: int, end: int, ranked: bool) -> _Seen:
        seen = self.seen if cycle is not None else self.loose
        cycle = cycle or 0
        c = seen.get(cycle)
        if c is None:
            c = seen[cycle] = _Seen(start, end)
        if start < c.start_ns:
            c.start_ns = start
        if end > c.end_ns:
            c.end_ns = end
        if ranked and (c.first_rank_ns is None or start < c.first_rank_ns):
            c.first_rank_ns = start
        return c

    def log(self, e: Entry) -> None:
        self._touch(e.cycle, e.ts_ns, e.ts_ns, e.rank is not None)

    def span(self, s: Span) -> None:
        c = self._touch(s.cycle, s.start_ns, s.ts_ns, s.rank is not None)
        if (
            s.name == semconv.SPAN_FTL_RUN_START
            and not s.truncated
            and (c.run_start_ns is None or s.ts_ns < c.run_start_ns)
        ):
            c.run_start_ns = s.ts_ns

    def cycles(self, ranks: dict[int, int], failures: list[Failure]) -> list[Cycle]:
        """The cycles in order; ``ranks``: ranks seen per cycle; ``failures``: each
        failing rank's first failure, earliest first."""
        out: list[Cycle] = []
        previous: Cycle | None = None
        seen = self.seen or self.loose
        for number in sorted(seen):
            c = seen[number]
            mine = [f for f in failures if f.cycle == number]
            resumed = recovery = None
            if previous is not None:
                resumed = c.run_start_ns if c.run_start_ns is not None else c.first_rank_ns
                if resumed is not None:
                    since = (
                        previous.first_failure.ts_ns
                        if previous.first_failure is not None
                        else previous.end_ns
                    )
                    recovery = (resumed - since) / 1e9
            cycle = Cycle(
                cycle=number,
                start_ns=c.start_ns,
                end_ns=c.end_ns,
                ranks=ranks.get(number, 0),
                failed_ranks=len({f.rank for f in mine}),
                first_failure=mine[0] if mine else None,
                resumed_ns=resumed,
                recovery_s=recovery,
            )
            out.append(cycle)
            previous = cycle
        return out
