"""Ledger scenarios from outside the suite's own habits: log calls whose values cannot be
printed, the node log deleted under a running aggregator, an OTLP endpoint that refuses
some batches for good or rejects part of a request (OTLP partial success)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from nvrx_otel import record as rec
from tests.aggregator.spoolkit import FakeWriter, wait_for
from tests.conftest import spawn
from tests.faults.ledger import MESSAGE, count_node_log, count_otlp, settle
from tests.faults.node import ROOT, Node
from tests.otlp_receiver import OtlpReceiver

UNPRINTABLE_RANK = """
import os
from nvrx_otel.logging import configure_logging, get_logger, setup_logger, shutdown_logging

class Unprintable:
    def __repr__(self):
        raise RuntimeError("repr fails")
    __str__ = __repr__

spool = os.environ["NVRX_NODE_LOCAL_TMPDIR"]
log = setup_logger(node_local_tmp_dir=spool)
for i in range(10):
    log.info("r0-%d plain", i)
log.info("r0-10 with an extra value that cannot be printed", extra={"v": Unprintable()})
configure_logging(log_dir=os.path.join(spool, "..", "run"), console_level="CRITICAL")
get_logger("t").bind(v=Unprintable()).info("r0-11 loguru, a bound value that cannot be printed")
shutdown_logging()
print("done", flush=True)
"""


def test_record_with_a_value_whose_repr_raises(tmp_path: Path) -> None:
    """A rank logs 10 plain records, then one with a stdlib ``extra`` value and one with a
    loguru ``bind`` value whose ``__repr__`` raises: the call must not raise, and each record
    must reach the node log (the value replaced) or be reported dropped."""
    node = Node(tmp_path)
    node.start()
    rank = spawn([sys.executable, "-c", UNPRINTABLE_RANK], env=dict(node.env, RANK="0"),
                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = rank.communicate(timeout=60)
    assert rank.returncode == 0 and out.strip() == "done", err  # nothing raised into the caller
    code, agg_err = node.stop()
    assert code == 0, agg_err
    settle("extra / bound value whose repr raises", 12, node.log_path)


def test_node_log_deleted_while_aggregating(tmp_path: Path) -> None:
    """The node log is deleted (an operator freeing disk space, a cleanup job) while the
    aggregator runs; the 100 records written after that must reach a node log at its path
    or be reported lost."""
    node = Node(tmp_path)
    node.start()
    before = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000d1", proc="rank0")
    for i in range(100):
        before.log(f"r0-{i}")
    before.close()
    wait_for(lambda: count_node_log(node.log_path).unique == 100, timeout=60, what="node log")
    # Committed (its spool file is deleted only then): what is deleted now was delivered;
    # records not yet committed would rightly be written again into the new file.
    wait_for(lambda: not before.path.exists(), timeout=60, what="the first 100 committed")
    node.log_path.unlink()
    after = FakeWriter(node.job_dir, pid=20_002, writer="00000000000000d2", proc="rank1")
    for i in range(100):
        after.log(f"r1-{i}")
    after.close()
    code, err = node.stop()
    assert "wrote 200 records" in err  # the aggregator believes it wrote them all
    settle("node log deleted while aggregating", 100, node.log_path, note=f"exit {code}")
    assert code == 0 and err.count("was deleted or replaced while in use") == 1, err


@pytest.mark.parametrize("how", ["replaced by another file", "directory removed"])
def test_node_log_replaced_or_its_directory_removed(tmp_path: Path, how: str) -> None:
    """Like the deleted node log: another file moved over the node log's path, or the
    whole log directory removed; the records written after that must be at the path."""
    node = Node(tmp_path)
    node.start()
    before = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000d3", proc="rank0")
    for i in range(100):
        before.log(f"r0-{i}")
    before.close()
    wait_for(lambda: count_node_log(node.log_path).unique == 100, timeout=60, what="node log")
    wait_for(lambda: not before.path.exists(), timeout=60, what="the first 100 committed")
    if how == "replaced by another file":
        other = node.log_path.with_name("other.log")
        other.write_text("an operator's notes\n")
        other.replace(node.log_path)
    else:
        shutil.rmtree(node.log_path.parent)
    after = FakeWriter(node.job_dir, pid=20_002, writer="00000000000000d4", proc="rank1")
    for i in range(100):
        after.log(f"r1-{i}")
    after.close()
    code, err = node.stop()
    assert code == 0, err
    settle(f"node log {how}", 100, node.log_path)
    if how == "replaced by another file":
        assert node.log_path.read_text().startswith("an operator's notes\n")


def test_otlp_batch_refused_for_good_is_reported_at_the_receiver(tmp_path: Path) -> None:
    """The endpoint answers 400 to the first batch of 100 records, then accepts: the second
    writer's 100 records arrive, and the refused ones must be reported at the receiver (as
    backlog skips are) so that OTLP unique + OTLP reported = emitted."""
    node = Node(tmp_path)
    first = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000e1", proc="rank0")
    for i in range(100):
        first.log(f"r0-{i}")
    first.close()
    with OtlpReceiver() as receiver:
        receiver.status = 400
        node.start("--otlp-endpoint", receiver.endpoint, "--drain-timeout", "5")
        wait_for(lambda: "refused a logs batch" in node.err(), timeout=60, what="the refusal")
        receiver.status = 200
        second = FakeWriter(node.job_dir, pid=20_002, writer="00000000000000e2", proc="rank1")
        for i in range(100):
            second.log(f"r1-{i}")
        second.close()
        receiver.wait_for(lambda r: count_otlp(r.logs).unique >= 100, timeout=60)
        code, err = node.stop()
        with receiver.lock:
            logs = list(receiver.logs)
    assert code == 0, err
    assert "100 dropped" in err  # stderr does count them
    settle("OTLP batch refused for good (HTTP 400)", 200, node.log_path, logs)


class PartialReceiver(OtlpReceiver):
    """A receiver that keeps the even-numbered records of each logs request and rejects the
    others with an OTLP partial success (``rejected_log_records``), as a backend does with
    records it cannot take; the spec forbids retrying them."""

    def _take(self, path: str, body: bytes) -> bytes:
        if not path.endswith("/v1/logs"):
            return super()._take(path, body)
        req = ExportLogsServiceRequest.FromString(body)
        rejected = 0
        for rl in req.resource_logs:
            for sl in rl.scope_logs:
                keep = [lr for lr in sl.log_records if not _odd(lr.body.string_value)]
                rejected += len(sl.log_records) - len(keep)
                del sl.log_records[:]
                sl.log_records.extend(keep)
        super()._take(path, req.SerializeToString())
        partial = ExportLogsPartialSuccess(rejected_log_records=rejected, error_message="no")
        return ExportLogsServiceResponse(partial_success=partial).SerializeToString()


def _odd(body: str) -> bool:
    m = MESSAGE.match(body)
    return m is not None and int(m["i"]) % 2 == 1


def test_otlp_partial_success_rejections_are_reported(tmp_path: Path) -> None:
    """The receiver answers 200 with ``partial_success.rejected_log_records`` = 50 for a
    request of 100 records: the 50 rejected must be reported lost (at the receiver, as
    other OTLP losses are), not counted as exported."""
    node = Node(tmp_path)
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000f1", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    with PartialReceiver() as receiver:
        node.start("--otlp-endpoint", receiver.endpoint, "--drain-timeout", "5")
        receiver.wait_for(lambda r: count_otlp(r.logs).unique >= 50, timeout=60)
        code, err = node.stop()
        with receiver.lock:
            logs = list(receiver.logs)
    assert code == 0, err
    settle("OTLP partial success rejects half", 100, node.log_path, logs, note=err[-200:])


@contextmanager
def grpc_receiver(logs: PartialReceiver) -> Iterator[tuple[str, list[int]]]:
    """An OTLP/gRPC endpoint: logs as ``logs`` takes them (a partial success rejecting the
    odd ones), every span rejected in a partial success (their counts listed)."""
    grpc = pytest.importorskip("grpc")
    spans: list[int] = []

    def export_logs(body: bytes, _: Any) -> bytes:
        return logs._take("/v1/logs", body)

    def export_traces(body: bytes, _: Any) -> bytes:
        req = ExportTraceServiceRequest.FromString(body)
        n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        spans.append(n)
        partial = ExportTracePartialSuccess(rejected_spans=n, error_message="no spans")
        return ExportTraceServiceResponse(partial_success=partial).SerializeToString()

    def export_metrics(body: bytes, _: Any) -> bytes:
        return b""

    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    for service, fn in (("logs.v1.LogsService", export_logs),
                        ("trace.v1.TraceService", export_traces),
                        ("metrics.v1.MetricsService", export_metrics)):  # fmt: skip
        handler = {"Export": grpc.unary_unary_rpc_method_handler(fn)}
        name = f"opentelemetry.proto.collector.{service}"
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(name, handler)])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", spans
    finally:
        server.stop(0)


def test_otlp_grpc_partial_success_for_logs_and_spans(tmp_path: Path) -> None:
    """The same partial success over gRPC, for logs and for spans: rejected log records
    are reported at the receiver; rejected spans are counted dropped, not exported."""
    node = Node(tmp_path, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000f2", proc="rank0")
    span = {"v": 1, "trace_id": "ab" * 16, "span_id": "cd" * 8, "name": "step", "pid": 20_001}
    w.raw(rec.encode(span | {"k": "span_start", "ts": time.time_ns(), "key": "s-0"}))
    for i in range(100):
        w.log(f"r0-{i}")
    w.raw(rec.encode(span | {"k": "span_end", "ts": time.time_ns(), "start": 1, "key": "s-1"}))
    w.close()
    receiver = PartialReceiver()
    with grpc_receiver(receiver) as (endpoint, spans):
        node.start("--otlp-endpoint", endpoint, "--drain-timeout", "5")
        receiver.wait_for(lambda r: count_otlp(r.logs).reported >= 50, timeout=60)
        code, err = node.stop()
        with receiver.lock:
            logs = list(receiver.logs)
    assert code == 0, err
    settle("OTLP/gRPC partial success rejects half", 100, node.log_path, logs, note=err[-200:])
    assert spans == [1], err
    # 50 records and the report of the 50 others; the one span rejected is dropped
    assert "exported 51 log records, 0 spans, 0 truncated spans; 51 dropped" in err, err
