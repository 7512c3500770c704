"""Latency: how long a log call takes to reach the node log, and the gateway's file output.

8 rank processes log through the NVRx API (``setup_logger``, the spool) at a steady
2k records/s each for a few seconds, while the node's aggregator runs as a real process
(``python -m nvrx_otel aggregate``, default settings). Each message carries the time of
its call (``time.time_ns()``); this process follows the output and, for every record,
takes the time it saw it minus the time of the call:

- ``node_log``: the record's line in the node log (goal p99 <= 200 ms);
- ``collector``: the same records exported OTLP/HTTP by the aggregator to a collector
  agent (``agent.yaml``), forwarded to a gateway (``gateway.yaml``) and written by its file
  exporter (goal p99 <= 2 s). Needs the collector binary (``NVRX_OTEL_COLLECTOR_BIN`` or
  ``scripts/build-collector.sh``); skipped without one when ``collector="auto"``.

Output is followed by polling every ``POLL_S`` (which adds up to that much); p50, p99 and
max are over every record logged after the first ``WARMUP_S`` of each rank, with the
count seen (every record must arrive, the warm-up's too). The warm-up is left out because
the aggregator, idle until the ranks start, looks at the spool once a check interval
(1 s): the records of that first look wait for its phase, up to a second, whatever the
steady state does. On a shared
2-core machine the ranks, the aggregator, the collectors and this process compete for
the cores: the numbers include that.

With ``--busy-disk`` a background ``dd`` keeps writing 256 MiB files with ``conv=fsync``
to the file system of the node log and the spool for the whole run (another job's
checkpoint, say): every fsync there then waits for a busy journal.

    python -m benchmarks.bench_latency [seconds] [--no-collector] [--busy-disk]
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_catchup import compile_package

RANKS = 8
RATE = 2_000  # records per second per rank
POLL_S = 0.002
WARMUP_S = 1.0
GOAL_NODE_LOG_P99_MS = 200.0
GOAL_COLLECTOR_P99_MS = 2_000.0
JOB = "bench"
_MARK = re.compile(rb"lat (\d+) (\d+) (\d+)")

_RANK = r"""
import os, sys, time
from nvrx_otel.logging import setup_logger
rank, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
log = setup_logger()
print("ready", flush=True)
sys.stdin.readline()  # "go"
start = time.monotonic()
n = int(rate * seconds)
for i in range(n):
    due = start + i / rate
    pause = due - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    log.info("lat %d %d %d", rank, i, time.time_ns())
"""


class _Follower:
    """Reads what is appended to files (``pattern`` under ``directory``); for each marked
    record (``lat <rank> <i> <call ns>``) keeps the first time it was seen."""

    def __init__(self, directory: Path, pattern: str) -> None:
        self.directory = directory
        self.pattern = pattern
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.seen: dict[tuple[int, int], int] = {}  # (rank, i) -> latency ns

    def steady(self) -> list[int]:
        """Latencies of the records logged after each rank's warm-up."""
        first = int(RATE * WARMUP_S)
        return [ns for (_, i), ns in self.seen.items() if i >= first]

    def poll(self) -> None:
        now = time.time_ns()
        for path in sorted(self.directory.glob(self.pattern)):
            offset = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except FileNotFoundError:
                continue
            if not data:
                continue
            self.offsets[path] = offset + len(data)
            data = self.partial.pop(path, b"") + data
            cut = data.rfind(b"\n") + 1
            if cut < len(data):
                self.partial[path] = data[cut:]
            seen = self.seen
            for rank, i, called in _MARK.findall(data[:cut]):
                key = (int(rank), int(i))
                if key not in seen:
                    seen[key] = now - int(called)


def _percentiles(follower: _Follower, expected: int, goal_ms: float) -> dict[str, Any]:
    seen = len(follower.seen)
    latencies_ns = follower.steady()
    if not latencies_ns:
        return {"records": expected, "seen": seen}
    ordered = sorted(latencies_ns)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6, 1)

    return {
        "records": expected,
        "seen": seen,
        "after_warmup": len(ordered),
        "warmup_s": WARMUP_S,
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] / 1e6, 1),
        "goal_p99_ms": goal_ms,
        "goal_met": seen == expected and at(0.99) <= goal_ms,
    }


def _collector_bin() -> str | None:
    found = os.environ.get("NVRX_OTEL_COLLECTOR_BIN", "").strip()
    if found:
        return found
    script = Path(__file__).resolve().parents[1] / "scripts" / "build-collector.sh"
    proc = subprocess.run([str(script)], capture_output=True, text=True)
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else None


