"""Transport security of the spans the SDK exports itself (no spool), and of the
aggregator's health metrics (the SDK's metric exporter): ``https://`` is TLS over gRPC
without a CA file too (the system's trust store), ``http://`` is cleartext, a gRPC
``host:port`` follows ``OTEL_EXPORTER_OTLP_INSECURE``; a TLS file that cannot be read keeps
the exporter out with a warning naming the file."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from nvrx_otel.tracing.sdk import exporters_from_env
from tests.tlskit import (
    HTTP2_PREFACE,
    Pki,
    first_bytes,
    grpc_endpoint,
    is_tls_hello,
    make_pki,
    tls_http_endpoint,
)

TOKEN = "sdk-token-on-the-wire"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(autouse=True)
def _no_trust_from_outside(monkeypatch: pytest.MonkeyPatch, pki: Pki) -> Iterator[None]:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("certifi.where", lambda: str(pki.ca.with_name("none")))
    yield


def _span() -> Any:
    span = TracerProvider().get_tracer("t").start_span("secret-span-name")
    span.end()
    return span


def _one_exporter() -> Any:
    made = exporters_from_env(["otlp"])
    assert len(made) == 1
    return made[0]


def _first_bytes_of_an_export(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> bytes:
    """Export one span to a listener that records the client's first bytes."""
    pytest.importorskip("grpc")
    with first_bytes() as wire:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.format(port=wire.port))
        exporter = _one_exporter()
        thread = threading.Thread(target=exporter.export, args=([_span()],), daemon=True)
        thread.start()
        try:
            assert wire.got.wait(30), "no connection reached the listener"
        finally:
            exporter.shutdown()
            thread.join(30)
        return wire.seen[0]


@pytest.fixture
def grpc_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {TOKEN}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    return monkeypatch


def test_grpc_https_without_a_ca_file_is_not_cleartext(grpc_env: pytest.MonkeyPatch) -> None:
    data = _first_bytes_of_an_export(grpc_env, "https://127.0.0.1:{port}")
    assert is_tls_hello(data) and TOKEN.encode() not in data and b"secret-span" not in data


@pytest.mark.parametrize(
    ("endpoint", "insecure", "tls"),
    [
        ("http://127.0.0.1:{port}", None, False),
        ("127.0.0.1:{port}", None, True),
        ("127.0.0.1:{port}", "true", False),
        ("https://127.0.0.1:{port}", "true", True),
    ],
)
def test_grpc_cleartext_only_for_http_or_insecure_host_port(
    grpc_env: pytest.MonkeyPatch, endpoint: str, insecure: str | None, tls: bool
) -> None:
    if insecure is not None:
        grpc_env.setenv("OTEL_EXPORTER_OTLP_INSECURE", insecure)
    data = _first_bytes_of_an_export(grpc_env, endpoint)
    assert is_tls_hello(data) is tls, data[:40]
    assert data.startswith(HTTP2_PREFACE) is not tls


def test_grpc_https_verifies_against_the_system_store(
    grpc_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    """The test CA as the system's store (``SSL_CERT_FILE``): the export is verified and
    delivered, the token with it. gRPC's own roots would not know the test CA."""
    pytest.importorskip("grpc")
    grpc_env.setenv("SSL_CERT_FILE", str(pki.ca))
    with grpc_endpoint(pki, token=TOKEN) as (port, calls):
        grpc_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{port}")
        exporter = _one_exporter()
        try:
            assert exporter.export([_span()]) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
    assert calls and calls[0][1]["authorization"] == f"Bearer {TOKEN}"


def test_grpc_mutual_tls_from_the_variables(grpc_env: pytest.MonkeyPatch, pki: Pki) -> None:
    pytest.importorskip("grpc")
    grpc_env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pki.ca))
    grpc_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(pki.client_cert))
    grpc_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", str(pki.client_key))
    with grpc_endpoint(pki, client_auth=True) as (port, calls):
        grpc_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{port}")
        exporter = _one_exporter()
        try:
            assert exporter.export([_span()]) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
    assert len(calls) == 1


def test_http_https_with_a_ca_file_delivers(monkeypatch: pytest.MonkeyPatch, pki: Pki) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pki.ca))
    with tls_http_endpoint(pki) as e:
        url = e.url.replace("/v1/logs", "/v1/traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
        exporter = _one_exporter()
        try:
            assert exporter.export([_span()]) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        assert [path for path, _, _ in e.requests] == ["/v1/traces"]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize(
    "variable",
    [
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    ],
)
def test_a_tls_file_that_cannot_be_read_keeps_the_exporter_out_naming_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    protocol: str,
    variable: str,
) -> None:
    """The SDK's gRPC exporter would log the missing file and go on without it (gRPC's own
    roots, no client certificate); here the exporter is left out, said once, naming it."""
    if protocol == "grpc":
        pytest.importorskip("grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.invalid:4318")
    missing = tmp_path / f"{variable.lower()}.pem"
    monkeypatch.setenv(variable, str(missing))
    assert exporters_from_env(["otlp"]) == []
    err = capsys.readouterr().err
    assert "cannot create span exporter 'otlp'" in err
    assert f"{variable}='{missing}': cannot read the file" in err


# --- the aggregator's health metrics (the SDK's metric exporter) ---------------------------


def test_health_metrics_over_grpc_https_are_not_cleartext() -> None:
    pytest.importorskip("grpc")
    from nvrx_otel.aggregator.otlp_metrics import HealthMetrics
    from nvrx_otel.aggregator.otlp_transport import OtlpConfig

    with first_bytes() as wire:
        config = OtlpConfig(
            endpoint=f"https://127.0.0.1:{wire.port}",
            protocol="grpc",
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=2.0,
        )
        metrics = HealthMetrics(config, None, lambda: {"records": 1.0}, interval_s=0.2)
        try:
            deadline = time.monotonic() + 30
            while not wire.seen and time.monotonic() < deadline:
                wire.got.wait(0.5)
        finally:
            metrics.shutdown(1.0)
        assert wire.seen, "no connection reached the listener"
        data = wire.seen[0]
    assert is_tls_hello(data) and TOKEN.encode() not in data
