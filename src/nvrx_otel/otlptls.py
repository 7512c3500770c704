"""Transport security of every OTLP export: which endpoints get TLS, what they trust, and
the files they read.

One rule on every path (the aggregator's OTLP/HTTP and OTLP/gRPC, its health metrics, the
SDK's span exporters):

- an ``https://`` endpoint is TLS, always: verified against
  ``OTEL_EXPORTER_OTLP_CERTIFICATE`` when it is set, else against the default trust store
  (:func:`default_roots`);
- an ``http://`` endpoint is cleartext;
- a gRPC endpoint given as ``host:port`` (no scheme) is TLS unless
  ``OTEL_EXPORTER_OTLP_INSECURE`` is ``true`` (OpenTelemetry's meaning of that variable,
  which concerns only such endpoints);
- a CA file, client certificate or client key that cannot be read is an error naming the
  variable and the file, never a silent fallback to another trust or to no client
  certificate.

The per-signal variables (``OTEL_EXPORTER_OTLP_<SIGNAL>_CERTIFICATE``...) win over the
general ones, as for every OTLP option.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvrx_otel import env


def signal_value(environ: Mapping[str, str], name: str, signal: str) -> str | None:
    """``name``'s per-signal variant for ``signal`` when set, else ``name``; stripped, None
    when empty."""
    specific = environ.get(
        name.replace("OTEL_EXPORTER_OTLP_", f"OTEL_EXPORTER_OTLP_{signal.upper()}_")
    )
    value = specific if specific and specific.strip() else environ.get(name)
    return value.strip() if value and value.strip() else None


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one signal's exports (None: not set)."""

    certificate: str | None = None  # the CA bundle to verify the endpoint with
    client_certificate: str | None = None
    client_key: str | None = None


def tls_files(signal: str, environ: Mapping[str, str] | None = None) -> TlsFiles:
    """The TLS files of ``signal`` from the environment, each checked readable, and the
    client certificate checked to load with its key (ValueError naming the variables and
    the files otherwise)."""
    e = os.environ if environ is None else environ
    found = []
    names = []
    for name in (
        env.OTEL_EXPORTER_OTLP_CERTIFICATE,
        env.OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
        env.OTEL_EXPORTER_OTLP_CLIENT_KEY,
    ):
        path = signal_value(e, name, signal)
        specific = name.replace("OTEL_EXPORTER_OTLP_", f"OTEL_EXPORTER_OTLP_{signal.upper()}_")
        names.append(specific if e.get(specific, "").strip() else name)
        if path is not None:
            read_pem(names[-1], path)
        found.append(path)
    files = TlsFiles(*found)
    if files.client_certificate:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
                files.client_certificate, files.client_key
            )
        except (OSError, ssl.SSLError) as exc:
            key = f" and {names[2]}={files.client_key!r}" if files.client_key else ""
            raise ValueError(
                f"{names[1]}={files.client_certificate!r}{key}: not a certificate and its "
                f"private key in PEM ({exc})"
            ) from None
    return files


def read_pem(variable: str, path: str) -> bytes:
    """The bytes of the file ``path`` that ``variable`` names; ValueError naming both when
    it cannot be read (missing, a directory, no permission) or is empty."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"{variable}={path!r}: cannot read the file: {reason}") from None
    if not data.strip():
        raise ValueError(f"{variable}={path!r}: the file is empty")
    return data


def insecure_wanted(signal: str, environ: Mapping[str, str] | None = None) -> bool:
    """``OTEL_EXPORTER_OTLP[_<SIGNAL>]_INSECURE`` is ``true`` (any case)."""
    e = os.environ if environ is None else environ
    return (signal_value(e, env.OTEL_EXPORTER_OTLP_INSECURE, signal) or "").lower() == "true"


def grpc_uses_tls(endpoint: str, insecure: bool) -> bool:
    """Whether a gRPC channel to ``endpoint`` is TLS: by its scheme, else (``host:port``)
    unless ``insecure``."""
    if endpoint.startswith("https://"):
        return True
    if endpoint.startswith("http://"):
        return False
    return not insecure


def grpc_target(endpoint: str) -> str:
    """``host:port`` of a gRPC endpoint given with or without a scheme."""
    return endpoint.split("://", 1)[-1].rstrip("/")


def default_roots() -> bytes | None:
    """The default trust store as PEM: the system's (OpenSSL's default CA file, which
    ``SSL_CERT_FILE`` replaces), then certifi's bundle when installed (what ``requests``
    trusts, so that a host without a system bundle still verifies public endpoints).
    None when neither is found (gRPC then uses the roots it ships)."""
    parts: list[bytes] = []
    paths = ssl.get_default_verify_paths()
    candidates = [paths.cafile]
    try:
        import certifi

        candidates.append(certifi.where())
    except ImportError:
        pass
    for path in candidates:
        if path and os.path.isfile(path):
            try:
                with open(path, "rb") as fh:
                    parts.append(fh.read())
            except OSError:
                continue
    return b"\n".join(parts) if parts else None


def ssl_context(files: TlsFiles) -> ssl.SSLContext:
    """The client TLS context of an OTLP/HTTP connection: verifies against the CA file,
    else ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` (as ``requests`` would), else the
    system's store and certifi's bundle; presents the client certificate if any."""
    cafile = (
        files.certificate
        or os.environ.get("REQUESTS_CA_BUNDLE")
        or os.environ.get("CURL_CA_BUNDLE")
    )
    if cafile and os.path.isdir(cafile):
        context = ssl.create_default_context(capath=cafile)
    elif cafile:
        context = ssl.create_default_context(cafile=cafile)
    else:
        context = ssl.create_default_context()  # the system's store
        try:
            import certifi

            context.load_verify_locations(cafile=certifi.where())
        except (ImportError, OSError, ssl.SSLError):
            pass
    if files.client_certificate:
        try:
            context.load_cert_chain(files.client_certificate, files.client_key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"client certificate {files.client_certificate!r} / key "
                f"{files.client_key!r}: cannot load them: {exc}"
            ) from None
    return context


def grpc_credentials(files: TlsFiles) -> Any:
    """``grpc.ChannelCredentials`` verifying against the CA file, else
    :func:`default_roots`; with the client certificate and key if any."""
    import grpc

    roots = read_pem("CA file", files.certificate) if files.certificate else default_roots()
    chain = key = None
    if files.client_certificate:
        chain = read_pem("client certificate", files.client_certificate)
        key_path = files.client_key or files.client_certificate
        key = read_pem("client key", key_path)
    return grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=key, certificate_chain=chain
    )
