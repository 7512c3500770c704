"""Catch-up after an outage: records spooled while no aggregator ran, then one started.

200k records of 8 ranks are spooled (files as the spool writer makes them) while the
aggregator is down. Then the aggregator is started as a real process, as a job script
would start it (``python -m nvrx_otel.logging.aggregator``), and the clock runs from just before
its process starts (interpreter start-up and imports included) to:

- ``node_log``: the last record's line in the node log (OTLP off), with and without
  ``--en-chronological-ordering``;
- ``otlp``: the last record acknowledged by an OTLP/HTTP receiver (another process that
  acknowledges each request on receipt, as a collector's receiver does, then decodes it
  and counts its log records; HTTP/1.1, keeping the connection open between requests as
  a collector does), node log and OTLP both on.

Each case reports ``records_per_s`` (records over the wall time from just before the
process starts), ``records_per_cpu_s`` (over the aggregator's CPU seconds, see below),
``peak_rss_mib``, its goal (``goal_records_per_s``: 200k for the node log, 100k for OTLP)
and whether the median run met it; the machine's load average before and after the runs
is reported beside them.

The aggregator runs at nice 0; its peak RSS (``VmHWM``) by then is reported. It is stopped
by a wait file once everything arrived; its summary must report nothing dropped. Its CPU
time for the whole run (``cpu_s``: user + system, the drain and exit included) is reported
too: on a shared machine the wall clock also counts the time other processes hold the
cores, the CPU time does not.

The package's bytecode is compiled before the clock starts, as an installed package's is
(pip compiles it at install): with ``PYTHONDONTWRITEBYTECODE`` set and an editable install,
every start would otherwise compile the aggregator's modules from source again.

    python -m benchmarks.bench_catchup [records] [repeats]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_aggregator import RANKS, prepare
from nvrx_otel.spool.paths import job_dir

TARGET_NODE_LOG = 200_000
TARGET_OTLP = 100_000
_POLL_S = 0.005

_RECEIVER = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
total = 0
counting = threading.Lock()  # requests of several connections are decoded side by side
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept open between requests, as a collector's
    def log_message(self, *a): pass
    def do_POST(self):
        global total
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # acknowledged on receipt, as a collector's receiver does once the request is in its
        # pipeline; then decoded and counted (the clock stops at the last record counted)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0"); self.end_headers(); self.wfile.flush()
        if self.path.endswith("/v1/logs"):
            req = ExportLogsServiceRequest.FromString(body)
            n = sum(len(s.log_records) for r in req.resource_logs for s in r.scope_logs)
            with counting:  # one count, one whole line at a time
                total += n
                print(total, flush=True)
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
print(s.server_address[1], flush=True)
s.serve_forever()
"""


class _LineCounter:
    """Counts the node log's lines, reading each byte once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def poll(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return 0
        self.offset += len(data)
        self.lines += data.count(b"\n")
        return self.lines


def _start_aggregator(tmp: Path, root: Path, extra: list[str]) -> subprocess.Popen[bytes]:
    env = dict(os.environ, NVRX_NODE_LOCAL_TMPDIR=str(root), NVRX_OTEL_STATUS_INTERVAL_S="0")
    for name in list(env):
        if name.startswith("OTEL_EXPORTER_OTLP"):
            del env[name]
    cmd = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp / "logs")]
    cmd += ["--wait-file", str(tmp / "done"), "--job-id", "bench", "--nice", "0"]
    cmd += ["--check-interval", "0.1", "--drain-timeout", "60", *extra]
    return subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)


def _peak_rss_kib(pid: int) -> int:
    """The process's peak RSS so far (``VmHWM``: per address space, so it starts anew at
    ``exec`` — unlike ``ru_maxrss``, which keeps the forking parent's)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def _finish(proc: subprocess.Popen[bytes], tmp: Path) -> tuple[int, int, str, float]:
    """Touch the wait file, reap the aggregator: (exit code, peak RSS KiB, stderr, CPU
    seconds of the whole run)."""
    rss = _peak_rss_kib(proc.pid)
    (tmp / "done").touch()
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    cpu = -1.0
    try:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
    except ChildProcessError:  # reaped already
        pass
    code = proc.wait()
    if rss < 0:
        raise RuntimeError(f"aggregator exited early ({code}):\n{err}")
    return code, rss, err, cpu


def compile_package() -> None:
    """Compile the package's bytecode (once), as installing it would."""
    import compileall

    import nvrx_otel

    compileall.compile_dir(Path(nvrx_otel.__file__).parent, quiet=1)


