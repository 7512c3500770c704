"""The first failing rank, by the evidence it rests on, by timestamp and by trace.

A *failure* is a log record at ERROR or worse (OTel severity >= 17; the aggregator's loss
reports excluded) or a span with status ERROR, a span the aggregator ended for a process
that died in it (``nv.nvrx.span.truncated``) included; its time is the record's time or
the span's end. Only processes with a workload rank count.

- **By evidence, then timestamp.** A failure with evidence of its own (an exception, an
  ERROR record or span, a fatal signal, a non-zero exit or a vanished process the watcher
  recorded: ``OWN``) outranks what follows from another rank's: a rank that did not fail
  while the others failed in a collective and was then stopped (``HUNG``), or that
  returned with exit 0 before they did (``RETURNED``); then an exception of a collective
  (a timeout, a peer that closed: ``COLLECTIVE``); then a span the process ended inside
  (``INFERRED``), dated at the process's recorded end when there is one. A rank stopped
  by SIGTERM (its stacks at the signal, or its ending) with no failure of its own is a
  *victim* of the launcher: not a failure, listed as stopped.
- **By trace:** in the trace of that failure (a log record's trace id, a span's), the
  failing spans form chains through their parents (a worker's span under the launcher's
  cycle span, a save phase under its request); the failing span with no failing child is
  where the failure started, the earliest of them if several. When the trace has no
  failing span with a rank, its earliest failing log record.

Memory: the best failure per rank, per trace with failures the earliest failure, the
failing spans (at most :data:`KEEP_MAX` of each), and each rank's ending and stacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final

from nvrx_otel.nodeline import ranges, ranks_phrase, repeated
from nvrx_otel.report.model import Failure, Hung, Ordering, Silent
from nvrx_otel.report.otlp import Span
from nvrx_otel.view.entry import Ending, Entry

ERROR_SEVERITY: Final = 17
KEEP_MAX: Final = 100_000
SKEW_S: Final = 0.5
"""Assumed bound on the clock difference between two nodes (NTP keeps well inside it)."""
OWN, HUNG, RETURNED, COLLECTIVE, INFERRED = 5, 4, 3, 2, 1
"""What a failure rests on, strongest first (see the module docstring)."""
_COLLECTIVE: Final = re.compile(
    r"(?i)timed? ?out|timeout|connection (?:closed|reset|refused)|closed by peer|broken pipe"
    r"|DistBackendError|DistNetworkError|DistStoreError|watchdog|ProcessGroup\w* .*abort"
)
"""An exception of a collective or its transport: the consequence of another rank's end."""
_STOPPED: Final = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
STOPPED: Final = 0
"""A failure that says the rank was stopped (a span or record ended by SIGTERM): a victim."""
_STOP_TEXT: Final = re.compile(r"\b(?:SIGTERM|SIGINT|SIGHUP|KeyboardInterrupt|Terminated)\b")


@dataclass(frozen=True)
class _End:
    ts_ns: int
    ending: Ending
    what: str
    node: str | None
    origin: str
    where: str  # the record's call site: for a dump of stacks, where the innermost frame is


def _evidence(said: str, default: int) -> int:
    """What a failure saying ``said`` rests on: STOPPED, COLLECTIVE, else ``default``."""
    if _STOP_TEXT.search(said):
        return STOPPED
    return COLLECTIVE if _COLLECTIVE.search(said) else default


