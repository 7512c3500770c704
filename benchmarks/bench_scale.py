"""Scale: simulated nodes' spools through aggregators, a node agent and one gateway,
directly over OTLP and through Kafka.

What is simulated: the ranks. Each simulated node is a spool of 8 ranks made by
``bench_aggregator.prepare`` (files and records exactly as the spool writer makes them, one
template), copied per node with writer ids of its own, so every writer and record key is
unique in the job; no rank process runs while the clock runs, so the aggregators drain a
backlog (as after a log storm or an outage), not a trickle. What is real: the rest. A
small fixed pool of processes does the work, at most 4 (5 with the broker) on a 2-core
machine: one gateway (``gateway.yaml``), one agent (``agent.yaml``) and 2 aggregator
workers, each draining its share of the nodes one after the other with the real
``Aggregator`` (node log written, OTLP/HTTP to the agent). The job grows from 8 to 512
ranks (1 to 64 nodes) with the same records per rank; for each size:

- ``records_per_s``: records through the gateway, from "go" until the gateway's file
  exporter has sent every log record (its own metric), over wall time;
- ``loss``: expected record keys missing from the gateway's ``logs*.jsonl`` after the
  graceful stop (must be 0), and ``duplicates`` (at least once: allowed, removable by key);
- ``ns_per_record``: CPU time (user + system) of all the processes from "go" until the
  gateway has sent the last record (collectors and broker from /proc, aggregators their
  own process time), per record, in total and per tier (``_aggregators``, ``_agent``,
  ``_gateway``, ``_broker``). The question is whether it stays flat as ranks grow, not
  parallel speed;
- ``idle_cpu_ms_per_s_<tier>``: what the agent, the gateway (and the broker) cost per
  second with no record to move, measured for ``IDLE_S`` before the clock starts while the
  gateway's metrics are polled at 20 Hz as during the run. The gateway's idle cost is that
  polling (about 1 ms of gateway CPU a scrape; unpolled it idles at 0), the broker's is
  its own housekeeping; both last as long as the run, not as many records;
- ``ns_per_record_net`` and ``ns_per_record_<tier>_net``: the same less the idle rate
  times the run's wall time: the marginal cost of a record, the figure to judge flatness
  by. The aggregators have no idle part (their clock runs only while they drain).

What is kept out of the clock, because it is paid once per process and not per record (a
deployment's collectors and aggregators run for the whole job, the benchmark starts fresh
ones for every size): the aggregators' lazy imports (``_preload``), and ``WARM_RECORDS``
unkeyed records (one full gateway batch) through agent and gateway, which make the
agent's connection, the Kafka topic and partitions, and the direct gateway's first full
batch (measured 30-50 ms of gateway CPU more than the later ones, 1,400-2,300 ns a record
over the 8-rank size's 24,000 when it fell inside the clock) before "go". What stays in
it: everything that grows with the job, including each node's aggregator start and stop
(one per 8 ranks). Resolution: the collectors' and the broker's CPU is read in 10 ms
clock ticks, 417 ns a record at 8 ranks (24,000 records), 7 ns at 512.

Two paths, in one run: ``direct`` (agent → gateway over OTLP/gRPC) and ``kafka`` (the
agent writes to a real Kafka broker, ``agent-kafka.yaml``; Apache Kafka 4 in KRaft mode,
one process, 4 partitions per topic, from ``tests/collector/kafka.py``; the gateway reads
from it, ``gateway-kafka.yaml``; the broker's CPU time is a fourth tier). Every size of
every path runs ``--repeats`` times (default 3), interleaved; each section reports the
medians, every repeat's total and net ns/record, and ``<path>_flatness`` the max/min over
sizes of the median cost per record (total and per tier, gross and net) and the 512-rank
figure over the 8-rank one. The summary has the load average before
and after: the machine is shared.

    python -m benchmarks.bench_scale [records per rank] [--quick] [--kafka | --direct]
        [--repeats N]

Needs the collector binary (``NVRX_OTEL_COLLECTOR_BIN`` or ``scripts/build-collector.sh``)
and, for the Kafka path, Java and Maven (``scripts/fetch-kafka.sh``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
from tests.collector.kafka import KafkaBroker, KafkaTopics

from benchmarks.bench_aggregator import RANKS, prepare
from nvrx_otel.spool.paths import job_dir, parse_name

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "collector-config"
RANK_COUNTS = (8, 32, 128, 512)
QUICK_RANK_COUNTS = (8, 32)
RECORDS_PER_RANK = 3_000
REPEATS = 3
PATHS = ("direct", "kafka")
POLL_S = 0.05  # how often the gateway's metrics are read while a size runs
WARM_RECORDS = 8192  # one full gateway batch through agent and gateway before the clock
IDLE_S = 2.0  # how long the idle tiers' CPU is measured before each size
WORKERS = 2  # aggregator processes; with the agent and the gateway, 4 processes
JOB = "bench"
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_KEY = re.compile(rb'"nv\.nvrx\.record\.key","value":\{"stringValue":"([0-9a-f]{16}-\d+)"')


# --- the aggregator worker (a subprocess) ----------------------------------------------------


def _preload() -> None:
    """Import what the aggregator imports lazily on its first export (OTLP encoding, the
    health metrics' SDK and exporter): a process pays it once per job, not per record, and
    the smallest size would otherwise carry it over its few records."""
    import importlib

    for module in (
        "nvrx_otel.aggregator.otlp_encode",
        "nvrx_otel.aggregator.otlp_wire",
        "nvrx_otel.aggregator.otlp_http",
        "nvrx_otel.aggregator.otlp_metrics",
        "opentelemetry.sdk.metrics",
        "opentelemetry.sdk.metrics.export",
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "requests.utils",
    ):
        importlib.import_module(module)


def _worker(endpoint: str, log_root: str, roots: list[str]) -> None:
    """Drain each node's spool (one after the other) to ``endpoint``; print the totals."""
    from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig

    _preload()
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    start = time.process_time()
    written = exported = 0
    for root in roots:
        node = Path(root).name
        aggregator = Aggregator(
            AggregatorConfig(
                log_dir=Path(log_root) / node,
                spool_root=Path(root),
                job_id=JOB,
                node_id=node,
                status_interval=0,
                drain_timeout=3600,
                nice=0,
                otlp_endpoint=endpoint,
            )
        )
        aggregator.open()
        aggregator.request_stop("benchmark")  # no writer is alive: drain all, then stop
        code = aggregator.run()
        assert code == 0, f"aggregator of {node} exited with {code}"
        written += aggregator.health.written
        assert aggregator._otlp is not None
        exported += aggregator._otlp.exported["logs"]
        shutil.rmtree(Path(log_root) / node)  # the node log: not what is measured here
    cpu = time.process_time() - start
    print(json.dumps({"written": written, "exported": exported, "cpu_s": cpu}), flush=True)


# --- collectors --------------------------------------------------------------------------------


def _collector_bin() -> str:
    found = os.environ.get("NVRX_OTEL_COLLECTOR_BIN", "").strip()
    if found:
        return found
    proc = subprocess.run(
        [str(ROOT / "scripts" / "build-collector.sh")], capture_output=True, text=True, check=True
    )
    return proc.stdout.strip().splitlines()[-1]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_collectors(
    binary: str, out: Path, storage: Path, kafka: KafkaTopics | None = None
) -> tuple[_Collector, _Collector, dict[str, int], dict[str, int]]:
    """One gateway writing ``out`` and one agent (disk queue in ``storage``) sending to it,
    directly or, with ``kafka``, through its topics; both on free 127.0.0.1 ports. Returns
    (gateway, agent, the gateway's ports, the agent's ports) by name: grpc, http, health,
    metrics."""
    gw = dict(zip(("grpc", "http", "health", "metrics"), _free_ports(4), strict=True))
    ag = dict(zip(("grpc", "http", "health", "metrics"), _free_ports(4), strict=True))
    kafka_env = kafka.env() if kafka is not None else {}
    gateway = _Collector(
        binary,
        ["gateway.yaml", *(["gateway-kafka.yaml"] if kafka else [])],
        {
            **kafka_env,
            "NVRX_OTEL_GATEWAY_GRPC_ENDPOINT": f"127.0.0.1:{gw['grpc']}",
            "NVRX_OTEL_GATEWAY_HTTP_ENDPOINT": f"127.0.0.1:{gw['http']}",
            "NVRX_OTEL_GATEWAY_HEALTH_ENDPOINT": f"127.0.0.1:{gw['health']}",
            "NVRX_OTEL_GATEWAY_METRICS_PORT": str(gw["metrics"]),
            "NVRX_OTEL_GATEWAY_OUTPUT_DIR": str(out),
        },
        gw["health"],
    )
    try:
        agent = _Collector(
            binary,
            ["agent.yaml", *(["agent-kafka.yaml"] if kafka else [])],
            {
                **kafka_env,
                "NVRX_OTEL_AGENT_GRPC_ENDPOINT": f"127.0.0.1:{ag['grpc']}",
                "NVRX_OTEL_AGENT_HTTP_ENDPOINT": f"127.0.0.1:{ag['http']}",
                "NVRX_OTEL_AGENT_HEALTH_ENDPOINT": f"127.0.0.1:{ag['health']}",
                "NVRX_OTEL_AGENT_METRICS_PORT": str(ag["metrics"]),
                "NVRX_OTEL_AGENT_STORAGE_DIR": str(storage),
                "NVRX_OTEL_GATEWAY_ENDPOINT": f"127.0.0.1:{gw['grpc']}",
            },
            ag["health"],
        )
    except BaseException:
        gateway.stop()
        raise
    return gateway, agent, gw, ag


class _Collector:
    def __init__(self, binary: str, configs: list[str], environ: dict[str, str], health: int):
        self.health = health
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [binary, *(f"--config=file:{CONFIGS / c}" for c in configs)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NVRX_OTEL_COLLECTOR_LOG_LEVEL": "warn", **environ},
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"collector did not start:\n{self.tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"http://127.0.0.1:{health}/", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def tail(self) -> str:
        self.log.seek(0)
        return "\n".join(self.log.read().decode(errors="replace").splitlines()[-20:])


def _metric(port: int, prefix: str) -> float:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def _warm_up(agent_http: int, gateway_metrics: int, records: int = 1) -> int:
    """Send ``records`` log records (no record key: not counted as the job's) through the
    agent and wait until the gateway wrote them; return how many. Through Kafka the logs
    topic then exists and the gateway's consumer has its partitions (it looks for a missing
    topic every few seconds, which would otherwise count as throughput); on either path the
    agent's connection to its next hop is made before the clock starts."""
    line = "warm-up " + "x" * 200
    body = {
        "resourceLogs": [
            {"scopeLogs": [{"logRecords": [{"body": {"stringValue": line}}] * records}]}
        ]
    }
    requests.post(f"http://127.0.0.1:{agent_http}/v1/logs", json=body, timeout=30)
    deadline = time.monotonic() + 60
    while _metric(gateway_metrics, "otelcol_exporter_sent_log_records") < records:
        if time.monotonic() > deadline:
            raise RuntimeError("the warm-up records did not reach the gateway")
        time.sleep(POLL_S)
    return records


def _idle_rates(
    agent: _Collector, gateway: _Collector, kafka: KafkaTopics | None, gateway_metrics: int
) -> dict[str, float]:
    """CPU seconds per second each long-running tier spends with no record to move, while
    the gateway's metrics are polled as during the measurement (so that part of the
    benchmark's own cost is in it too): a per-second cost, not a per-record one."""
    procs: dict[str, Any] = {"agent": agent.cpu_s, "gateway": gateway.cpu_s}
    if kafka is not None:
        procs["broker"] = kafka.broker.cpu_s
    before = {tier: cpu() for tier, cpu in procs.items()}
    start = time.perf_counter()
    while time.perf_counter() - start < IDLE_S:
        _metric(gateway_metrics, "otelcol_exporter_sent_log_records")
        time.sleep(POLL_S)
    seconds = time.perf_counter() - start
    return {tier: (cpu() - before[tier]) / seconds for tier, cpu in procs.items()}


# --- one size ----------------------------------------------------------------------------------


def _make_nodes(template: Path, base: Path, nodes: int) -> list[Path]:
    """``nodes`` spool roots, each a copy of the 8-rank template with writer ids of its own."""
    roots = []
    for n in range(nodes):
        root = base / f"node-{n:04d}"
        directory = job_dir(root, JOB)
        directory.mkdir(parents=True, mode=0o700)
        for path in sorted(template.iterdir()):
            name = parse_name(path.name)
            assert name is not None
            writer = f"{n + 1:08x}{name.writer[8:]}"  # template writers are 1..8: unique
            data = path.read_bytes()
            data = data.replace(f'"w":"{name.writer}"'.encode(), f'"w":"{writer}"'.encode())
            data = data.replace(f'"key":"{name.writer}-'.encode(), f'"key":"{writer}-'.encode())
            new_name = path.name.replace(name.writer, writer)
            (directory / new_name).write_bytes(data)
        roots.append(root)
    return roots


def _one_size(
    binary: str,
    tmp: Path,
    template: Path,
    ranks: int,
    per_rank: int,
    kafka: KafkaTopics | None = None,
) -> dict[str, Any]:
    nodes = ranks // RANKS
    total = ranks * per_rank
    base = tmp / f"ranks-{ranks}"
    roots = _make_nodes(template, base / "spool", nodes)
    out = base / "out"
    gateway = agent = None
    workers: list[subprocess.Popen[str]] = []
    errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed below) the workers' stderr
    try:
        gateway, agent, gw, ag = start_collectors(binary, out, base / "agent-storage", kafka)
        warm = _warm_up(ag["http"], gw["metrics"], WARM_RECORDS)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NVRX_"))}
        environ["PYTHONPATH"] = str(ROOT)
        for w in range(WORKERS):
            share = [str(r) for r in roots[w::WORKERS]]
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.bench_scale",
                        "--worker",
                        f"http://127.0.0.1:{ag['http']}",
                        str(base / "logs"),
                        *share,
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                    env=environ,
                    cwd=ROOT,
                )
            )
        for p in workers:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        idle = _idle_rates(agent, gateway, kafka, gw["metrics"])
        agent_cpu0, gateway_cpu0 = agent.cpu_s(), gateway.cpu_s()
        broker_cpu0 = kafka.broker.cpu_s() if kafka else 0.0
        start = time.perf_counter()
        for p in workers:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        sent = "otelcol_exporter_sent_log_records"
        while _metric(gw["metrics"], sent) < total + warm:
            if any(p.poll() not in (None, 0) for p in workers):
                errors.seek(0)
                raise RuntimeError(f"an aggregator worker failed:\n{errors.read().decode()}")
            time.sleep(POLL_S)
        seconds = time.perf_counter() - start
        agent_cpu, gateway_cpu = agent.cpu_s() - agent_cpu0, gateway.cpu_s() - gateway_cpu0
        broker_cpu = kafka.broker.cpu_s() - broker_cpu0 if kafka else 0.0
        results = []
        for p in workers:
            stdout, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                errors.seek(0)
                raise RuntimeError(f"an aggregator worker failed:\n{errors.read().decode()}")
            results.append(json.loads(stdout.strip().splitlines()[-1]))
        while _metric(ag["metrics"], "otelcol_exporter_queue_size{") > 0:
            time.sleep(0.05)
    finally:
        for p in workers:
            if p.poll() is None:
                p.kill()
                p.wait()
        for c in (agent, gateway):
            if c is not None:
                c.stop()
        errors.close()
    keys: dict[bytes, int] = {}
    for path in out.glob("logs*.jsonl"):
        for key in _KEY.findall(path.read_bytes()):
            keys[key] = keys.get(key, 0) + 1
    writers = {f"{n + 1:08x}{r + 1:08x}".encode() for n in range(nodes) for r in range(RANKS)}
    unexpected = 0
    for key in keys:
        writer, seq = key.split(b"-")
        unexpected += writer not in writers or int(seq) >= per_rank
    loss = total - (len(keys) - unexpected)  # every found key is distinct and expected
    aggregator_cpu = sum(r["cpu_s"] for r in results)
    cpu = aggregator_cpu + agent_cpu + gateway_cpu + broker_cpu
    busy = {"agent": agent_cpu, "gateway": gateway_cpu, "broker": broker_cpu}
    net = {tier: busy[tier] - rate * seconds for tier, rate in idle.items()}
    shutil.rmtree(base)
    return {
        "kafka": kafka is not None,
        "ranks": ranks,
        "nodes": nodes,
        "records": total,
        "seconds": round(seconds, 2),
        "records_per_s": round(total / seconds),
        "loss": loss,
        "unexpected": unexpected,
        "duplicates": sum(keys.values()) - len(keys),
        "exported_by_aggregators": sum(r["exported"] for r in results),
        "ns_per_record": round(cpu / total * 1e9),
        "ns_per_record_aggregators": round(aggregator_cpu / total * 1e9),
        "ns_per_record_agent": round(agent_cpu / total * 1e9),
        "ns_per_record_gateway": round(gateway_cpu / total * 1e9),
        **({"ns_per_record_broker": round(broker_cpu / total * 1e9)} if kafka else {}),
        **{f"idle_cpu_ms_per_s_{tier}": round(rate * 1e3, 1) for tier, rate in idle.items()},
        "ns_per_record_net": round((cpu - sum(idle.values()) * seconds) / total * 1e9),
        **{f"ns_per_record_{tier}_net": round(c / total * 1e9) for tier, c in net.items()},
    }


