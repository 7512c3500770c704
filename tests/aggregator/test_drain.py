"""The drain at the end of a job reads every byte its writers spooled: files scanned but not
yet read, files a writer made just before it ended and bytes past the cycle's read budget
all keep the aggregator draining until they are in the node log."""

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
    wait_for,
    writer_env,
)

SHORT_LIVED = r"""
import os, sys, time
from nvrx_otel.logging import setup_logger
spool, wait, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
log = setup_logger(node_local_tmp_dir=spool)
log.info("%s 0", tag)  # the spool file exists from here on
while not os.path.exists(wait):
    time.sleep(0.005)
for i in range(1, count):
    log.info("%s %d", tag, i)
"""


def test_drain_waits_for_files_scanned_but_unread(tmp_path: Path) -> None:
    """30 short-lived writers of 600 records, each still logging when the wait file appears:
    the aggregator drains until all of them have ended and every record is in the node
    log, exactly once."""
    writers, count = 30, 600
    wait = tmp_path / "done"
    agg = cli(tmp_path, "--drain-timeout", "120")
    procs: list[subprocess.Popen[bytes]] = []
    argv = [sys.executable, "-c", SHORT_LIVED, str(tmp_path / "spool"), str(wait)]
    try:
        started(tmp_path, agg)
        env = writer_env(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="64", NVRX_LOG_MAX_LOG_FILES="200")
        procs = [
            subprocess.Popen(
                [*argv, f"w{n}", str(count)],
                env=env,
            )
            for n in range(writers)
        ]
        job = spool_dir(tmp_path)
        wait_for(
            lambda: len({p.name.split(".")[2] for p in job.glob("*.jsonl")}) == writers,
            timeout=120,
            what="every writer's first spool file",
        )
        wait.touch()
        code, err = finish(agg, timeout=180)
    finally:
        for p in procs:
            if p.wait(timeout=120) != 0:
                raise AssertionError(f"writer exited with {p.returncode}")
    assert code == 0, err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert (dropped, corrupt) == (0, 0), err
    counts = Counter(kept)
    assert max(counts.values()) == 1
    assert set(counts) == {f"w{n} {i}" for n in range(writers) for i in range(count)}, (
        f"{len(counts)} of {writers * count} records in the node log\n{err}"
    )


BIG_THEN_SMALL = r"""
import os, sys, time
from nvrx_otel.logging import setup_logger
spool, wait = sys.argv[1], sys.argv[2]
log = setup_logger(node_local_tmp_dir=spool)
log.info("first")
while not os.path.exists(wait):
    time.sleep(0.005)
log.info("big " + "x" * (11 << 20))
for i in range(10):
    log.info("small %d", i)
"""


def test_drain_reads_past_a_record_larger_than_the_cycle_budget(tmp_path: Path) -> None:
    """An 11 MB record (past the file size, so the writer rotates around it) followed by
    10 small ones, logged as the wait file appears: the 10 small records are in the node
    log and the big one is either kept or reported corrupt (it is past the reader's line
    limit when the writer does not cap it)."""
    wait = tmp_path / "done"
    agg = cli(tmp_path, "--drain-timeout", "120")
    started(tmp_path, agg)
    proc = subprocess.Popen(
        [sys.executable, "-c", BIG_THEN_SMALL, str(tmp_path / "spool"), str(wait)],
        env=writer_env(tmp_path),
    )
    try:
        wait_for(lambda: list(spool_dir(tmp_path).glob("*.jsonl")), timeout=60, what="spool")
        wait.touch()
        code, err = finish(agg, timeout=180)
    finally:
        assert proc.wait(timeout=120) == 0
    assert code == 0, err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    small = [m for m in kept if m.startswith(("first", "small"))]
    assert small == ["first"] + [f"small {i}" for i in range(10)], err
    big = [m for m in kept if m.startswith("big ")]
    assert dropped == 0
    assert len(big) + corrupt == 1, err


BUDGET_WRITER = r"""
import os, sys, time
from pathlib import Path
from nvrx_otel.spool.writer import SpoolWriter
directory, go = Path(sys.argv[1]), Path(sys.argv[2])
w = SpoolWriter(directory, max_file_size=4096, budget=16384)
def log(msg):
    w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
            "msg": msg, "file": "w.py", "line": 1, "pid": 0})
for i in range(500):
    log(f"before {i}")
print("over budget", flush=True)
while not go.exists():
    time.sleep(0.01)
for i in range(20):
    log(f"after {i}")
w.close()
"""


def test_writer_over_budget_resumes_once_the_aggregator_caught_up(tmp_path: Path) -> None:
    """A writer fills its budget while no aggregator runs and drops the rest. The
    aggregator then starts and reads everything; the writer's older files become final only
    later (settling time), with nothing new to read: they are deleted all the same, so the
    writer logs again and those records are kept, its drops reported."""
    job = spool_dir(tmp_path)
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUDGET_WRITER, str(job), str(go)],
        stdout=subprocess.PIPE,
        text=True,
    )
    agg = None
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "over budget\n"
        assert len(list(job.glob("*.jsonl"))) >= 3
        agg = cli(tmp_path)
        started(tmp_path, agg)
        wait_for(
            lambda: len(list(job.glob("*.jsonl"))) == 1,
            timeout=60,
            what="the consumed older spool files deleted",
        )
        go.touch()
        assert proc.wait(timeout=60) == 0
        (tmp_path / "done").touch()
        code, err = finish(agg)
    finally:
        go.touch()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
        if agg is not None and agg.poll() is None:
            agg.kill()
            agg.wait()
    assert code == 0, err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert [m for m in kept if m.startswith("after")] == [f"after {i}" for i in range(20)], err
    assert dropped > 0 and corrupt == 0
    assert len(kept) + dropped == 520, err
