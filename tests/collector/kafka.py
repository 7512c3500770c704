"""A real single-node Apache Kafka broker (KRaft: broker and controller in one JVM) for tests.

The jars come from ``scripts/fetch-kafka.sh`` (Maven Central, cached per version). A broker
listens on 127.0.0.1 only, on ports picked free (PLAINTEXT for clients, CONTROLLER for its
own quorum); its storage directory is formatted once, and ``kill`` + ``start`` is a broker
restart on the same log directory. It runs under ``timeout`` in its own process group, so a
test run that dies cannot leave it behind for long; readiness is its "Kafka Server started"
log line, never a sleep. The JVM is kept small (serial GC, C1 only, one active processor):
the test machine has 2 cores shared with the collectors and the ranks.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.collector.harness import ROOT, free_ports

FETCH_SCRIPT = ROOT / "scripts" / "fetch-kafka.sh"
LIFETIME_S = 1800  # `timeout` ends a broker the tests forgot (a module takes a few minutes)
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
READY_LINE = b"Kafka Server started"
JVM_OPTS = (
    "-Xms64m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:ActiveProcessorCount=1",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)
PARTITIONS = 4  # of each topic the producers create: more than one, so keys matter


def cluster_id() -> str:
    """A new Kafka cluster id: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class KafkaBroker:
    """One broker+controller process on 127.0.0.1: ``format`` once, ``start``,
    ``wait_ready``, ``kill`` or ``stop``; ``start`` again is a restart on the same data."""

    lib: Path
    home: Path
    port: int = 0
    controller_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)
    _log_start: int = 0

    def __post_init__(self) -> None:
        if not self.port:
            self.port, self.controller_port = free_ports(2)
        self.home.mkdir(parents=True, exist_ok=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.home / "broker.log"

    def _java(self, *args: str) -> list[str]:
        return ["java", *JVM_OPTS, "-cp", f"{self.lib}/*", *args]

    def format(self) -> KafkaBroker:
        """Write server.properties and format the (new) storage directory."""
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": str(PARTITIONS),
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.enable": "false",
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        proc = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format",
                "-t", cluster_id(), "-c", str(self.properties),
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, f"kafka-storage format failed:\n{proc.stdout}{proc.stderr}"
        return self

    def start(self) -> KafkaBroker:
        assert self.proc is None, "the broker is running"
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(
            [
                "timeout", "--kill-after=10", str(LIFETIME_S),
                *self._java("kafka.Kafka", str(self.properties)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: `timeout` and the JVM go together
        )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> KafkaBroker:
        """Until this start's log says "Kafka Server started"; fail with the log if it exits."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY_LINE in self._log_since_start():
                return self
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"broker exited with {self.proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            time.sleep(0.1)
        raise AssertionError(f"broker not ready after {timeout}s:\n{self.log_tail()}")

    def _log_since_start(self) -> bytes:
        with self.log_path.open("rb") as f:
            f.seek(self._log_start)
            return f.read()

    def kill(self) -> None:
        """SIGKILL to the broker's process group, as a crash would: no clean shutdown."""
        self._signal_and_wait(signal.SIGKILL, STOP_TIMEOUT_S)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (a controlled shutdown) and wait; SIGKILL if it takes longer."""
        self._signal_and_wait(signal.SIGTERM, timeout)

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # `timeout` is gone; make sure no JVM of its group outlives it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_s(self) -> float:
        """CPU time (user + system) the broker's JVM has used so far (for benchmarks)."""
        assert self.proc is not None
        tick = 1 / os.sysconf("SC_CLK_TCK")
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        total = 0.0
        for pid in children.split():  # the JVM under `timeout`
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) * tick  # utime + stime
        return total

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class KafkaTopics:
    """One test's topics and consumer group on a shared broker (nothing leaks between tests)."""

    broker: KafkaBroker
    prefix: str

    def env(self) -> dict[str, str]:
        """Environment for agent-kafka.yaml and gateway-kafka.yaml."""
        return {
            "NVRX_OTEL_KAFKA_BROKERS": f"[{self.broker.bootstrap}]",
            "NVRX_OTEL_KAFKA_LOGS_TOPIC": f"{self.prefix}-logs",
            "NVRX_OTEL_KAFKA_TRACES_TOPIC": f"{self.prefix}-traces",
            "NVRX_OTEL_KAFKA_METRICS_TOPIC": f"{self.prefix}-metrics",
            "NVRX_OTEL_KAFKA_GROUP_ID": f"{self.prefix}-gateways",
            "NVRX_OTEL_KAFKA_METADATA_REFRESH": "5s",
        }
