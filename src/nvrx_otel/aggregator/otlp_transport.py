"""Sending serialized OTLP requests: endpoint and options from ``OTEL_EXPORTER_OTLP_*``.

``Transport.send`` never raises: it answers OK, RETRY (endpoint down, overloaded or
timing out: send the same batch again later), DENIED (the endpoint refused the sender,
not the data: credentials refused with HTTP 401 or 403, gRPC UNAUTHENTICATED or
PERMISSION_DENIED, or a cleartext request sent to a TLS port; a configuration error to
report loudly and retry) or REJECTED (the endpoint refused the
data for good: count it as dropped, never loop on it). An OK answer may carry an OTLP
*partial success*: the endpoint took the request but rejected some of its items for good
(the specification forbids retrying them); ``Transport.rejected`` says how many.

Transport security follows :mod:`nvrx_otel.otlptls`: ``https://`` is TLS on both
protocols (never cleartext for want of a CA file), ``http://`` is cleartext.
"""

from __future__ import annotations

import enum
import gzip
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from nvrx_otel import env
from nvrx_otel.otlptls import (
    TlsFiles,
    grpc_credentials,
    grpc_target,
    grpc_uses_tls,
    insecure_wanted,
    tls_files,
)

_RETRY_HTTP: Final = frozenset({408, 429, 500, 502, 503, 504})
_DENIED_HTTP: Final = frozenset({401, 403})
_TLS_PORT_ANSWERS: Final = (
    b"HTTP request to an HTTPS server",  # Go's net/http (the collector)
    b"plain HTTP request was sent to HTTPS port",  # nginx
)
"""What a TLS port answers (HTTP 400) to a cleartext request: the sender's mistake."""


class Result(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    REJECTED = "rejected"
    DENIED = "denied"


@dataclass(frozen=True)
class OtlpConfig:
    """Where and how one signal is sent."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: Mapping[str, str] = field(default_factory=dict)
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    compression: str = "none"
    timeout: float = 10.0
    malformed_headers: str = ""  # the headers variable some of whose headers were dropped
    insecure: bool = False  # OTEL_EXPORTER_OTLP_INSECURE: a gRPC host:port in cleartext

    @property
    def header_problem(self) -> str:
        """One line when headers were dropped (names the variable, never a value)."""
        if not self.malformed_headers:
            return ""
        return f"{self.malformed_headers} is malformed: headers are dropped"

    @property
    def shown_endpoint(self) -> str:
        """The endpoint as it may be printed (see :func:`redact_url`)."""
        return redact_url(self.endpoint)


_USERINFO: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#@\s]*@")
_QUERY_ITEM: Final = re.compile(r"([?&;])([^&;#=]*)(=?)[^&;#]*")


def redact_url(text: str) -> str:
    """``text`` (an endpoint URL, well formed or not) with what may be a credential masked:
    the user and password (``https://***@host``) and every query value (``?api_key=***``;
    a query item without ``=`` is masked whole)."""
    out = _USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", text.strip(), count=1)
    head, sep, query = out.partition("?")
    if not sep:
        return out
    query, hash_, fragment = query.partition("#")
    masked = _QUERY_ITEM.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}***" if m.group(3) else f"{m.group(1)}***",
        "?" + query,
    )
    return f"{head}{masked}{hash_}{'***' if fragment else ''}"


class _Dropped(logging.Filter):
    """Swallows (and counts) what OTel's header parser logs: a malformed header, *with its
    value* (a token), which must never reach a log or a terminal."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.count += 1
        return False


_HEADER_LOGGER: Final = "opentelemetry.util.re"
_parse_lock = threading.Lock()


def parse_headers(text: str) -> tuple[dict[str, str], bool]:
    """The headers of an ``OTEL_EXPORTER_OTLP_*HEADERS`` value as OTel's exporters parse
    them, and whether any was dropped as malformed (what the parser logs is swallowed)."""
    from opentelemetry.util.re import parse_env_headers

    dropped = _Dropped()
    logger = logging.getLogger(_HEADER_LOGGER)
    with _parse_lock:
        logger.addFilter(dropped)
        try:
            headers = dict(parse_env_headers(text, liberal=True))
        finally:
            logger.removeFilter(dropped)
    return headers, dropped.count > 0


def _get(environ: Mapping[str, str], name: str, signal: str) -> str | None:
    return _get_named(environ, name, signal)[1]


def _get_named(environ: Mapping[str, str], name: str, signal: str) -> tuple[str, str | None]:
    """The variable that gives ``name`` for ``signal`` (the signal's own first) and its
    value."""
    specific_name = name.replace("OTEL_EXPORTER_OTLP_", f"OTEL_EXPORTER_OTLP_{signal.upper()}_")
    specific = environ.get(specific_name)
    used, value = (specific_name, specific) if specific else (name, environ.get(name))
    return used, (value.strip() if value and value.strip() else None)


def resolve(
    signal: str, *, base_endpoint: str | None = None, environ: Mapping[str, str] | None = None
) -> OtlpConfig:
    """The config of ``signal`` ("logs", "traces", "metrics"): ``base_endpoint`` (the
    ``--otlp-endpoint`` flag) overrides the environment. Bad values raise ValueError
    naming the variable."""
    e = os.environ if environ is None else environ
    protocol = _get(e, env.OTEL_EXPORTER_OTLP_PROTOCOL, signal) or "http/protobuf"
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: expected http/protobuf or grpc"
        )
    specific_name = env.OTEL_EXPORTER_OTLP_ENDPOINT.replace("OTLP_", f"OTLP_{signal.upper()}_")
    if base_endpoint:
        endpoint = _signal_url(base_endpoint, signal, protocol)
    elif e.get(specific_name, "").strip():
        endpoint = _checked_url(specific_name, e[specific_name], protocol)  # used as is
    elif e.get(env.OTEL_EXPORTER_OTLP_ENDPOINT, "").strip():
        name = env.OTEL_EXPORTER_OTLP_ENDPOINT
        endpoint = _signal_url(_checked_url(name, e[name], protocol), signal, protocol)
    else:
        default = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
        endpoint = _signal_url(default, signal, protocol)
    compression = (_get(e, env.OTEL_EXPORTER_OTLP_COMPRESSION, signal) or "none").lower()
    if compression not in ("none", "gzip"):
        raise ValueError(f"OTEL_EXPORTER_OTLP_COMPRESSION={compression!r}: expected gzip or none")
    timeout_text = _get(e, env.OTEL_EXPORTER_OTLP_TIMEOUT, signal)
    timeout = 10.0
    if timeout_text is not None:
        timeout = env.parse_nonneg_float(env.OTEL_EXPORTER_OTLP_TIMEOUT, timeout_text) / 1000.0
    headers_name, headers_text = _get_named(e, env.OTEL_EXPORTER_OTLP_HEADERS, signal)
    headers, dropped = parse_headers(headers_text or "")
    files = tls_files(signal, e)  # each one readable, or a ValueError naming it
    return OtlpConfig(
        endpoint=endpoint,
        protocol=protocol,
        headers=headers,
        certificate=files.certificate,
        client_certificate=files.client_certificate,
        client_key=files.client_key,
        compression=compression,
        timeout=timeout or 10.0,
        malformed_headers=headers_name if dropped else "",
        insecure=insecure_wanted(signal, e),
    )


