"""Running the built collector in tests: free ports, start/ready/stop, reading its file output.

Every collector listens on 127.0.0.1 only, on ports picked free for the test; readiness is
the health_check extension answering 200, never a sleep. ``Collector.stop`` sends SIGTERM
and waits (the collector drains and flushes), then kills on timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import requests

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "collector-config"
BUILD_SCRIPT = ROOT / "scripts" / "build-collector.sh"

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class Ports:
    """The ports one collector listens on."""

    grpc: int
    http: int
    health: int
    metrics: int

    @classmethod
    def pick(cls, n: int = 1) -> list[Ports]:
        """``n`` sets of ports, all distinct (picked in one go, so no two collide)."""
        ports = free_ports(4 * n)
        return [cls(*ports[4 * i : 4 * i + 4]) for i in range(n)]


def agent_env(ports: Ports, storage: Path, gateway_grpc: int, **extra: str) -> dict[str, str]:
    """Environment for agent.yaml (and its overlays) on 127.0.0.1."""
    return {
        "NVRX_OTEL_AGENT_GRPC_ENDPOINT": f"127.0.0.1:{ports.grpc}",
        "NVRX_OTEL_AGENT_HTTP_ENDPOINT": f"127.0.0.1:{ports.http}",
        "NVRX_OTEL_AGENT_HEALTH_ENDPOINT": f"127.0.0.1:{ports.health}",
        "NVRX_OTEL_AGENT_METRICS_PORT": str(ports.metrics),
        "NVRX_OTEL_AGENT_STORAGE_DIR": str(storage),
        "NVRX_OTEL_GATEWAY_ENDPOINT": f"127.0.0.1:{gateway_grpc}",
        **extra,
    }


def gateway_env(ports: Ports, output: Path, **extra: str) -> dict[str, str]:
    """Environment for gateway.yaml (and its overlays) on 127.0.0.1."""
    return {
        "NVRX_OTEL_GATEWAY_GRPC_ENDPOINT": f"127.0.0.1:{ports.grpc}",
        "NVRX_OTEL_GATEWAY_HTTP_ENDPOINT": f"127.0.0.1:{ports.http}",
        "NVRX_OTEL_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{ports.health}",
        "NVRX_OTEL_GATEWAY_METRICS_PORT": str(ports.metrics),
        "NVRX_OTEL_GATEWAY_OUTPUT_DIR": str(output),
        **extra,
    }


def config_args(configs: Iterable[str | Path]) -> list[str]:
    return [f"--config=file:{CONFIG_DIR / c}" for c in configs]


def run_validate(
    binary: Path, configs: Iterable[str | Path], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), "validate", *config_args(configs)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@dataclass
class Collector:
    """One collector process: ``start`` it, ``wait_ready``, ``stop``."""

    binary: Path
    configs: list[str | Path]
    env: dict[str, str]
    health_port: int
    log_path: Path
    feature_gates: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> Collector:
        args = [str(self.binary), *config_args(self.configs)]
        if self.feature_gates:
            args.append("--feature-gates=" + ",".join(self.feature_gates))
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> Collector:
        """Poll health_check until it answers 200; fail with the log if the process exits."""
        assert self.proc is not None
        url = f"http://127.0.0.1:{self.health_port}/"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"collector exited with {self.proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            with contextlib.suppress(requests.RequestException):
                if requests.get(url, timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise AssertionError(f"collector not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait (it drains and flushes); kill if it does not exit in time."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise AssertionError(
                        f"collector ignored SIGTERM for {timeout}s:\n{self.log_tail()}"
                    ) from None
            return proc.returncode
        finally:
            self._close_log()

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: no drain, no flush."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


MakeCollector = Callable[..., Collector]
"""The type of the ``make_collector`` fixture."""


# --- the file exporter's output ------------------------------------------------------------


def read_requests(directory: Path, signal_name: str) -> list[dict[str, Any]]:
    """Every export request the gateway wrote for ``signal_name`` ("logs", "traces"),
    rotated files included. A last line without its newline is still being written."""
    out: list[dict[str, Any]] = []
    for path in sorted(directory.glob(f"{signal_name}*.jsonl")):
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        out.extend(json.loads(line) for line in complete.splitlines() if line.strip())
    return out


def any_value(v: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a Python value (64-bit ints arrive as decimal strings)."""
    if not v:
        return None
    ((kind, value),) = v.items()
    if kind == "intValue":
        return int(value)
    if kind == "arrayValue":
        return [any_value(x) for x in value.get("values", [])]
    if kind == "kvlistValue":
        return attrs(value.get("values", []))
    return value


def attrs(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value", {})) for kv in kvs}


def logs(directory: Path) -> list[dict[str, Any]]:
    """The gateway's log records, flattened, in file order."""
    out = []
    for req in read_requests(directory, "logs"):
        for rl in req.get("resourceLogs", []):
            res = attrs(rl.get("resource", {}).get("attributes", []))
            for sl in rl.get("scopeLogs", []):
                for lr in sl.get("logRecords", []):
                    out.append(
                        {
                            "resource": res,
                            "scope": sl.get("scope", {}).get("name", ""),
                            "time": int(lr.get("timeUnixNano", 0)),
                            "severity_number": lr.get("severityNumber", 0),
                            "severity_text": lr.get("severityText", ""),
                            "body": any_value(lr.get("body", {})),
                            "attributes": attrs(lr.get("attributes", [])),
                            "trace_id": lr.get("traceId", ""),
                            "span_id": lr.get("spanId", ""),
                            "flags": lr.get("flags", 0),
                        }
                    )
    return out


def spans(directory: Path) -> list[dict[str, Any]]:
    """The gateway's spans, flattened, in file order."""
    out = []
    for req in read_requests(directory, "traces"):
        for rs in req.get("resourceSpans", []):
            res = attrs(rs.get("resource", {}).get("attributes", []))
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    out.append(
                        {
                            "resource": res,
                            "scope": ss.get("scope", {}).get("name", ""),
                            "name": sp.get("name", ""),
                            "trace_id": sp.get("traceId", ""),
                            "span_id": sp.get("spanId", ""),
                            "parent_span_id": sp.get("parentSpanId", ""),
                            "start": int(sp.get("startTimeUnixNano", 0)),
                            "end": int(sp.get("endTimeUnixNano", 0)),
                            "attributes": attrs(sp.get("attributes", [])),
                            "status": sp.get("status", {}),
                        }
                    )
    return out


def wait_until(
    predicate: Callable[[], bool],
    what: str,
    timeout: float = 30.0,
    *,
    on_fail: Callable[[], str] = str,
) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds,
    with ``on_fail()`` (e.g. a collector's log tail) in the message."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_fail()}")
        time.sleep(0.1)


@contextlib.contextmanager
def running(*collectors: Collector) -> Iterator[tuple[Collector, ...]]:
    """Start all, wait until each is ready, stop all (last started first) on the way out."""
    try:
        for c in collectors:
            c.start()
        for c in collectors:
            c.wait_ready()
        yield collectors
    finally:
        for c in reversed(collectors):
            c.stop()
