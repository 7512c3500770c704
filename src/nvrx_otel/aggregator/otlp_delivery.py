"""Delivering encoded OTLP requests: the exporters and the retry with backoff.

The OTLP sink (``otlp_export``) decides *what* to send and *when* (batches, its cursors);
this module decides *where* and *how*: one :class:`Exporter` per place a request goes (an OTLP
endpoint's :class:`~nvrx_otel.aggregator.otlp_transport.Transport`, or :class:`JsonLines`
for ``--otlp-json``), and :class:`Delivery`, which sends a request to every exporter,
retrying with exponential backoff while one says *retry*, counting a request one refuses
for good, and the items a partial success rejects, as dropped (the caller reports them:
``otlp_losses``). After a refusal the next request waits the backoff too, so an endpoint
that refuses everything (its loss reports included) is not hammered. The backoff gives way
at once to budget pressure, and to the drain: once the aggregator drains, a waiting retry
runs at once and no wait or send outlasts the drain's deadline.

An endpoint that refuses the credentials (HTTP 401/403, gRPC UNAUTHENTICATED or
PERMISSION_DENIED), or a TLS port sent a cleartext request, refuses the sender, not the
data: a configuration error, said loudly (at once, then every ``DENIED_REMIND_S`` while it
lasts) and retried with backoff like an endpoint that is down. Nothing is counted dropped;
the records stay in the spool until an endpoint takes them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from nvrx_otel.aggregator.lifecycle import AggregatorError
from nvrx_otel.aggregator.nofollow import SymlinkRefused, open_output
from nvrx_otel.aggregator.otlp_transport import Result
from nvrx_otel.aggregator.otlp_wire import LogsEncoder

BACKOFF_START_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
DENIED_REMIND_S: Final = 60.0
"""While an endpoint keeps refusing the credentials, the report is made again this often."""


class Exporter(Protocol):
    """Where one encoded request goes."""

    last_error: str
    rejected: int  # items the last acknowledged request's partial success rejected

    def deliver(self, signal: str, message: Any, payload: bytes, timeout: float) -> Result:
        """Send one request (``message``, serialized as ``payload``) within ``timeout`` s."""
        ...


class EndpointExporter:
    """An OTLP endpoint, one transport per signal."""

    def __init__(self, transports: dict[str, Any]) -> None:
        self.transports = transports
        self.last_error = ""
        self.rejected = 0

    def deliver(self, signal: str, message: Any, payload: bytes, timeout: float) -> Result:
        transport = self.transports.get(signal)
        if transport is None:
            return Result.OK
        config = transport.config
        if timeout < config.timeout:  # a send started in the drain ends with it
            from dataclasses import replace

            transport.config = replace(config, timeout=max(timeout, 0.1))
            try:
                result: Result = transport.send(payload)
            finally:
                transport.config = config
        else:
            result = transport.send(payload)
        self.last_error = transport.last_error
        self.rejected = transport.rejected
        return result


class JsonLines:
    """``--otlp-json``: OTLP/JSON lines, logs and traces in separate files (the shape of
    the collector's file exporter). Always acknowledges unless the disk fails: then the
    request is retried, and a line it could write only in part is cut off again (a full
    disk leaves no half line for a reader to choke on). A directory removed while in use
    (a cleanup job) is made again. A file's name that is a symlink is refused (at start:
    ``AggregatorError``; later: the request is retried, the line saying why)."""

    def __init__(self, directory: Path, node: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.paths = {
            "logs": directory / f"logs_{node}.jsonl",
            "traces": directory / f"traces_{node}.jsonl",
        }
        for path in self.paths.values():
            if path.is_symlink():
                raise AggregatorError(
                    f"--otlp-json: {path} is a symlink; refusing to write through it"
                )
        self.last_error = ""
        self.rejected = 0

    def deliver(self, signal: str, message: Any, payload: bytes, timeout: float) -> Result:
        try:
            from nvrx_otel.aggregator.otlp_encode import parse, to_json

            if isinstance(message, bytes):
                message = parse(signal, message)
            line = orjson.dumps(to_json(message), option=orjson.OPT_APPEND_NEWLINE)
            self.directory.mkdir(parents=True, exist_ok=True)
            _append_line(self.paths[signal], line)
            return Result.OK
        except SymlinkRefused as exc:
            self.last_error = str(exc)
            return Result.RETRY
        except OSError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return Result.RETRY


def _append_line(path: Path, line: bytes) -> None:
    """Append ``line`` whole or not at all (what a failed write left is cut off)."""
    fd = open_output(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # never a symlink
    try:
        start = os.fstat(fd).st_size
        view = memoryview(line)
        done = 0
        try:
            while done < len(line):
                done += os.write(fd, view[done:])
        except OSError:
            if done:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
            raise
    finally:
        os.close(fd)


class Delivery:
    """Sends requests to every exporter, retrying with backoff (see the module)."""

    def __init__(
        self,
        exporters: list[Exporter],
        *,
        on_report: Callable[[str], None],
        give_way: Callable[[], bool],
    ) -> None:
        self.exporters = exporters
        self.on_report = on_report
        self.give_way = give_way  # True: stop retrying now (budget pressure)
        self.retrying = False
        self.denied = ""  # while the endpoint refuses the credentials: its last answer
        self._denied_said = 0.0  # when that was last reported (monotonic)
        self.dropped = 0  # spans refused or rejected for good (the sink counts log records)
        self._backoff = BACKOFF_START_S
        self._refused_until = 0.0  # after a refusal, the next request waits until then
        self._said: set[str] = set()
        self._deadline = float("inf")
        self._interrupt = threading.Event()
        self._logs = LogsEncoder()  # its caches live as long as the sink

    def drain_by(self, deadline: float) -> None:
        """The aggregator drains until ``deadline`` (monotonic): retry now, wait no longer.
        A drain that follows live writers moves its deadline later: that only lets waits
        run longer, it does not cut the current one short again."""
        later = deadline > self._deadline
        self._deadline = deadline
        if not later:
            self._backoff = BACKOFF_START_S
            self._interrupt.set()

    def expired(self) -> bool:
        return time.monotonic() >= self._deadline

    def export(
        self,
        logs: dict[str, list[dict[str, Any]]],
        spans: dict[str, list[dict[str, Any]]],
        trunc: list[tuple[dict[str, Any], dict[str, Any], int]],
        resources: dict[str, dict[str, Any]],
        exported: dict[str, int],
    ) -> int | None:
        """Encode and send log records and spans per writer (``trunc``: spans ended for
        their writer, who died first). Once every exporter took them: how many of the log
        records were refused or rejected for good (counted as dropped, for the caller to
        report); None when the sink must stop first (the logs then go again with the
        spans: duplicates, never losses)."""
        log_batch = [(resources.get(w, {}), rs) for w, rs in logs.items() if rs]
        span_batch = [(resources.get(w, {}), rs) for w, rs in spans.items() if rs]
        n_logs = sum(len(rs) for _, rs in log_batch)
        n_spans = sum(len(rs) for _, rs in span_batch) + len(trunc)
        logs_lost = 0
        if n_logs:
            lost = self.send("logs", self._logs.request(log_batch, time.time_ns()), n_logs)
            if lost is None:
                return None
            exported["logs"] += n_logs - lost
            logs_lost = lost
        if n_spans:  # the proto messages imported only when there are spans
            from nvrx_otel.aggregator.otlp_encode import encode_spans

            lost = self.send("traces", encode_spans(span_batch, trunc), n_spans)
            if lost is None:
                return None
            if lost < n_spans:  # which of them were rejected is not said: spans first
                exported["spans"] += max(0, n_spans - len(trunc) - lost)
                exported["truncated"] += min(len(trunc), n_spans - lost)
        return logs_lost

    def send(self, signal: str, message: Any, count: int) -> int | None:
        """Deliver one request (a message, or its serialized bytes) to every exporter: how
        many of its ``count`` items an exporter refused or rejected for good (0: all taken,
        counted as dropped), or None when it is not delivered yet (give way or deadline):
        send it again later."""
        payload = message if isinstance(message, bytes) else message.SerializeToString()
        lost = 0
        for dest in self.exporters:
            result = self._deliver(dest, signal, message, payload, count)
            if result is None:
                return None
            lost = max(lost, result)
        return lost

    def _deliver(
        self, dest: Exporter, signal: str, message: Any, payload: bytes, count: int
    ) -> int | None:
        cooldown = self._refused_until - time.monotonic()
        if cooldown > 0 and not self._wait(cooldown):
            return None
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                return None
            result = dest.deliver(signal, message, payload, left)
            if result is Result.OK:
                if self.retrying:
                    self.on_report(f"OTLP {signal} export works again")
                self.retrying = False
                self.denied = ""
                self._backoff = BACKOFF_START_S
                rejected = min(max(dest.rejected, 0), count)
                if rejected:
                    self.dropped += rejected if signal != "logs" else 0  # logs: the caller's
                    self._say_once(
                        f"partial:{signal}",
                        f"OTLP endpoint rejected {rejected} of a {signal} batch of {count} "
                        f"({dest.last_error}); counted as dropped"
                        + (" and reported to it" if signal == "logs" else "")
                        + " (said once; the summary counts them all)",
                    )
                return rejected
            if result is Result.REJECTED:
                self.dropped += count if signal != "logs" else 0  # logs: the caller counts
                self.on_report(
                    f"OTLP endpoint refused a {signal} batch of {count} for good "
                    f"({dest.last_error}); counted as dropped"
                )
                self._refused_until = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
                return count
            if result is Result.DENIED:
                self._denied(signal, count, dest.last_error)
            elif not self.retrying:
                self.on_report(
                    f"OTLP {signal} export failing ({dest.last_error}); retrying with backoff, "
                    "the node log keeps flowing"
                )
            self.retrying = True
            if not self._wait(self._backoff):
                return None
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)

    def _denied(self, signal: str, count: int, error: str) -> None:
        """Report an endpoint refusing the sender: at once, again when its answer changes,
        and every ``DENIED_REMIND_S`` while it lasts."""
        now = time.monotonic()
        if error == self.denied and now - self._denied_said < DENIED_REMIND_S:
            return
        self.denied = error
        self._denied_said = now
        self.on_report(
            f"OTLP configuration error: the endpoint refused the sender of a {signal} batch "
            f"of {count}, not its data ({error}); check the endpoint URL, "
            "OTEL_EXPORTER_OTLP_HEADERS (the token) and the endpoint's auth settings. "
            "Nothing is dropped: the records stay in the spool and are retried with backoff"
        )

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.on_report(message)

    def _wait(self, seconds: float) -> bool:
        """Wait out a backoff; False when the exporter must give way first."""
        until = time.monotonic() + seconds
        while True:
            if self.give_way():
                return False
            now = time.monotonic()
            if now >= self._deadline:
                return False
            if now >= until:
                return True
            if self._interrupt.wait(min(0.2, until - now, self._deadline - now)):
                self._interrupt.clear()
                return True  # the drain began: try again at once
