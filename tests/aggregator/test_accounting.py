"""Accounting: for every writer, emitted = in the node log + reported dropped + reported
corrupt; each loss is one WARNING with the nv.nvrx.drop.* attributes (H1)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel import semconv
from nvrx_otel.aggregator.nodelog import local_time
from nvrx_otel.spool import slowpath
from nvrx_otel.spool.writer import SpoolWriter
from tests.aggregator.spoolkit import (
    LINE,
    FakeWriter,
    config,
    log_lines,
    log_path,
    messages,
    running,
    spool_dir,
    wait_for,
)


def test_drop_record_becomes_one_warning_with_attributes(tmp_path: Path) -> None:
    w = FakeWriter(spool_dir(tmp_path), pid=1234, identity={"node": "n", "rank": 3, "lrank": 1})
    w.log("kept")
    w.drop(7, 1_700_000_000_000_000_000, 1_700_000_001_500_000_000, reason="budget")
    w.log("kept after")
    w.close()
    captured: list[dict[str, Any]] = []
    with running(config(tmp_path), sinks=[captured.extend]) as agg:
        wait_for(lambda: len(captured) == 3, what="three records")
    warning = captured[1]
    assert warning["lvl"] == "WARNING" and warning["sev"] == 13
    assert warning["attrs"] == {
        semconv.DROP_COUNT: 7,
        semconv.DROP_RANK: 3,
        semconv.DROP_PID: 1234,
        semconv.DROP_REASON: semconv.DropReasonValues.BUDGET.value,
    }
    first, last = local_time(1_700_000_000_000_000_000), local_time(1_700_000_001_500_000_000)
    lines = log_lines(log_path(tmp_path))
    m = LINE.match(lines[1])
    assert m and m["lvl"] == "WARNING" and m["r"] == "3" and m["lr"] == "1"
    assert m["msg"] == f"dropped 7 records from rank 3 pid 1234 between {first} and {last}: budget"
    assert agg.health.dropped == 7
    assert messages(log_path(tmp_path))[::2] == ["kept", "kept after"]


def test_corrupt_report_has_attributes_too(tmp_path: Path) -> None:
    w = FakeWriter(spool_dir(tmp_path), pid=99, identity={"rank": 2})
    w.log("good")
    w.raw(b"garbage\n{half a record\n")
    w.log("good again")
    w.close()
    captured: list[dict[str, Any]] = []
    with running(config(tmp_path), sinks=[captured.extend]):
        wait_for(lambda: len(captured) == 3, what="three records")
    assert captured[1]["attrs"] == {
        semconv.DROP_COUNT: 2,
        semconv.DROP_RANK: 2,
        semconv.DROP_PID: 99,
        semconv.DROP_REASON: "corrupt",
    }
    assert captured[1]["msg"].startswith("corrupt 2 records from rank 2 pid 99 between ")


WRITER = r"""
import sys, time
from pathlib import Path
from nvrx_otel.spool.writer import SpoolWriter
w = SpoolWriter(Path(sys.argv[1]), max_file_size=4096, budget=8192)
for i in range(int(sys.argv[2])):
    w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
            "msg": f"m {i}", "file": "w.py", "line": 1, "pid": 0})
w.close()
"""


def test_real_writer_over_budget_is_fully_accounted(tmp_path: Path) -> None:
    """A real SpoolWriter over its budget while no aggregator runs: what it could not spool
    arrives as a drop record, so node log + reported dropped = emitted (H1)."""
    count = 400
    subprocess.run(
        [sys.executable, "-c", WRITER, str(spool_dir(tmp_path)), str(count)], check=True, timeout=60
    )
    with running(config(tmp_path)) as agg:
        wait_for(lambda: not any(p.suffix == ".jsonl" for p in spool_dir(tmp_path).iterdir()),
                 what="spool consumed")  # fmt: skip
    msgs = messages(log_path(tmp_path))
    kept = [m for m in msgs if m.startswith("m ")]
    dropped = [re.match(r"dropped (\d+) records from rank \? pid \d+ between .*: budget$", m)
               for m in msgs if not m.startswith("m ")]  # fmt: skip
    assert dropped and all(dropped)
    assert len(kept) + sum(int(m[1]) for m in dropped if m) == count
    assert kept == [f"m {i}" for i in range(len(kept))]
    assert agg.health.dropped == count - len(kept)


def test_spool_directory_removed_while_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tmp cleaner removes the job's spool directory under a running job: the aggregator
    makes it again, keeps reading the files it has open, and the writer's records that
    found no directory to rotate into are reported as dropped: emitted = logged + dropped."""
    monkeypatch.setattr(slowpath, "_REOPEN_NS", 0)  # after a failed open, try at every record
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True)
    writer = SpoolWriter(directory, max_file_size=4096)
    emitted = 0

    def log(n: int) -> None:
        nonlocal emitted
        for _ in range(n):
            writer.emit({"k": "log", "ts": time.time_ns(), "lvl": "INFO", "msg": f"r{emitted}"})
            emitted += 1

    with running(config(tmp_path)) as agg:
        log(20)
        wait_for(lambda: agg.health.written == 20, what="the first records")
        wait_for(lambda: _remove(directory), what="the directory removed")
        log(20)  # into the open (now unlinked) file and past it: no directory to rotate into
        wait_for(directory.is_dir, what="the directory made again")
        log(20)
        writer.close()

        def logged() -> list[str]:
            return [m for m in messages(log_path(tmp_path)) if m.startswith("r")]

        wait_for(lambda: len(logged()) + agg.health.dropped == emitted, what="every record")
    assert emitted == 60 and agg.health.dropped > 0  # some found no directory
    reports = [m for m in messages(log_path(tmp_path)) if m.startswith("dropped ")]
    assert len(reports) == 1 and reports[0].startswith(f"dropped {agg.health.dropped} records")
    assert len(set(logged())) == len(logged())  # none twice


def _remove(directory: Path) -> bool:
    """Remove a directory the aggregator may be writing into (its state's temporary file
    can appear or go during the walk, which fails it): True once it is gone."""
    try:
        shutil.rmtree(directory)
    except OSError:
        return False
    return True