def _node_log(records_per_rank: int, *, chrono: bool) -> dict[str, Any]:
    total = RANKS * records_per_rank
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-catchup-") as name:
        tmp = Path(name)
        root = tmp / "spool"
        prepare(job_dir(root, "bench"), records_per_rank)
        log = _LineCounter(tmp / "logs" / f"nvrx_log_{_node()}.log")
        start = time.perf_counter()
        proc = _start_aggregator(tmp, root, ["--en-chronological-ordering"] if chrono else [])
        try:
            while log.poll() < total:
                if proc.poll() is not None:
                    break
                time.sleep(_POLL_S)
            elapsed = time.perf_counter() - start
        finally:
            code, rss, err, cpu = _finish(proc, tmp)
    return {
        "records": total,
        "seconds": round(elapsed, 3),
        "records_per_s": round(total / elapsed),
        "cpu_s": round(cpu, 3),
        "records_per_cpu_s": round(total / cpu) if cpu > 0 else None,
        "peak_rss_mib": round(rss / 1024, 1),
        "exit_code": code,
        "summary": [ln for ln in err.splitlines() if "stopped (" in ln][-1:],
    }


def _otlp(records_per_rank: int) -> dict[str, Any]:
    total = RANKS * records_per_rank
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-catchup-") as name:
        tmp = Path(name)
        root = tmp / "spool"
        prepare(job_dir(root, "bench"), records_per_rank)
        receiver = subprocess.Popen(
            [sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True
        )
        try:
            assert receiver.stdout is not None
            port = int(receiver.stdout.readline())
            start = time.perf_counter()
            proc = _start_aggregator(tmp, root, ["--otlp-endpoint", f"http://127.0.0.1:{port}"])
            acked = 0
            try:
                while acked < total:
                    line = receiver.stdout.readline()
                    if not line:
                        raise RuntimeError("receiver ended")
                    acked = int(line)
                elapsed = time.perf_counter() - start
            finally:
                code, rss, err, cpu = _finish(proc, tmp)
        finally:
            receiver.kill()
            receiver.wait()
    return {
        "records": total,
        "acknowledged": acked,
        "seconds": round(elapsed, 3),
        "records_per_s": round(total / elapsed),
        "cpu_s": round(cpu, 3),
        "records_per_cpu_s": round(total / cpu) if cpu > 0 else None,
        "peak_rss_mib": round(rss / 1024, 1),
        "exit_code": code,
        "summary": [ln for ln in err.splitlines() if "OTLP:" in ln or "stopped (" in ln],
    }


def _node() -> str:
    from nvrx_otel.identity import get_identity

    return get_identity().node_id


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput, with every run's throughput beside it."""
    ordered = sorted(runs, key=lambda r: r["records_per_s"])
    median = dict(ordered[len(ordered) // 2])
    median["runs_records_per_s"] = [r["records_per_s"] for r in runs]
    median["runs_records_per_cpu_s"] = [r["records_per_cpu_s"] for r in runs]
    return median


def _goal(run: dict[str, Any], goal: int) -> dict[str, Any]:
    """The median run with its goal beside it (wall records/s from the process's start)."""
    run["goal_records_per_s"] = goal
    run["goal_met"] = run["records_per_s"] >= goal and run.get("acknowledged", goal) == run.get(
        "records", goal
    )
    return run


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def run(records: int = 200_000, repeats: int = 1) -> dict[str, Any]:
    """Each case ``repeats`` times, interleaved (A B C, A B C, ...); the median run of each."""
    per_rank = max(1, records // RANKS)
    compile_package()
    load_before = _load()
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "chrono": [], "otlp": []}
    for _ in range(max(1, repeats)):
        runs["plain"].append(_node_log(per_rank, chrono=False))
        runs["chrono"].append(_node_log(per_rank, chrono=True))
        runs["otlp"].append(_otlp(per_rank))
    plain = _goal(_median_run(runs["plain"]), TARGET_NODE_LOG)
    chrono = _goal(_median_run(runs["chrono"]), TARGET_NODE_LOG)
    otlp = _goal(_median_run(runs["otlp"]), TARGET_OTLP)
    return {
        "node_log": plain,
        "node_log_chronological": chrono,
        "otlp": otlp,
        "targets": {
            "node_log_records_per_s": TARGET_NODE_LOG,
            "otlp_records_per_s": TARGET_OTLP,
        },
        "load_average": {"before": load_before, "after": _load()},
        "target_met": plain["goal_met"] and chrono["goal_met"] and otlp["goal_met"],
    }


if __name__ == "__main__":
    print(
        run(
            int(sys.argv[1]) if len(sys.argv) > 1 else 200_000,
            int(sys.argv[2]) if len(sys.argv) > 2 else 1,
        )
    )
