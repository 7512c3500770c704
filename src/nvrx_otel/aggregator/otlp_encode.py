"""Spool spans → OTLP protobuf requests, filled directly (no SDK objects in between).

Building SDK ``LogRecord`` objects and running the SDK's ``encode_logs`` costs ~38 us per
record; filling opentelemetry-proto messages straight from the decoded spool record costs
a fraction of that (``benchmarks/bench_otlp.py`` measures both). Log records go faster
still as wire bytes (``otlp_wire``); :func:`encode_logs` parses those into a message. The
JSON form used by ``--otlp-json`` is the same messages in the OTLP/JSON mapping the
collector's file exporter writes (ids as lowercase hex, 64-bit integers as decimal strings).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from nvrx_otel import semconv

Record = dict[str, Any]
Batch = Sequence[tuple[Mapping[str, Any], list[Record]]]
"""Records grouped by their writer's resource attributes (the header's ``res``)."""

_fromhex = bytes.fromhex
_HAS_IS_REMOTE = 0x100  # SpanFlags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def fill_value(target: AnyValue, value: Any) -> None:
    """Set an OTLP AnyValue from a JSON value (str, bool, int, float, list, dict, None)."""
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        if -(2**63) <= value < 2**63:
            target.int_value = value
        else:
            target.string_value = str(value)
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, (list, tuple)):
        values = target.array_value.values
        for item in value:
            fill_value(values.add(), item)
    elif isinstance(value, dict):
        kvs = target.kvlist_value.values
        for k, v in value.items():
            kv = kvs.add()
            kv.key = str(k)
            fill_value(kv.value, v)
    elif value is not None:
        target.string_value = str(value)


def fill_attributes(target: Any, attrs: Mapping[str, Any]) -> None:
    """Append ``attrs`` to a repeated KeyValue field."""
    add = target.add
    for key, value in attrs.items():
        kv: KeyValue = add()
        kv.key = key
        fill_value(kv.value, value)


def encode_logs(batch: Batch, observed_ns: int) -> ExportLogsServiceRequest:
    """One export request as a message (the sink sends ``otlp_wire``'s bytes directly)."""
    from nvrx_otel.aggregator.otlp_wire import LogsEncoder

    return ExportLogsServiceRequest.FromString(LogsEncoder().request(batch, observed_ns))


def parse(signal: str, payload: bytes) -> ExportLogsServiceRequest | ExportTraceServiceRequest:
    """A serialized request of ``signal`` (``logs`` or ``traces``) as its message."""
    if signal == "logs":
        return ExportLogsServiceRequest.FromString(payload)
    return ExportTraceServiceRequest.FromString(payload)


def _fill_span(span: Span, r: Record, *, truncated_at: int | None = None) -> None:
    span.trace_id = _fromhex(r["trace_id"])
    span.span_id = _fromhex(r["span_id"])
    parent = r.get("parent_id")
    if parent:
        span.parent_span_id = _fromhex(parent)
    # the trace flags, and whether the parent is remote, as the SDK's encoder says it
    span.flags = (r.get("tf", 1) & 0xFF) | (
        _HAS_IS_REMOTE | _IS_REMOTE if r.get("parent_remote") else _HAS_IS_REMOTE
    )
    span.name = r.get("name", "")
    kind: int = r.get("kind", 0)
    span.kind = kind + 1  # type: ignore[assignment]  # API SpanKind 0..4 -> OTLP 1..5
    if truncated_at is None:
        span.start_time_unix_nano = r["start"] if "start" in r else r["ts"]
        span.end_time_unix_nano = r["ts"]
    else:
        span.start_time_unix_nano = r["ts"]
        span.end_time_unix_nano = max(truncated_at, r["ts"])
    fill_attributes(span.attributes, r.get("attrs") or {})
    for event in r.get("events") or ():
        ev = span.events.add()
        ev.time_unix_nano = event.get("ts", 0)
        ev.name = event.get("name", "")
        fill_attributes(ev.attributes, event.get("attrs") or {})
    for link in r.get("links") or ():
        ln = span.links.add()
        ln.trace_id = _fromhex(link["trace_id"])
        ln.span_id = _fromhex(link["span_id"])
        fill_attributes(ln.attributes, link.get("attrs") or {})
    dropped = r.get("dropped") or {}
    span.dropped_attributes_count = dropped.get("attrs", 0)
    span.dropped_events_count = dropped.get("events", 0)
    span.dropped_links_count = dropped.get("links", 0)
    if truncated_at is not None:
        kv = span.attributes.add()
        kv.key = semconv.SPAN_TRUNCATED
        kv.value.bool_value = True
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = "the process ended before the span did"
    else:
        status = r.get("status") or {}
        span.status.code = status.get("code", 0)
        if status.get("msg"):
            span.status.message = status["msg"]


def encode_spans(
    batch: Batch, truncated: Iterable[tuple[Mapping[str, Any], Record, int]] = ()
) -> ExportTraceServiceRequest:
    """Ended spans (``span_end`` records) by resource and scope, plus ``truncated`` spans:
    ``(resource, span_start record, end ns)`` of spans whose process died inside them."""
    req = ExportTraceServiceRequest()
    groups: list[tuple[Mapping[str, Any], list[tuple[Record, int | None]]]] = [
        (res, [(r, None) for r in records]) for res, records in batch
    ]
    for res, start, end_ns in truncated:
        groups.append((res, [(start, end_ns)]))
    for resource, items in groups:
        rs = req.resource_spans.add()
        fill_attributes(rs.resource.attributes, resource)
        rs.schema_url = semconv.SCHEMA_URL
        scopes: dict[tuple[str, str], Any] = {}
        for r, truncated_at in items:
            key = (r.get("scope", ""), r.get("scope_v", ""))
            ss = scopes.get(key)
            if ss is None:
                ss = scopes[key] = rs.scope_spans.add()
                ss.scope.name = key[0]
                ss.schema_url = semconv.SCHEMA_URL
                if key[1]:
                    ss.scope.version = key[1]
            _fill_span(ss.spans.add(), r, truncated_at=truncated_at)
    return req


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_FIELDS and isinstance(v, str) else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def to_json(message: ExportLogsServiceRequest | ExportTraceServiceRequest) -> dict[str, Any]:
    """The OTLP/JSON form of a request, as the collector's file exporter writes it."""
    as_dict = MessageToDict(message, use_integers_for_enums=True)
    out: dict[str, Any] = _hex_ids(as_dict)
    return out
