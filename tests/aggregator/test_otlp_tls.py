"""Transport security of the aggregator's OTLP exports (``otlptls``, ``otlp_transport``):
``https://`` is TLS on OTLP/HTTP and OTLP/gRPC with or without a CA file (the system's
trust store then), ``http://`` is cleartext, a gRPC ``host:port`` follows
``OTEL_EXPORTER_OTLP_INSECURE``; mutual TLS presents the client certificate; a TLS file that
cannot be read is an error naming it; credentials refused are DENIED, not REJECTED."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel.aggregator.otlp_transport import OtlpConfig, Result, Transport, resolve
from tests.aggregator.spoolkit import NO_WATCHER
from tests.tlskit import (
    HTTP2_PREFACE,
    Pki,
    first_bytes,
    grpc_endpoint,
    is_tls_hello,
    make_pki,
    tls_http_endpoint,
)

TOKEN = "s3cret-token-on-the-wire"
_made: list[Transport] = []


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(autouse=True)
def _close_transports() -> Iterator[None]:
    yield
    while _made:
        _made.pop().close()


def _transport(signal: str = "logs", **options: Any) -> Transport:
    options.setdefault("timeout", 5.0)
    t = Transport(signal, OtlpConfig(**options))
    _made.append(t)
    return t


def _until_tls_seen(listener: Any, send: Any) -> bytes:
    """Send until the listener saw a connection (gRPC connects in the background)."""
    deadline = time.monotonic() + 30
    while not listener.seen and time.monotonic() < deadline:
        send()
    assert listener.seen, "no connection reached the listener"
    return bytes(listener.seen[0])


# --- OTLP/HTTP ---------------------------------------------------------------------------


def test_https_with_a_ca_file_verifies_and_delivers(pki: Pki) -> None:
    with tls_http_endpoint(pki) as e:
        t = _transport(endpoint=e.url, certificate=str(pki.ca), headers={"authorization": "x"})
        assert t.send(b"over tls") is Result.OK, t.last_error
        assert e.requests[0][2] == b"over tls"


def test_https_without_a_ca_file_is_tls_against_the_system_store(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No CA file: the handshake happens and fails verification (the test CA is in no
    trust store), with an error saying so; the test CA as the system's store
    (``SSL_CERT_FILE``) makes it verify."""
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("certifi.where", lambda: str(pki.ca.with_name("none")))
    with tls_http_endpoint(pki) as e:
        t = _transport(endpoint=e.url)
        assert t.send(b"x") is Result.RETRY
        assert "CERTIFICATE_VERIFY_FAILED" in t.last_error, t.last_error
        assert e.requests == []
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
        t = _transport(endpoint=e.url)
        assert t.send(b"verified") is Result.OK, t.last_error
        assert e.requests[0][2] == b"verified"


