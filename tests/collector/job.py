"""A small multi-node job on one host: a gateway, an agent per node, and per node either an
aggregator (``agent.yaml``) or nothing (``agent-filelog.yaml``: the agent tails the spool),
with real rank processes (``job_rank.py``) logging inside spans. With ``kafka`` the agents
write to Kafka topics (``agent-kafka.yaml``) and the gateway reads them
(``gateway-kafka.yaml``).

Nodes are told apart by ``NVRX_OTEL_NODE_ID`` (agents, aggregators and ranks of a node
share it) and by their own spool root. Everything is on 127.0.0.1; collectors come from
the ``make_collector`` fixture and processes from ``tests.conftest.spawn``, so nothing
outlives the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from nvrx_otel import semconv
from tests.aggregator.spoolkit import NO_WATCHER
from tests.collector.harness import (
    ROOT,
    Collector,
    MakeCollector,
    Ports,
    agent_env,
    gateway_env,
    logs,
    spans,
    wait_until,
)
from tests.collector.kafka import KafkaTopics
from tests.conftest import spawn

RANK_SCRIPT = Path(__file__).with_name("job_rank.py")
JOB_ID = "4242"
FILELOG_GATES = ("stanza.synchronousLogEmitter",)
_DROPPED_PREFIXES = ("OTEL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "NVRX_", "SLURM_")


def queue_size(metrics_port: int) -> float:
    """The sum of an agent's ``otelcol_exporter_queue_size`` (every signal)."""
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("otelcol_exporter_queue_size{")
    )


def sent_log_records(metrics_port: int) -> float:
    """Log records a collector's exporters have sent (``otelcol_exporter_sent_log_records``)."""
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    prefix = "otelcol_exporter_sent_log_records{"
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def spool_records_read(metrics_port: int) -> float:
    """Log records the agent's ``file_log/spool`` receiver has passed on."""
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    prefix = 'otelcol_receiver_accepted_log_records{receiver="file_log/spool"'
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def base_env(**extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(NO_WATCHER)
    environ.update(extra)
    return environ


@dataclass
class Node:
    index: int
    name: str
    ports: Ports
    spool: Path
    storage: Path
    agent: Collector = field(init=False)
    aggregator: subprocess.Popen[bytes] | None = None
    ranks: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports.http}"


