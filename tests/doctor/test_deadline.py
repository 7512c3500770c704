"""One deadline per endpoint check: an endpoint that accepts the connection and then
trickles its answer (a stuck proxy) is reported as not answering within --timeout, however
often it sends a byte."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from nvrx_otel.aggregator.otlp_transport import OtlpConfig
from nvrx_otel.doctor.endpoint import probe

TRICKLE_FOR_S = 30.0  # the server gives up by itself, so the check ends even without a deadline


@pytest.fixture
def trickling() -> Iterator[str]:
    """An HTTP endpoint that sends its answer's status line and then one header byte every
    0.2 s, for ever (until TRICKLE_FOR_S)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            until = time.monotonic() + TRICKLE_FOR_S
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while not stop.wait(0.2) and time.monotonic() < until:
                    conn.sendall(b"a")
            except OSError:
                return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1/logs"
    finally:
        stop.set()
        server.close()


def test_a_trickling_endpoint_ends_the_check_at_the_timeout(trickling: str) -> None:
    started = time.monotonic()
    answer = probe("logs", OtlpConfig(endpoint=trickling), timeout=1.0)
    took = time.monotonic() - started
    assert not answer.ok
    assert answer.detail == "no answer within 1 s"
    assert took < TRICKLE_FOR_S / 3, took  # about 1 s; a per-read timeout never ends
