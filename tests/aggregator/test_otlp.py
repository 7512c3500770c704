"""The aggregator's OTLP output: encoding, delivery, truncated spans, outages, JSON files."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from nvrx_otel import record as rec
from nvrx_otel import semconv
from nvrx_otel.aggregator.otlp_encode import encode_logs, encode_spans
from tests.aggregator.spoolkit import AggProc, finish, process_env, wait_for
from tests.aggregator.spoolkit import spawn as agg_spawn
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver, any_value

RANK_SCRIPT = Path(__file__).with_name("otlp_rank.py")


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return process_env(tmp, "node-a", **extra)


def _aggregator(tmp: Path, *args: str, env: dict[str, str]) -> AggProc:
    """The aggregator as a process whose stderr goes to a file (``err()`` reads it)."""
    cmd = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp / "logs"),
           "--wait-file", str(tmp / "wait"), "--check-interval", "0.1", "--drain-timeout", "30",
           *args]  # fmt: skip
    return agg_spawn(tmp, cmd, env)


def _stop(agg: AggProc, tmp: Path) -> str:
    (tmp / "wait").touch()
    code, err = finish(agg, timeout=90)
    assert code == 0, err
    return err


def _node_log_count(path: Path, text: str) -> int:
    return path.read_text().count(text) if path.exists() else 0


def _ranks(tmp: Path, n: int, records: int, mode: str = "normal") -> list[subprocess.Popen[bytes]]:
    return [
        spawn(
            [sys.executable, str(RANK_SCRIPT), str(records), mode],
            env=_env(tmp, RANK=str(r), LOCAL_RANK=str(r)),
            stdout=subprocess.PIPE,
        )
        for r in range(n)
    ]


def _finish(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0


def _unique(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {i["attributes"][key]: i for i in items}


def test_severity_of_every_level_is_mapped() -> None:
    names = {"TRACE": 1, "DEBUG": 5, "INFO": 9, "SUCCESS": 10, "WARNING": 13, "ERROR": 17,
             "CRITICAL": 21}  # fmt: skip
    assert {k: rec.SEVERITY_BY_LEVEL[k] for k in names} == names
    for levelno in range(1, 60):
        assert rec.severity_of(levelno) > 0  # nothing falls to UNSPECIFIED


def test_encoding_decodes_with_opentelemetry_proto() -> None:
    record = {"k": "log", "ts": 123, "sev": 10, "lvl": "SUCCESS", "lg": "app", "msg": "m",
              "path": "/x/train.py", "line": 7, "fn": "main", "tid": 5, "tn": "T",
              "key": "ab-1", "trace_id": "0af7651916cd43dd8448eb211c80319c",
              "span_id": "b7ad6b7169203331", "tf": 1, "exc": "Traceback...",
              "exc_type": "ValueError", "exc_msg": "bad",
              "attrs": {"step": 3, "tags": ["a"]}}  # fmt: skip
    res = {semconv.WORKLOAD_RANK: 3, semconv.NODE_ID: "n1"}
    raw = encode_logs([(res, [record])], observed_ns=456).SerializeToString()
    req = ExportLogsServiceRequest.FromString(raw)
    rl = req.resource_logs[0]
    assert {kv.key: any_value(kv.value) for kv in rl.resource.attributes} == res
    lr = rl.scope_logs[0].log_records[0]
    assert rl.scope_logs[0].scope.name == "app"
    assert (lr.time_unix_nano, lr.observed_time_unix_nano) == (123, 456)
    assert (lr.severity_number, lr.severity_text) == (10, "SUCCESS")  # SUCCESS -> INFO2
    attrs = {kv.key: any_value(kv.value) for kv in lr.attributes}
    assert attrs[semconv.CODE_FILE_PATH] == "/x/train.py" and attrs[semconv.CODE_LINE_NUMBER] == 7
    assert attrs[semconv.LOG_RECORD_UID] == "ab-1" and attrs[semconv.EXCEPTION_TYPE] == "ValueError"
    assert attrs[semconv.RECORD_KEY] == "ab-1"  # the deprecated alias, for one release
    assert attrs["tags"] == ["a"] and "log.logger.name" not in attrs  # the scope names it
    assert rl.schema_url == rl.scope_logs[0].schema_url == semconv.SCHEMA_URL
    assert lr.trace_id.hex() == record["trace_id"] and lr.span_id.hex() == record["span_id"]
    span = {"k": "span_end", "ts": 20, "start": 10, "trace_id": record["trace_id"],
            "span_id": "00f067aa0ba902b7", "parent_id": "b7ad6b7169203331", "name": "n",
            "scope": semconv.SPAN_GROUP_FT, "kind": 0, "attrs": {semconv.RESTART_CYCLE: 2},
            "events": [{"ts": 15, "name": "e", "attrs": {}}],
            "status": {"code": 2, "msg": "x"}}  # fmt: skip
    treq = ExportTraceServiceRequest.FromString(encode_spans([(res, [span])]).SerializeToString())
    sp = treq.resource_spans[0].scope_spans[0].spans[0]
    assert (sp.start_time_unix_nano, sp.end_time_unix_nano, sp.kind) == (10, 20, 1)
    assert sp.parent_span_id.hex() == "b7ad6b7169203331" and sp.status.code == 2
    rs = treq.resource_spans[0]
    assert rs.schema_url == rs.scope_spans[0].schema_url == semconv.SCHEMA_URL
    assert sp.flags == 0x101  # trace flags 1 (the default), HAS_IS_REMOTE; a local parent


def test_job_delivers_logs_and_spans_correlated(tmp_path: Path, receiver: OtlpReceiver) -> None:
    env = _env(tmp_path)
    agg = _aggregator(tmp_path, "--otlp-endpoint", receiver.endpoint, env=env)
    _finish(_ranks(tmp_path, 3, 300))
    expected_logs = 3 * (300 + 1)
    assert receiver.wait_for(lambda r: len(_unique(r.logs, semconv.RECORD_KEY)) >= expected_logs)
    assert receiver.wait_for(lambda r: len(r.spans) >= 6)
    _stop(agg, tmp_path)
    logs = _unique(receiver.logs, semconv.RECORD_KEY)
    assert len(logs) == expected_logs
    spans = {s["span_id"]: s for s in receiver.spans}
    assert len(spans) == 6
    for log in logs.values():
        rank = log["resource"][semconv.WORKLOAD_RANK]
        assert log["resource"][semconv.NODE_ID] == "node-a"
        assert log["body"].endswith(f"of rank {rank}") or log["body"] == "checkpoint scheduled"
        span = spans[log["span_id"]]  # every record was logged inside a span
        assert span["trace_id"] == log["trace_id"]
        assert span["resource"][semconv.WORKLOAD_RANK] == rank
    cycles = [s for s in spans.values() if s["name"] == semconv.SPAN_FTL_CYCLE]
    schedules = [s for s in spans.values() if s["name"] == semconv.SPAN_CKPT_SCHEDULE]
    assert len(cycles) == len(schedules) == 3
    for s in schedules:
        assert spans[s["parent_span_id"]]["name"] == semconv.SPAN_FTL_CYCLE
        assert s["attributes"][semconv.CKPT_CALL_IDX] == 1
    assert all(
        s["scope"] in (semconv.SPAN_GROUP_FT, semconv.SPAN_GROUP_CKPT) for s in spans.values()
    )


def test_rank_killed_inside_a_span_delivers_it_truncated(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    env = _env(tmp_path)
    agg = _aggregator(tmp_path, "--otlp-endpoint", receiver.endpoint, env=env)
    (rank,) = _ranks(tmp_path, 1, 50, "die_in_span")
    assert rank.stdout is not None and rank.stdout.readline() == b"ready\n"
    os.kill(rank.pid, signal.SIGKILL)
    rank.communicate(timeout=30)
    assert receiver.wait_for(lambda r: any(s["name"] == semconv.SPAN_FTL_FAULT for s in r.spans))
    assert receiver.wait_for(lambda r: len(r.spans) >= 3)
    _stop(agg, tmp_path)
    spans = {s["name"]: s for s in receiver.spans}
    fault, cycle = spans[semconv.SPAN_FTL_FAULT], spans[semconv.SPAN_FTL_CYCLE]
    for open_span in (fault, cycle):  # both were open when the rank died
        assert open_span["attributes"][semconv.SPAN_TRUNCATED] is True
        assert open_span["status_code"] == 2
    assert fault["parent_span_id"] == cycle["span_id"]
    assert spans[semconv.SPAN_CKPT_SCHEDULE]["attributes"].get(semconv.SPAN_TRUNCATED) is None
    logs = _unique(receiver.logs, semconv.RECORD_KEY)
    assert len(logs) == 50 + 2
    last = max(log["time"] for log in logs.values())
    assert fault["end"] == last  # ended at the writer's last record
    (died,) = [log for log in logs.values() if log["body"].startswith("about to die")]
    assert died["span_id"] == fault["span_id"]


def test_forked_children_deliver(tmp_path: Path, receiver: OtlpReceiver) -> None:
    env = _env(tmp_path)
    agg = _aggregator(tmp_path, "--otlp-endpoint", receiver.endpoint, env=env)
    _finish(_ranks(tmp_path, 1, 10, "fork"))
    assert receiver.wait_for(
        lambda r: any(s["name"] == semconv.SPAN_FTL_HEALTH_CHECK for s in r.spans)
    )
    assert receiver.wait_for(lambda r: len(_unique(r.logs, semconv.RECORD_KEY)) >= 13)
    _stop(agg, tmp_path)
    logs = list(_unique(receiver.logs, semconv.RECORD_KEY).values())
    child = [log for log in logs if "child" in log["body"]]
    (parent_pid,) = {
        log["resource"][semconv.PROCESS_PID] for log in logs if log["body"].startswith("step")
    }
    assert len(child) == 2 and all(c["resource"][semconv.PROCESS_PID] != parent_pid for c in child)
    (hc,) = [s for s in receiver.spans if s["name"] == semconv.SPAN_FTL_HEALTH_CHECK]
    assert hc["resource"][semconv.PROCESS_PID] == child[0]["resource"][semconv.PROCESS_PID]
    assert child[1]["span_id"] == hc["span_id"]


def test_receiver_down_loses_nothing(tmp_path: Path) -> None:
    """The endpoint is down from the start until the aggregator has said that exporting
    fails and has written every record to the node log; once it is back, everything
    arrives."""
    receiver = OtlpReceiver().start()
    port = receiver.port
    receiver.stop()  # down from the start: the node log must flow regardless
    env = _env(tmp_path)
    agg = _aggregator(tmp_path, "--otlp-endpoint", f"http://127.0.0.1:{port}", env=env)
    try:
        _finish(_ranks(tmp_path, 2, 200))
        node_log = tmp_path / "logs" / "nvrx_log_node-a.log"
        wait_for(lambda: _node_log_count(node_log, "\n") >= 402, 60, "the node log")
        assert node_log.read_text().count(" of rank ") == 400  # written while OTLP is down
        wait_for(lambda: "export failing" in agg.err(), 60, "the export failing")
        receiver = OtlpReceiver(port=port).start()
        assert receiver.wait_for(lambda r: len(_unique(r.logs, semconv.RECORD_KEY)) >= 402, 60)
        assert receiver.wait_for(lambda r: len({s["span_id"] for s in r.spans}) >= 4, 60)
        err = _stop(agg, tmp_path)
    finally:
        receiver.stop()
        if agg.poll() is None:
            agg.kill()
            agg.wait()
    assert "retrying with backoff" in err and "works again" in err
    assert len(_unique(receiver.logs, semconv.RECORD_KEY)) == 402
    assert not list((tmp_path / "spool").rglob("*.jsonl"))  # consumed by both, then deleted


def test_aggregator_killed_and_restarted_loses_nothing(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    env = _env(tmp_path)
    receiver.status = 503  # refuse everything: progress stays unacknowledged
    agg = _aggregator(tmp_path, "--otlp-endpoint", receiver.endpoint, env=env)
    _finish(_ranks(tmp_path, 2, 100))
    node_log = tmp_path / "logs" / "nvrx_log_node-a.log"
    wait_for(lambda: _node_log_count(node_log, " of rank ") >= 200, 60, "the node log")
    agg.kill()
    agg.wait(timeout=30)
    receiver.status = 200
    agg = _aggregator(tmp_path, "--otlp-endpoint", receiver.endpoint, env=env)
    assert receiver.wait_for(lambda r: len(_unique(r.logs, semconv.RECORD_KEY)) >= 202)
    _stop(agg, tmp_path)
    assert len(_unique(receiver.logs, semconv.RECORD_KEY)) == 202
    assert node_log.read_text().count(" of rank ") == 200  # and exactly once in the node log


def _ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else _ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_ids_to_base64(v) for v in node]
    return node


def test_otlp_json_output_parses_as_otlp_json(tmp_path: Path) -> None:
    env = _env(tmp_path)
    agg = _aggregator(tmp_path, "--otlp-json", str(tmp_path / "otlp"), env=env)
    _finish(_ranks(tmp_path, 2, 20))
    logs_file = tmp_path / "otlp" / "logs_node-a.jsonl"
    wait_for(
        lambda: _node_log_count(logs_file, '"nv.nvrx.record.key"') >= 42, 60, "the OTLP/JSON logs"
    )
    _stop(agg, tmp_path)
    n_logs = n_spans = 0
    for line in logs_file.read_text().splitlines():
        doc = json.loads(line)
        rl = doc["resourceLogs"][0]
        record = rl["scopeLogs"][0]["logRecords"][0]
        assert isinstance(record["timeUnixNano"], str)  # 64-bit integers as decimal strings
        req = ParseDict(_ids_to_base64(doc), ExportLogsServiceRequest())
        n_logs += sum(len(sl.log_records) for r in req.resource_logs for sl in r.scope_logs)
    for line in (tmp_path / "otlp" / "traces_node-a.jsonl").read_text().splitlines():
        doc = json.loads(line)
        span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16)  # lowercase hex
        req2 = ParseDict(_ids_to_base64(doc), ExportTraceServiceRequest())
        n_spans += sum(len(ss.spans) for r in req2.resource_spans for ss in r.scope_spans)
    assert (n_logs, n_spans) == (42, 4)


def test_batch_refused_for_good_is_counted_not_retried_forever(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    receiver.status = 400  # a permanent refusal, unlike 503
    agg = _aggregator(tmp_path, "--otlp-endpoint", receiver.endpoint, env=_env(tmp_path))
    _finish(_ranks(tmp_path, 1, 30))
    node_log = tmp_path / "logs" / "nvrx_log_node-a.log"
    wait_for(lambda: _node_log_count(node_log, " of rank ") >= 30, 60, "the node log")
    err = _stop(agg, tmp_path)
    assert "refused a logs batch of 31 for good (HTTP 400" in err
    assert "exported 0 log records, 0 spans" in err and "33 dropped" in err
    node_log = (tmp_path / "logs" / "nvrx_log_node-a.log").read_text()
    assert node_log.count(" of rank ") == 30  # the node log is unaffected
