"""OTLP output: encoding cost per record (SDK route vs direct), and aggregator records/s
to a local OTLP/HTTP endpoint.

- ``sdk_encode``: build SDK log records from decoded spool records and run the SDK's own
  ``encode_logs`` (what an exporter built on the SDK would do);
- ``message_encode``: fill opentelemetry-proto messages straight from the decoded records
  and serialize them (the route before ``otlp_wire``), plus the orjson decode all need;
- ``wire_encode``: write the request's protobuf bytes directly
  (``nvrx_otel.aggregator.otlp_wire``, what the aggregator sends);
- ``aggregator``: a prepared spool (8 ranks) drained by one in-process aggregator with the
  node log and OTLP/HTTP output to a receiver in another process that reads and discards
  each request; records/s of the OTLP sink from start until every record is acknowledged.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.bench_aggregator import NODE, prepare
from nvrx_otel.aggregator.otlp_wire import LogsEncoder
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig
from nvrx_otel.spool.paths import job_dir

_RECEIVER = r"""
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
gate, first = sys.argv[1], sys.argv[2]  # refuse (503) until the gate file exists
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ok = os.path.exists(gate)
        if ok and not os.path.exists(first):
            with open(first, "w") as fh:
                fh.write(repr(time.time()))
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", "0"); self.end_headers()
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def _lines(n: int) -> list[bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        prepare(Path(tmp), max(1, n // 8))
        out: list[bytes] = []
        for path in sorted(Path(tmp).iterdir()):
            out.extend(line for line in path.read_bytes().splitlines()[1:])
        return out[:n]


def _sdk_encode(lines: list[bytes]) -> None:
    from opentelemetry._logs import LogRecord, SeverityNumber
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs as sdk_encode
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource = Resource.create({})
    scope = InstrumentationScope("nvrx")
    batch = []
    for line in lines:
        r = orjson.loads(line)
        record = LogRecord(
            timestamp=r["ts"],
            observed_timestamp=time.time_ns(),
            severity_text=r["lvl"],
            severity_number=SeverityNumber(r["sev"]),
            body=r["msg"],
            attributes={
                "code.file.path": r["path"],
                "code.line.number": r["line"],
                "code.function.name": r["fn"],
                "thread.id": r["tid"],
                "thread.name": r["tn"],
                "log.record.uid": r["key"],
                "nv.nvrx.record.key": r["key"],
            },
        )
        batch.append(ReadableLogRecord(record, resource=resource, instrumentation_scope=scope))
    sdk_encode(batch).SerializeToString()


def _message_encode(lines: list[bytes]) -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
    )

    req = ExportLogsServiceRequest()
    sl = req.resource_logs.add().scope_logs.add()
    sl.scope.name = "nvrx"
    observed = time.time_ns()
    for line in lines:
        r = orjson.loads(line)
        lr = sl.log_records.add()
        lr.time_unix_nano = r["ts"]
        lr.observed_time_unix_nano = observed
        lr.severity_number = r["sev"]
        lr.severity_text = r["lvl"]
        lr.body.string_value = r["msg"]
        add = lr.attributes.add
        for key, value in (
            ("code.file.path", r["path"]),
            ("code.function.name", r["fn"]),
            ("thread.name", r["tn"]),
        ):
            kv = add()
            kv.key = key
            kv.value.string_value = value
        for key, number in (("thread.id", r["tid"]), ("code.line.number", r["line"])):
            kv = add()
            kv.key = key
            kv.value.int_value = number
        for key in ("log.record.uid", "nv.nvrx.record.key"):
            kv = add()
            kv.key = key
            kv.value.string_value = r["key"]
    req.SerializeToString()


def _wire_encode(lines: list[bytes]) -> None:
    records = [orjson.loads(line) for line in lines]
    LogsEncoder().request([({}, records)], time.time_ns())


def _per_record(fn: Any, lines: list[bytes], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        fn(lines)
        samples.append((time.perf_counter_ns() - start) / len(lines))
    return statistics.median(samples)


def _aggregator_rate(records_per_rank: int, *, otlp_alone: bool) -> dict[str, Any]:
    """Records/s of the OTLP sink: with the node log draining at the same time (both
    sinks), or alone (the endpoint refuses until the node log has every record; the time
    runs from the first accepted request to the last acknowledgement)."""
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-otlp-") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "spool"
        directory = job_dir(root, "bench")
        prepare(directory, records_per_rank)
        total = records_per_rank * 8
        gate, first = tmp / "gate", tmp / "first"
        if not otlp_alone:
            gate.touch()
        with subprocess.Popen(
            [sys.executable, "-c", _RECEIVER, str(gate), str(first)],
            stdout=subprocess.PIPE,
            text=True,
        ) as receiver:
            try:
                assert receiver.stdout is not None
                port = int(receiver.stdout.readline())
                config = AggregatorConfig(
                    log_dir=tmp / "logs",
                    spool_root=root,
                    job_id="bench",
                    node_id=NODE,
                    status_interval=0,
                    drain_timeout=3600,
                    nice=0,
                    otlp_endpoint=f"http://127.0.0.1:{port}",
                )
                agg = Aggregator(config)
                start = time.time()
                agg.start_thread()
                export = agg._otlp
                assert export is not None
                if otlp_alone:
                    while agg.health.written < total:
                        time.sleep(0.01)
                    gate.touch()
                while export.exported["logs"] < total:
                    time.sleep(0.005)
                end = time.time()
                if otlp_alone:
                    start = float(first.read_text())
                agg.shutdown()
            finally:
                receiver.kill()
    return {"records": total, "seconds": end - start, "records_per_s": total / (end - start)}


def run(records: int = 20_000, records_per_rank: int = 50_000, rounds: int = 5) -> dict[str, Any]:
    lines = _lines(records)
    samples: dict[str, list[float]] = {"sdk": [], "message": [], "wire": []}
    for _ in range(rounds):  # interleaved: noise hits all alike
        samples["sdk"].append(_per_record(_sdk_encode, lines, 1))
        samples["message"].append(_per_record(_message_encode, lines, 1))
        samples["wire"].append(_per_record(_wire_encode, lines, 1))
    sdk, message, wire = (statistics.median(samples[k]) for k in ("sdk", "message", "wire"))
    return {
        "ns_per_record": {"sdk_encode": sdk, "message_encode": message, "wire_encode": wire},
        "ratios": {"wire/sdk": wire / sdk, "wire/message": wire / message},
        "otlp_sink_alone": _aggregator_rate(records_per_rank, otlp_alone=True),
        "both_sinks_at_once": _aggregator_rate(records_per_rank, otlp_alone=False),
        "target_otlp_records_per_s": 100_000,
        "cpus": os.cpu_count(),
    }
