"""Whether an OTLP endpoint answers: one real request, with a short timeout.

OTLP/HTTP: an empty export request (``POST``, ``application/x-protobuf``, the configured
headers), which a receiver accepts as zero items: any 2xx answer means records would be
taken; any other status, or no answer, means they would not. gRPC: a TCP connection (and
the TLS handshake for ``https://``), since calling the service needs the grpc extra.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from nvrx_otel.aggregator.otlp_transport import OtlpConfig
from nvrx_otel.doctor.tlsinfo import TlsInfo, client_context, describe, failure


@dataclass(frozen=True)
class Probe:
    """The answer of one endpoint."""

    signal: str
    endpoint: str
    ok: bool
    detail: str
    tls: TlsInfo | None = None

    def line(self) -> str:
        verdict = "answers" if self.ok else "does not answer"
        return f"OTLP {self.signal} endpoint {self.endpoint} {verdict}: {self.detail}"


def probe(signal: str, config: OtlpConfig, timeout: float) -> Probe:
    """Ask the endpoint of ``signal``; never raises."""
    try:
        if config.protocol == "grpc":
            return _grpc(signal, config, timeout)
        return _http(signal, config, timeout)
    except ssl.SSLError as exc:
        return Probe(signal, config.endpoint, False, failure(exc))
    except TimeoutError:
        return Probe(signal, config.endpoint, False, f"no answer within {timeout:g} s")
    except ConnectionRefusedError:
        return Probe(signal, config.endpoint, False, "connection refused")
    except socket.gaierror as exc:
        return Probe(signal, config.endpoint, False, f"cannot resolve its host: {exc.strerror}")
    except http.client.HTTPException as exc:
        return Probe(signal, config.endpoint, False, f"not an HTTP answer: {exc!r}")
    except (OSError, ValueError) as exc:
        return Probe(signal, config.endpoint, False, f"{type(exc).__name__}: {exc}")


def _http(signal: str, config: OtlpConfig, timeout: float) -> Probe:
    url = urlsplit(config.endpoint)
    host = url.hostname or ""
    secure = url.scheme == "https"
    port = url.port or (443 if secure else 80)
    conn: http.client.HTTPConnection
    if secure:
        context = client_context(config.certificate, config.client_certificate, config.client_key)
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.connect()
        tls = None
        if isinstance(conn.sock, ssl.SSLSocket):
            tls = describe(conn.sock, config.certificate, config.client_certificate)
        headers = {"Content-Type": "application/x-protobuf", **config.headers}
        conn.request("POST", url.path or "/", body=b"", headers=headers)
        status = conn.getresponse().status
    finally:
        conn.close()
    ms = (time.monotonic() - started) * 1000
    ok = 200 <= status < 300
    why = "" if ok else ": records sent there would be refused"
    return Probe(signal, config.endpoint, ok, f"HTTP {status} in {ms:.0f} ms{why}", tls)


def _grpc(signal: str, config: OtlpConfig, timeout: float) -> Probe:
    text = config.endpoint
    url = urlsplit(text if "://" in text else f"//{text}")
    secure = url.scheme == "https"
    host, port = url.hostname or "", url.port or 4317
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout) as raw:
        tls = None
        if secure:
            context = client_context(
                config.certificate, config.client_certificate, config.client_key
            )
            context.set_alpn_protocols(["h2"])
            with context.wrap_socket(raw, server_hostname=host) as sock:
                tls = describe(sock, config.certificate, config.client_certificate)
    ms = (time.monotonic() - started) * 1000
    detail = f"TCP connection accepted in {ms:.0f} ms (gRPC: the service itself is not called)"
    return Probe(signal, config.endpoint, True, detail, tls)
