"""The one record type of the log view: what a node-log record and an OTLP log record
both become."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

LOSS_FILE: Final = "nvrx_aggregator"
"""The call site the aggregator gives its loss reports (``reports.FILE``)."""


@dataclass(frozen=True)
class Loss:
    """What a loss report (``dropped <N> records from rank ...``) accounts for."""

    what: str  # "dropped" or "corrupt"
    count: int
    reason: str


@dataclass(frozen=True)
class Collapsed:
    """What a record the aggregator's de-duplication window collapsed stands for: ``count``
    identical records from ``ranks`` (its ``nv.nvrx.dedup.*`` attributes, or the node log's
    `` [repeated <N>x across ranks <ranges>]``)."""

    count: int
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Ending:
    """The watcher's ``nv.nvrx.process.*`` attributes of a record: ``outcome`` (``exit``,
    ``exception``, ``signal``, ``vanished``) on a process's ending record, ``stacks``
    (``fatal``, ``terminate``, ``requested``) on a dump of its stacks."""

    outcome: str | None
    signal: str | None
    stacks: str | None
    exit_code: int | None


@dataclass(eq=False, slots=True)
class Entry:
    """One log record as the view sees it, whichever file it came from.

    ``text`` is the whole message: its first line, then any further lines and the
    exception's traceback (the node log's continuation lines, without their indent).
    ``ts_ns`` is ns since the epoch (the node log keeps milliseconds). Unknown fields are
    ``None``."""

    ts_ns: int
    level: str
    severity: int  # OTel severity number; 0 when the level is not a known name
    node: str | None
    rank: int | None
    lrank: int | None
    irank: int | None
    ilrank: int | None
    file: str
    line: int | None
    text: str
    trace_id: str | None
    span_id: str | None
    loss: Loss | None
    path: str  # the file it was read from (one string object per file)
    number: int  # the number of its (first) line there
    cycle: int | None = None  # restart cycle (OTLP: the resource's nv.nvrx.restart.cycle)
    observed_ns: int | None = None  # OTLP: when the exporter saw it (its observedTimeUnixNano)
    collapsed: Collapsed | None = None  # the aggregator collapsed identical records into it
    exc_type: str | None = None  # OTLP: its exception.type
    job: str | None = None  # OTLP: the resource's nv.nvrx.job.id
    ending: Ending | None = None  # OTLP: the watcher's record of how a process ended or
    # what it was doing when signalled (nv.nvrx.process.*)

    @property
    def origin(self) -> str:
        """``<path>:<line number>`` where the record starts."""
        return f"{self.path}:{self.number}"

    @property
    def first_line(self) -> str:
        return self.text.partition("\n")[0]
