"""Agent and gateway for real: OTLP/HTTP into a node agent, OTLP JSON files out of the gateway.

Also the two optional paths of gateway.yaml's README: a backend overlay (a second copy to
an OTLP endpoint) and the scale-out overlay (load balancing over two gateways).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from nvrx_otel import semconv
from tests.collector.harness import (
    MakeCollector,
    Ports,
    agent_env,
    gateway_env,
    logs,
    running,
    spans,
    wait_until,
)
from tests.otlp_receiver import OtlpReceiver

T0 = 1_764_445_845_123_456_789  # ns; every digit counts (a float would lose the last ones)


def kv(key: str, value: Any) -> KeyValue:
    out = KeyValue(key=key)
    if isinstance(value, bool):
        out.value.bool_value = value
    elif isinstance(value, int):
        out.value.int_value = value
    else:
        out.value.string_value = str(value)
    return out


def log_request(resource: dict[str, Any], records: list[dict[str, Any]]) -> bytes:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.extend(kv(k, v) for k, v in resource.items())
    sl = rl.scope_logs.add()
    sl.scope.name = "train"
    for r in records:
        lr = sl.log_records.add()
        lr.time_unix_nano = r["ts"]
        lr.severity_number = r.get("sev", 9)  # type: ignore[assignment]
        lr.severity_text = r.get("lvl", "INFO")
        lr.body.string_value = r["msg"]
        lr.attributes.append(kv(semconv.RECORD_KEY, r["key"]))
        if "trace_id" in r:
            lr.trace_id = bytes.fromhex(r["trace_id"])
            lr.span_id = bytes.fromhex(r["span_id"])
            lr.flags = 1
    return req.SerializeToString()


def span_request(resource: dict[str, Any], items: list[dict[str, Any]]) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(kv(k, v) for k, v in resource.items())
    ss = rs.scope_spans.add()
    ss.scope.name = "nvrx_otel.test"
    for item in items:
        sp = ss.spans.add()
        sp.trace_id = bytes.fromhex(item["trace_id"])
        sp.span_id = bytes.fromhex(item["span_id"])
        sp.name = item["name"]
        sp.kind = Span.SPAN_KIND_INTERNAL
        sp.start_time_unix_nano = item["start"]
        sp.end_time_unix_nano = item["end"]
        sp.attributes.append(kv(semconv.RESTART_CYCLE, 0))
        sp.status.code = Status.STATUS_CODE_OK
    return req.SerializeToString()


def post(
    port: int, path: str, body: bytes | str, content_type: str = "application/x-protobuf"
) -> None:
    resp = requests.post(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        headers={"Content-Type": content_type},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text


def queue_sizes(metrics_port: int) -> list[float]:
    """The agent's ``otelcol_exporter_queue_size`` values (one per signal)."""
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    return [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("otelcol_exporter_queue_size{")
    ]


def hexid(n: int, width: int) -> str:
    return f"{n:0{width}x}"


