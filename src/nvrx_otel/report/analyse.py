"""One pass over the files: every record goes to each question's collector (and to any
sink, e.g. the Perfetto writer), then the answers make the :class:`Report`.

Records are streamed file by file; no record is kept except the few each collector
holds (see each module). The last log lines of the first failing rank are read again
afterwards from the files that rank's records came from.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from nvrx_otel.report import failures
from nvrx_otel.report import stragglers as strag
from nvrx_otel.report.cycles import Cycles
from nvrx_otel.report.failures import COLLECTIVE, SKEW_S, Failures, ordering
from nvrx_otel.report.model import Failure, LogLine, Report, Thresholds
from nvrx_otel.report.otlp import Item, Span, read_lines
from nvrx_otel.report.phases import Phases
from nvrx_otel.report.silence import INTERVALS, MIN_S, Activity, log_line
from nvrx_otel.report.timeline import Timeline
from nvrx_otel.report.verdict import verdict
from nvrx_otel.view.entry import Entry
from nvrx_otel.view.files import NODE_LOG, Tail, Wanted, find_streams
from nvrx_otel.view.read import Problems
from nvrx_otel.view.sources import Malformed, read_node_log

WANTED: Final = Wanted(node_logs=False, signals=("logs", "traces"), subdirs=("otlp",))
"""A directory gives its OTLP/JSON logs and traces files (no node logs: those hold no
spans, and a record in both would count twice)."""
LAST_LINES: Final = 10
"""Log lines shown before the first failure (the failing line included)."""

Sink = Callable[[Item], None]


def _batches(path: Path, kind: str, problems: Malformed) -> Iterator[Sequence[Item]]:
    tail = Tail(path)
    try:
        lines = tail.lines(final=True)
        if kind == NODE_LOG:
            for e in read_node_log(lines, str(path), problems):
                yield [e]
        else:
            yield from read_lines(lines, str(path), problems)
    finally:
        tail.close()


class Analysis:
    """The collectors, fed record by record."""

    def __init__(self, sinks: Sequence[Sink] = (), job: str | None = None) -> None:
        self.sinks = list(sinks)
        self.job = job  # only this job's records (and those that name none)
        self.jobs: set[str] = set()
        self.phases = Phases()
        self.failures = Failures()
        self.activity = Activity()
        self.cycles = Cycles()
        self.timeline = Timeline()
        self.log_files: dict[int, dict[str, str]] = {}  # rank -> path -> kind
        self.logs = self.spans = 0
        self.nodes: set[str] = set()
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.lost: dict[str, int] = {}

    def feed(self, batch: Sequence[Item], kind: str) -> None:
        sinks = self.sinks
        jobs = self.jobs
        for item in batch:
            job = item.job
            if job is not None:
                if job not in jobs:
                    jobs.add(job)
                if self.job is not None and job != self.job:
                    continue
            if isinstance(item, Span):
                self.span(item)
            else:
                self.log(item, kind)
            for sink in sinks:
                sink(item)

    def _bounds(self, start: int, end: int, node: str | None) -> None:
        if self.start_ns is None or start < self.start_ns:
            self.start_ns = start
        if self.end_ns is None or end > self.end_ns:
            self.end_ns = end
        if node is not None and node not in self.nodes:
            self.nodes.add(node)

    def log(self, e: Entry, kind: str) -> None:
        self.logs += 1
        self._bounds(e.ts_ns, e.ts_ns, e.node)
        if e.loss is not None:
            self.lost[e.loss.what] = self.lost.get(e.loss.what, 0) + e.loss.count
        self.failures.log(e)
        self.activity.log(e)
        self.cycles.log(e)
        if e.rank is not None:
            files = self.log_files.get(e.rank)
            if files is None:
                files = self.log_files[e.rank] = {}
            if e.path not in files:
                files[e.path] = kind
                self.timeline.rank(e.rank, e.node)

    def span(self, s: Span) -> None:
        self.spans += 1
        self._bounds(s.start_ns, s.ts_ns, s.node)
        self.phases.add(s)
        self.failures.span(s)
        self.activity.span(s)
        self.cycles.span(s)
        self.timeline.span(s)

    def report(self, thresholds: Thresholds, problems: Problems, files: int) -> Report:
        ranked = self.failures.ranked()
        first = ranked[0] if ranked else None
        by_trace = self.failures.by_trace(first)
        order = None
        if first is not None:
            order = ordering([f for f in ranked if f.cycle == first.cycle], thresholds.skew_s)
            first = replace(first, last_lines=self.last_lines(first))
        if by_trace is not None and first is not None and by_trace.rank == first.rank:
            by_trace = replace(by_trace, last_lines=first.last_lines)
        stopped: list[int] = []
        collective: list[int] = []
        if first is not None:
            failing = {f.rank for f in ranked if f.cycle == first.cycle}
            stopped = sorted(
                rank
                for cycle, rank in self.failures.stopped_keys()
                if cycle == first.cycle and rank not in failing
            )
            collective = sorted(
                {f.rank for f in ranked if f.cycle == first.cycle and f.evidence == COLLECTIVE}
            )
        ranks_per_cycle: dict[int, int] = {}
        for cycle, _ in self.activity.ranks:
            ranks_per_cycle[cycle] = ranks_per_cycle.get(cycle, 0) + 1
        silent = self.activity.silent(thresholds.silence_min_s, thresholds.silence_intervals)
        cycle = first.cycle if first is not None else (silent[0].cycle if silent else 0)
        hung = failures.hung(self.failures, ranked, silent, ranks_per_cycle.get(cycle, 0))
        report = Report(
            phases=self.phases.stats(),
            stragglers=strag.stragglers(
                self.phases.per_rank, thresholds.straggler_ratio, thresholds.straggler_min_s
            ),
            first_failure=first,
            first_failure_by_trace=by_trace,
            ordering=order,
            silent=silent,
            hung=hung,
            cycles=self.cycles.cycles(ranks_per_cycle, ranked),
            thresholds=thresholds,
            logs=self.logs,
            spans=self.spans,
            skipped_lines=problems.total,
            files=files,
            nodes=sorted(self.nodes),
            ranks=len({rank for _, rank in self.activity.ranks}),
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            stopped=stopped,
            collective=collective,
            lost=dict(self.lost),
            jobs=sorted(self.jobs),
        )
        return replace(report, verdict=verdict(report))

    def last_lines(self, f: Failure) -> list[LogLine]:
        """The failing rank's last :data:`LAST_LINES` log lines up to its failure (read
        again from its files; lines those files no longer hold are not shown)."""
        keep: list[tuple[int, int, Entry]] = []
        seq = 0
        for path, kind in (self.log_files.get(f.rank) or {}).items():
            try:
                batches = list(_only_rank(_batches(Path(path), kind, _named_already), f))
            except OSError:
                continue
            for e in batches:
                seq += 1
                item = (e.ts_ns, seq, e)
                if len(keep) < LAST_LINES:
                    heapq.heappush(keep, item)
                elif item > keep[0]:
                    heapq.heapreplace(keep, item)
        return [log_line(e) for _, _, e in sorted(keep)]


def _named_already(path: str, number: int, line: str) -> None:
    """Malformed lines met when reading a file again: they were named the first time."""


def _only_rank(batches: Iterable[Sequence[Item]], f: Failure) -> Iterator[Entry]:
    for batch in batches:
        for item in batch:
            if (
                isinstance(item, Entry)
                and item.rank == f.rank
                and (item.cycle or 0) == f.cycle
                and item.ts_ns <= f.ts_ns
            ):
                yield item


def analyse(paths: list[str], **options: Any) -> Report:
    """The report of the OTLP/JSON files ``paths`` name (files, directories, globs); the
    options are :func:`analyse_timeline`'s. Raises
    :class:`~nvrx_otel.view.files.PathError` naming a path it cannot read; a line that is
    no OTLP request is named on stderr and skipped."""
    return analyse_timeline(paths, **options)[0]


def analyse_timeline(
    paths: list[str],
    *,
    straggler_ratio: float = strag.RATIO,
    straggler_min_s: float = strag.MIN_EXCESS_S,
    silence_min_s: float = MIN_S,
    silence_intervals: float = INTERVALS,
    skew_s: float = SKEW_S,
    sinks: Sequence[Sink] = (),
    problems: Problems | None = None,
    job: str | None = None,
) -> tuple[Report, Timeline]:
    """The report and the per-rank timeline (what the pictures draw) of ``paths``. Each
    record also goes to every sink; ``problems`` names the lines that are no OTLP
    request; ``job``: only that job's records (and those that name no job); the report's
    ``jobs`` lists every job the records name."""
    problems = problems or Problems(prog="nvrx-otel report", what="valid OTLP JSON request")
    streams = find_streams(paths, WANTED)
    run = Analysis(sinks, job)
    files = 0
    for stream in streams:
        for path in stream.files:
            files += 1
            for batch in _batches(path, stream.kind, problems):
                run.feed(batch, stream.kind)
    thresholds = Thresholds(
        straggler_ratio=straggler_ratio,
        straggler_min_s=straggler_min_s,
        silence_min_s=silence_min_s,
        silence_intervals=silence_intervals,
        skew_s=skew_s,
    )
    return run.report(thresholds, problems, files), run.timeline
