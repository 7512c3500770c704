"""What output capture costs a rank per line it writes to stderr, and how fast its watcher
records: one rank process writes ``lines`` lines with ``os.write`` to a file, with capture
off (the peer: exactly what the program does without it) and on, alternated over
``rounds``; the ratio of their medians is the cost. The watcher's rate is lines a second
from the first write until every line is in the spool (polled every 0.1 s: a lower bound).

    python -m benchmarks.bench_capture [lines]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

RANK = """\
import os, sys, time
from nvrx_otel.logging import setup_logger
setup_logger()
line = b"x" * 100 + b"\\n"
n = int(sys.argv[1])
w0 = time.time_ns()
t0 = time.perf_counter_ns()
for _ in range(n):
    os.write(2, line)
t1 = time.perf_counter_ns()
open(sys.argv[2], "w").write(f"{t0} {t1} {w0}")
"""
_ROOT = Path(__file__).resolve().parents[1]


def _once(tmp: Path, lines: int, capture: str, i: int) -> tuple[float, float | None]:
    spool = tmp / f"spool-{capture}-{i}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVRX_", "RANK"))}
    env.update(NVRX_NODE_LOCAL_TMPDIR=str(spool), RANK="0", NVRX_OTEL_CAPTURE_OUTPUT=capture,
               NVRX_OTEL_CAPTURE_STACKS="on", PYTHONPATH=str(_ROOT / "src"))  # fmt: skip
    result = tmp / f"t-{capture}-{i}"
    with (tmp / "err").open("wb") as err:
        subprocess.run([sys.executable, "-c", RANK, str(lines), str(result)], env=env,
                       stderr=err, stdout=subprocess.DEVNULL, check=True, timeout=600)  # fmt: skip
    t0, t1, wall0 = (int(x) for x in result.read_text().split())
    per_line = (t1 - t0) / lines
    if capture == "off":
        return per_line, None
    recorded = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        recorded, done = 0, False
        for path in spool.rglob("*-watch.*.jsonl"):
            for raw in path.read_bytes().splitlines():
                rec = orjson.loads(raw)
                if rec.get("lg") == "nvrx_otel.capture":
                    recorded += 1
                elif "nv.nvrx.process.outcome" in rec.get("attrs", {}):
                    done = True
        if done and recorded >= lines:  # (the end may come before the last lines)
            break
        time.sleep(0.1)
    assert recorded == lines, f"recorded {recorded} of {lines} lines"
    rate = lines / max(1e-9, (time.time_ns() - wall0) / 1e9)  # (polled: a lower bound)
    return per_line, rate


def run(lines: int = 200_000, rounds: int = 5) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        off: list[float] = []
        on: list[float] = []
        rates: list[float] = []
        for i in range(rounds):
            off.append(_once(tmp, lines, "off", i)[0])
            ns, rate = _once(tmp, lines, "on", i)
            on.append(ns)
            rates.append(rate or 0.0)
    return {
        "ns_per_line": {"capture_off": statistics.median(off), "capture_on": statistics.median(on)},
        "watcher_lines_per_s": statistics.median(rates),
        "ratios": {"capture_on/capture_off": statistics.median(on) / statistics.median(off)},
        "targets": {},
    }


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000), indent=2))
