"""TLS for the doctor's endpoint check: the client context and what the handshake showed.

Only what Python's :mod:`ssl` gives: the context is built from the same
``OTEL_EXPORTER_OTLP_*CERTIFICATE``/``CLIENT_KEY`` files the exporters use (the system's
CAs when no certificate is given), verifying the peer and its host name as they do; the
report is the protocol version, the cipher and the peer certificate's subject, issuer and
expiry.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TlsInfo:
    """What one TLS handshake showed."""

    version: str
    cipher: str
    subject: str
    issuer: str
    not_after: str
    trusted_by: str  # the CA file named by the certificate variable, or "system CAs"
    client_certificate: bool

    def line(self) -> str:
        client = ", client certificate sent" if self.client_certificate else ""
        return (
            f"{self.version} {self.cipher}; server certificate {self.subject} issued by "
            f"{self.issuer}, valid until {self.not_after}; verified with {self.trusted_by}"
            f"{client}"
        )


def client_context(
    certificate: str | None, client_certificate: str | None, client_key: str | None
) -> ssl.SSLContext:
    """A verifying client context; ``OSError``/``ssl.SSLError`` for an unreadable file."""
    context = ssl.create_default_context(cafile=certificate)
    if client_certificate:
        context.load_cert_chain(client_certificate, client_key)
    return context


def _name(parts: Any) -> str:
    """``CN=collector,O=Example`` from the nested tuples ``getpeercert()`` returns."""
    try:
        return ",".join(f"{k}={v}" for rdn in parts for k, v in rdn) or "(empty)"
    except (TypeError, ValueError):
        return "(unreadable)"


def describe(
    sock: ssl.SSLSocket, certificate: str | None, client_certificate: str | None
) -> TlsInfo:
    """The handshake of ``sock`` (done, verified) in words."""
    cert = sock.getpeercert() or {}
    cipher = sock.cipher()
    return TlsInfo(
        version=sock.version() or "TLS",
        cipher=cipher[0] if cipher else "?",
        subject=_name(cert.get("subject", ())),
        issuer=_name(cert.get("issuer", ())),
        not_after=str(cert.get("notAfter", "?")),
        trusted_by=certificate or "system CAs",
        client_certificate=bool(client_certificate),
    )


def failure(exc: ssl.SSLError) -> str:
    """A failed handshake in one phrase."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {exc.verify_message or exc.reason}"
    return f"TLS handshake failed: {exc.reason or exc}"