def _checked_url(name: str, value: str, protocol: str) -> str:
    """``value`` of variable ``name`` stripped, if it is an http:// or https:// URL with a
    host (for gRPC also a bare ``host:port``); else ValueError naming both: an endpoint no
    request can reach is refused at the start, not retried for ever."""
    text = value.strip()
    bare = protocol == "grpc" and "://" not in text
    try:
        url = urlsplit(f"//{text}" if bare else text)
        ok = (bare or url.scheme in ("http", "https")) and bool(url.hostname)
        url.port  # noqa: B018  # raises ValueError for a port that is not a number
    except ValueError:
        ok = False
    if not ok or any(c.isspace() for c in text):
        also = " (or host:port for gRPC)" if protocol == "grpc" else ""
        shown = redact_url(value)
        raise ValueError(f"{name}={shown!r}: expected an http:// or https:// URL{also}")
    return text


def _signal_url(base: str, signal: str, protocol: str) -> str:
    if protocol == "grpc":
        return base
    return base.rstrip("/") + f"/v1/{signal}"


def partial_rejections(signal: str, body: bytes) -> tuple[int, str]:
    """Items an OTLP export response's ``partial_success`` rejects, and its message (0 and
    "" for a full success, an empty body or one that is not such a response)."""
    if not body:
        return 0, ""
    try:
        if signal == "logs":
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
                ExportLogsServiceResponse,
            )

            logs = ExportLogsServiceResponse.FromString(body).partial_success
            return max(0, logs.rejected_log_records), logs.error_message
        if signal == "traces":
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceResponse,
            )

            spans = ExportTraceServiceResponse.FromString(body).partial_success
            return max(0, spans.rejected_spans), spans.error_message
    except Exception:  # not a protobuf response (a proxy's page): nothing known rejected
        pass
    return 0, ""


