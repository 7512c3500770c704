"""TLS for tests: a CA, a server certificate for 127.0.0.1 and a client certificate, made
with ``cryptography`` in the test's directory; TLS endpoints on 127.0.0.1 (OTLP/HTTP and
OTLP/gRPC); and a listener that records the first bytes a client sends, to tell a TLS
handshake from cleartext on the wire."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TLS_RECORD_HANDSHAKE = 0x16
"""The first byte of a TLS ClientHello (a handshake record)."""
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""What a cleartext HTTP/2 (gRPC) client sends first."""


@dataclass(frozen=True)
class Pki:
    """PEM files: ``ca`` (the CA certificate), ``server_cert``/``server_key`` (for
    127.0.0.1 and localhost, signed by the CA), ``client_cert``/``client_key`` (for mutual
    TLS, signed by the CA)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=7)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("nvrx-otel test CA"))
        .issuer_name(name("nvrx-otel test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issue(cn: str, usage: Any, san: list[Any] | None) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    server_key, server_cert = issue(
        "127.0.0.1",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    client_key, client_cert = issue("nvrx-otel test client", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    pki = Pki(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server-key.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    pem = serialization.Encoding.PEM
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    pki.server_cert.write_bytes(server_cert.public_bytes(pem))
    write_key(server_key, pki.server_key)
    pki.client_cert.write_bytes(client_cert.public_bytes(pem))
    write_key(client_key, pki.client_key)
    return pki


class TlsHttpEndpoint:
    """An HTTPS endpoint on 127.0.0.1 answering ``status`` to every POST; it records each
    request's path, headers and body (optionally asks for a client certificate)."""

    def __init__(self, pki: Pki, *, client_auth: bool = False) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.peer_certs: list[Any] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.requests.append((self.path, dict(self.headers.items()), body))
                outer.peer_certs.append(self.connection.getpeercert())
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pki.server_cert, pki.server_key)
        if client_auth:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=pki.ca)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/v1/logs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def tls_http_endpoint(pki: Pki, *, client_auth: bool = False) -> Iterator[TlsHttpEndpoint]:
    endpoint = TlsHttpEndpoint(pki, client_auth=client_auth)
    try:
        yield endpoint
    finally:
        endpoint.stop()


@contextmanager
def grpc_endpoint(
    pki: Pki | None, *, client_auth: bool = False, token: str | None = None
) -> Iterator[tuple[int, list[tuple[str, dict[str, str]]]]]:
    """An OTLP/gRPC endpoint on 127.0.0.1 (TLS with ``pki``, cleartext without): its port
    and the calls it took (method, metadata). With ``token`` a call without
    ``authorization: Bearer <token>`` is refused with UNAUTHENTICATED."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    calls: list[tuple[str, dict[str, str]]] = []

    def handler(method: str) -> Any:
        def export(body: bytes, context: Any) -> bytes:
            metadata = dict(context.invocation_metadata())
            if token is not None and metadata.get("authorization") != f"Bearer {token}":
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
            calls.append((method, metadata))
            return b""

        return grpc.unary_unary_rpc_method_handler(export)

    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    for service in ("logs.v1.LogsService", "trace.v1.TraceService", "metrics.v1.MetricsService"):
        name = f"opentelemetry.proto.collector.{service}"
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(name, {"Export": handler(service)})]
        )
    if pki is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        creds = grpc.ssl_server_credentials(
            [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
            root_certificates=pki.ca.read_bytes() if client_auth else None,
            require_client_auth=client_auth,
        )
        port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        yield port, calls
    finally:
        server.stop(0)


class FirstBytes:
    """A TCP listener on 127.0.0.1 that records what each client sends first (up to 64 KiB
    or until it pauses), then closes the connection: what went over the wire in clear."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.got = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                data = b""
                try:
                    while len(data) < 65536:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
            self.seen.append(data)
            self.got.set()

    def close(self) -> None:
        self._sock.close()


@contextmanager
def first_bytes() -> Iterator[FirstBytes]:
    listener = FirstBytes()
    try:
        yield listener
    finally:
        listener.close()


def is_tls_hello(data: bytes) -> bool:
    return len(data) > 5 and data[0] == TLS_RECORD_HANDSHAKE and data[1] == 0x03
