"""The lean spool path: span_start/span_end records exactly as docs/spool-format.md says,
the span being current the standard way, and log records carrying its ids."""

from __future__ import annotations

import enum
import os
import re
import signal
from pathlib import Path

import pytest
from opentelemetry import context, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from nvrx_otel import _tracectx
from nvrx_otel import record as rec
from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import EXCEPTION_MESSAGE, EXCEPTION_STACKTRACE, EXCEPTION_TYPE
from nvrx_otel.tracing import setup_tracing
from tests.conftest import log_records
from tests.tracing.conftest import ended, run_python, spans

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")
SHARED = ("trace_id", "span_id", "tf", "name", "scope", "scope_v", "kind", "pid", "node")


def test_start_and_end_records_have_every_field(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("my.scope", "1.2")
    with tracer.start_as_current_span("op", kind=SpanKind.CLIENT, attributes={"a": 1}) as span:
        span.set_attribute("b", "two")
    (start,) = spans(tmp_path, "span_start")
    (end,) = spans(tmp_path, "span_end")
    ctx = span.get_span_context()
    assert start["v"] == 1 and HEX32.match(start["trace_id"]) and HEX16.match(start["span_id"])
    assert start["trace_id"] == f"{ctx.trace_id:032x}" and start["span_id"] == f"{ctx.span_id:016x}"
    assert start["tf"] == int(ctx.trace_flags) and start["tf"] & 1
    assert (start["name"], start["scope"], start["scope_v"]) == ("op", "my.scope", "1.2")
    assert start["kind"] == 2 and start["attrs"] == {"a": 1} and start["links"] == []
    assert "parent_id" not in start and start["pid"] == os.getpid()
    assert "seq" not in start  # it is in the key
    assert rec.seq_of(end["key"]) == rec.seq_of(start["key"]) + 1
    assert end["key"].split("-")[0] == start["key"].split("-")[0]
    assert {k: end[k] for k in SHARED} == {k: start[k] for k in SHARED}
    assert end["attrs"] == {"a": 1, "b": "two"} and end["start"] == start["ts"]
    assert end["ts"] >= end["start"] and end["events"] == [] and end["links"] == []
    assert end["status"] == {"code": 0, "msg": ""} and "dropped" not in end


def test_children_carry_parent_ids_and_links(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")
    with tracer.start_as_current_span("parent") as parent:
        other = tracer.start_span("other")  # child of "parent" too (current context)
        with tracer.start_as_current_span(
            "child", links=[Link(other.get_span_context(), {"why": "x"})]
        ) as child:
            child.add_link(parent.get_span_context())
        other.end()
    by_name = ended(tmp_path)
    p, c, o = by_name["parent"], by_name["child"], by_name["other"]
    assert c["parent_id"] == p["span_id"] == o["parent_id"] and "parent_id" not in p
    assert c["trace_id"] == p["trace_id"] == o["trace_id"]
    assert c["links"] == [
        {"trace_id": o["trace_id"], "span_id": o["span_id"], "attrs": {"why": "x"}},
        {"trace_id": p["trace_id"], "span_id": p["span_id"], "attrs": {}},
    ]
    (child_start,) = [s for s in spans(tmp_path, "span_start") if s["name"] == "child"]
    assert len(child_start["links"]) == 1  # links known at start only


def test_events_status_and_name_as_the_sdk_keeps_them(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")
    span = tracer.start_span("first name")
    span.add_event("ev", {"k": 1}, timestamp=123)
    span.set_status(StatusCode.ERROR, "bad")
    span.update_name("second name")
    span.set_status(Status(StatusCode.OK))
    span.set_status(StatusCode.ERROR, "ignored: OK is final")
    span.end()
    span.end()  # a second end writes nothing
    span.set_attribute("late", 1)  # after end: ignored
    (start,) = spans(tmp_path, "span_start")
    (end,) = spans(tmp_path, "span_end")
    assert start["name"] == "first name" and end["name"] == "second name"
    assert end["events"] == [{"ts": 123, "name": "ev", "attrs": {"k": 1}}]
    assert end["status"] == {"code": 1, "msg": ""} and "late" not in end["attrs"]
    assert not span.is_recording()


def test_records_are_whole_across_file_rotations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_LOG_MAX_FILE_SIZE_KB", "4")  # a new file every few spans
    monkeypatch.setenv("NVRX_OTEL_SPOOL_BUDGET_MB", "8")
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")
    for i in range(40):
        with tracer.start_as_current_span("op", attributes={"i": i}) as span:
            if i % 3 == 0:
                span.set_status(StatusCode.ERROR, f"bad {i}")
    records = spans(tmp_path)
    assert len(list(tmp_path.rglob("*.jsonl"))) > 2
    assert len(records) == 80 and len({r["key"] for r in records}) == 80
    for end in spans(tmp_path, "span_end"):
        i = end["attrs"]["i"]
        status = {"code": 2, "msg": f"bad {i}"} if i % 3 == 0 else {"code": 0, "msg": ""}
        assert end["status"] == status and end["events"] == []


def test_escaping_exception_is_recorded_with_status_error(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    with (
        pytest.raises(ValueError, match="boom"),
        trace.get_tracer("t").start_as_current_span("op"),
    ):
        raise ValueError("boom")
    (end,) = spans(tmp_path, "span_end")
    assert end["status"] == {"code": 2, "msg": "ValueError: boom"}
    (event,) = end["events"]
    assert event["name"] == "exception" and event["attrs"][EXCEPTION_TYPE] == "ValueError"
    assert event["attrs"][EXCEPTION_MESSAGE] == "boom"
    assert "raise ValueError" in event["attrs"][EXCEPTION_STACKTRACE]


def test_span_limits_drop_and_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "2")
    monkeypatch.setenv("OTEL_SPAN_EVENT_COUNT_LIMIT", "2")
    monkeypatch.setenv("OTEL_SPAN_LINK_COUNT_LIMIT", "1")
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")
    other = tracer.start_span("other")
    other.end()
    link = Link(other.get_span_context())
    span = tracer.start_span("op", attributes={"a": 1, "b": 2, "c": 3}, links=[link, link])
    span.set_attribute("a", 10)  # an existing key may change
    span.set_attribute("d", 4)
    for name in ("e1", "e2", "e3"):
        span.add_event(name)
    span.end()
    end = ended(tmp_path)["op"]
    assert end["attrs"] == {"a": 10, "b": 2}
    assert [e["name"] for e in end["events"]] == ["e2", "e3"]  # the oldest goes
    assert len(end["links"]) == 1
    assert end["dropped"] == {"attrs": 2, "events": 1, "links": 1}


class Color(str, enum.Enum):
    RED = "red"


def test_odd_attribute_values_are_converted_never_raised(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    span = trace.get_tracer("t").start_span(
        "op",
        attributes={"path": Path("/x/y"), "seq": (1, 2), "none": None, "color": Color.RED},  # type: ignore[dict-item]
    )
    span.set_attribute("mixed", [1, "a"])  # type: ignore[list-item]
    span.set_attribute("", 1)
    span.end()
    attrs = ended(tmp_path)["op"]["attrs"]
    assert attrs == {"path": "/x/y", "seq": [1, 2], "color": "red", "mixed": "[1, 'a']"}


def test_current_span_is_set_the_standard_way(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")
    assert not trace.get_current_span().get_span_context().is_valid
    with tracer.start_as_current_span("outer") as outer:
        assert trace.get_current_span() is outer and _tracectx.current_span() is outer
        ctx = context.get_current()
        with tracer.start_as_current_span("inner") as inner:
            assert trace.get_current_span() is inner
        assert trace.get_current_span() is outer
    assert not trace.get_current_span().get_span_context().is_valid
    detached = tracer.start_span("explicit", context=ctx)  # parent from a given context
    detached.end()
    with trace.use_span(tracer.start_span("used"), end_on_exit=True) as used:
        assert trace.get_current_span() is used
    by_name = ended(tmp_path)
    assert by_name["explicit"]["parent_id"] == by_name["outer"]["span_id"]
    assert by_name["inner"]["parent_id"] == by_name["outer"]["span_id"]
    assert "parent_id" not in by_name["used"]


def test_start_as_current_span_decorates_sync_and_async(tmp_path: Path) -> None:
    import asyncio

    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")

    @tracer.start_as_current_span("sync")
    def work() -> int:
        return trace.get_current_span().get_span_context().span_id

    @tracer.start_as_current_span("async")
    async def awork() -> int:
        await asyncio.sleep(0)
        return trace.get_current_span().get_span_context().span_id

    ids = {work(), work(), asyncio.run(awork())}
    assert len(ids) == 3
    ended_ids = {int(r["span_id"], 16) for r in spans(tmp_path, "span_end")}
    assert ended_ids == ids


@pytest.mark.parametrize("with_filter", [False, True], ids=["fast-logger", "stdlib-path"])
def test_logs_inside_a_span_carry_its_ids(tmp_path: Path, with_filter: bool) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))

    def keep(record: object) -> bool:
        return True

    if with_filter:  # a filter sends every call down the full stdlib path
        log.addFilter(keep)
    try:
        setup_tracing(spool_dir=tmp_path)
        with trace.get_tracer("t").start_as_current_span("op") as span:
            log.info("inside")
        log.info("outside")
    finally:
        log.removeFilter(keep)
    inside, outside = log_records(tmp_path)
    (end,) = spans(tmp_path, "span_end")
    assert inside["msg"] == "inside" and inside["trace_id"] == end["trace_id"]
    assert inside["span_id"] == end["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert inside["tf"] == end["tf"] and "trace_id" not in outside


def test_killed_process_leaves_its_span_start(tmp_path: Path) -> None:
    code = (
        "import os, signal\n"
        "from nvrx_otel.tracing import setup_tracing, ft_span\n"
        f"setup_tracing(spool_dir={str(tmp_path)!r})\n"
        "with ft_span('run', cycle=3):\n"
        "    with ft_span('teardown', cycle=3):\n"
        "        pass\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = run_python(code)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    starts = {r["name"] for r in spans(tmp_path, "span_start")}
    ends = {r["name"] for r in spans(tmp_path, "span_end")}
    assert starts == {"nv.nvrx.ftl.run", "nv.nvrx.ftl.teardown"}
    assert ends == {"nv.nvrx.ftl.teardown"}  # the run span was open when the process died


def test_a_vanished_spool_never_raises(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path / "spool")
    tracer = trace.get_tracer("t")
    with tracer.start_as_current_span("first"):
        pass
    for path in (tmp_path / "spool" / "nojob").iterdir():
        path.unlink()
    (tmp_path / "spool" / "nojob").rmdir()
    with tracer.start_as_current_span("second") as span:  # written to a deleted file or dropped
        span.set_attribute("k", 1)
    assert not span.is_recording()


def test_a_parent_through_traceparent_is_marked_remote_and_encoded_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root span under the launcher's TRACEPARENT has a remote parent; its child has a
    local one. The OTLP span flags say so as the SDK's encoder does (HAS_IS_REMOTE always,
    IS_REMOTE for a remote parent), next to the trace flags."""
    from nvrx_otel.aggregator.otlp_encode import encode_spans

    monkeypatch.setenv("TRACEPARENT", f"00-{'12' * 16}-{'34' * 8}-01")
    setup_tracing(spool_dir=tmp_path)
    tracer = trace.get_tracer("t")
    with tracer.start_as_current_span("root"), tracer.start_as_current_span("child"):
        pass
    ends = {r["name"]: r for r in spans(tmp_path, "span_end")}
    assert ends["root"]["parent_id"] == "34" * 8 and ends["root"]["parent_remote"] is True
    assert "parent_remote" not in ends["child"]
    for r in ends.values():
        assert rec.valid(r)
    (rs,) = encode_spans([({}, list(ends.values()))]).resource_spans
    flags = {s.name: s.flags for ss in rs.scope_spans for s in ss.spans}
    assert flags == {"root": 0x301, "child": 0x101}