def test_https_never_sends_the_token_in_clear() -> None:
    with first_bytes() as wire:
        t = _transport(
            endpoint=f"https://127.0.0.1:{wire.port}/v1/logs",
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        data = _until_tls_seen(wire, lambda: t.send(b"body-in-clear?"))
    assert is_tls_hello(data) and TOKEN.encode() not in data and b"body-in-clear" not in data


def test_http_stays_cleartext() -> None:
    with first_bytes() as wire:
        t = _transport(endpoint=f"http://127.0.0.1:{wire.port}/v1/logs", timeout=3.0)
        data = _until_tls_seen(wire, lambda: t.send(b"plain"))
    assert data.startswith(b"POST /v1/logs HTTP/1.1")


def test_mutual_tls_presents_the_client_certificate(pki: Pki) -> None:
    with tls_http_endpoint(pki, client_auth=True) as e:
        t = _transport(endpoint=e.url, certificate=str(pki.ca))
        assert t.send(b"x") is Result.RETRY  # no client certificate: the server says no
        t = _transport(
            endpoint=e.url,
            certificate=str(pki.ca),
            client_certificate=str(pki.client_cert),
            client_key=str(pki.client_key),
        )
        assert t.send(b"x") is Result.OK, t.last_error
        subject = dict(pair[0] for pair in e.peer_certs[-1]["subject"])
        assert subject["commonName"] == "nvrx-otel test client"


@pytest.mark.parametrize("status", [401, 403])
def test_credentials_refused_over_http_are_denied_not_rejected(pki: Pki, status: int) -> None:
    with tls_http_endpoint(pki) as e:
        e.status = status
        t = _transport(endpoint=e.url, certificate=str(pki.ca))
        assert t.send(b"x") is Result.DENIED
        assert f"HTTP {status}" in t.last_error and "credentials were refused" in t.last_error


# --- OTLP/gRPC ---------------------------------------------------------------------------


def _grpc(endpoint: str, **options: Any) -> Transport:
    pytest.importorskip("grpc")
    return _transport(protocol="grpc", endpoint=endpoint, **options)


def test_grpc_https_without_a_ca_file_is_not_cleartext() -> None:
    """The reported hole: gRPC to https:// without a CA file was a cleartext channel that
    carried the bearer token and the log bodies. Now the client's first bytes are a TLS
    ClientHello, and neither the token nor the body is on the wire in clear."""
    with first_bytes() as wire:
        t = _grpc(
            f"https://127.0.0.1:{wire.port}",
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=2.0,
        )
        data = _until_tls_seen(wire, lambda: t.send(b"body-in-clear?"))
    assert is_tls_hello(data), data[:40]
    assert not data.startswith(HTTP2_PREFACE)
    assert TOKEN.encode() not in data and b"body-in-clear" not in data


def test_grpc_https_without_a_ca_file_verifies_against_the_system_store(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("certifi.where", lambda: str(pki.ca.with_name("none")))
    with grpc_endpoint(pki) as (port, calls):
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        t = _grpc(f"https://127.0.0.1:{port}", timeout=3.0)
        assert t.send(b"") is Result.RETRY  # the test CA is in no store: not verified
        assert calls == []
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
        t = _grpc(f"https://127.0.0.1:{port}", headers={"authorization": f"Bearer {TOKEN}"})
        assert t.send(b"") is Result.OK, t.last_error
        assert calls[0][1]["authorization"] == f"Bearer {TOKEN}"


def test_grpc_https_with_a_ca_file_and_mutual_tls(pki: Pki) -> None:
    with grpc_endpoint(pki, client_auth=True) as (port, calls):
        t = _grpc(
            f"https://127.0.0.1:{port}",
            certificate=str(pki.ca),
            client_certificate=str(pki.client_cert),
            client_key=str(pki.client_key),
        )
        assert t.send(b"") is Result.OK, t.last_error
        assert len(calls) == 1


@pytest.mark.parametrize(
    ("endpoint", "insecure", "tls"),
    [
        ("http://127.0.0.1:{port}", False, False),
        ("http://127.0.0.1:{port}", True, False),
        ("127.0.0.1:{port}", False, True),  # OpenTelemetry's default: TLS
        ("127.0.0.1:{port}", True, False),  # OTEL_EXPORTER_OTLP_INSECURE=true
        ("https://127.0.0.1:{port}", True, True),  # the variable does not touch https://
    ],
)
def test_grpc_cleartext_only_for_http_or_insecure_host_port(
    endpoint: str, insecure: bool, tls: bool
) -> None:
    with first_bytes() as wire:
        t = _grpc(endpoint.format(port=wire.port), insecure=insecure, timeout=2.0)
        data = _until_tls_seen(wire, lambda: t.send(b"x"))
    assert is_tls_hello(data) is tls, data[:40]
    assert data.startswith(HTTP2_PREFACE) is not tls


def test_grpc_insecure_variable_is_resolved_per_signal() -> None:
    base = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "node:4317"}
    assert resolve("logs", environ=base).insecure is False
    on = {**base, "OTEL_EXPORTER_OTLP_INSECURE": "TRUE"}
    assert resolve("logs", environ=on).insecure is True
    off_for_logs = {**on, "OTEL_EXPORTER_OTLP_LOGS_INSECURE": "false"}
    assert resolve("logs", environ=off_for_logs).insecure is False
    assert resolve("traces", environ=off_for_logs).insecure is True


@pytest.mark.parametrize(
    ("code", "result"),
    [("UNAUTHENTICATED", Result.DENIED), ("PERMISSION_DENIED", Result.DENIED),
     ("INVALID_ARGUMENT", Result.REJECTED), ("UNAVAILABLE", Result.RETRY)],
)  # fmt: skip
def test_grpc_credentials_refused_are_denied(pki: Pki, code: str, result: Result) -> None:
    grpc = pytest.importorskip("grpc")
    from concurrent.futures import ThreadPoolExecutor

    def export(body: bytes, context: Any) -> bytes:
        context.abort(getattr(grpc.StatusCode, code), "no")
        return b""

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    name = "opentelemetry.proto.collector.logs.v1.LogsService"
    handler = {"Export": grpc.unary_unary_rpc_method_handler(export)}
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(name, handler)])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        t = _grpc(f"http://127.0.0.1:{port}")
        assert t.send(b"") is result
        assert code in t.last_error
    finally:
        server.stop(0)