class Transport:
    """Sends serialized export requests of one signal to one endpoint."""

    def __init__(self, signal: str, config: OtlpConfig) -> None:
        self.signal = signal
        self.config = config
        self.last_error = ""
        self.rejected = 0  # items the last OK answer's partial success rejected
        self._session: Any = None
        self._grpc: Any = None
        self._http: Any = None  # otlp_http.HttpEndpoint, or False: through requests

    def send(self, payload: bytes) -> Result:
        self.rejected = 0
        try:
            if self.config.protocol == "grpc":
                return self._send_grpc(payload)
            return self._send_http(payload)
        except Exception as exc:  # a transport must never take the aggregator down
            self.last_error = f"{type(exc).__name__}: {exc}"
            return Result.RETRY

    def close(self) -> None:
        """Close the kept-alive connection, if any (a next send opens another)."""
        if self._http:
            self._http.close()
        if self._session is not None:
            self._session.close()

    def _send_http(self, payload: bytes) -> Result:
        cfg = self.config
        if self._http is None:
            from nvrx_otel.aggregator.otlp_http import HttpEndpoint, plain_route

            self._http = False
            if plain_route(cfg.endpoint):
                self._http = HttpEndpoint(
                    cfg.endpoint,
                    cfg.headers,
                    certificate=cfg.certificate,
                    client_certificate=cfg.client_certificate,
                    client_key=cfg.client_key,
                )
        body = gzip.compress(payload, compresslevel=1) if cfg.compression == "gzip" else payload
        if self._http is False:
            return self._send_requests(body)
        import http.client

        headers = {"Content-Type": "application/x-protobuf"}
        if cfg.compression == "gzip":
            headers["Content-Encoding"] = "gzip"
        try:
            status, content = self._http.post(body, headers, cfg.timeout)
        except (OSError, http.client.HTTPException) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return Result.RETRY
        return self._answer(status, content)

    def _send_requests(self, body: bytes) -> Result:
        """Through ``requests``: an endpoint a proxy or ``~/.netrc`` concerns (otlp_http)."""
        import requests

        if self._session is None:
            self._session = requests.Session()
            self._session.headers.update(self.config.headers)
            self._session.headers["Content-Type"] = "application/x-protobuf"
            if self.config.compression == "gzip":
                self._session.headers["Content-Encoding"] = "gzip"
        cfg = self.config
        cert: Any = None
        if cfg.client_certificate and cfg.client_key:
            cert = (cfg.client_certificate, cfg.client_key)
        elif cfg.client_certificate:
            cert = cfg.client_certificate
        try:
            resp = self._session.post(
                cfg.endpoint,
                data=body,
                timeout=cfg.timeout,
                verify=cfg.certificate if cfg.certificate else True,
                cert=cert,
            )
        except requests.RequestException as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return Result.RETRY
        return self._answer(resp.status_code, resp.content)

    def _answer(self, status: int, content: bytes) -> Result:
        if 200 <= status < 300:
            self._partial(content)
            return Result.OK
        self.last_error = f"HTTP {status} from {self.config.shown_endpoint}"
        if status in _DENIED_HTTP:
            self.last_error += ": the credentials were refused"
            return Result.DENIED
        if status == 400 and any(answer in content[:512] for answer in _TLS_PORT_ANSWERS):
            self.last_error += ": the endpoint speaks TLS, use https://"
            return Result.DENIED
        return Result.RETRY if status in _RETRY_HTTP else Result.REJECTED

    def _send_grpc(self, payload: bytes) -> Result:
        try:
            import grpc
        except ImportError as exc:
            raise ValueError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the grpc extra: "
                "pip install 'nvrx-otel[grpc]'"
            ) from exc
        cfg = self.config
        if self._grpc is None:
            target = grpc_target(cfg.endpoint)
            if grpc_uses_tls(cfg.endpoint, cfg.insecure):
                files = TlsFiles(cfg.certificate, cfg.client_certificate, cfg.client_key)
                channel = grpc.secure_channel(target, grpc_credentials(files))
            else:
                channel = grpc.insecure_channel(target)
            method = {
                "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            }[self.signal]
            self._grpc = channel.unary_unary(method)
        metadata = list(cfg.headers.items())
        compression = grpc.Compression.Gzip if cfg.compression == "gzip" else None
        try:
            reply = self._grpc(
                payload, timeout=cfg.timeout, metadata=metadata, compression=compression
            )
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else None
            self.last_error = f"gRPC {code} from {cfg.endpoint}" + (
                f": {details}" if details else ""
            )
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                self.last_error += " (the credentials were refused)"
                return Result.DENIED
            retry = {
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                grpc.StatusCode.ABORTED,
                grpc.StatusCode.CANCELLED,
                grpc.StatusCode.OUT_OF_RANGE,
                grpc.StatusCode.DATA_LOSS,
            }
            return Result.RETRY if code in retry else Result.REJECTED
        self._partial(reply if isinstance(reply, bytes) else b"")
        return Result.OK

    def _partial(self, body: bytes) -> None:
        rejected, message = partial_rejections(self.signal, body)
        if rejected:
            self.rejected = rejected
            self.last_error = f"partial success from {self.config.shown_endpoint}: {message or '-'}"
