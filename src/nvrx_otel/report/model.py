"""What ``nvrx-otel report`` finds: the :class:`Report` and its parts (plain values, so
the text, JSON, HTML and picture renderers and the demo read the same thing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PhaseStats:
    """Durations of one phase (span name) across ranks, in seconds."""

    name: str
    group: str
    count: int
    ranks: int
    p50_s: float
    p99_s: float
    max_s: float
    max_rank: int | None  # the rank (None: a process without one) of the longest


@dataclass(frozen=True)
class Straggler:
    """A rank whose mean duration of a phase exceeds the threshold over the median of the
    ranks' means."""

    phase: str
    rank: int
    node: str | None
    mean_s: float
    median_s: float
    ratio: float
    max_s: float
    count: int


@dataclass(frozen=True)
class LogLine:
    ts_ns: int
    level: str
    text: str
    node: str | None
    rank: int | None
    origin: str  # file:line it was read from


@dataclass(frozen=True)
class Failure:
    """A rank's failure: an ERROR-or-worse log record or a span with status ERROR (a span
    the aggregator ended for a process that died included)."""

    rank: int
    node: str | None
    cycle: int
    ts_ns: int
    observed_ns: int | None
    kind: str  # "log" or "span"
    what: str  # the message's first line, or the span name and its status
    trace_id: str | None
    span_id: str | None
    origin: str
    last_lines: list[LogLine] = field(default_factory=list)
    evidence: int = 3  # failures.OWN, HUNG, RETURNED, COLLECTIVE or INFERRED: what it rests on


@dataclass(frozen=True)
class Ordering:
    """Whether the first failure is first whatever the nodes' clock skew (see
    docs/report.md): ``sure`` unless the next failing rank (``other``) is on another node
    within the skew bound, or the observed times order the two the other way."""

    sure: bool
    margin_s: float | None
    skew_s: float
    other: Failure | None
    note: str


@dataclass(frozen=True)
class OpenSpan:
    name: str
    start_ns: int
    end_ns: int
    span_id: str | None
    truncated: bool  # ended by the aggregator because the process died in it


@dataclass(frozen=True)
class Silent:
    """A rank that went quiet while the others of its cycle kept logging."""

    rank: int
    node: str | None
    cycle: int
    last_ns: int
    behind_s: float  # the others' median last record minus this rank's
    threshold_s: float
    last_record: LogLine | None
    open_span: OpenSpan | None


@dataclass(frozen=True)
class Hung:
    """A rank that did not arrive where the others waited for it: one that failed nothing
    while the others failed in a collective, or a silent rank (``report.md``)."""

    rank: int
    node: str | None
    cycle: int
    span: str | None  # the span it was in (the one its process ended inside), if known
    since_ns: int | None  # that span's start, else its last record
    waited_by: list[int]  # the ranks that failed in a collective waiting for it
    waiting: int  # how many ranks waited (those, or the others of its cycle)
    stack: str | None  # where its stack at SIGTERM ends, when it was recorded


@dataclass(frozen=True)
class Cycle:
    """One restart cycle (records without a cycle count as cycle 0)."""

    cycle: int
    start_ns: int
    end_ns: int
    ranks: int
    failed_ranks: int
    first_failure: Failure | None
    resumed_ns: int | None  # when the workload ran again (cycles after the first)
    recovery_s: float | None  # previous cycle's first failure (or end) to resumed_ns


@dataclass(frozen=True)
class Thresholds:
    straggler_ratio: float
    straggler_min_s: float
    silence_min_s: float
    silence_intervals: float
    skew_s: float


@dataclass
class Report:
    """Everything the report says (``nvrx_otel.report.analyse``)."""

    phases: list[PhaseStats]
    stragglers: list[Straggler]
    first_failure: Failure | None
    first_failure_by_trace: Failure | None
    ordering: Ordering | None
    silent: list[Silent]
    cycles: list[Cycle]
    thresholds: Thresholds
    logs: int = 0
    spans: int = 0
    skipped_lines: int = 0
    files: int = 0
    nodes: list[str] = field(default_factory=list)
    ranks: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    stopped: list[int] = field(default_factory=list)
    """Ranks of the first failure's cycle the launcher stopped (SIGTERM): its victims."""
    collective: list[int] = field(default_factory=list)
    """Ranks of that cycle whose failure was a collective's (a timeout, a closed peer)."""
    hung: list[Hung] = field(default_factory=list)
    """The ranks the others waited for (see :class:`Hung`)."""
    lost: dict[str, int] = field(default_factory=dict)
    """Records the fault ledger reported lost: ``dropped`` and ``corrupt`` counts."""
    jobs: list[str] = field(default_factory=list)
    """Every job id (``nv.nvrx.job.id``) the records name."""
    verdict: str = ""
    """The answer first (``report/verdict.py``)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
