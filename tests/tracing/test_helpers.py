"""Span helpers: semconv names, attribute short names, sync/async context managers and
decorators, exceptions, checkpoint links, and the startup/import spans."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nvrx_otel.semconv import (
    CKPT_BYTES,
    CKPT_CALL_IDX,
    CKPT_ITERATION,
    CKPT_PATH,
    ERROR_TYPE,
    EXCEPTION_TYPE,
    RESTART_CYCLE,
    SPAN_CKPT_FINALIZE,
    SPAN_CKPT_REQUEST,
    SPAN_CKPT_SAVE_WRITE,
    SPAN_CKPT_SCHEDULE,
    SPAN_FTL_FAULT,
    SPAN_FTL_PYTHON_IMPORTS,
    SPAN_FTL_PYTHON_STARTUP,
    SPAN_GROUP_CKPT,
    SPAN_GROUP_CKPT_PHASES,
    CkptSaveSpanKind,
    CkptSpanKind,
    FtSpanKind,
)
from nvrx_otel.tracing import (
    checkpoint_link,
    checkpoint_span,
    ckptlinks,
    ft_span,
    process_start_ns,
    setup_tracing,
    startup_spans,
)
from nvrx_otel.tracing.propagation import traceparent
from tests.tracing.conftest import ended, run_python, spans


class CheckpointError(Exception):
    pass


def test_checkpoint_span_uses_the_semconv_table_and_short_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_tracing(spool_dir=tmp_path)
    with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=3, iteration=1200, color="red"):
        pass
    with checkpoint_span(
        CkptSaveSpanKind.WRITE, call_idx=3, bytes=10, path=Path("/ckpt"), **{"my.key": 1}
    ):
        pass
    by_name = ended(tmp_path)
    schedule, write = by_name[SPAN_CKPT_SCHEDULE], by_name[SPAN_CKPT_SAVE_WRITE]
    assert schedule["scope"] == SPAN_GROUP_CKPT and write["scope"] == SPAN_GROUP_CKPT_PHASES
    assert schedule["attrs"] == {CKPT_CALL_IDX: 3, CKPT_ITERATION: 1200, "color": "red"}
    assert write["attrs"] == {CKPT_CALL_IDX: 3, CKPT_BYTES: 10, CKPT_PATH: "/ckpt", "my.key": 1}
    err = capsys.readouterr().err
    assert err.count("unknown attribute 'color'") == 1 and "my.key" not in err


def test_unknown_kind_is_reported_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_tracing(spool_dir=tmp_path)
    ran = []
    with checkpoint_span("explode", call_idx=1) as span:
        ran.append(span)
    with ft_span("nap", cycle=0):
        ran.append(None)
    assert ran == [trace.INVALID_SPAN, None] and not spans(tmp_path)
    err = capsys.readouterr().err
    assert "unknown kind 'explode'" in err and "unknown kind 'nap'" in err


def test_exceptions_are_recorded_with_error_type_and_reraised(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    with pytest.raises(CheckpointError), ft_span(FtSpanKind.FAULT, cycle=2):
        raise CheckpointError("disk full")
    end = ended(tmp_path)[SPAN_FTL_FAULT]
    assert end["attrs"] == {RESTART_CYCLE: 2, ERROR_TYPE: f"{__name__}.CheckpointError"}
    assert end["status"] == {"code": 2, "msg": "CheckpointError: disk full"}
    (event,) = end["events"]
    assert event["name"] == "exception"
    assert event["attrs"][EXCEPTION_TYPE] == f"{__name__}.CheckpointError"


def test_async_context_manager_and_decorators(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)

    @checkpoint_span("stage", call_idx=9)
    def stage(n: int) -> int:
        return trace.get_current_span().get_span_context().span_id + 0 * n

    @ft_span("rendezvous", cycle=1)
    async def rendezvous() -> int:
        await asyncio.sleep(0)
        return trace.get_current_span().get_span_context().span_id

    @ft_span("health_check", cycle=1)
    async def failing() -> None:
        await asyncio.sleep(0)
        raise CheckpointError("unhealthy")

    async def main() -> tuple[int, int]:
        async with checkpoint_span("finalize", call_idx=9) as span:
            await asyncio.sleep(0)
            inner = await rendezvous()
        with pytest.raises(CheckpointError):
            await failing()
        return span.get_span_context().span_id, inner

    outer, inner = asyncio.run(main())
    ids = {stage(1), stage(2)}
    assert len(ids) == 2  # a new span per call
    records = spans(tmp_path, "span_end")
    names = sorted(r["name"] for r in records)
    assert names == sorted(
        [
            SPAN_CKPT_FINALIZE,
            "nv.nvrx.ftl.rendezvous",
            "nv.nvrx.ftl.health_check",
            "nv.nvrx.ckpt.save.stage",
            "nv.nvrx.ckpt.save.stage",
        ]
    )
    by_id = {int(r["span_id"], 16): r for r in records}
    assert by_id[inner]["parent_id"] == f"{outer:016x}"  # awaited inside the async with
    failed = next(r for r in records if r["name"] == "nv.nvrx.ftl.health_check")
    assert failed["status"]["code"] == 2 and failed["attrs"][ERROR_TYPE].endswith("CheckpointError")


def test_checkpoint_spans_link_by_call_idx_across_threads(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    with checkpoint_span("schedule", call_idx=11):
        pass

    def worker() -> None:  # another thread: no common parent, joined by call_idx
        with checkpoint_span("request", call_idx=11, path="/ckpt/11"):
            pass

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    with checkpoint_span("finalize", call_idx=11):
        pass
    with checkpoint_span("finalize", call_idx=12):  # another checkpoint: no links
        pass
    records = spans(tmp_path, "span_end")
    schedule, request, finalize, other = records
    assert [r["name"] for r in records] == [
        SPAN_CKPT_SCHEDULE,
        SPAN_CKPT_REQUEST,
        SPAN_CKPT_FINALIZE,
        SPAN_CKPT_FINALIZE,
    ]

    def ref(record: dict[str, object]) -> dict[str, object]:
        return {"trace_id": record["trace_id"], "span_id": record["span_id"], "attrs": {}}

    assert schedule["links"] == [] and request["links"] == [ref(schedule)]
    assert finalize["links"] == [ref(schedule), ref(request)] and other["links"] == []


def test_a_new_schedule_under_a_call_idx_starts_a_new_checkpoint(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    with checkpoint_span("schedule", call_idx=7):
        pass
    with checkpoint_span("request", call_idx=7):
        pass
    with checkpoint_span("schedule", call_idx=7) as again:  # the index is used again
        pass
    with checkpoint_span("finalize", call_idx=7):
        pass
    *_, second, finalize = spans(tmp_path, "span_end")
    assert second["span_id"] == f"{again.get_span_context().span_id:016x}"
    ref = {"trace_id": second["trace_id"], "span_id": second["span_id"], "attrs": {}}
    assert finalize["links"] == [ref]  # not to the request of the earlier checkpoint
    assert checkpoint_link(7) == traceparent(again.get_span_context())


def test_only_recent_checkpoints_are_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")  # spans with ids, nothing written
    setup_tracing(spool_dir=tmp_path)
    count = ckptlinks.MAX_CHECKPOINTS + 1
    last = {}
    for idx in range(count):
        for kind in ("schedule", "request"):
            with checkpoint_span(kind, call_idx=idx) as span:
                last[kind] = span.get_span_context()
    assert checkpoint_link(0) is None  # the oldest half is forgotten
    assert checkpoint_link(count - 1) == traceparent(last["schedule"])
    assert ckptlinks.requests[count - 1] == last["request"]
    assert len(ckptlinks.schedules) <= ckptlinks.MAX_CHECKPOINTS


def test_helpers_follow_a_provider_switched_off_on_or_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helpers keep the global provider's tracers: switching that provider off and on
    again, or another global provider, takes effect at the next span."""
    provider = setup_tracing(spool_dir=tmp_path)
    with checkpoint_span("request", call_idx=1):
        pass
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert setup_tracing(spool_dir=tmp_path) is provider
    with checkpoint_span("request", call_idx=2) as span:
        assert span is trace.INVALID_SPAN
    assert checkpoint_link(2) is None  # nothing remembered while off
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    assert setup_tracing(spool_dir=tmp_path) is provider
    with checkpoint_span("request", call_idx=3):
        pass
    assert [r["attrs"][CKPT_CALL_IDX] for r in spans(tmp_path, "span_end")] == [1, 3]
    exporter = InMemorySpanExporter()
    theirs = TracerProvider()
    theirs.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER = theirs  # replaced behind the API's back (reset after the test)
    with checkpoint_span("request", call_idx=4):
        pass
    (sdk_span,) = exporter.get_finished_spans()
    assert sdk_span.attributes == {CKPT_CALL_IDX: 4}
    assert len(spans(tmp_path, "span_end")) == 2
    theirs.shutdown()


