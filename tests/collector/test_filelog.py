"""The filelog agent (agent.yaml + agent-filelog.yaml): spool files in, OTLP logs out.

Records are written by the real SpoolWriter (plus a corrupt and an empty line by hand);
the span they belong to goes from the OpenTelemetry SDK to the agent over OTLP, as ranks
do in this mode. The gateway's files must hold every record once, shaped like the
aggregator's OTLP output: exact timestamps, severity, trace and span ids, semconv names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from nvrx_otel import env, semconv
from nvrx_otel.identity import get_identity
from nvrx_otel.spool.writer import SpoolWriter
from tests.collector.harness import (
    Collector,
    MakeCollector,
    Ports,
    agent_env,
    gateway_env,
    logs,
    running,
    spans,
    wait_until,
)

T0 = 1_764_445_845_123_456_789  # ns; every digit must survive (a float would lose them)
FILELOG_AGENT = ["agent.yaml", "agent-filelog.yaml"]
GATES = ("stanza.synchronousLogEmitter",)
RAW_FIELDS = {"v", "k", "ts", "sev", "lvl", "msg", "lg", "key", "trace_id", "pid", "attrs"}


def log_record(ts: int, sev: int, lvl: str, msg: str, **extra: Any) -> dict[str, Any]:
    return {
        "k": "log",
        "ts": ts,
        "sev": sev,
        "lvl": lvl,
        "lg": "train",
        "msg": msg,
        "path": "/work/train.py",
        "line": 45,
        "fn": "main",
        "tid": 140000000000001,
        "tn": "MainThread",
        **extra,
    }


@pytest.mark.collector
def test_filelog_agent_ships_spool_records_and_resumes_after_restart(
    make_collector: MakeCollector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        env.RANK: "0",
        env.LOCAL_RANK: "0",
        env.SLURM_JOB_ID: "0042",
        env.NVRX_OTEL_NODE_ID: "node-a",
    }.items():
        monkeypatch.setenv(name, value)
    spool_root = tmp_path / "spool"
    writer = SpoolWriter(spool_root / "0042")
    pid = os.getpid()

    gw_ports, ag_ports = Ports.pick(2)
    out = tmp_path / "out"
    gateway = make_collector(
        "gateway", ["gateway.yaml"], gateway_env(gw_ports, out), gw_ports.health
    )
    environ = agent_env(
        ag_ports,
        tmp_path / "agent-storage",
        gw_ports.grpc,
        **{env.NVRX_NODE_LOCAL_TMPDIR: str(spool_root)},
    )

    def agent(name: str) -> Collector:
        return make_collector(name, FILELOG_AGENT, environ, ag_ports.health, GATES)

    # The span whose ids the records carry; it ends (and is exported) once the agent runs.
    provider = TracerProvider(resource=get_identity().resource())
    provider.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{ag_ports.http}/v1/traces")
        )
    )
    span = provider.get_tracer("nvrx_otel.test").start_span(semconv.SPAN_FTL_CYCLE)
    ctx = span.get_span_context()
    trace_id, span_id = f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
    ids = {"trace_id": trace_id, "span_id": span_id, "tf": 1}

    # Before the agent starts: files present at start are read from their beginning.
    writer.emit(log_record(T0, 9, "INFO", "training started", **ids))
    writer.emit(
        log_record(
            T0 + 1,
            17,
            "ERROR",
            "step failed",
            exc="Traceback (most recent call last):\nValueError: bad batch",
            exc_type="ValueError",
            exc_msg="bad batch",
            attrs={"step": 7, "phase": "fwd"},
            **ids,
        )
    )
    writer.emit({"k": "span_start", "ts": T0, "name": "skipped", "trace_id": trace_id, **ids})
    live = writer.current_path
    assert live is not None
    with live.open("ab") as f:
        f.write(b"\n")  # not a record
        f.write(b'{"v":1,"k":"log","ts":17644\n')  # corrupt: reported, not lost
    writer.emit(
        {
            "k": "drop",
            "ts": T0 + 3,
            "count": 5,
            "first_ts": T0 - 10,
            "last_ts": T0 - 5,
            "reason": "budget",
        }
    )

    first = agent("agent")
    with running(gateway, first):
        writer.emit(log_record(T0 + 4, 13, "WARNING", "appended while the agent runs", **ids))
        span.end()  # exported over OTLP to the agent
        wait_until(
            lambda: len(logs(out)) == 5 and len(spans(out)) == 1,
            "5 log records and the span in the gateway's files",
            on_fail=first.log_tail,
        )
        assert first.stop() == 0
        # Written while no agent runs; the restarted agent resumes from its saved offsets.
        writer.emit(log_record(T0 + 5, 9, "INFO", "written while the agent was down"))
        second = agent("agent-restarted").start().wait_ready()
        wait_until(lambda: len(logs(out)) == 6, "the 6th record", on_fail=second.log_tail)
        assert second.stop() == 0
    provider.shutdown()
    writer.close()

    records = logs(out)
    by_body = {r["body"]: r for r in records}
    assert len(by_body) == len(records) == 6  # each once: no record read twice after restart
    res = get_identity().resource_attributes()

    started = by_body["training started"]
    assert started["time"] == T0
    assert (started["severity_number"], started["severity_text"]) == (9, "INFO")
    assert (started["trace_id"], started["span_id"], started["flags"]) == (trace_id, span_id, 1)
    assert started["attributes"] == {
        semconv.CODE_FILE_PATH: "/work/train.py",
        semconv.CODE_LINE_NUMBER: 45,
        semconv.CODE_FUNCTION_NAME: "main",
        semconv.THREAD_ID: 140000000000001,
        semconv.THREAD_NAME: "MainThread",
        semconv.LOG_RECORD_UID: f"{writer.writer_id}-0",
        semconv.RECORD_KEY: f"{writer.writer_id}-0",  # its deprecated alias, for one release
    }

    failed = by_body["step failed"]
    assert (failed["time"], failed["severity_number"], failed["severity_text"]) == (
        T0 + 1,
        17,
        "ERROR",
    )
    assert failed["attributes"][semconv.EXCEPTION_TYPE] == "ValueError"
    assert failed["attributes"][semconv.EXCEPTION_MESSAGE] == "bad batch"
    assert failed["attributes"][semconv.EXCEPTION_STACKTRACE].endswith("ValueError: bad batch")
    assert (failed["attributes"]["step"], failed["attributes"]["phase"]) == (7, "fwd")

    (drop,) = [r for r in records if r["body"].startswith("dropped ")]
    assert drop["body"].startswith(f"dropped 5 records from rank 0 pid {pid} between ")
    assert drop["body"].endswith(": budget")
    assert (drop["time"], drop["severity_number"], drop["severity_text"]) == (
        T0 + 3,
        13,
        "WARNING",
    )
    assert drop["attributes"] == {
        semconv.DROP_COUNT: 5,
        semconv.DROP_RANK: 0,
        semconv.DROP_PID: pid,
        semconv.DROP_REASON: "budget",
        semconv.LOG_RECORD_UID: f"{writer.writer_id}-3",
        semconv.RECORD_KEY: f"{writer.writer_id}-3",
    }

    (corrupt,) = [r for r in records if r["body"].startswith("corrupt spool line in ")]
    assert corrupt["body"].endswith(': {"v":1,"k":"log","ts":17644')
    assert corrupt["severity_number"] == 13
    assert corrupt["attributes"][semconv.DROP_REASON] == "corrupt"

    assert by_body["appended while the agent runs"]["time"] == T0 + 4
    assert by_body["written while the agent was down"]["trace_id"] == ""
    for r in records:
        assert not RAW_FIELDS & set(r["attributes"]), r
        assert r["resource"] == res, r  # the file header's resource, as the aggregator uses
        assert {k: type(v) for k, v in r["resource"].items()} == {
            k: type(v) for k, v in res.items()
        }  # integers stay integers
        is_log = r not in (drop, corrupt)
        assert r["scope"] == ("train" if is_log else "")  # the logger name, as the aggregator

    (sp,) = spans(out)
    assert (sp["trace_id"], sp["span_id"], sp["name"]) == (
        trace_id,
        span_id,
        semconv.SPAN_FTL_CYCLE,
    )
    assert sp["resource"][semconv.NODE_ID] == "node-a"


@pytest.mark.collector
def test_filelog_mode_reports_what_the_spool_budget_dropped(
    make_collector: MakeCollector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody deletes spool files in filelog mode, so a writer over its budget drops; its
    drop record (written at close regardless of the budget) reaches the gateway, and
    records shipped + records reported dropped = records emitted, across rotated files."""
    monkeypatch.setenv(env.RANK, "5")
    spool_root = tmp_path / "spool"
    file_size = 4096
    writer = SpoolWriter(spool_root / "nojob", max_file_size=file_size, budget=3 * file_size)
    emitted = 200
    for i in range(emitted):
        writer.emit(log_record(T0 + i, 9, "INFO", f"record {i:03d} " + "x" * 80))
    writer.close()
    files = sorted((spool_root / "nojob").glob("*.jsonl"))
    assert len(files) == 3  # rotated up to the budget, then dropped

    gw_ports, ag_ports = Ports.pick(2)
    out = tmp_path / "out"
    gateway = make_collector(
        "gateway", ["gateway.yaml"], gateway_env(gw_ports, out), gw_ports.health
    )
    environ = agent_env(
        ag_ports,
        tmp_path / "agent-storage",
        gw_ports.grpc,
        **{env.NVRX_NODE_LOCAL_TMPDIR: str(spool_root)},
    )
    agent = make_collector("agent", FILELOG_AGENT, environ, ag_ports.health, GATES)

    def drops() -> list[dict[str, Any]]:
        return [r for r in logs(out) if semconv.DROP_COUNT in r["attributes"]]

    with running(gateway, agent):
        wait_until(lambda: len(drops()) == 1, "the drop record", on_fail=agent.log_tail)
        (drop,) = drops()
        shipped = emitted - drop["attributes"][semconv.DROP_COUNT]
        wait_until(lambda: len(logs(out)) == shipped + 1, f"{shipped} records and the drop")
    records = logs(out)
    bodies = [r["body"] for r in records if r is not drop and r["body"].startswith("record ")]
    # Each shipped record once (the files are read side by side, so not in emit order).
    assert sorted(bodies) == [f"record {i:03d} " + "x" * 80 for i in range(shipped)]
    assert drop["attributes"][semconv.DROP_REASON] == "budget"
    assert drop["attributes"][semconv.DROP_RANK] == 5
    assert drop["body"].startswith(f"dropped {emitted - shipped} records from rank 5 pid ")
