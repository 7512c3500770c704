"""Descriptors stay bounded whatever the number of writers: an aggregator allowed 256
descriptors drains the spool files of 600 writers whole, none lost to ``EMFILE``."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.aggregator.spoolkit import (
    cli,
    finish,
    ledger,
    log_path,
    spool_dir,
    started,
)

FORKED_WRITERS = r"""
import os, sys, time
from pathlib import Path
from nvrx_otel.spool.writer import SpoolWriter
directory, tag, writers, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
go = Path(sys.argv[5]) if len(sys.argv) > 5 else None  # live writers: wait for it mid-way
r, w_pipe = os.pipe()
pids = []
for n in range(writers):
    pid = os.fork()
    if pid == 0:
        w = SpoolWriter(directory)
        for i in range(count):
            w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
                    "msg": f"{tag}{n} {i}", "file": "w.py", "line": 1, "pid": 0})
            if i == 0 and go is not None:
                os.write(w_pipe, b"x")
                while not go.exists():
                    time.sleep(0.05)
        w.close()
        os._exit(0)
    pids.append(pid)
    if go is None and len(pids) >= 50:
        for p in pids:
            assert os.waitpid(p, 0)[1] == 0
        pids = []
if go is not None:
    seen = 0
    while seen < writers:
        seen += len(os.read(r, writers))
    print("ready", flush=True)
for p in pids:
    assert os.waitpid(p, 0)[1] == 0
"""

LIMITED = r"""
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
sys.argv = ["aggregator", *sys.argv[1:]]
runpy.run_module("nvrx_otel.logging.aggregator", run_name="__main__", alter_sys=True)
"""


def test_600_writers_with_256_descriptors_all_reach_the_node_log(tmp_path: Path) -> None:
    """600 short-lived writers spool while no aggregator runs, then an aggregator with
    RLIMIT_NOFILE 256 (OTLP off) starts and 200 more writers start, log and stay alive
    (more than it may hold open); when they end and the wait file appears, every record
    of the 800 writers is in the node log exactly once and the spool is empty."""
    job, go = spool_dir(tmp_path), tmp_path / "go"
    subprocess.run(
        [sys.executable, "-c", FORKED_WRITERS, str(job), "gone", "600", "5"],
        check=True,
        timeout=300,
    )
    assert len(list(job.glob("*.jsonl"))) == 600
    agg = cli(tmp_path, "--drain-timeout", "120", command=[sys.executable, "-c", LIMITED])
    live = subprocess.Popen(
        [sys.executable, "-c", FORKED_WRITERS, str(job), "live", "200", "5", str(go)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        started(tmp_path, agg)
        assert live.stdout is not None and live.stdout.readline() == "ready\n"
        go.touch()
        (tmp_path / "done").touch()
        code, err = finish(agg, timeout=240)
    finally:
        go.touch()
        assert live.wait(timeout=120) == 0
        if live.stdout is not None:
            live.stdout.close()
    assert code == 0, err
    assert "Too many open files" not in err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert (dropped, corrupt) == (0, 0), err
    counts = Counter(kept)
    assert max(counts.values()) == 1
    expected = {f"gone{n} {i}" for n in range(600) for i in range(5)}
    expected |= {f"live{n} {i}" for n in range(200) for i in range(5)}
    assert set(counts) == expected, f"{len(counts)} of {len(expected)} records\n{err}"
    assert not list(job.glob("*.jsonl"))
