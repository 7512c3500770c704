"""OTLP/JSON lines made by hand, in the shape the aggregator's ``--otlp-json`` and the
collector's file exporter write (ids as lowercase hex, 64-bit integers as strings)."""

from __future__ import annotations

from typing import Any

import orjson

from nvrx_otel import semconv

NS = 1_000_000_000
BASE_NS = 1_700_000_000 * NS


def at(seconds: float) -> int:
    """``BASE_NS`` plus ``seconds`` (to the nanosecond)."""
    return BASE_NS + round(seconds * NS)


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _kvs(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in attrs.items()]


def resource(
    node: str, rank: int | None = None, cycle: int | None = None, **more: Any
) -> dict[str, Any]:
    attrs: dict[str, Any] = {semconv.NODE_ID: node}
    if rank is not None:
        attrs[semconv.WORKLOAD_RANK] = rank
    if cycle is not None:
        attrs[semconv.RESTART_CYCLE] = cycle
    attrs.update(more)
    return attrs


def log(
    ts: int,
    body: str,
    level: str = "INFO",
    *,
    trace: str | None = None,
    span: str | None = None,
    observed: int | None = None,
    line: int = 7,
    **attrs: Any,
) -> dict[str, Any]:
    """A log record; ``attrs``: more attributes (``exception_type="ValueError"`` for
    ``exception.type``, ``outcome``/``signal``/``stacks``/``exit_code`` for the watcher's
    ``nv.nvrx.process.*`` and ``process.exit.code``)."""
    sev = {"DEBUG": 5, "INFO": 9, "WARNING": 13, "ERROR": 17, "CRITICAL": 21, "FATAL": 21}[level]
    names = {
        "exception_type": semconv.EXCEPTION_TYPE,
        "outcome": semconv.PROCESS_OUTCOME,
        "signal": semconv.PROCESS_SIGNAL,
        "stacks": semconv.PROCESS_STACKS,
        "exit_code": semconv.PROCESS_EXIT_CODE,
    }
    more = {names.get(k, k): v for k, v in attrs.items()}
    lr: dict[str, Any] = {
        "timeUnixNano": str(ts),
        "observedTimeUnixNano": str(observed or ts),
        "severityNumber": sev,
        "severityText": level,
        "body": {"stringValue": body},
        "attributes": _kvs({"code.file.path": "/w/train.py", "code.line.number": line, **more}),
    }
    if trace:
        lr["traceId"] = trace
        lr["spanId"] = span or ""
    return lr


def span(
    name: str,
    start: int,
    end: int,
    *,
    trace: str,
    span_id: str,
    parent: str | None = None,
    error: str | None = None,
    truncated: bool = False,
    links: list[tuple[str, str]] | None = None,
    **attrs: Any,
) -> dict[str, Any]:
    a = dict(attrs)
    if truncated:
        a[semconv.SPAN_TRUNCATED] = True
    s: dict[str, Any] = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": _kvs(a),
        "status": {},
    }
    if parent:
        s["parentSpanId"] = parent
    if error is not None or truncated:
        s["status"] = {"code": 2, "message": error or "the process ended before the span did"}
    if links:
        s["links"] = [{"traceId": t, "spanId": i} for t, i in links]
    return s


def logs_line(res: dict[str, Any], records: list[dict[str, Any]]) -> str:
    doc = {
        "resourceLogs": [
            {
                "resource": {"attributes": _kvs(res)},
                "scopeLogs": [{"scope": {"name": "nvrx"}, "logRecords": records}],
            }
        ]
    }
    return orjson.dumps(doc).decode() + "\n"


def spans_line(res: dict[str, Any], spans: list[dict[str, Any]], scope: str = "x") -> str:
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": _kvs(res)},
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans}],
            }
        ]
    }
    return orjson.dumps(doc).decode() + "\n"


def tid(n: int) -> str:
    """A 32-hex trace id."""
    return f"{n:032x}"


def sid(n: int) -> str:
    """A 16-hex span id."""
    return f"{n:016x}"
