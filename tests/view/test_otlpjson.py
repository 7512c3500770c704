"""OTLP/JSON lines read into entries: the collector file exporter's shape and ours."""

from __future__ import annotations

import base64

import orjson

from nvrx_otel import semconv
from nvrx_otel.view.otlpjson import parse_line, read_otlp_json
from tests.view.viewkit import BASE_NS, otlp_line


def _kv(key: str, value: dict[str, object]) -> dict[str, object]:
    return {"key": key, "value": value}


def _request(records: list[dict[str, object]], resource: list[dict[str, object]]) -> str:
    doc = {
        "resourceLogs": [
            {
                "resource": {"attributes": resource},
                "scopeLogs": [{"scope": {}, "logRecords": records}],
            }
        ]
    }
    return orjson.dumps(doc).decode()


def test_identity_level_call_site_and_text_are_read() -> None:
    (e,) = parse_line(otlp_line("node-b", 7, [(BASE_NS + 5, "WARNING", "careful")]), "f", 1)
    assert (e.ts_ns, e.level, e.severity, e.node, e.rank) == (
        BASE_NS + 5,
        "WARNING",
        13,
        "node-b",
        7,
    )
    assert (e.file, e.line, e.text, e.origin) == ("a.py", 3, "careful", "f:1")


def test_ids_in_hex_or_base64_and_records_in_time_order() -> None:
    trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    records = [
        {
            "timeUnixNano": str(BASE_NS + 2),
            "body": {"stringValue": "b"},
            "traceId": base64.b64encode(bytes.fromhex(trace)).decode(),
            "spanId": base64.b64encode(bytes.fromhex(span)).decode(),
        },
        {
            "timeUnixNano": BASE_NS + 1,
            "severityNumber": 17,
            "body": {"stringValue": "a"},
            "traceId": trace,
            "spanId": span,
        },
        {
            "observedTimeUnixNano": str(BASE_NS + 3),
            "body": {"intValue": "5"},
            "traceId": "",
            "spanId": "",
        },
    ]
    entries = parse_line(_request(records, []), "f", 1)
    assert [(e.text, e.trace_id, e.span_id) for e in entries] == [
        ("a", trace, span),
        ("b", trace, span),
        ("5", None, None),
    ]
    assert [e.level for e in entries] == ["ERROR", "?", "?"]  # the severity names the level


def test_record_attributes_override_the_resource_and_stacktrace_joins_the_text() -> None:
    resource = [
        _kv(semconv.WORKLOAD_RANK, {"intValue": "1"}),
        _kv(semconv.INFRA_RANK, {"intValue": "4"}),
    ]
    attrs = [
        _kv(semconv.WORKLOAD_RANK, {"intValue": "9"}),
        _kv("exception.stacktrace", {"stringValue": "Traceback\nValueError: x\n"}),
    ]
    rec = {
        "timeUnixNano": "1",
        "severityText": "ERROR",
        "body": {"stringValue": "failed"},
        "attributes": attrs,
    }
    (e,) = parse_line(_request([rec], resource), "f", 1)
    assert (e.rank, e.irank, e.node) == (9, 4, None)
    assert e.text == "failed\nTraceback\nValueError: x"


def test_loss_report_attributes_make_a_loss() -> None:
    attrs = [
        _kv(semconv.DROP_COUNT, {"intValue": "12"}),
        _kv(semconv.DROP_REASON, {"stringValue": "otlp_backlog"}),
    ]
    body = "dropped 12 records from rank 3 pid 9 between a and b: otlp_backlog"
    rec = {
        "timeUnixNano": "1",
        "severityText": "WARNING",
        "body": {"stringValue": body},
        "attributes": attrs,
    }
    (e,) = parse_line(_request([rec], []), "f", 1)
    assert e.loss is not None and (e.loss.what, e.loss.count, e.loss.reason) == (
        "dropped",
        12,
        "otlp_backlog",
    )


def test_other_signals_give_nothing_and_malformed_lines_are_named() -> None:
    good = otlp_line("n", 0, [(BASE_NS, "INFO", "kept")]).strip()
    lines = ['{"resourceSpans": []}', "{not json", '{"other": 1}', "", good]
    bad: list[tuple[str, int]] = []
    entries = list(
        read_otlp_json(enumerate(lines, 1), "f.jsonl", lambda p, n, line: bad.append((p, n)))
    )
    assert [e.text for e in entries] == ["kept"]
    assert bad == [("f.jsonl", 2), ("f.jsonl", 3)]