def test_grpc_wrong_token_is_denied_right_token_accepted(pki: Pki) -> None:
    with grpc_endpoint(pki, token=TOKEN) as (port, calls):
        url = f"https://127.0.0.1:{port}"
        wrong = _grpc(url, certificate=str(pki.ca), headers={"authorization": "Bearer typo"})
        assert wrong.send(b"") is Result.DENIED
        assert "UNAUTHENTICATED" in wrong.last_error
        right = _grpc(url, certificate=str(pki.ca), headers={"authorization": f"Bearer {TOKEN}"})
        assert right.send(b"") is Result.OK, right.last_error
        assert len(calls) == 1


# --- files that cannot be read -------------------------------------------------------------


@pytest.mark.parametrize(
    "variable",
    [
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY",
    ],
)
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_tls_file_that_cannot_be_read_is_an_error_naming_it(
    tmp_path: Path, pki: Pki, variable: str, protocol: str
) -> None:
    missing = tmp_path / "no-such.pem"
    environ = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca),
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(pki.client_cert),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.client_key),
        variable: str(missing),
    }
    with pytest.raises(ValueError, match=f"{variable}='{missing}': cannot read the file"):
        resolve("logs", environ=environ)
    directory = {**environ, variable: str(tmp_path)}
    with pytest.raises(ValueError, match=f"{variable}='{tmp_path}': cannot read the file"):
        resolve("logs", environ=directory)
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    with pytest.raises(ValueError, match=f"{variable}='{empty}': the file is empty"):
        resolve("logs", environ={**environ, variable: str(empty)})


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_aggregator_refuses_to_start_on_a_missing_client_key(
    tmp_path: Path, pki: Pki, protocol: str
) -> None:
    """At start, one line naming the variable and the file: not a retry loop that never
    says why, nor a connection without the client certificate."""
    import os
    import subprocess
    import sys

    missing = tmp_path / "client-key.pem"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX", "OTEL"))}
    environ.update(NO_WATCHER)
    environ.update(
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_EXPORTER_OTLP_ENDPOINT="https://127.0.0.1:1",
        OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE=str(pki.client_cert),
        OTEL_EXPORTER_OTLP_CLIENT_KEY=str(missing),
    )
    argv = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
            str(tmp_path / "logs"), "--wait-file", str(tmp_path / "w"),
            "--spool-dir", str(tmp_path / "s"), "--drain-timeout", "0"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert f"OTEL_EXPORTER_OTLP_CLIENT_KEY='{missing}': cannot read the file" in lines[0]


def test_a_client_certificate_that_does_not_go_with_its_key_is_an_error_naming_both(
    pki: Pki,
) -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(pki.client_cert),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.server_key),  # another certificate's key
    }
    with pytest.raises(ValueError) as caught:
        resolve("logs", environ=environ)
    message = str(caught.value)
    assert f"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE='{pki.client_cert}'" in message
    assert f"OTEL_EXPORTER_OTLP_CLIENT_KEY='{pki.server_key}'" in message
    not_pem = {**environ, "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.ca.with_name("junk"))}
    pki.ca.with_name("junk").write_text("not a key\n")
    with pytest.raises(ValueError, match="not a certificate and its private key in PEM"):
        resolve("logs", environ=not_pem)
    assert resolve(
        "logs", environ={**environ, "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.client_key)}
    )
