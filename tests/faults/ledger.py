"""The fault ledger: for one scenario, what the ranks emitted against what the node log
and an OTLP receiver hold, and what the aggregator reported lost.

A row passes when emitted = in the node log + reported dropped + reported corrupt, the
node log holds no record twice, and (OTLP on) unique records at the receiver + the losses
reported there = emitted. Every row made in a run is kept in :data:`ROWS`, and the
``tests/faults`` conftest prints them as one table at the end.

Rank messages are ``<tag>-<i>`` (``r3-17``: rank 3's 18th record), so the ledger can
count per writer; loss reports are the WARNING records of ``nvrx_otel.aggregator``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel import semconv
from nvrx_otel.aggregator import reports
from tests.aggregator.spoolkit import LINE

MESSAGE = re.compile(r"^(?P<tag>r[0-9a-z]*)-(?P<i>\d+)\b")
"""A rank's message: tag, then its index in the tag's sequence."""
NODE_LINE = re.compile(
    LINE.pattern.replace(r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", r"(?P<time>\S+ \S+)")
)
"""The node-log line grammar, any time text (a record without a valid ``ts`` shows ``????``)."""
REPORT = re.compile(r"^(?P<what>dropped|corrupt) (?P<count>\d+) records from rank ")
"""A loss report's message in the node log."""


class LedgerError(AssertionError):
    """A scenario lost, duplicated or misreported records (not a harness failure: expected
    failures name this, so a broken harness still fails)."""


def defect(reason: str) -> pytest.MarkDecorator:
    """Mark a scenario that shows a known loss: an expected failure, strict (it must fail
    until the fix lands) and only by :class:`LedgerError`, never by a harness error."""
    return pytest.mark.xfail(strict=True, raises=LedgerError, reason=reason)


def require(condition: object, message: str) -> None:
    """Fail the scenario with :class:`LedgerError` unless ``condition`` holds."""
    if not condition:
        raise LedgerError(message)


@dataclass
class NodeLogCount:
    """What a node log holds: rank records (per message), reported losses."""

    messages: Counter[str] = field(default_factory=Counter)
    dropped: int = 0
    corrupt: int = 0

    @property
    def unique(self) -> int:
        return len(self.messages)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.messages.values())

    def per_tag(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for msg in self.messages:
            m = MESSAGE.match(msg)
            if m:
                out[m["tag"]] += 1
        return out


def count_node_log(path: Path) -> NodeLogCount:
    """Count the rank records and the loss reports of a node log."""
    out = NodeLogCount()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        m = NODE_LINE.match(line)
        if not m:
            continue
        msg = m["msg"]
        if m["file"] == reports.FILE:
            r = REPORT.match(msg)
            if r is None:
                continue
            if r["what"] == "dropped":
                out.dropped += int(r["count"])
            else:
                out.corrupt += int(r["count"])
        elif MESSAGE.match(msg):
            out.messages[MESSAGE.match(msg)[0]] += 1  # type: ignore[index]
    return out


@dataclass
class OtlpCount:
    """What an OTLP receiver got, deduplicated by ``nv.nvrx.record.key`` (delivery is at
    least once)."""

    unique: int = 0
    reported: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


def count_otlp(logs: list[dict[str, Any]]) -> OtlpCount:
    out = OtlpCount()
    by_key = {log["attributes"].get(semconv.RECORD_KEY): log for log in logs}
    for log in by_key.values():
        attrs = log["attributes"]
        if semconv.DROP_COUNT in attrs:
            out.reported += int(attrs[semconv.DROP_COUNT])
            out.reasons[str(attrs.get(semconv.DROP_REASON))] += int(attrs[semconv.DROP_COUNT])
        elif isinstance(log["body"], str) and MESSAGE.match(log["body"]):
            out.unique += 1
    return out


@dataclass
class Row:
    scenario: str
    emitted: int
    node_log: int
    dropped: int
    corrupt: int
    duplicates: int
    otlp_unique: int | None = None
    otlp_reported: int | None = None
    note: str = ""

    def problems(self) -> list[str]:
        out = []
        accounted = self.node_log + self.dropped + self.corrupt
        if accounted != self.emitted:
            out.append(
                f"emitted {self.emitted} != node log {self.node_log} + dropped {self.dropped}"
                f" + corrupt {self.corrupt} ({accounted - self.emitted:+d})"
            )
        if self.duplicates:
            out.append(f"{self.duplicates} duplicates in the node log")
        if self.otlp_unique is not None and self.otlp_reported is not None:
            otlp = self.otlp_unique + self.otlp_reported
            if otlp != self.emitted:
                out.append(
                    f"emitted {self.emitted} != OTLP unique {self.otlp_unique} + OTLP reported"
                    f" {self.otlp_reported} ({otlp - self.emitted:+d})"
                )
        return out


ROWS: list[Row] = []
"""Every row made in this run, in order."""


def settle(
    scenario: str,
    emitted: int,
    node_log: Path,
    otlp_logs: list[dict[str, Any]] | None = None,
    note: str = "",
) -> Row:
    """Make the scenario's row, keep it for the summary, and fail on any problem."""
    nl = count_node_log(node_log)
    row = Row(scenario, emitted, nl.unique, nl.dropped, nl.corrupt, nl.duplicates, note=note)
    if otlp_logs is not None:
        oc = count_otlp(otlp_logs)
        row.otlp_unique, row.otlp_reported = oc.unique, oc.reported
    ROWS.append(row)
    problems = row.problems()
    require(not problems, f"{scenario}: " + "; ".join(problems))
    return row


HEAD = ("scenario", "emitted", "node log", "dropped", "corrupt", "dups", "otlp uniq",
        "otlp rep", "result")  # fmt: skip


def table(rows: list[Row]) -> list[str]:
    """The rows as aligned text lines."""
    cells = [HEAD]
    for r in rows:
        cells.append(
            (
                r.scenario,
                str(r.emitted),
                str(r.node_log),
                str(r.dropped),
                str(r.corrupt),
                str(r.duplicates),
                "-" if r.otlp_unique is None else str(r.otlp_unique),
                "-" if r.otlp_reported is None else str(r.otlp_reported),
                "ok" if not r.problems() else "FAIL " + "; ".join(r.problems()),
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEAD) - 1)]
    return [
        "  ".join(c[i].ljust(widths[i]) if i < 1 else c[i].rjust(widths[i]) for i in range(8))
        + "  "
        + c[8]
        for c in cells
    ]