def test_helpers_cost_nothing_while_off_and_trace_once_set_up(tmp_path: Path) -> None:
    @ft_span("run", cycle=0)  # decorated before tracing is set up
    def run() -> trace.Span:
        return trace.get_current_span()

    with checkpoint_span("request", call_idx=1) as span:
        assert span is trace.INVALID_SPAN
    assert run() is trace.INVALID_SPAN
    setup_tracing(spool_dir=tmp_path)
    assert run().get_span_context().is_valid
    assert [r["name"] for r in spans(tmp_path, "span_end")] == ["nv.nvrx.ftl.run"]


def test_startup_span_starts_when_the_process_started(tmp_path: Path) -> None:
    code = (
        "import time\n"
        "t0 = time.time_ns()\n"
        "time.sleep(0.3)\n"
        "from nvrx_otel.tracing import setup_tracing, startup_spans, import_span\n"
        f"setup_tracing(spool_dir={str(tmp_path)!r})\n"
        "with startup_spans():\n"
        "    with import_span():\n"
        "        import json\n"
        "stat = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"
        "btime = next(int(l.split()[1]) for l in open('/proc/stat') if l.startswith('btime'))\n"
        "import os\n"
        "print(t0, btime * 10**9 + int(stat[19]) * 10**9 // os.sysconf('SC_CLK_TCK'))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    t0, from_proc = (int(x) for x in proc.stdout.split())
    by_name = ended(tmp_path)
    startup, imports = by_name[SPAN_FTL_PYTHON_STARTUP], by_name[SPAN_FTL_PYTHON_IMPORTS]
    assert startup["start"] <= t0  # before the script's first line, not when called
    assert abs(startup["start"] - from_proc) < 1_500_000_000  # btime has 1 s resolution
    assert imports["parent_id"] == startup["span_id"] and imports["start"] > t0


def test_process_start_reads_proc(tmp_path: Path) -> None:
    start = process_start_ns()
    assert start is not None
    fake = tmp_path / "stat"
    fake.write_bytes(b"1 (a (b) c) S " + b"0 " * 16 + b"100 0 0\n")  # starttime = 100 ticks
    assert process_start_ns(str(fake)) is not None
    fake.write_bytes(b"garbage")
    assert process_start_ns(str(fake)) is None


def test_startup_record_ends_now(tmp_path: Path) -> None:
    setup_tracing(spool_dir=tmp_path)
    span = startup_spans().record()
    assert not span.is_recording()
    (end,) = spans(tmp_path, "span_end")
    assert end["name"] == SPAN_FTL_PYTHON_STARTUP and end["start"] < end["ts"]
