"""The first failing rank, by timestamp and by trace correlation.

A *failure* is a log record at ERROR or worse (OTel severity >= 17; the aggregator's loss
reports excluded) or a span with status ERROR, a span the aggregator ended for a process
that died in it (``nv.nvrx.span.truncated``) included; its time is the record's time or
the span's end. Only processes with a workload rank count.

- **By timestamp:** the earliest failure of any rank.
- **By trace:** in the trace of that failure (a log record's trace id, a span's), the
  failing spans form chains through their parents (a worker's span under the launcher's
  cycle span, a save phase under its request); the failing span with no failing child is
  where the failure started, the earliest of them if several. When the trace has no
  failing span with a rank, its earliest failing log record.

Memory: the earliest failure per rank, per trace with failures the earliest failure, and
the failing spans (at most :data:`KEEP_MAX` of each).
"""

from __future__ import annotations

from typing import Final

from nvrx_otel.nodeline import ranges, repeated
from nvrx_otel.report.model import Failure, Ordering
from nvrx_otel.report.otlp import Span
from nvrx_otel.view.entry import Entry

ERROR_SEVERITY: Final = 17
KEEP_MAX: Final = 100_000
SKEW_S: Final = 0.5
"""Assumed bound on the clock difference between two nodes (NTP keeps well inside it)."""


def _log_failure(e: Entry, rank: int) -> Failure:
    what = e.first_line
    if e.collapsed is not None:  # the aggregator's de-duplication: say whom it stands for
        what += repeated(e.collapsed.count, ranges(e.collapsed.ranks))
    return Failure(
        rank=rank,
        node=e.node,
        cycle=e.cycle or 0,
        ts_ns=e.ts_ns,
        observed_ns=e.observed_ns,
        kind="log",
        what=what,
        trace_id=e.trace_id,
        span_id=e.span_id,
        origin=e.origin,
    )


def _span_failure(s: Span, rank: int) -> Failure:
    why = "process ended inside it" if s.truncated else (s.status or "status ERROR")
    return Failure(
        rank=rank,
        node=s.node,
        cycle=s.cycle or 0,
        ts_ns=s.ts_ns,
        observed_ns=None,
        kind="span",
        what=f"{s.name}: {why}",
        trace_id=s.trace_id,
        span_id=s.span_id,
        origin=f"{s.path}:{s.number}",
    )


class Failures:
    """Takes every record; answers the questions at the end."""

    def __init__(self) -> None:
        self.first_by_rank: dict[tuple[int, int], Failure] = {}  # (cycle, rank)
        self.first_by_trace: dict[str, Failure] = {}
        self.error_spans: dict[str, Span] = {}  # span id -> failing span with a rank
        self.starts: dict[tuple[int, int], int] = {}  # (cycle, rank) -> its failure's start
        # (cycle, rank) whose first failure is a collapsed record of another rank: its own
        # time is gone (between the record's first and last), so it does not tie with the
        # record's own rank, whose time that is
        self.stood_for: set[tuple[int, int]] = set()

    def log(self, e: Entry) -> None:
        if e.severity < ERROR_SEVERITY or e.rank is None or e.loss is not None:
            return
        # A record the aggregator collapsed is a failure of each rank it stands for.
        for rank in e.collapsed.ranks if e.collapsed is not None else (e.rank,):
            self._log(e, rank)

    def _log(self, e: Entry, rank: int) -> None:
        """``e`` as a failure of ``rank`` (one of the ranks ``e`` stands for when the
        aggregator collapsed it)."""
        key = (e.cycle or 0, rank)
        known = self.first_by_rank.get(key)
        trace = e.trace_id
        if known is not None and e.ts_ns >= known.ts_ns:
            if trace is None:
                return
            earlier = self.first_by_trace.get(trace)
            if earlier is not None and earlier.ts_ns <= e.ts_ns:
                return
        self._note(key, _log_failure(e, rank), member=rank != e.rank)

    def span(self, s: Span) -> None:
        rank = s.rank
        if not s.error or rank is None:
            return
        if s.span_id is not None and len(self.error_spans) < KEEP_MAX:
            self.error_spans[s.span_id] = s
        self._note((s.cycle or 0, rank), _span_failure(s, rank), s.start_ns)

    def _note(
        self, key: tuple[int, int], f: Failure, start: int | None = None, *, member: bool = False
    ) -> None:
        known = self.first_by_rank.get(key)
        start = f.ts_ns if start is None else start
        if (
            known is None
            or f.ts_ns < known.ts_ns
            # spans ending together (a process that died in nested spans): the innermost
            or (f.ts_ns == known.ts_ns and start > self.starts.get(key, start))
        ):
            self.first_by_rank[key] = f
            self.starts[key] = start
            if member:
                self.stood_for.add(key)
            else:
                self.stood_for.discard(key)
        trace = f.trace_id
        if trace is not None:
            earlier = self.first_by_trace.get(trace)
            if (earlier is None and len(self.first_by_trace) < KEEP_MAX) or (
                earlier is not None and f.ts_ns < earlier.ts_ns
            ):
                self.first_by_trace[trace] = f

    def ranked(self) -> list[Failure]:
        """Each failing rank's (per cycle) first failure, earliest first."""
        stood_for = self.stood_for
        return sorted(
            self.first_by_rank.values(),
            key=lambda f: (f.ts_ns, (f.cycle, f.rank) in stood_for, f.rank),
        )

    def by_trace(self, first: Failure | None) -> Failure | None:
        """Where the failure of ``first``'s trace started (see the module)."""
        if first is None or first.trace_id is None:
            return None
        trace = first.trace_id
        failing = [s for s in self.error_spans.values() if s.trace_id == trace]
        parents = {s.parent_id for s in failing if s.parent_id is not None}
        innermost = [s for s in failing if s.span_id not in parents and s.rank is not None]
        if innermost:
            origin = min(innermost, key=lambda s: (s.ts_ns, s.rank))
            assert origin.rank is not None
            return _span_failure(origin, origin.rank)
        return self.first_by_trace.get(trace)


def ordering(ranked: list[Failure], skew_s: float = SKEW_S) -> Ordering | None:
    """Whether clock skew could put another rank's failure before the first one."""
    if not ranked:
        return None
    first = ranked[0]
    other = next((f for f in ranked[1:] if f.rank != first.rank), None)
    if other is None:
        return Ordering(True, None, skew_s, None, "the only failing rank")
    margin = (other.ts_ns - first.ts_ns) / 1e9
    notes = []
    if first.node == other.node:
        sure = margin > 0
        notes.append(f"the next failing rank {other.rank} is on the same node (one clock)")
    else:
        sure = margin > skew_s
        if sure:
            notes.append(
                f"{margin:.3f} s before rank {other.rank} on {other.node}: more than "
                f"the assumed clock skew ({skew_s:g} s)"
            )
        else:
            notes.append(
                f"only {margin:.3f} s before rank {other.rank} on {other.node}: within "
                f"the assumed clock skew ({skew_s:g} s), the order could be the other "
                "way"
            )
    if (
        first.observed_ns is not None
        and other.observed_ns is not None
        and first.node != other.node
        and other.observed_ns < first.observed_ns
    ):
        notes.append("their observed (export) times order them the other way")
    return Ordering(sure, margin, skew_s, other, "; ".join(notes))
