"""OTLP/HTTP over one kept-alive ``http.client`` connection (``otlp_http``): what goes out
(headers, compression, the path), what the answers mean, connections the endpoint closes,
timeouts, and the endpoints left to ``requests`` (a proxy or ``~/.netrc`` concerns them)."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from nvrx_otel.aggregator.otlp_http import plain_route
from nvrx_otel.aggregator.otlp_transport import OtlpConfig, Result, Transport


class Endpoint:
    """A local endpoint answering ``status`` (and ``answer``) to every POST, HTTP/1.1 unless
    told otherwise; it records each request and counts the connections made to it."""

    def __init__(self, *, http10: bool = False, close_after: int = 0) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.connections = 0
        self.status = 200
        self.answer = b""
        self.stall = threading.Event()  # set: requests get no answer until cleared
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0" if http10 else "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.requests.append((self.path, dict(self.headers.items()), body))
                while outer.stall.is_set():
                    time.sleep(0.01)
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(outer.answer)))
                self.end_headers()
                self.wfile.write(outer.answer)
                if close_after and len(outer.requests) % close_after == 0:
                    self.close_connection = True  # as an idle timeout would, unannounced

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stall.clear()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.stop()


_made: list[Transport] = []


@pytest.fixture(autouse=True)
def _close_transports() -> Iterator[None]:
    yield
    while _made:
        _made.pop().close()


def _transport(url: str, **options: Any) -> Transport:
    t = Transport("logs", OtlpConfig(endpoint=url, **options))
    _made.append(t)
    return t


def test_requests_share_one_connection_with_headers_and_gzip(endpoint: Endpoint) -> None:
    t = _transport(endpoint.url, headers={"x-tenant": "a b"}, compression="gzip")
    for payload in (b"one", b"two" * 1000, b"three"):
        assert t.send(payload) is Result.OK
    assert endpoint.connections == 1
    assert [gzip.decompress(body) for _, _, body in endpoint.requests] == [
        b"one", b"two" * 1000, b"three"
    ]  # fmt: skip
    path, headers, _ = endpoint.requests[0]
    assert path == "/v1/logs"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["Content-Encoding"] == "gzip"
    assert headers["x-tenant"] == "a b"


def test_answers_mean_what_they_meant(endpoint: Endpoint) -> None:
    t = _transport(endpoint.url)
    endpoint.status = 503
    assert t.send(b"x") is Result.RETRY
    assert "HTTP 503" in t.last_error
    endpoint.status = 400
    assert t.send(b"x") is Result.REJECTED
    endpoint.status = 200
    endpoint.answer = ExportLogsServiceResponse(
        partial_success={"rejected_log_records": 3, "error_message": "too old"}
    ).SerializeToString()
    assert t.send(b"x") is Result.OK
    assert t.rejected == 3 and "too old" in t.last_error
    endpoint.answer = b""
    assert t.send(b"x") is Result.OK and t.rejected == 0


@pytest.mark.parametrize(
    "answer",
    [b"Client sent an HTTP request to an HTTPS server.\n",
     b"<html><center>The plain HTTP request was sent to HTTPS port</center></html>"],
    ids=["go", "nginx"],
)  # fmt: skip
def test_a_tls_port_answering_a_cleartext_request_is_denied_not_rejected(
    endpoint: Endpoint, answer: bytes
) -> None:
    """An http:// endpoint that is a TLS port: its HTTP 400 is the sender's mistake, not bad
    data (a plain 400 still rejects the batch for good)."""
    t = _transport(endpoint.url)
    endpoint.status = 400
    endpoint.answer = answer
    assert t.send(b"x") is Result.DENIED
    assert "the endpoint speaks TLS, use https://" in t.last_error


@pytest.mark.parametrize("http10", [True, False], ids=["http1.0", "closed-unannounced"])
def test_a_connection_the_endpoint_closed_is_opened_again(http10: bool) -> None:
    """An HTTP/1.0 endpoint closes after each answer; another closes kept-alive
    connections without a word (an idle timeout): every request still goes, at once."""
    e = Endpoint(http10=http10, close_after=0 if http10 else 1)
    try:
        t = _transport(e.url)
        for i in range(5):
            if not http10:
                deadline = time.monotonic() + 5  # the close reached us: the reuse notices it
                while t._http and t._http._conn and time.monotonic() < deadline:
                    if not _readable(t._http._conn.sock):
                        time.sleep(0.01)
                        continue
                    break
            assert t.send(b"r%d" % i) is Result.OK, t.last_error
        assert [body for _, _, body in e.requests] == [b"r%d" % i for i in range(5)]
        assert e.connections == 5
    finally:
        e.stop()


def _readable(sock: socket.socket | None) -> bool:
    import select

    return sock is None or bool(select.select([sock], [], [], 0)[0])


def test_an_endpoint_that_does_not_answer_times_out(endpoint: Endpoint) -> None:
    t = _transport(endpoint.url, timeout=0.3)
    endpoint.stall.set()
    started = time.monotonic()
    assert t.send(b"x") is Result.RETRY
    assert time.monotonic() - started < 5
    assert "timed out" in t.last_error
    endpoint.stall.clear()
    assert t.send(b"y") is Result.OK  # a new connection after the one that timed out


def test_an_endpoint_that_is_down_is_retried(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens once it is closed
    t = _transport(f"http://127.0.0.1:{port}/v1/logs", timeout=1.0)
    assert t.send(b"x") is Result.RETRY
    assert "Connection" in t.last_error or "refused" in t.last_error


def test_endpoints_a_proxy_or_netrc_concerns_go_through_requests(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert plain_route(endpoint.url)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert not plain_route(endpoint.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert plain_route(endpoint.url)
    (tmp_path / "netrc").write_text("machine 127.0.0.1 login u password p\n")
    assert not plain_route(endpoint.url)
    t = _transport(endpoint.url)
    assert t.send(b"x") is Result.OK
    assert t._http is False  # sent by requests, which added the netrc's credentials
    assert endpoint.requests[-1][1]["Authorization"].startswith("Basic ")