def _log_failure(e: Entry, rank: int) -> Failure:
    what = e.first_line
    if e.collapsed is not None:  # the aggregator's de-duplication: say whom it stands for
        what += repeated(e.collapsed.count, ranges(e.collapsed.ranks))
    return Failure(
        evidence=_evidence(f"{e.exc_type or ''} {e.first_line}", OWN),
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
    evidence = INFERRED if s.truncated else _evidence(s.status, OWN)
    return Failure(
        evidence=evidence,
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
        self.ends: dict[tuple[int, int], _End] = {}  # (cycle, rank) -> its process's ending
        self.terminated: dict[tuple[int, int], _End] = {}  # -> its stacks at SIGTERM
        self.inside: dict[tuple[int, int], Span] = {}  # -> the innermost span it ended in

    def log(self, e: Entry) -> None:
        if e.ending is not None and e.rank is not None:
            self._ending(e, e.ending, e.rank)
            return
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

    def _ending(self, e: Entry, ending: Ending, rank: int) -> None:
        key = (e.cycle or 0, rank)
        where = f"{e.file}:{e.line}" if e.line is not None else e.file
        end = _End(e.ts_ns, ending, e.first_line, e.node, e.origin, where)
        if ending.stacks == "fatal":  # a fatal signal: a failure of its own
            self._note(key, _log_failure(e, rank))
        elif ending.stacks == "terminate":
            self.terminated.setdefault(key, end)
        elif ending.outcome is not None:
            self.ends[key] = end

    def span(self, s: Span) -> None:
        rank = s.rank
        if s.truncated and rank is not None:
            key = (s.cycle or 0, rank)
            known = self.inside.get(key)
            if known is None or s.start_ns > known.start_ns:
                self.inside[key] = s
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
            or f.evidence > known.evidence
            or (f.evidence == known.evidence and f.ts_ns < known.ts_ns)
            # spans ending together (a process that died in nested spans): the innermost
            or (
                f.evidence == known.evidence
                and f.ts_ns == known.ts_ns
                and start > self.starts.get(key, start)
            )
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

    def stopped(self, key: tuple[int, int]) -> bool:
        """Whether the launcher stopped this (cycle, rank): SIGTERM's stacks, its end, or
        a failure that says so (a span ended by SIGTERM)."""
        end = self.ends.get(key)
        by_signal = end is not None and end.ending.signal in _STOPPED
        said = self.first_by_rank.get(key)
        return (
            key in self.terminated or by_signal or (said is not None and said.evidence == STOPPED)
        )

    def stopped_keys(self) -> set[tuple[int, int]]:
        """Every (cycle, rank) the launcher stopped."""
        keys = self.terminated.keys() | self.ends.keys() | self.first_by_rank.keys()
        return {k for k in keys if self.stopped(k)}

    def ranked(self) -> list[Failure]:
        """Each failing rank's (per cycle) best failure (see the module docstring),
        strongest evidence first, then earliest; victims of the launcher left out."""
        out: list[Failure] = []
        for key, f in self.first_by_rank.items():
            end = self.ends.get(key)
            if end is not None and f.evidence == INFERRED and _own_end(end.ending):
                f = _end_failure(end, key)  # its recorded end says more than an inference
            if f.evidence == STOPPED:
                continue  # a victim: what it says is that it was stopped
            if f.evidence == INFERRED:
                if self.stopped(key):
                    continue  # a victim: it was stopped inside its span
                if end is not None:  # dated at its process's end, not its last record
                    f = replace(f, ts_ns=max(f.ts_ns, end.ts_ns))
            out.append(f)
        for key, end in self.ends.items():
            if key not in self.first_by_rank and _own_end(end.ending):
                out.append(_end_failure(end, key))
        out += self._consequences(out)
        stood_for = self.stood_for
        return sorted(
            out,
            key=lambda f: (-f.evidence, f.ts_ns, (f.cycle, f.rank) in stood_for, f.rank),
        )

    def _consequences(self, found: list[Failure]) -> list[Failure]:
        """When a cycle's failures are all of collectives: the ranks that caused them, one
        that did not fail and was stopped (hung) or returned with exit 0 before them."""
        out: list[Failure] = []
        by_cycle: dict[int, list[Failure]] = {}
        for f in found:
            by_cycle.setdefault(f.cycle, []).append(f)
        for cycle, failures in by_cycle.items():
            if any(f.evidence > COLLECTIVE for f in failures):
                continue
            waiting = [f for f in failures if f.evidence == COLLECTIVE]
            if not waiting:
                continue
            first = min(f.ts_ns for f in waiting)
            failed = {f.rank for f in waiting}
            n = ranks_phrase(failed)
            for (c, rank), end in self.ends.items():
                e = end.ending
                clean = e.outcome == "exit" and e.exit_code == 0
                if c == cycle and rank not in failed and clean and end.ts_ns <= first:
                    what = f"returned (exit 0) while {n} went on to fail in a collective"
                    out.append(_end_failure(end, (c, rank), RETURNED, what))
            for (c, rank), end in self.terminated.items():
                if c == cycle and rank not in failed:
                    what = (
                        f"hung: did not fail while {n} failed in a collective; its stack at "
                        f"SIGTERM ends in {end.where}"
                    )
                    out.append(_end_failure(end, (c, rank), HUNG, what))
        return out

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


def hung(f: Failures, ranked: list[Failure], silent: list[Silent], ranks: int) -> list[Hung]:
    """The hung ranks: a HUNG failure's, else the silent ranks (``ranks``: of the cycle)."""
    out: list[Hung] = []
    for x in ranked:
        if x.evidence != HUNG:
            continue
        key = (x.cycle, x.rank)
        inside = f.inside.get(key)
        waited = sorted({w.rank for w in ranked if w.cycle == x.cycle and w.evidence == COLLECTIVE})
        end = f.terminated.get(key)
        out.append(
            Hung(
                rank=x.rank,
                node=x.node,
                cycle=x.cycle,
                span=None if inside is None else inside.name,
                since_ns=None if inside is None else inside.start_ns,
                waited_by=waited,
                waiting=len(waited),
                stack=None if end is None else end.where,
            )
        )
    if out:
        return out
    for q in silent:
        end = f.terminated.get((q.cycle, q.rank))
        out.append(
            Hung(
                rank=q.rank,
                node=q.node,
                cycle=q.cycle,
                span=None if q.open_span is None else q.open_span.name,
                since_ns=q.last_ns if q.open_span is None else q.open_span.start_ns,
                waited_by=[],
                waiting=max(ranks - len(silent), 0),
                stack=None if end is None else end.where,
            )
        )
    return out


def _own_end(ending: Ending) -> bool:
    """An ending that is a failure of its own (not a stop by the launcher, not a clean
    exit)."""
    if ending.outcome == "exit":
        return ending.exit_code not in (0, None)
    if ending.outcome == "signal":
        return ending.signal not in _STOPPED
    return ending.outcome in ("exception", "vanished")


def _end_failure(
    end: _End, key: tuple[int, int], evidence: int = OWN, what: str | None = None
) -> Failure:
    return Failure(
        rank=key[1],
        node=end.node,
        cycle=key[0],
        ts_ns=end.ts_ns,
        observed_ns=None,
        kind="log",
        what=what or end.what,
        trace_id=None,
        span_id=None,
        origin=end.origin,
        evidence=evidence,
    )


def ordering(ranked: list[Failure], skew_s: float = SKEW_S) -> Ordering | None:
    """Whether clock skew could put another rank's failure before the first one."""
    if not ranked:
        return None
    first = ranked[0]
    other = next((f for f in ranked[1:] if f.rank != first.rank), None)
    if first.evidence == INFERRED:
        return Ordering(
            False, None, skew_s, other, "it rests on a span its process ended inside: inferred"
        )
    if other is None:
        return Ordering(True, None, skew_s, None, "the only failing rank")
    if other.evidence < first.evidence:
        return Ordering(
            True, (other.ts_ns - first.ts_ns) / 1e9, skew_s, other,
            f"the other failures follow from it (rank {other.rank}: {other.what})",
        )  # fmt: skip
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