@pytest.mark.collector
def test_log_and_span_pass_agent_and_gateway_into_files(
    make_collector: MakeCollector, tmp_path: Path
) -> None:
    gw_ports, ag_ports = Ports.pick(2)
    out = tmp_path / "out"
    gateway = make_collector(
        "gateway", ["gateway.yaml"], gateway_env(gw_ports, out), gw_ports.health
    )
    agent = make_collector(
        "agent",
        ["agent.yaml"],
        agent_env(
            ag_ports,
            tmp_path / "agent-storage",
            gw_ports.grpc,
            NVRX_OTEL_NODE_ID="node-007",
            NVRX_OTEL_AGENT_JOB_ID="0042",  # stays text (not the number 34)
        ),
        ag_ports.health,
    )
    trace_id, span_id = hexid(0x4BF92F3577B34DA6A3CE929D0E0E4736, 32), hexid(0xF067AA0BA902B7, 16)
    with running(gateway, agent):
        # The log's resource lacks node and job: the agent fills them in. The span's
        # resource has its own node id, which the agent keeps.
        post(
            ag_ports.http,
            "/v1/logs",
            log_request(
                {semconv.SERVICE_NAME: "trainer", semconv.WORKLOAD_RANK: 3},
                [
                    {
                        "ts": T0,
                        "sev": 17,
                        "lvl": "ERROR",
                        "msg": "step failed",
                        "key": "abcdef0123456789-0",
                        "trace_id": trace_id,
                        "span_id": span_id,
                    }
                ],
            ),
        )
        post(
            ag_ports.http,
            "/v1/traces",
            span_request(
                {semconv.SERVICE_NAME: "trainer", semconv.NODE_ID: "rank-node"},
                [
                    {
                        "trace_id": trace_id,
                        "span_id": span_id,
                        "name": semconv.SPAN_FTL_CYCLE,
                        "start": T0 - 1000,
                        "end": T0 + 1000,
                    }
                ],
            ),
        )
        wait_until(
            lambda: logs(out) and spans(out),
            "the log record and the span in the gateway's files",
            on_fail=lambda: agent.log_tail() + "\n" + gateway.log_tail(),
        )
        # The drain check the README gives before stopping an agent: its queue is empty.
        wait_until(lambda: queue_sizes(ag_ports.metrics) == [0, 0, 0], "an empty agent queue")
        assert agent.stop() == 0
        assert gateway.stop() == 0

    (log,) = logs(out)  # exactly once, after both stopped and flushed
    assert log["time"] == T0
    assert (log["severity_number"], log["severity_text"]) == (17, "ERROR")
    assert log["body"] == "step failed"
    assert (log["trace_id"], log["span_id"], log["flags"]) == (trace_id, span_id, 1)
    assert log["attributes"] == {semconv.RECORD_KEY: "abcdef0123456789-0"}
    assert log["resource"] == {
        semconv.SERVICE_NAME: "trainer",
        semconv.WORKLOAD_RANK: 3,
        semconv.NODE_ID: "node-007",
        semconv.JOB_ID: "0042",
    }
    (span,) = spans(out)
    assert (span["trace_id"], span["span_id"], span["name"]) == (
        trace_id,
        span_id,
        semconv.SPAN_FTL_CYCLE,
    )
    assert (span["start"], span["end"]) == (T0 - 1000, T0 + 1000)
    assert span["attributes"] == {semconv.RESTART_CYCLE: 0}
    assert span["resource"][semconv.NODE_ID] == "rank-node"
    assert span["resource"][semconv.JOB_ID] == "0042"
    for c in (agent, gateway):
        assert "deprecated" not in c.log_text().lower(), c.log_text()


@pytest.mark.collector
def test_gateway_backend_overlay_copies_to_the_backend(
    make_collector: MakeCollector, tmp_path: Path
) -> None:
    (ports,) = Ports.pick()
    out = tmp_path / "out"
    with OtlpReceiver() as backend:
        gateway = make_collector(
            "gateway",
            ["gateway.yaml", "gateway-backend.yaml"],
            gateway_env(ports, out, NVRX_OTEL_BACKEND_ENDPOINT=backend.endpoint),
            ports.health,
        )
        with running(gateway):
            post(
                ports.http,
                "/v1/logs",
                log_request(
                    {semconv.SERVICE_NAME: "trainer"}, [{"ts": T0, "msg": "hi", "key": "k-0"}]
                ),
            )
            assert backend.wait_for(lambda r: len(r.logs) == 1), gateway.log_tail()
            wait_until(
                lambda: len(logs(out)) == 1, "the record in the file", on_fail=gateway.log_tail
            )
        assert backend.logs[0]["body"] == "hi"
        assert backend.logs[0]["time"] == T0
    assert [r["body"] for r in logs(out)] == ["hi"]


