"""Aggregator throughput: records per second from a spool into the node log, on one core.

A spool of 8 ranks is prepared in a temporary directory (files as the spool writer makes
them: header line, then ``record.encode`` lines, rotated at 10 MiB), then one in-process
aggregator drains it into the node log with no OTLP sink, pinned to one CPU. The time
covers everything the service does: reading, decoding, formatting, writing, fsync and
commits, and deleting the consumed spool files.

    python -m benchmarks.bench_aggregator [records per rank]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nvrx_otel import record as rec
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig
from nvrx_otel.spool.paths import SpoolFileName, job_dir

RANKS = 8
TARGET = 200_000
FILE_SIZE = 10 << 20
NODE = "bench-node"


def _header(writer: str, index: int, pid: int) -> bytes:
    return rec.encode(
        {
            "v": 1,
            "k": "hdr",
            "w": writer,
            "f": index,
            "ts": time.time_ns(),
            "pid": pid,
            "ppid": 1,
            "proc": "bench",
            "res": {},
        }
    )


def prepare(directory: Path, records_per_rank: int) -> int:
    """Write the spool of RANKS writers; returns the bytes written."""
    directory.mkdir(parents=True, mode=0o700, exist_ok=True)
    total = 0
    base_ts = time.time_ns() - 60 * 1_000_000_000
    for rank in range(RANKS):
        writer = f"{rank + 1:016x}"
        pid = 10_000 + rank
        proc = f"rank{rank}"
        index = 0
        parts: list[bytes] = []
        size = 0

        for seq in range(records_per_rank):
            line = rec.encode(
                {
                    "v": 1,
                    "k": "log",
                    "ts": base_ts + seq * 30_000 + rank * 1_000,
                    "sev": 9,
                    "lvl": "INFO",
                    "lg": "nvrx",
                    "msg": f"iteration {seq} loss 0.{seq % 9973:04d} lr 3e-4 tokens/s 123456",
                    "path": "/workspace/project/train.py",
                    "line": 120 + seq % 7,
                    "fn": "train_step",
                    "pid": pid,
                    "tid": 140_000_000_000 + rank,
                    "tn": "MainThread",
                    "seq": seq,
                    "key": f"{writer}-{seq}",
                    "node": NODE,
                    "job": "bench",
                    "rank": rank,
                    "lrank": rank,
                    "irank": 0,
                    "ilrank": 0,
                }
            )
            if size + len(line) > FILE_SIZE:
                total += _write_file(directory, SpoolFileName(writer, index, pid, proc), parts)
                index, parts, size = index + 1, [], 0
            parts.append(line)
            size += len(line)
        total += _write_file(directory, SpoolFileName(writer, index, pid, proc), parts)
    return total


def _write_file(directory: Path, name: SpoolFileName, lines: list[bytes]) -> int:
    data = _header(name.writer, name.index, name.pid) + b"".join(lines)
    (directory / name.name).write_bytes(data)
    return len(data)


def _drain(tmp: Path, template: Path, *, chrono: bool) -> dict[str, Any]:
    """One aggregator, pinned to one CPU, draining a fresh copy of the spool."""
    mode = "chrono" if chrono else "plain"
    root = tmp / f"spool-{mode}"
    directory = job_dir(root, "bench")
    directory.mkdir(parents=True, mode=0o700)
    for path in template.iterdir():
        os.link(path, directory / path.name)  # the aggregator deletes what it consumed
    config = AggregatorConfig(
        log_dir=tmp / f"logs-{mode}",
        spool_root=root,
        job_id="bench",
        node_id=NODE,
        chrono=chrono,
        hold_window_ms=0,
        status_interval=0,
        drain_timeout=3600,
        nice=0,
    )
    aggregator = Aggregator(config)
    code, elapsed = drain_on_one_cpu(aggregator)
    written = aggregator.health.written
    return {
        "written": written,
        "seconds": round(elapsed, 3),
        "records_per_s": round(written / elapsed),
        "node_log_mib": round(aggregator.log_path.stat().st_size / (1 << 20), 1),
        "exit_code": code,
    }


def run(records_per_rank: int) -> dict[str, Any]:
    """Time one aggregator draining RANKS x ``records_per_rank`` records, in arrival order
    and with chronological ordering."""
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-agg-") as tmp:
        template = Path(tmp) / "template"
        spool_bytes = prepare(template, records_per_rank)
        plain = _drain(Path(tmp), template, chrono=False)
        chrono = _drain(Path(tmp), template, chrono=True)
    records = RANKS * records_per_rank
    return {
        "spool": {"ranks": RANKS, "records": records, "mib": round(spool_bytes / (1 << 20), 1)},
        "drain": plain,
        "drain_chronological": chrono,
        "target_records_per_s": TARGET,
        "target_met": plain["records_per_s"] >= TARGET and plain["written"] == records,
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    print(run(n))


def drain_on_one_cpu(aggregator: Aggregator) -> tuple[int, float]:
    """Run ``aggregator`` over what is spooled (no writer alive: it drains all, then
    stops) pinned to one CPU; its exit code and the seconds it took."""
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(affinity)})
    try:
        aggregator.open()
        aggregator.request_stop("benchmark")
        start = time.perf_counter()
        code = aggregator.run()
        return code, time.perf_counter() - start
    finally:
        os.sched_setaffinity(0, affinity)
