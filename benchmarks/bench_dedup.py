"""Storm de-duplication (``--dedup-window``): exported volume and aggregator throughput.

Storm: 512 simulated ranks (spool files as the spool writer makes them, writers gone) each
log one identical ERROR record (same logger, call site and text, times 10 us apart). One
in-process aggregator drains them into the node log and OTLP/JSON lines, with the window
off and on; the result compares records in with records and bytes exported (OTLP/JSON and
node log). Target: the exported volume falls at least 100x.

Throughput: the aggregator draining (pinned to one CPU) a spool with the window off and on,
for ordinary traffic (8 ranks of distinct records: the stage's cost when nothing
collapses) and for a sustained storm (512 ranks x ``steps`` identical records per step).

    python -m benchmarks.bench_dedup [records per rank of the ordinary spool]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_aggregator import drain_on_one_cpu
from nvrx_otel import record as rec
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig
from nvrx_otel.spool.paths import SpoolFileName, job_dir

RANKS = 512
WINDOW_MS = 1000
NODE = "bench-node"
TARGET_REDUCTION = 100
STORM = "NCCL watchdog: collective operation timed out"


def prepare_storm(directory: Path, ranks: int, steps: int, *, distinct: bool = False) -> int:
    """Spool files of ``ranks`` writers, each with ``steps`` records, record ``i`` the same
    on every rank (``distinct``: each rank's text its own); returns the bytes written."""
    directory.mkdir(parents=True, mode=0o700, exist_ok=True)
    base_ts = time.time_ns() - 60 * 1_000_000_000
    total = 0
    for rank in range(ranks):
        writer = f"{rank + 1:016x}"
        pid = 20_000 + rank
        header = {"v": 1, "k": "hdr", "w": writer, "f": 0, "ts": base_ts, "pid": pid}
        header.update({"ppid": 1, "proc": f"rank{rank}", "res": {}})
        lines = [rec.encode(header)]
        for step in range(steps):
            d = {"v": 1, "k": "log", "ts": base_ts + step * 5_000_000_000 + rank * 10_000}
            d.update({"sev": 17, "lvl": "ERROR", "lg": "torch.distributed"})
            text = f"rank {rank} step {step} loss 0.{step % 9973:04d}" if distinct else STORM
            d.update({"msg": f"[step {step}] {text}"})
            d.update({"path": "/workspace/project/train.py", "line": 311, "fn": "train_step"})
            d.update({"pid": pid, "tid": 1, "tn": "MainThread", "key": f"{writer}-{step:x}"})
            d.update({"node": NODE, "job": "bench", "rank": rank, "lrank": rank % 8})
            lines.append(rec.encode(d))
        data = b"".join(lines)
        (directory / SpoolFileName(writer, 0, pid, f"rank{rank}").name).write_bytes(data)
        total += len(data)
    return total


def _drain(tmp: Path, template: Path, name: str, *, window_ms: int, otlp: bool) -> dict[str, Any]:
    root = tmp / f"spool-{name}"
    directory = job_dir(root, "bench")
    directory.mkdir(parents=True, mode=0o700)
    for path in template.iterdir():
        os.link(path, directory / path.name)  # the aggregator deletes what it consumed
    json_dir = tmp / f"otlp-{name}" if otlp else None
    config = AggregatorConfig(
        log_dir=tmp / f"logs-{name}",
        spool_root=root,
        job_id="bench",
        node_id=NODE,
        status_interval=0,
        drain_timeout=3600,
        nice=0,
        dedup_window_ms=window_ms,
        otlp_json=json_dir,
        otlp_from_env=False,
    )
    aggregator = Aggregator(config)
    code, elapsed = drain_on_one_cpu(aggregator)
    h = aggregator.health
    records_in = h.written + h.collapsed
    out: dict[str, Any] = {
        "records_in": records_in,
        "node_log_records": h.written,
        "collapsed": h.collapsed,
        "node_log_bytes": aggregator.log_path.stat().st_size,
        "seconds": round(elapsed, 3),
        "records_in_per_s": round(records_in / elapsed),
        "exit_code": code,
    }
    if json_dir is not None:
        sink = aggregator._sinks["otlp_json"]
        out["otlp_records"] = sink.exported["logs"]
        out["otlp_bytes"] = sum(p.stat().st_size for p in json_dir.glob("logs_*.jsonl"))
    return out


def storm(tmp: Path, ranks: int = RANKS) -> dict[str, Any]:
    """One identical record from each of ``ranks`` ranks: volume with the window off and on."""
    template = tmp / "storm-template"
    prepare_storm(template, ranks, 1)
    off = _drain(tmp, template, "storm-off", window_ms=0, otlp=True)
    on = _drain(tmp, template, "storm-on", window_ms=WINDOW_MS, otlp=True)
    reduction = {
        "otlp_records": round(off["otlp_records"] / max(on["otlp_records"], 1), 1),
        "otlp_bytes": round(off["otlp_bytes"] / max(on["otlp_bytes"], 1), 1),
        "node_log_records": round(off["node_log_records"] / max(on["node_log_records"], 1), 1),
        "node_log_bytes": round(off["node_log_bytes"] / max(on["node_log_bytes"], 1), 1),
    }
    return {
        "ranks": ranks,
        "window_off": off,
        "window_on": on,
        "reduction": reduction,
        "target_reduction": TARGET_REDUCTION,
        "target_met": min(reduction.values()) >= TARGET_REDUCTION,
    }


def _best(tmp: Path, template: Path, name: str, *, window_ms: int, rounds: int) -> dict[str, Any]:
    """The fastest of ``rounds`` drains (the machine is shared: the others met noise)."""
    runs = [
        _drain(tmp, template, f"{name}-{i}", window_ms=window_ms, otlp=False) for i in range(rounds)
    ]
    return max(runs, key=lambda r: r["records_in_per_s"])


def throughput(
    tmp: Path, records_per_rank: int, storm_steps: int, rounds: int = 3
) -> dict[str, Any]:
    """Records read per second with the window off and on (node log only, one CPU; the
    best of ``rounds``)."""
    ordinary = tmp / "ordinary-template"
    prepare_storm(ordinary, 8, records_per_rank, distinct=True)
    sustained = tmp / "sustained-template"
    prepare_storm(sustained, RANKS, storm_steps)
    out: dict[str, Any] = {}
    for label, template in (("ordinary_8_ranks", ordinary), ("storm_512_ranks", sustained)):
        off = _best(tmp, template, f"{label}-off", window_ms=0, rounds=rounds)
        on = _best(tmp, template, f"{label}-on", window_ms=WINDOW_MS, rounds=rounds)
        out[label] = {
            "records_in": off["records_in"],
            "off_records_in_per_s": off["records_in_per_s"],
            "on_records_in_per_s": on["records_in_per_s"],
            "on_over_off": round(on["records_in_per_s"] / max(off["records_in_per_s"], 1), 2),
            "on_node_log_records": on["node_log_records"],
        }
    return out


def run(records_per_rank: int = 25_000, storm_steps: int = 100, rounds: int = 3) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nvrx-bench-dedup-") as tmp:
        result = {"storm": storm(Path(tmp))}
        result["throughput"] = throughput(Path(tmp), records_per_rank, storm_steps, rounds)
    return result


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 25_000
    print(run(n))
