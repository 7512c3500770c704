"""``nvrx-otel report`` over 1M records: wall time and peak RSS.

Four nodes of 8 ranks write OTLP/JSON as the aggregator's ``--otlp-json`` does
(``logs_<node>.jsonl`` and ``traces_<node>.jsonl``, one request per rank and batch of
steps). Each rank and step gives three log records and two spans (a checkpoint
``write`` inside ``completion_sync``), so 1M records are 600k log records and 400k spans;
rank 5 is slower in ``write`` (a straggler) and rank 9 goes silent for the last fifth of
the run. The command runs as a real process writing to ``/dev/null``; its peak RSS is its
own ``VmHWM``. The same run at a tenth of the records shows how memory grows with the
input (the phase durations are kept, 8 bytes per span); ``--perfetto`` is measured too.

    python -m benchmarks.bench_report [records]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.bench_logs_view import measure, show
from nvrx_otel import semconv as sc

NODES = 4
RANKS_PER_NODE = 8
STEP_NS = 100_000_000  # 100 ms between steps
STEPS_PER_REQUEST = 64
TARGET_S = 60.0
"""1M records in under a minute on one core."""


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _resource(node: str, rank: int) -> dict[str, Any]:
    return {
        "attributes": [
            _kv(sc.NODE_ID, node),
            _kv(sc.WORKLOAD_RANK, rank),
            _kv(sc.RESTART_CYCLE, 0),
            _kv(sc.JOB_ID, "bench"),
        ]
    }


def _log(ts: int, level: str, sev: int, body: str, trace: str, span: str) -> dict[str, Any]:
    return {
        "timeUnixNano": str(ts),
        "observedTimeUnixNano": str(ts + 500_000_000),
        "severityNumber": sev,
        "severityText": level,
        "body": {"stringValue": body},
        "attributes": [_kv("code.file.path", "/w/train.py"), _kv("code.line.number", 12)],
        "traceId": trace,
        "spanId": span,
    }


def _span(
    name: str, start: int, end: int, trace: str, span: str, parent: str, i: int
) -> dict[str, Any]:
    return {
        "traceId": trace,
        "spanId": span,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [_kv(sc.CKPT_CALL_IDX, i)],
        "status": {},
    }


def prepare(directory: Path, records: int) -> int:
    """Write the files; returns their total size in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    steps = max(1, records // (NODES * RANKS_PER_NODE * 5))
    base = time.time_ns() - 3600 * 1_000_000_000
    total = 0
    for node in range(NODES):
        name = f"node{node:03d}"
        logs_path, traces_path = (
            directory / f"logs_{name}.jsonl",
            directory / f"traces_{name}.jsonl",
        )
        with open(logs_path, "wb") as logs, open(traces_path, "wb") as traces:
            for first in range(0, steps, STEPS_PER_REQUEST):
                for lr in range(RANKS_PER_NODE):
                    rank = node * RANKS_PER_NODE + lr
                    last = steps * 4 // 5 if rank == 9 else steps
                    res = _resource(name, rank)
                    log_records, spans = [], []
                    for step in range(first, min(first + STEPS_PER_REQUEST, last)):
                        ts = base + step * STEP_NS + lr * 1000
                        trace = f"{rank:08x}{step:024x}"
                        outer, inner = f"{rank:04x}{step:011x}1", f"{rank:04x}{step:011x}2"
                        write_ns = 40_000_000 if rank == 5 else 10_000_000
                        log_records += [
                            _log(ts, "INFO", 9, f"step {step} done", trace, outer),
                            _log(
                                ts + 100,
                                "DEBUG",
                                5,
                                f"rank {rank} loaded batch {step}",
                                trace,
                                outer,
                            ),
                            _log(ts + 200, "INFO", 9, f"loss {step % 97 / 7:.4f}", trace, inner),
                        ]
                        spans += [
                            _span(
                                sc.SPAN_CKPT_SAVE_WRITE,
                                ts + 1000,
                                ts + 1000 + write_ns,
                                trace,
                                inner,
                                outer,
                                step,
                            ),
                            _span(
                                sc.SPAN_CKPT_SAVE_COMPLETION_SYNC,
                                ts,
                                ts + write_ns + 2000,
                                trace,
                                outer,
                                "",
                                step,
                            ),
                        ]
                    if not log_records:
                        continue
                    logs.write(
                        orjson.dumps(
                            {
                                "resourceLogs": [
                                    {
                                        "resource": res,
                                        "scopeLogs": [
                                            {"scope": {"name": "nvrx"}, "logRecords": log_records}
                                        ],
                                    }
                                ]
                            }
                        )
                        + b"\n"
                    )
                    traces.write(
                        orjson.dumps(
                            {
                                "resourceSpans": [
                                    {
                                        "resource": res,
                                        "scopeSpans": [
                                            {
                                                "scope": {"name": sc.SPAN_GROUP_CKPT_PHASES},
                                                "spans": spans,
                                            }
                                        ],
                                    }
                                ]
                            }
                        )
                        + b"\n"
                    )
        total += logs_path.stat().st_size + traces_path.stat().st_size
    return total


def run(records: int = 1_000_000) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nvrx-report-bench-") as tmp:
        for n in (records // 10, records):
            directory = Path(tmp) / str(n)
            t0 = time.perf_counter()
            size = prepare(directory, n)
            made = time.perf_counter() - t0
            text = measure("report", str(directory))
            perfetto = measure(
                "report", str(directory), "--json", "--perfetto", str(Path(tmp) / "p.json")
            )
            out[f"{n} records"] = {
                "input_mb": size / 1e6,
                "generate_s": made,
                "wall_s": text["wall_s"],
                "records_per_s": n / text["wall_s"],
                "peak_rss_mib": text["peak_rss_mib"],
                "perfetto_wall_s": perfetto["wall_s"],
                "perfetto_peak_rss_mib": perfetto["peak_rss_mib"],
                "perfetto_mb": (Path(tmp) / "p.json").stat().st_size / 1e6,
            }
    out["targets"] = {"wall_s": TARGET_S}
    return out


if __name__ == "__main__":
    show(run(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
