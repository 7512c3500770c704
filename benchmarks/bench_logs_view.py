"""``nvrx-otel logs`` over 1M records: wall time and peak RSS.

Four node logs (8 ranks each, 250k records per node at 1M) are written once with the
node log's own formatter (``nodeline.format_clean_records``), in batches of the 8 ranks
as the aggregator writes them, so each file is near (not strictly) time-ordered. Every
rank logs ``step <i> done`` each step (identical across the 32 ranks: collapsed by the
de-duplication) and a message of its own. The command runs as a real process writing
to ``/dev/null`` (plain text); its peak RSS is its own ``VmHWM``. The same run at a tenth
of the records shows the memory does not grow with the input.

    python -m benchmarks.bench_logs_view [records]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nvrx_otel.nodeline import format_clean_records

NODES = 4
RANKS_PER_NODE = 8
STEP_NS = 1_000_000  # 1 ms between steps
TARGET_S = 30.0
"""1M records (about 150 MB of node logs) in under half a minute on one core."""

_HWM = r"""
import os, sys
from nvrx_otel.cli import main
try:
    rc = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        hwm = next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:"))
    with open(os.environ["BENCH_HWM_FILE"], "w") as out:
        out.write(str(hwm))
sys.exit(rc)
"""


def prepare(directory: Path, records: int) -> int:
    """Write the node logs; returns their total size in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    steps = max(1, records // (NODES * RANKS_PER_NODE * 2))
    base = time.time_ns() - 3600 * 1_000_000_000
    total = 0
    for node in range(NODES):
        name = f"node{node:03d}"
        with open(directory / f"nvrx_log_{name}.log", "w", encoding="utf-8") as fh:
            batch: list[dict[str, Any]] = []
            for step in range(steps):
                ts = base + step * STEP_NS
                for lr in range(RANKS_PER_NODE):
                    rank = node * RANKS_PER_NODE + lr
                    ids = {"rank": rank, "lrank": lr, "irank": node, "ilrank": 0}
                    batch.append(
                        {
                            "ts": ts + lr * 1000,
                            "lvl": "INFO",
                            "file": "train.py",
                            "line": 12,
                            "msg": f"step {step} done",
                            **ids,
                        }
                    )
                    batch.append(
                        {
                            "ts": ts + 500_000 + lr,
                            "lvl": "DEBUG",
                            "file": "data.py",
                            "line": 40,
                            "msg": f"rank {rank} loaded batch {step}",
                            **ids,
                        }
                    )
                if len(batch) >= 4096:
                    batch.sort(key=lambda d: d["rank"])  # per rank, as the aggregator reads files
                    fh.write(format_clean_records(batch, name))
                    batch = []
            if batch:
                batch.sort(key=lambda d: d["rank"])
                fh.write(format_clean_records(batch, name))
        total += (directory / f"nvrx_log_{name}.log").stat().st_size
    return total


def measure(*args: str) -> dict[str, float]:
    """Wall time and peak RSS of ``nvrx-otel ARGS`` as a process writing to /dev/null."""
    with tempfile.NamedTemporaryFile() as hwm:
        env = dict(os.environ, BENCH_HWM_FILE=hwm.name)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", _HWM, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        wall = time.perf_counter() - start
        rss_kib = int(Path(hwm.name).read_text() or "0")
    return {"wall_s": wall, "peak_rss_mib": rss_kib / 1024}


def _run(directory: Path, *flags: str) -> dict[str, float]:
    return measure("logs", str(directory), *flags)


def run(records: int = 1_000_000) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nvrx-logs-bench-") as tmp:
        for n in (records // 10, records):
            directory = Path(tmp) / str(n)
            t0 = time.perf_counter()
            size = prepare(directory, n)
            made = time.perf_counter() - t0
            default = _run(directory)
            no_dedup = _run(directory, "--no-dedup")
            filtered = _run(directory, "--rank", "0-3", "--level", "info")
            out[f"{n} records"] = {
                "input_mb": size / 1e6,
                "generate_s": made,
                "wall_s": default["wall_s"],
                "records_per_s": n / default["wall_s"],
                "peak_rss_mib": default["peak_rss_mib"],
                "no_dedup_wall_s": no_dedup["wall_s"],
                "no_dedup_peak_rss_mib": no_dedup["peak_rss_mib"],
                "filtered_wall_s": filtered["wall_s"],
            }
    out["targets"] = {"wall_s": TARGET_S}
    return out


def show(result: dict[str, Any]) -> None:
    """Print a run's result, section by section."""
    for section, values in result.items():
        print(section)
        for key, value in values.items():
            print(f"  {key:24s} {value:,.2f}")


if __name__ == "__main__":
    show(run(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
