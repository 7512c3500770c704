"""The path without a spool: the SDK exports, exit stays bounded, forks get fresh stacks."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from nvrx_otel.semconv import (
    CKPT_CALL_IDX,
    CKPT_ITERATION,
    ERROR_TYPE,
    PROCESS_PID,
    SPAN_CKPT_SCHEDULE,
    SPAN_GROUP_CKPT,
)
from nvrx_otel.tracing import checkpoint_span, ft_span, setup_tracing
from tests.tracing.conftest import run_python


def test_spans_go_to_the_given_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    provider = setup_tracing(exporters=[exporter])
    assert provider.mode == "sdk"  # type: ignore[attr-defined]
    with ft_span("cycle", cycle=2) as cycle:
        with checkpoint_span("schedule", call_idx=7, iteration=100):
            pass
        with pytest.raises(RuntimeError), ft_span("fault", cycle=2):
            raise RuntimeError("lost a node")
    assert provider.force_flush()
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    schedule = by_name[SPAN_CKPT_SCHEDULE]
    assert schedule.instrumentation_scope is not None
    assert schedule.instrumentation_scope.name == SPAN_GROUP_CKPT
    assert dict(schedule.attributes or {}) == {CKPT_CALL_IDX: 7, CKPT_ITERATION: 100}
    assert schedule.parent is not None
    assert schedule.parent.span_id == cycle.get_span_context().span_id
    assert schedule.resource.attributes[PROCESS_PID] == os.getpid()
    fault = by_name["nv.nvrx.ftl.fault"]
    assert fault.status.status_code is StatusCode.ERROR
    assert (fault.attributes or {})[ERROR_TYPE] == "RuntimeError"
    assert [e.name for e in fault.events] == ["exception"]


def test_traceparent_parents_root_spans_in_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("TRACEPARENT", f"00-{'12' * 16}-{'34' * 8}-01")
    exporter = InMemorySpanExporter()
    provider = setup_tracing(exporters=[exporter])

    def in_thread() -> None:
        with trace.get_tracer("t").start_as_current_span("from a thread"):
            pass

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    with trace.get_tracer("t").start_as_current_span("main"):
        pass
    provider.force_flush()
    finished = exporter.get_finished_spans()
    assert len(finished) == 2
    for span in finished:
        assert span.context is not None and span.parent is not None
        assert span.context.trace_id == int("12" * 16, 16)
        assert span.parent.span_id == int("34" * 8, 16) and span.parent.is_remote


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port  # closed again: nobody listens there


def test_exit_with_an_unreachable_endpoint_is_bounded() -> None:
    env = dict(os.environ)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{_free_port()}"
    code = (
        "import sys, time\n"
        "from nvrx_otel.tracing import setup_tracing, ft_span\n"
        "provider = setup_tracing()\n"
        "assert provider.mode == 'sdk', provider.mode\n"
        "with ft_span('cycle', cycle=0):\n"
        "    pass\n"
        "print(time.monotonic(), flush=True)\n"  # the script's last moment
    )
    started = time.monotonic()
    proc = run_python(code, env)
    finished = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    body_done = float(proc.stdout.split()[-1])  # CLOCK_MONOTONIC is system-wide
    # The SDK alone waits 6-9 s here; generous margin for a loaded machine.
    assert finished - body_done < 3.0, (finished - started, proc.stderr)


FORKING = r"""
import json, multiprocessing, os, sys
from nvrx_otel.tracing import setup_tracing, ft_span
setup_tracing()
with ft_span("cycle", cycle=0):
    pass  # queued in the parent before the forks: must be exported once, by the parent

def child(kind):
    with ft_span("run", cycle=0, **{"test.child": kind}):
        pass

pid = os.fork()
if pid == 0:
    child("fork")
    sys.exit(0)  # atexit runs: the child's own stack flushes
os.waitpid(pid, 0)
p = multiprocessing.get_context("fork").Process(target=child, args=("multiprocessing",))
p.start()
p.join()
print(json.dumps({"parent": os.getpid(), "fork": pid, "mp": p.pid}), file=sys.stderr)
"""


def test_sdk_path_in_fork_and_multiprocessing_children() -> None:
    env = dict(os.environ)
    env["OTEL_TRACES_EXPORTER"] = "console"
    proc = run_python(FORKING, env)
    assert proc.returncode == 0, proc.stderr
    pids = json.loads(proc.stderr.strip().splitlines()[-1])
    decoder = json.JSONDecoder()
    exported: list[dict[str, object]] = []
    text, pos = proc.stdout, 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        obj, pos = decoder.raw_decode(text, pos)
        exported.append(obj)
    by_kind: dict[str, list[int]] = {}
    for span in exported:
        attrs = span["attributes"]
        resource = span["resource"]
        assert isinstance(attrs, dict) and isinstance(resource, dict)
        kind = attrs.get("test.child", "parent")
        by_kind.setdefault(str(kind), []).append(resource["attributes"][PROCESS_PID])
    assert by_kind == {
        "parent": [pids["parent"]],  # exported once: children do not re-send it
        "fork": [pids["fork"]],
        "multiprocessing": [pids["mp"]],
    }


def test_spool_spans_off_sends_spans_to_exporters_while_logs_still_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVRX_OTEL_SPOOL_SPANS=0 (the collector's filelog agent mode): spans go over the SDK
    path although a spool is configured; log records still spool, with the span's ids."""
    from nvrx_otel.logging import setup_logger
    from tests.conftest import log_records, read_spool

    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path))
    monkeypatch.setenv("NVRX_OTEL_SPOOL_SPANS", "0")
    exporter = InMemorySpanExporter()
    provider = setup_tracing(exporters=[exporter])
    assert provider.mode == "sdk"  # type: ignore[attr-defined]
    log = setup_logger()
    with ft_span("cycle", cycle=1) as cycle:
        log.info("inside")
    assert provider.force_flush()
    (span,) = exporter.get_finished_spans()
    assert span.context is not None
    assert span.context.span_id == cycle.get_span_context().span_id
    (record,) = log_records(tmp_path)
    assert record["span_id"] == format(span.context.span_id, "016x")
    assert not [r for r in read_spool(tmp_path) if r["k"].startswith("span")]


def test_sdk_spans_carry_schema_urls_and_remote_parent_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK path: resource and scope carry the semantic conventions' schema URL; the SDK's
    own encoder marks the TRACEPARENT parent remote (the spool path's encoder matches it)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from nvrx_otel.semconv import SCHEMA_URL

    monkeypatch.setenv("TRACEPARENT", f"00-{'12' * 16}-{'34' * 8}-01")
    exporter = InMemorySpanExporter()
    provider = setup_tracing(exporters=[exporter])
    with ft_span("cycle", cycle=0):
        pass
    provider.force_flush()
    (span,) = exporter.get_finished_spans()
    assert span.resource.schema_url == SCHEMA_URL
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.schema_url == SCHEMA_URL
    (rs,) = encode_spans([span]).resource_spans
    assert rs.schema_url == rs.scope_spans[0].schema_url == SCHEMA_URL
    assert rs.scope_spans[0].spans[0].flags == 0x300