def _kafka_lib() -> Path:
    found = os.environ.get("NVRX_OTEL_KAFKA_LIB", "").strip()
    if found:
        return Path(found)
    proc = subprocess.run(
        [str(ROOT / "scripts" / "fetch-kafka.sh")], capture_output=True, text=True, check=True
    )
    return Path(proc.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One size's repeats: medians of times and costs, sums of loss and duplicates, and
    every repeat's total and net ns/record (so the spread is visible)."""
    first = runs[0]
    combined: dict[str, Any] = {k: first[k] for k in ("ranks", "nodes", "records")}
    combined["seconds"] = round(_median([r["seconds"] for r in runs]), 2)
    combined["records_per_s"] = round(_median([r["records_per_s"] for r in runs]))
    for key in ("loss", "unexpected", "duplicates"):
        combined[key] = sum(r[key] for r in runs)
    for key in first:
        if key.startswith("ns_per_record"):
            combined[key] = round(_median([r[key] for r in runs]))
        elif key.startswith("idle_cpu"):
            combined[key] = round(_median([r[key] for r in runs]), 1)
    combined["ns_per_record_repeats"] = " ".join(str(r["ns_per_record"]) for r in runs)
    combined["ns_per_record_net_repeats"] = " ".join(str(r["ns_per_record_net"]) for r in runs)
    return combined


def _flatness(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """max/min over the sizes of the (median) cost per record, in total and per tier."""
    out: dict[str, Any] = {}
    for key in sizes[0]:
        if key.startswith("ns_per_record") and not key.endswith("_repeats"):
            values = [s[key] for s in sizes]
            out[f"{key}_max/min"] = round(max(values) / max(min(values), 1), 3)
    for key in ("ns_per_record", "ns_per_record_net"):
        out[f"{key}_largest/smallest"] = round(sizes[-1][key] / max(sizes[0][key], 1), 3)
    return out


def run(
    records_per_rank: int = RECORDS_PER_RANK,
    rank_counts: tuple[int, ...] = RANK_COUNTS,
    *,
    paths: tuple[str, ...] = PATHS,
    repeats: int = REPEATS,
) -> dict[str, Any]:
    """Every size in ``rank_counts`` (multiples of 8), ``records_per_rank`` records each,
    on each of ``paths`` (``direct``: agent → gateway over OTLP; ``kafka``: agent → Kafka →
    gateway), ``repeats`` times (sizes and paths interleaved, so a change of the machine's
    load touches every size alike); one section per path and size (medians) and one per
    path with the flatness (max/min over sizes of ns/record)."""
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise ValueError(f"unknown path(s): {sorted(unknown)}")
    binary = _collector_bin()
    began = time.perf_counter()
    load_before = os.getloadavg()
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nvrx-bench-scale-")))
        broker = None
        if "kafka" in paths:
            broker = KafkaBroker(_kafka_lib(), tmp / "kafka").format()
            stack.callback(broker.stop)
            broker.start().wait_ready()
        template = tmp / "template"
        spool_bytes = prepare(template, records_per_rank)
        for repeat in range(repeats):
            for path in paths:
                for ranks in rank_counts:
                    topics = None
                    if path == "kafka":
                        assert broker is not None
                        topics = KafkaTopics(broker, f"bench-{ranks}-{repeat}")
                    runs.setdefault((path, ranks), []).append(
                        _one_size(binary, tmp, template, ranks, records_per_rank, topics)
                    )
    load_after = os.getloadavg()
    result: dict[str, Any] = {}
    for path in paths:
        sizes = [_combine(runs[(path, ranks)]) for ranks in rank_counts]
        for size in sizes:
            result[f"{path}_ranks_{size['ranks']}"] = size
        result[f"{path}_flatness"] = _flatness(sizes)
    result["summary"] = {
        "paths": ",".join(paths),
        "repeats": repeats,
        "processes": WORKERS + 2 + (1 if "kafka" in paths else 0),
        "records_per_rank": records_per_rank,
        "spool_bytes_per_record": round(spool_bytes / (RANKS * records_per_rank)),
        "total_loss": sum(r["loss"] for rs in runs.values() for r in rs),
        "load_average_1/5/15_before": " ".join(f"{x:.2f}" for x in load_before),
        "load_average_1/5/15_after": " ".join(f"{x:.2f}" for x in load_after),
        "seconds": round(time.perf_counter() - began, 1),
    }
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        import argparse

        parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale")
        parser.add_argument("records_per_rank", nargs="?", type=int)
        parser.add_argument("--quick", action="store_true", help="8 and 32 ranks, 500 records")
        parser.add_argument("--kafka", action="store_true", help="only the Kafka path")
        parser.add_argument("--direct", action="store_true", help="only the direct path")
        parser.add_argument("--repeats", type=int, help=f"runs of each size (default {REPEATS})")
        args = parser.parse_args()
        n = args.records_per_rank or (500 if args.quick else RECORDS_PER_RANK)
        chosen = tuple(p for p in PATHS if getattr(args, p)) or PATHS
        repeats = args.repeats or (1 if args.quick else REPEATS)
        counts = QUICK_RANK_COUNTS if args.quick else RANK_COUNTS
        print(json.dumps(run(n, counts, paths=chosen, repeats=repeats), indent=2))
