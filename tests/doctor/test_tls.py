"""The doctor's endpoint check over TLS: what Python's ssl shows of the handshake, and an
untrusted certificate as a problem."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from nvrx_otel.cli import main


class _Accept(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def https(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on 127.0.0.1 with a self-signed certificate: its URL and the cert."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=nvrx-test-collector",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


def _doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--json", "--timeout", "20"])
    return code, orjson.loads(capsys.readouterr().out)


def test_trusted_certificate_shows_the_handshake(
    https: tuple[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = https
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(cert))
    code, doc = _doctor(capsys)
    assert code == 0, doc["problems"]
    tls = doc["otlp"][0]["tls"]
    assert tls["version"].startswith("TLSv1.")
    assert tls["subject"] == "commonName=nvrx-test-collector"
    assert tls["issuer"] == "commonName=nvrx-test-collector"
    assert tls["trusted_by"] == str(cert)
    assert doc["otlp"][0]["detail"].startswith("HTTP 200")


def test_untrusted_certificate_is_a_problem(
    https: tuple[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = https
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    code, doc = _doctor(capsys)
    assert code == 1
    assert doc["otlp"][0]["ok"] is False
    assert "TLS certificate not trusted" in doc["otlp"][0]["detail"]
    assert doc["otlp"][0]["detail"].endswith("self-signed certificate")