class Job:
    """``nodes`` x ``ranks_per_node`` ranks of ``records`` step records each."""

    def __init__(
        self,
        make_collector: MakeCollector,
        tmp: Path,
        *,
        filelog: bool = False,
        grpc: bool = False,
        nodes: int = 2,
        ranks_per_node: int = 4,
        records: int = 100,
        kafka: KafkaTopics | None = None,
    ) -> None:
        self.make_collector = make_collector
        self.kafka = kafka
        self.tmp = tmp
        self.filelog = filelog
        self.grpc = grpc  # aggregators export OTLP/gRPC to the agent instead of OTLP/HTTP
        self.ranks_per_node = ranks_per_node
        self.records = records
        self.out = tmp / "out"
        self.gate = tmp / "gate"
        gw_ports, *node_ports = Ports.pick(nodes + 1)
        self.gateway_ports = gw_ports
        self.gateway = self._gateway("gateway")
        self.nodes: list[Node] = []
        for i, ports in enumerate(node_ports):
            name = f"node-{i}"
            spool = tmp / name / "spool"
            node = Node(i, name, ports, spool, tmp / name / "agent-storage")
            node.agent = self.agent(node, "agent")
            self.nodes.append(node)

    # --- collectors --------------------------------------------------------------------

    def _gateway(self, log_name: str) -> Collector:
        p = self.gateway_ports
        configs = ["gateway.yaml"]
        environ = gateway_env(p, self.out)
        if self.kafka is not None:
            configs.append("gateway-kafka.yaml")
            environ.update(self.kafka.env())
        return self.make_collector(log_name, configs, environ, p.health)

    def agent(self, node: Node, log_name: str) -> Collector:
        """A (new) agent for ``node``: same ports and storage every time."""
        extra = {"NVRX_OTEL_NODE_ID": node.name, "NVRX_OTEL_AGENT_JOB_ID": JOB_ID}
        configs = ["agent.yaml"]
        gates: tuple[str, ...] = ()
        if self.filelog:
            configs.append("agent-filelog.yaml")
            extra["NVRX_NODE_LOCAL_TMPDIR"] = str(node.spool)
            gates = FILELOG_GATES
        if self.kafka is not None:
            configs.append("agent-kafka.yaml")
            extra.update(self.kafka.env())
        environ = agent_env(node.ports, node.storage, self.gateway_ports.grpc, **extra)
        return self.make_collector(
            f"{node.name}-{log_name}", configs, environ, node.ports.health, gates
        )

    def restart_gateway(self) -> None:
        self.gateway = self._gateway("gateway-restarted").start().wait_ready()

    def restart_agent(self, node: Node) -> None:
        node.agent = self.agent(node, "agent-restarted").start().wait_ready()

    def start(self) -> Job:
        """Gateway, agents (ready), then aggregators: the senders' endpoints are up."""
        collectors = [self.gateway, *(n.agent for n in self.nodes)]
        for c in collectors:
            c.start()
        for c in collectors:
            c.wait_ready()
        if not self.filelog:
            for node in self.nodes:
                log = self.aggregator_log(node)
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("ab") as err:
                    node.aggregator = spawn(
                        [sys.executable, "-m", "nvrx_otel.logging.aggregator",
                         "--log-dir", str(self.tmp / node.name / "logs"),
                         "--wait-file", str(self.tmp / node.name / "wait"),
                         "--check-interval", "0.1", "--drain-timeout", "60",
                         "--otlp-endpoint",
                         f"http://127.0.0.1:{node.ports.grpc}" if self.grpc else node.endpoint],
                        env=self.node_env(node, **self._protocol()),
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )  # fmt: skip
            # A wait file that exists when an aggregator starts is stale (ignored): touch
            # it (in stop) only once the aggregator says it is waiting for it.
            for node in self.nodes:
                wait_until(
                    lambda n=node: "; waiting for " in self.aggregator_log(n).read_text(),  # type: ignore[misc]
                    f"{node.name}'s aggregator running",
                    on_fail=self.tails,
                )
        return self

    # --- processes ---------------------------------------------------------------------

    def _protocol(self) -> dict[str, str]:
        return {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"} if self.grpc else {}

    def node_env(self, node: Node, **extra: str) -> dict[str, str]:
        return base_env(
            NVRX_NODE_LOCAL_TMPDIR=str(node.spool),
            NVRX_OTEL_NODE_ID=node.name,
            SLURM_JOB_ID=JOB_ID,
            **extra,
        )

    def rank_of(self, node: Node, local: int) -> int:
        return node.index * self.ranks_per_node + local

    def start_ranks(self, *, gated: bool = False, step_s: float = 0.0) -> None:
        """Start every rank; ``gated``: each waits after its first cycle until ``release``,
        and then logs a step every ``step_s`` seconds."""
        args = [sys.executable, str(RANK_SCRIPT), str(self.records)]
        args.append("filelog" if self.filelog else "aggregator")
        if gated:
            args += [str(self.gate), str(step_s)]
        world = str(len(self.nodes) * self.ranks_per_node)
        for node in self.nodes:
            for local in range(self.ranks_per_node):
                extra = {
                    "RANK": str(self.rank_of(node, local)),
                    "LOCAL_RANK": str(local),
                    "WORLD_SIZE": world,
                }
                if self.filelog:
                    extra["OTEL_EXPORTER_OTLP_ENDPOINT"] = node.endpoint
                node.ranks.append(
                    spawn(args, env=self.node_env(node, **extra), stdout=subprocess.PIPE)
                )

    def wait_half(self) -> None:
        """Every (gated) rank has finished its first cycle and waits at the gate."""
        for node in self.nodes:
            for proc in node.ranks:
                assert proc.stdout is not None
                assert proc.stdout.readline() == b"half\n", f"rank exited with {proc.wait()}"

    def release(self) -> None:
        self.gate.touch()

    def finish_ranks(self) -> None:
        for node in self.nodes:
            for proc in node.ranks:
                out, _ = proc.communicate(timeout=120)
                assert proc.returncode == 0 and out.endswith(b"done\n"), (proc.returncode, out)

    def node_log_records(self, node: Node) -> int:
        """Step and checkpoint lines in ``node``'s node log (aggregator mode)."""
        path = self.tmp / node.name / "logs" / f"nvrx_log_{node.name}.log"
        return path.read_text().count(" of rank ") if path.exists() else 0

    def stop(self) -> None:
        """The graceful stop of collector-config/README.md: the senders first (aggregators
        drain until OTLP is acknowledged; in filelog mode the agent has read every record),
        then each agent once its queue is empty, then the gateway."""
        if self.filelog:  # each agent has read every record of its node's spool
            per_node = self.ranks_per_node * (self.records + 2)
            for node in self.nodes:
                wait_until(
                    lambda n=node: spool_records_read(n.ports.metrics) >= per_node,  # type: ignore[misc]
                    f"{per_node} spool records read by {node.name}'s agent",
                    on_fail=self.tails,
                )
        for node in self.nodes:
            if node.aggregator is not None:
                (self.tmp / node.name / "wait").touch()
                code = node.aggregator.wait(timeout=120)
                assert code == 0, self.aggregator_log(node).read_text()
        for node in self.nodes:
            wait_until(
                lambda n=node: queue_size(n.ports.metrics) == 0,  # type: ignore[misc]
                f"an empty queue in {node.name}'s agent",
                timeout=60,
                on_fail=self.tails,
            )
            assert node.agent.stop() == 0, node.agent.log_tail()
        if self.kafka is not None:
            self.wait_gateway_consumed()
        assert self.gateway.stop() == 0, self.gateway.log_tail()

    def wait_gateway_consumed(self, timeout: float = 90.0) -> None:
        """Kafka mode: the agents are done, so wait until the gateway has read everything
        from the topics (every record key and span in its files) or the time is up; what
        is then missing, check_output names."""
        spans_expected = len(self.nodes) * self.ranks_per_node * 4
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (
                self.arrived() >= self.expected_records()
                and len({s["span_id"] for s in spans(self.out)}) >= spans_expected
            ):
                return
            time.sleep(0.2)

    def aggregator_log(self, node: Node) -> Path:
        return self.tmp / node.name / "aggregator.err"

    def tails(self) -> str:
        """The last lines of every collector's, aggregator's (and broker's) log, for a
        failure message."""
        parts = [
            f"--- {c.log_path.name}\n{c.log_tail(8)}"
            for c in (self.gateway, *(n.agent for n in self.nodes))
        ]
        if self.kafka is not None:
            parts.append(f"--- kafka broker\n{self.kafka.broker.log_tail(8)}")
        for node in self.nodes:
            path = self.aggregator_log(node)
            if path.exists():
                tail = "\n".join(path.read_text(errors="replace").splitlines()[-8:])
                parts.append(f"--- {node.name} aggregator\n{tail}")
        return "\n".join(parts)

    # --- expectations ------------------------------------------------------------------

    def expected_records(self) -> int:
        return len(self.nodes) * self.ranks_per_node * (self.records + 2)

    def arrived(self) -> int:
        """Distinct record keys in the gateway's log file so far."""
        return len({r["attributes"].get(semconv.RECORD_KEY) for r in logs(self.out)})

    def check_output(self) -> dict[str, int]:
        """Assert on the gateway's files after the stop; returns what was found."""
        return check_output(self, logs(self.out), spans(self.out))


def check_output(
    job: Job, records: list[dict[str, Any]], items: list[dict[str, Any]]
) -> dict[str, int]:
    """Every record and span of every rank exactly once after de-duplication (by record key,
    by span id), on the resource of its rank and node, and each record inside its span."""
    by_key: dict[str, dict[str, Any]] = {}
    for r in records:
        key = r["attributes"][semconv.RECORD_KEY]  # every record has its key
        if key in by_key:  # a duplicate (at least once) must be the same record
            assert by_key[key] == r, (by_key[key], r)
        by_key[key] = r
    by_id: dict[str, dict[str, Any]] = {}
    for s in items:
        if s["span_id"] in by_id:
            assert by_id[s["span_id"]] == s, (by_id[s["span_id"]], s)
        by_id[s["span_id"]] = s

    node_of = {
        job.rank_of(n, local): n.name for n in job.nodes for local in range(job.ranks_per_node)
    }
    half = job.records // 2
    expected: Counter[str] = Counter()
    for rank in node_of:
        expected.update(f"step {i} of rank {rank}" for i in range(job.records))
        expected.update(f"checkpoint {c} of rank {rank}" for c in (0, 1))
    found = Counter(r["body"] for r in by_key.values())
    assert found == expected, (
        f"missing: {sorted(expected - found)[:10]} ({sum((expected - found).values())}), "
        f"extra: {sorted(found - expected)[:10]} ({sum((found - expected).values())})"
    )

    for r in by_key.values():
        rank = r["resource"][semconv.WORKLOAD_RANK]
        assert r["body"].endswith(f" of rank {rank}"), r
        assert r["resource"][semconv.NODE_ID] == node_of[rank], r
        assert r["resource"][semconv.WORKLOAD_LOCAL_RANK] == rank % job.ranks_per_node, r
        assert r["resource"][semconv.JOB_ID] == JOB_ID, r
        span = by_id.get(r["span_id"])  # every record was logged inside one of the spans
        assert span is not None, f"the span of this record did not arrive: {r}"
        assert r["trace_id"] == span["trace_id"] != "", (r, span)
        assert span["resource"][semconv.WORKLOAD_RANK] == rank, (r, span)
        cycle_span = (
            span if span["name"] == semconv.SPAN_FTL_CYCLE else by_id[span["parent_span_id"]]
        )
        step = r["body"].split()[1]
        cycle = int(step) // half if r["body"].startswith("step") else int(step)
        assert cycle_span["attributes"][semconv.RESTART_CYCLE] == cycle, (r, cycle_span)

    per_rank = Counter(s["resource"][semconv.WORKLOAD_RANK] for s in by_id.values())
    assert per_rank == dict.fromkeys(node_of, 4), per_rank  # 2 cycles, 2 checkpoints each
    for s in by_id.values():
        rank = s["resource"][semconv.WORKLOAD_RANK]
        assert s["resource"][semconv.NODE_ID] == node_of[rank], s
        assert s["resource"][semconv.JOB_ID] == JOB_ID, s
        if s["name"] == semconv.SPAN_CKPT_SCHEDULE:
            parent = by_id[s["parent_span_id"]]
            assert parent["name"] == semconv.SPAN_FTL_CYCLE and parent["trace_id"] == s["trace_id"]
        else:
            assert s["name"] == semconv.SPAN_FTL_CYCLE, s
    return {
        "records": len(by_key),
        "record_duplicates": len(records) - len(by_key),
        "spans": len(by_id),
        "span_duplicates": len(items) - len(by_id),
    }
