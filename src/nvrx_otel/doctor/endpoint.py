"""Whether an OTLP endpoint answers: one real request, within one deadline.

OTLP/HTTP: an empty export request (``POST``, ``application/x-protobuf``, the configured
headers), which a receiver accepts as zero items: any 2xx answer means records would be
taken; any other status, or no answer, means they would not. gRPC: a TCP connection (and
the TLS handshake when the exporter would use TLS: ``https://``, or ``host:port`` without
``OTEL_EXPORTER_OTLP_INSECURE=true``), since calling the service needs the grpc extra.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from nvrx_otel.aggregator.otlp_transport import OtlpConfig
from nvrx_otel.doctor.tlsinfo import TlsInfo, client_context, describe, failure
from nvrx_otel.otlptls import grpc_uses_tls


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
    """Ask the endpoint of ``signal``; never raises, and returns within about ``timeout``
    seconds whatever the endpoint does: the whole check (name lookup, connection, TLS
    handshake, request, answer) runs in a thread against one deadline; past it the
    thread's socket is shut down (its blocked read ends) and the endpoint does not answer.
    The endpoint is shown with its credentials masked."""
    shown = config.shown_endpoint
    held = _Held()
    answer: list[Probe] = []

    def run() -> None:
        answer.append(_checked(signal, config, timeout, held))

    worker = threading.Thread(target=run, name="nvrx-otel-doctor-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    if answer:
        return answer[0]
    held.shut()
    return Probe(signal, shown, False, f"no answer within {timeout:g} s")


class _Held:
    """The socket a probe thread is using, so that the caller can end it at the deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._shut = False

    def hold(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self._shut and sock is not None:
                _shutdown(sock)

    def shut(self) -> None:
        with self._lock:
            self._shut = True
            if self._sock is not None:
                _shutdown(self._sock)


def _shutdown(sock: socket.socket) -> None:
    try:  # the plain socket's shutdown: the TLS layer is left to the thread that uses it
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _checked(signal: str, config: OtlpConfig, timeout: float, held: _Held) -> Probe:
    shown = config.shown_endpoint
    try:
        if config.protocol == "grpc":
            return _grpc(signal, config, timeout, held)
        return _http(signal, config, timeout, held)
    except ssl.SSLError as exc:
        return Probe(signal, shown, False, failure(exc))
    except TimeoutError:
        return Probe(signal, shown, False, f"no answer within {timeout:g} s")
    except ConnectionRefusedError:
        return Probe(signal, shown, False, "connection refused")
    except socket.gaierror as exc:
        return Probe(signal, shown, False, f"cannot resolve its host: {exc.strerror}")
    except http.client.HTTPException as exc:
        said = type(exc).__name__ if isinstance(exc, http.client.InvalidURL) else repr(exc)
        return Probe(signal, shown, False, f"not an HTTP answer: {said}")  # never the URL
    except (OSError, ValueError) as exc:
        return Probe(signal, shown, False, f"{type(exc).__name__}: {exc}")


def _http(signal: str, config: OtlpConfig, timeout: float, held: _Held) -> Probe:
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
        raw = socket.create_connection((host, port), timeout=timeout)
        held.hold(raw)
        if secure:
            raw = context.wrap_socket(raw, server_hostname=host)
        conn.sock = raw  # the connection the request goes over
        tls = None
        if isinstance(conn.sock, ssl.SSLSocket):
            tls = describe(conn.sock, config.certificate, config.client_certificate)
        headers = {"Content-Type": "application/x-protobuf", **config.headers}
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        conn.request("POST", target, body=b"", headers=headers)
        status = conn.getresponse().status
    finally:
        conn.close()
    ms = (time.monotonic() - started) * 1000
    ok = 200 <= status < 300
    why = "" if ok else ": records sent there would be refused"
    if status in (401, 403):
        why = (
            ": the credentials were refused (records would wait in the spool until they are right)"
        )
    return Probe(signal, config.shown_endpoint, ok, f"HTTP {status} in {ms:.0f} ms{why}", tls)


def _grpc(signal: str, config: OtlpConfig, timeout: float, held: _Held) -> Probe:
    text = config.endpoint
    url = urlsplit(text if "://" in text else f"//{text}")
    secure = grpc_uses_tls(text, config.insecure)
    host, port = url.hostname or "", url.port or 4317
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout) as raw:
        held.hold(raw)
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
    return Probe(signal, config.shown_endpoint, True, detail, tls)