@pytest.mark.collector
def test_scaleout_keeps_traces_and_resources_on_one_gateway(
    make_collector: MakeCollector, tmp_path: Path
) -> None:
    """agent-scaleout.yaml: spans go by trace id, logs by resource, each exactly once, also
    when a gateway starts after the agent."""
    *gw_ports, ag_ports = Ports.pick(3)
    outs = [tmp_path / "out0", tmp_path / "out1"]
    gateways = [
        make_collector(f"gateway{i}", ["gateway.yaml"], gateway_env(p, o), p.health)
        for i, (p, o) in enumerate(zip(gw_ports, outs, strict=True))
    ]
    hostnames = ", ".join(f"127.0.0.1:{p.grpc}" for p in gw_ports)
    agent = make_collector(
        "agent",
        ["agent.yaml", "agent-scaleout.yaml"],
        agent_env(ag_ports, tmp_path / "agent-storage", 1, NVRX_OTEL_GATEWAYS=f"[{hostnames}]"),
        ag_ports.health,
    )
    n_traces, n_resources = 32, 8
    rng = os.urandom
    items = []
    for _ in range(n_traces):
        tid = rng(16).hex()
        items += [
            {"trace_id": tid, "span_id": rng(8).hex(), "name": "s", "start": T0, "end": T0 + 1}
            for _ in range(2)
        ]

    def total() -> tuple[int, int]:
        return sum(len(spans(o)) for o in outs), sum(len(logs(o)) for o in outs)

    # The second gateway comes up only after the agent has tried to send it its share (as on
    # a cluster where agents start first): that share waits for it, and the first gateway's
    # share is not sent again meanwhile.
    with running(gateways[0], agent):
        post(ag_ports.http, "/v1/traces", span_request({semconv.SERVICE_NAME: "t"}, items))
        for r in range(n_resources):
            records = [{"ts": T0 + i, "msg": f"r{r}-{i}", "key": f"w{r}-{i}"} for i in range(3)]
            resource = {semconv.SERVICE_NAME: "t", semconv.SERVICE_INSTANCE_ID: f"proc-{r}"}
            post(ag_ports.http, "/v1/logs", log_request(resource, records))
        # The scenario's order, not a synchronisation: the second gateway comes up late.
        # (Nothing observable says the agent has tried it: the first gateway's share only
        # lands once both are up.) Were it up earlier, the test would still pass.
        time.sleep(1.5)  # past the agent's 200 ms batch timeout and its first connect attempt
        with running(gateways[1]):
            wait_until(
                lambda: total() == (2 * n_traces, 3 * n_resources),
                "every span and log record in one of the gateways",
                on_fail=lambda: (
                    f"(spans, logs) = {total()}\n"
                    + "\n".join(c.log_tail() for c in (*gateways, agent))
                ),
            )
            time.sleep(1.0)  # a second copy, were one on its way, would land now
    trace_home: dict[str, set[int]] = defaultdict(set)
    resource_home: dict[str, set[int]] = defaultdict(set)
    for i, o in enumerate(outs):
        for s in spans(o):
            trace_home[s["trace_id"]].add(i)
        for lr in logs(o):
            resource_home[lr["resource"][semconv.SERVICE_INSTANCE_ID]].add(i)
    assert total() == (2 * n_traces, 3 * n_resources)  # exactly once after the stop
    assert all(len(homes) == 1 for homes in trace_home.values()), trace_home
    assert all(len(homes) == 1 for homes in resource_home.values()), resource_home
    assert {h for homes in trace_home.values() for h in homes} == {0, 1}  # both got traces


@pytest.mark.collector
def test_agent_queue_on_disk_survives_kill_9(make_collector: MakeCollector, tmp_path: Path) -> None:
    """Records the agent acknowledged while the gateway was down are on its disk queue: an
    agent killed with SIGKILL and started again delivers every one, once, when the gateway
    comes up."""
    gw_ports, ag_ports = Ports.pick(2)
    out = tmp_path / "out"
    storage = tmp_path / "agent-storage"
    env = agent_env(ag_ports, storage, gw_ports.grpc, NVRX_OTEL_NODE_ID="node-1")
    agent = make_collector("agent", ["agent.yaml"], env, ag_ports.health)
    keys = [f"00000000000000aa-{i:x}" for i in range(300)]
    with running(agent):
        for part in range(3):  # three requests, acknowledged with the gateway down
            records = [
                {"ts": T0 + i, "msg": f"record {i}", "key": keys[i]}
                for i in range(part * 100, part * 100 + 100)
            ]
            post(ag_ports.http, "/v1/logs", log_request({semconv.SERVICE_NAME: "t"}, records))
        wait_until(
            lambda: sum(queue_sizes(ag_ports.metrics)) == 300,
            "all 300 records in the agent's queue",
            on_fail=agent.log_tail,
        )
        agent.kill()
    assert not logs(out)
    gateway = make_collector(
        "gateway", ["gateway.yaml"], gateway_env(gw_ports, out), gw_ports.health
    )
    again = make_collector("agent-again", ["agent.yaml"], env, ag_ports.health)
    with running(gateway, again):
        wait_until(
            lambda: len(logs(out)) >= 300,
            "the killed agent's queue in the gateway's files",
            on_fail=lambda: again.log_tail() + "\n" + gateway.log_tail(),
        )
        wait_until(lambda: queue_sizes(ag_ports.metrics) == [0, 0, 0], "an empty agent queue")
    got = [r["attributes"][semconv.RECORD_KEY] for r in logs(out)]
    assert sorted(got) == sorted(keys)  # every record, none twice
