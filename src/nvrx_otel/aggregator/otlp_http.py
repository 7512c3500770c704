"""OTLP/HTTP requests over one persistent ``http.client`` connection.

An export request is a POST of protobuf bytes; the answer is a status and a short body.
``requests`` costs about 1 ms of Python per such request (and the GIL with it, which the
aggregator's loop shares); one kept-alive ``http.client`` connection costs a tenth of it.
What ``requests`` would take from the environment is kept: an endpoint that a proxy
variable (``HTTPS_PROXY``, ``NO_PROXY``...) or a ``~/.netrc`` entry concerns is sent
through ``requests`` as before (:func:`plain_route` says which). An ``https://`` URL is
TLS verified as :func:`nvrx_otel.otlptls.ssl_context` says: ``OTEL_EXPORTER_OTLP_CERTIFICATE``,
else ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` (as ``requests`` would), else the system's
store and certifi's bundle.

A connection the endpoint closed while idle (its keep-alive timeout) is noticed before
reuse and opened again; a request that fails on a reused connection before any answer
goes once more on a new one (the endpoint may have closed it meanwhile). Either way a
request may arrive twice, never not at all without its failure being returned.
"""

from __future__ import annotations

import http.client
import os
import select
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from nvrx_otel import __version__
from nvrx_otel.otlptls import TlsFiles, ssl_context

if TYPE_CHECKING:
    import ssl

USER_AGENT: Final = f"nvrx-otel/{__version__}"


def plain_route(endpoint: str) -> bool:
    """True when ``requests`` would add nothing from the environment to a request to
    ``endpoint``: no proxy applies to it and no ``~/.netrc`` entry names its host. Asked of
    ``requests`` itself only when a proxy variable or a netrc file is there at all (the
    common case costs no import of it)."""
    try:
        from urllib.request import getproxies_environment

        proxies = any(scheme != "no" for scheme in getproxies_environment())
        netrc = os.environ.get("NETRC")
        places = (netrc,) if netrc is not None else ("~/.netrc", "~/_netrc")
        has_netrc = any(os.path.exists(os.path.expanduser(p)) for p in places)
        if not proxies and not has_netrc:
            return True
        from requests.utils import get_environ_proxies, get_netrc_auth

        return not get_environ_proxies(endpoint) and get_netrc_auth(endpoint) is None
    except Exception:  # cannot tell: keep the route that honours all of it
        return False


class HttpEndpoint:
    """POSTs to one OTLP/HTTP URL over a connection kept open between requests."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        certificate: str | None = None,
        client_certificate: str | None = None,
        client_key: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.headers = {"User-Agent": USER_AGENT, **headers}
        self._tls = TlsFiles(certificate, client_certificate, client_key)
        self._context: ssl.SSLContext | None = None
        self._conn: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        """Send ``body``; the answer's status and body. Raises OSError or
        ``http.client.HTTPException`` when no answer came (the connection is then closed)."""
        conn = self._conn
        reused = conn is not None and conn.sock is not None
        if conn is None or (reused and _dropped(conn)):
            conn = self._connect(timeout)
            reused = False
        try:
            return self._exchange(conn, body, headers, timeout)
        except (ConnectionError, http.client.BadStatusLine):
            self.close()
            if not reused:
                raise
        except BaseException:
            self.close()
            raise
        conn = self._connect(timeout)  # the endpoint closed the kept-alive connection
        try:
            return self._exchange(conn, body, headers, timeout)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        self.close()
        conn: http.client.HTTPConnection
        if self.https:
            if self._context is None:
                self._context = ssl_context(self._tls)
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._context
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        self._conn = conn
        return conn

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        body: bytes,
        headers: Mapping[str, str],
        timeout: float,
    ) -> tuple[int, bytes]:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.request("POST", self.path, body=body, headers={**self.headers, **headers})
        resp = conn.getresponse()
        content = resp.read()
        if resp.will_close:
            self.close()
        return resp.status, content


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """The endpoint closed an idle kept-alive connection (or sent something unasked)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
