"""The lean span's line templates write exactly the bytes of the dict path
(``LeanSpan._record`` through ``record.spliced_line``), whatever the span carries; a name
the templates cannot take falls back to the dict path; a forked or renamed writer gets
new templates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from nvrx_otel import record as rec
from nvrx_otel.tracing import checkpoint_span, setup_tracing
from nvrx_otel.tracing.provider import NvrxTracerProvider
from nvrx_otel.tracing.span import LeanSpan


def _lines(directory: Path) -> list[bytes]:
    out: list[bytes] = []
    for path in sorted(directory.rglob("*.jsonl")):
        out.extend(line + b"\n" for line in path.read_bytes().splitlines()[1:])  # no header
    return out


def _dict_path_line(span: LeanSpan, line: bytes) -> bytes:
    """The line the dict path writes for ``span``'s record ``line`` (same kind, ts, seq)."""
    written = rec.decode(line)
    record = span._record(written["k"], written["ts"], rec.seq_of(written["key"]))
    return rec.spliced_line(record, span._sink.writer.identity_suffix)


def _check(directory: Path, spans: list[LeanSpan], kind: str = "") -> None:
    """Each ``kind`` line of ``spans`` (every line: "") is the dict path's line for the
    span as it is now (a start line: check it before the span changes)."""
    lines = [line for line in _lines(directory) if kind.encode() in line]
    by_id = {f"{s.get_span_context().span_id:016x}": s for s in spans}
    checked = 0
    for line in lines:
        span = by_id.get(rec.decode(line)["span_id"])
        if span is not None:
            assert line == _dict_path_line(span, line)
            checked += 1
    assert checked == (1 if kind else 2) * len(spans)


def _tracer(tmp_path: Path, scope: str = "my.scope", version: str | None = "1.2") -> Any:
    provider = setup_tracing(spool_dir=tmp_path)
    assert isinstance(provider, NvrxTracerProvider) and provider.mode == "spool"
    return trace.get_tracer(scope, version)


def test_plain_root_span_lines_match_the_dict_path(tmp_path: Path) -> None:
    tracer = _tracer(tmp_path)
    with tracer.start_as_current_span("op", attributes={"a": 1, "b": "x", "c": 1.5}) as span:
        pass
    _check(tmp_path, [span])


def test_rich_span_lines_match_the_dict_path(tmp_path: Path) -> None:
    tracer = _tracer(tmp_path, version=None)
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        other = tracer.start_span("other")
        with tracer.start_as_current_span(
            'na%me "quoted" \u00e9\u4e2d', links=[Link(other.get_span_context(), {"w": "x"})]
        ) as child:
            _check(tmp_path, [parent, other, child], '"k":"span_start"')
            child.set_attribute("later", True)
            child.add_event("ev", {"n": 3})
            child.set_status(Status(StatusCode.ERROR, "bad %s %d"))
        other.update_name("renamed %")
        other.end()
    _check(tmp_path, [parent, other, child], '"k":"span_end"')


def test_dropped_counts_take_the_dict_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1")
    tracer = _tracer(tmp_path)
    with tracer.start_as_current_span("op", attributes={"a": 1, "b": 2}) as span:
        _check(tmp_path, [span], '"k":"span_start"')
        span.set_attribute("c", 3)
    _check(tmp_path, [span], '"k":"span_end"')
    end = rec.decode(_lines(tmp_path)[-1])
    assert end["dropped"] == {"attrs": 2, "events": 0, "links": 0}


def test_a_name_orjson_refuses_takes_the_dict_path(tmp_path: Path) -> None:
    tracer = _tracer(tmp_path)
    with tracer.start_as_current_span("lone \ud800 surrogate", attributes={"k": "\udcff"}) as span:
        pass
    lines = _lines(tmp_path)
    assert [rec.decode(line)["name"] for line in lines] == ["lone \ufffd surrogate"] * 2
    assert [rec.decode(line)["attrs"] for line in lines] == [{"k": "\ufffd"}] * 2
    assert isinstance(span, LeanSpan) and span._tpl is None


def test_helper_span_lines_match_the_dict_path(tmp_path: Path) -> None:
    _tracer(tmp_path)
    with checkpoint_span("schedule", call_idx=7, iteration=70) as schedule:
        pass
    with (
        checkpoint_span("request", call_idx=7, path="/ckpt") as request,  # links to schedule
        checkpoint_span("write", call_idx=7) as write,  # a child of the request
    ):
        pass
    assert all(isinstance(s, LeanSpan) for s in (schedule, request, write))
    _check(tmp_path, [schedule, request, write])


def test_a_restarted_writer_gets_new_templates(tmp_path: Path) -> None:
    tracer = _tracer(tmp_path)
    span = tracer.start_span("op")
    sink = span._sink  # type: ignore[attr-defined]
    before = sink.templates
    assert before
    sink.writer.restart_in_child()  # what a forked child's writer does: new id and identity
    assert sink.templates is not before and not sink.templates
    span.end()  # started under the old writer id, ends under the new one
    records = {r["k"]: r for r in map(rec.decode, _lines(tmp_path))}  # two writers' files
    start, end = records["span_start"], records["span_end"]
    assert start["key"].split("-")[0] != end["key"].split("-")[0]
    assert end["key"].split("-")[0] == sink.writer.writer_id


def test_a_remote_parents_lines_match_the_dict_path(tmp_path: Path) -> None:
    tracer = _tracer(tmp_path)
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    with (
        trace.use_span(NonRecordingSpan(remote)),
        tracer.start_as_current_span("under a launcher") as child,
        tracer.start_as_current_span("grandchild") as grandchild,
    ):
        pass
    with (
        trace.use_span(NonRecordingSpan(remote)),
        checkpoint_span("schedule", call_idx=1) as helper,
    ):
        pass
    _check(tmp_path, [child, grandchild, helper])
    records = {r["name"]: r for r in map(rec.decode, _lines(tmp_path)) if r["k"] == "span_end"}
    assert records["under a launcher"]["parent_remote"] is True
    assert records["nv.nvrx.ckpt.schedule"]["parent_remote"] is True
    assert "parent_remote" not in records["grandchild"]
