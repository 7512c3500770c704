"""An OTLP/HTTP receiver for tests: 127.0.0.1 only, decodes with opentelemetry-proto.

It stops by itself after ``max_lifetime`` seconds even if a test forgets to stop it, and
can be stopped and started again on the same port (an endpoint that goes down and up).
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


class OtlpReceiver:
    """Collects what arrives, flattened: ``logs``, ``spans``, ``metrics`` (lists of dicts)."""

    def __init__(self, port: int = 0, max_lifetime: float = 300.0) -> None:
        self.port = port
        self.max_lifetime = max_lifetime
        self.logs: list[dict[str, Any]] = []
        self.spans: list[dict[str, Any]] = []
        self.metrics: list[str] = []
        self.requests = 0
        self.sizes: list[int] = []  # each accepted request's body, uncompressed
        self.refused: dict[str, int] = {}  # per signal: requests answered with another status
        self.status = 200  # tests may set e.g. 503 to refuse
        self.token: str | None = None  # set: a request without "Bearer <token>" gets 401
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                status = receiver.status
                token = receiver.token
                if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
                    status = 401
                reply = b""
                if status == 200:
                    reply = receiver._take(self.path, body)
                else:
                    with receiver.lock:
                        signal = self.path.rsplit("/", 1)[-1]
                        receiver.refused[signal] = receiver.refused.get(signal, 0) + 1
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(self.max_lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._timer is not None:
            self._timer.cancel()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _take(self, path: str, body: bytes) -> bytes:
        with self.lock:
            self.requests += 1
            self.sizes.append(len(body))
            if path.endswith("/v1/logs"):
                req = ExportLogsServiceRequest.FromString(body)
                for rl in req.resource_logs:
                    res = attrs(rl.resource.attributes)
                    for sl in rl.scope_logs:
                        for lr in sl.log_records:
                            self.logs.append(
                                {
                                    "resource": res,
                                    "scope": sl.scope.name,
                                    "time": lr.time_unix_nano,
                                    "observed": lr.observed_time_unix_nano,
                                    "severity_number": lr.severity_number,
                                    "severity_text": lr.severity_text,
                                    "body": any_value(lr.body),
                                    "attributes": attrs(lr.attributes),
                                    "trace_id": lr.trace_id.hex(),
                                    "span_id": lr.span_id.hex(),
                                    "flags": lr.flags,
                                }
                            )
                return ExportLogsServiceResponse().SerializeToString()
            if path.endswith("/v1/traces"):
                treq = ExportTraceServiceRequest.FromString(body)
                for rs in treq.resource_spans:
                    res = attrs(rs.resource.attributes)
                    for ss in rs.scope_spans:
                        for sp in ss.spans:
                            self.spans.append(
                                {
                                    "resource": res,
                                    "scope": ss.scope.name,
                                    "name": sp.name,
                                    "trace_id": sp.trace_id.hex(),
                                    "span_id": sp.span_id.hex(),
                                    "parent_span_id": sp.parent_span_id.hex(),
                                    "kind": sp.kind,
                                    "start": sp.start_time_unix_nano,
                                    "end": sp.end_time_unix_nano,
                                    "attributes": attrs(sp.attributes),
                                    "events": [(e.name, attrs(e.attributes)) for e in sp.events],
                                    "links": [
                                        (ln.trace_id.hex(), ln.span_id.hex()) for ln in sp.links
                                    ],
                                    "status_code": sp.status.code,
                                    "status_message": sp.status.message,
                                }
                            )
                return ExportTraceServiceResponse().SerializeToString()
            if path.endswith("/v1/metrics"):
                mreq = ExportMetricsServiceRequest.FromString(body)
                for rm in mreq.resource_metrics:
                    for sm in rm.scope_metrics:
                        self.metrics.extend(m.name for m in sm.metrics)
                return ExportMetricsServiceResponse().SerializeToString()
        return b""

    def wait_for(self, predicate: Callable[[OtlpReceiver], bool], timeout: float = 30.0) -> bool:
        """Poll ``predicate`` until it holds or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(self):
                    return True
            time.sleep(0.02)
        with self.lock:
            return predicate(self)
