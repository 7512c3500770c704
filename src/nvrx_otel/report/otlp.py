"""OTLP/JSON lines → log records and spans, the two things the report reads.

A line is one export request: ``{"resourceLogs": [...]}`` (read by the log view's
:func:`~nvrx_otel.view.otlpjson.parse_request`: the same records ``nvrx-otel logs``
shows) or ``{"resourceSpans": [...]}`` (read here into :class:`Span`). The identity (node,
ranks, restart cycle, job) comes from the resource; a span's own
``nv.nvrx.restart.cycle`` (the fault-tolerance spans carry one) and
``nv.nvrx.workload.rank`` take precedence, as a log record's own attributes do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from nvrx_otel import semconv
from nvrx_otel.view.entry import Entry
from nvrx_otel.view.otlpjson import (
    NotOtlp,
    attrs_of,
    hex_id,
    int_of,
    parse_request,
    requests,
    value_of,
)
from nvrx_otel.view.sources import Malformed

STATUS_ERROR: Final = 2
"""OTLP ``STATUS_CODE_ERROR``."""
_RESOURCE: Final = frozenset(
    {
        semconv.NODE_ID,
        semconv.WORKLOAD_RANK,
        semconv.INFRA_RANK,
        semconv.RESTART_CYCLE,
        semconv.JOB_ID,
        semconv.PROCESS_PID,
        semconv.SERVICE_NAME,
    }
)


@dataclass(eq=False, slots=True)
class Span:
    """One ended span (or one the aggregator ended for a writer that died: ``truncated``).
    ``ts_ns`` is its end, when it was recorded. Unknown fields are ``None``."""

    ts_ns: int
    start_ns: int
    name: str
    scope: str
    node: str | None
    rank: int | None
    irank: int | None
    cycle: int | None
    pid: int | None
    service: str | None  # service.name: names a process without a workload rank
    trace_id: str | None
    span_id: str | None
    parent_id: str | None
    error: bool
    status: str
    truncated: bool
    attrs: dict[str, Any] = field(default_factory=dict)
    links: list[tuple[str, str]] = field(default_factory=list)  # (trace id, span id)
    path: str = ""
    number: int = 0
    job: str | None = None  # the resource's nv.nvrx.job.id

    @property
    def duration_ns(self) -> int:
        return max(0, self.ts_ns - self.start_ns)


Item = Entry | Span
"""What a line gives: log records and spans."""


def _all_attrs(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items or ():
        key = kv.get("key")
        if isinstance(key, str):
            out[key] = value_of(kv.get("value"))
    return out


def _span(s: dict[str, Any], res: dict[str, Any], scope: str, path: str, number: int) -> Span:
    attrs = _all_attrs(s.get("attributes"))
    start = int_of(s.get("startTimeUnixNano")) or 0
    end = int_of(s.get("endTimeUnixNano")) or start
    status = s.get("status") or {}
    code = int_of(status.get("code")) or 0
    cycle = int_of(attrs.get(semconv.RESTART_CYCLE))
    if cycle is None:
        cycle = int_of(res.get(semconv.RESTART_CYCLE))
    links = []
    for ln in s.get("links") or ():
        trace, span = hex_id(ln.get("traceId"), 16), hex_id(ln.get("spanId"), 8)
        if trace is not None and span is not None:
            links.append((trace, span))
    node = res.get(semconv.NODE_ID)
    service = res.get(semconv.SERVICE_NAME)
    return Span(
        ts_ns=end,
        start_ns=start,
        name=str(s.get("name") or "?"),
        scope=scope,
        node=None if node is None else str(node),
        rank=int_of(attrs.get(semconv.WORKLOAD_RANK, res.get(semconv.WORKLOAD_RANK))),
        irank=int_of(res.get(semconv.INFRA_RANK)),
        cycle=cycle,
        pid=int_of(res.get(semconv.PROCESS_PID)),
        service=None if service is None else str(service),
        trace_id=hex_id(s.get("traceId"), 16),
        span_id=hex_id(s.get("spanId"), 8),
        parent_id=hex_id(s.get("parentSpanId"), 8),
        error=code == STATUS_ERROR or status.get("code") == "STATUS_CODE_ERROR",
        status=str(status.get("message") or ""),
        truncated=attrs.get(semconv.SPAN_TRUNCATED) is True,
        attrs=attrs,
        links=links,
        path=path,
        number=number,
        job=None if res.get(semconv.JOB_ID) is None else str(res.get(semconv.JOB_ID)),
    )


def parse_spans(doc: dict[str, Any], path: str, number: int) -> list[Span]:
    """The spans of one decoded ``resourceSpans`` request."""
    out: list[Span] = []
    for rs in doc["resourceSpans"]:
        res = attrs_of((rs.get("resource") or {}).get("attributes"), _RESOURCE)
        for ss in rs.get("scopeSpans") or ():
            scope = str((ss.get("scope") or {}).get("name") or "")
            for s in ss.get("spans") or ():
                out.append(_span(s, res, scope, path, number))
    return out


def parse_line(line: bytes | str, path: str, number: int) -> Sequence[Item]:
    """The log records or the spans of one OTLP/JSON line; raises ValueError (and
    TypeError, AttributeError, KeyError for a JSON of another shape) when it is not one."""
    doc = orjson.loads(line)
    if isinstance(doc, dict) and "resourceSpans" in doc:
        if not isinstance(doc["resourceSpans"], list):
            raise NotOtlp("resourceSpans is not a list")
        return parse_spans(doc, path, number)
    return parse_request(doc, path, number)


def read_lines(
    lines: Iterable[tuple[int, str]], path: str, malformed: Malformed
) -> Iterator[Sequence[Item]]:
    """The records of a file's numbered lines, a request at a time; a line that is not a
    request goes to ``malformed(path, number, line)``."""
    return requests(lines, path, malformed, parse_line)