def _ranks(tmp: Path, root: Path, seconds: float) -> list[subprocess.Popen[str]]:
    env = dict(os.environ, NVRX_NODE_LOCAL_TMPDIR=str(root), SLURM_JOB_ID=JOB)
    procs = []
    for rank in range(RANKS):
        rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(RANKS))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK, str(rank), str(RATE), str(seconds)],
                env=rank_env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a rank did not start")
    return procs


class _BusyDisk:
    """``dd`` writing ``directory/busy.bin`` over and over with ``conv=fsync`` (its own
    process group, stopped with it)."""

    def __init__(self, directory: Path) -> None:
        script = (
            f"while :; do dd if=/dev/zero of={directory / 'busy.bin'} bs=1M count=256 "
            "conv=fsync status=none; done"
        )
        self.proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def _measure(seconds: float, *, collector: str | None, busy_disk: bool = False) -> dict[str, Any]:
    from benchmarks.bench_scale import start_collectors
    from nvrx_otel.identity import get_identity

    expected = RANKS * int(RATE * seconds)
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-latency-") as name:
        tmp = Path(name)
        root = tmp / "spool"
        out = tmp / "out"
        gateway = agent = None
        busy = _BusyDisk(tmp) if busy_disk else None
        extra: list[str] = []
        try:
            if collector is not None:
                gateway, agent, _, ag = start_collectors(collector, out, tmp / "agent-storage")
                extra = ["--otlp-endpoint", f"http://127.0.0.1:{ag['http']}"]
            env = dict(os.environ, NVRX_NODE_LOCAL_TMPDIR=str(root))
            env["NVRX_OTEL_STATUS_INTERVAL_S"] = "0"
            for key in list(env):
                if key.startswith("OTEL_EXPORTER_OTLP"):
                    del env[key]
            cmd = [sys.executable, "-m", "nvrx_otel", "aggregate", "--log-dir", str(tmp / "logs")]
            cmd += ["--wait-file", str(tmp / "done"), "--job-id", JOB, "--nice", "0", *extra]
            aggregator = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
            ranks = _ranks(tmp, root, seconds)
            node_log = _Follower(tmp / "logs", f"nvrx_log_{get_identity().node_id}.log*")
            gateway_out = _Follower(out, "logs*.jsonl")
            for proc in ranks:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            # the ranks log for ``seconds``; then everything must arrive within the grace
            deadline = time.monotonic() + seconds + 30
            while time.monotonic() < deadline:
                node_log.poll()
                if collector is not None:
                    gateway_out.poll()
                done = len(node_log.seen) >= expected and (
                    collector is None or len(gateway_out.seen) >= expected
                )
                if done:
                    break
                time.sleep(POLL_S)
            for proc in ranks:
                proc.wait(30)
            (tmp / "done").touch()
            assert aggregator.stderr is not None
            err = aggregator.stderr.read().decode(errors="replace")
            aggregator.wait(60)
        finally:
            if busy is not None:
                busy.stop()
            for c in (agent, gateway):
                if c is not None:
                    c.stop()
    result: dict[str, Any] = {
        "ranks": RANKS,
        "records_per_s_per_rank": RATE,
        "seconds": seconds,
        "busy_disk": busy_disk,
        "node_log": _percentiles(node_log, expected, GOAL_NODE_LOG_P99_MS),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "summary": [ln for ln in err.splitlines() if "stopped (" in ln][-1:],
    }
    if collector is not None:
        result["collector"] = _percentiles(gateway_out, expected, GOAL_COLLECTOR_P99_MS)
    return result


def run(
    seconds: float = 5.0, collector: bool | str = "auto", *, busy_disk: bool = False
) -> dict[str, Any]:
    """Measure the node-log path and (with a collector binary) the collector path."""
    compile_package()
    binary = _collector_bin() if collector else None
    if collector is True and binary is None:
        raise RuntimeError("no collector binary (NVRX_OTEL_COLLECTOR_BIN, build-collector.sh)")
    return _measure(seconds, collector=binary, busy_disk=busy_disk)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(
        json.dumps(
            run(
                float(args[0]) if args else 5.0,
                collector="--no-collector" not in sys.argv,
                busy_disk="--busy-disk" in sys.argv,
            ),
            indent=2,
        )
    )
