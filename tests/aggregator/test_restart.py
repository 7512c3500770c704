"""Exactly once across restarts, ``kill -9`` included: progress is committed with the node
log's length and a restart truncates the node log back to it (H2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.aggregator.spoolkit import (
    FakeWriter,
    cli,
    finish,
    log_path,
    messages,
    spool_dir,
    started,
    wait_for,
)

WRITER = r"""
import sys, time
from pathlib import Path
from nvrx_otel.spool.writer import SpoolWriter
directory, tag, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
w = SpoolWriter(directory, max_file_size=64 * 1024, budget=64 << 20)
for i in range(count):
    w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
            "msg": f"{tag} {i}", "file": "w.py", "line": 1, "pid": 0})
    if i % 200 == 199:
        time.sleep(0.01)
w.close()
"""


def test_kill_9_and_restart_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    """Writers log while the aggregator is killed with SIGKILL three times and restarted:
    every record is in the node log exactly once, and the spool is emptied."""
    count = 4000
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(spool_dir(tmp_path)), f"w{n}", str(count)]
        )
        for n in range(3)
    ]
    path = log_path(tmp_path)
    try:
        for round_ in range(3):
            agg = cli(tmp_path, "--nice", "0")
            floor = (round_ + 1) * 1500
            wait_for(lambda f=floor: len(messages(path)) > f, timeout=20, what="progress")
            agg.send_signal(signal.SIGKILL)
            agg.wait(timeout=10)
        for w in writers:
            assert w.wait(timeout=60) == 0
        agg = cli(tmp_path)
        started(tmp_path, agg)
        (tmp_path / "done").touch()
        code, err = finish(agg)
        assert code == 0, err
    finally:
        for w in writers:
            w.kill()
            w.wait()
    got = Counter(messages(path))
    want = {f"w{n} {i}" for n in range(3) for i in range(count)}
    assert {m for m, c in got.items() if c > 1} == set()
    assert set(got) == want
    assert "reported 0 dropped and 0 corrupt records" in err
    assert [n for n in os.listdir(spool_dir(tmp_path)) if not n.startswith(".")] == []


def test_restart_truncates_uncommitted_text(tmp_path: Path) -> None:
    """Text past the committed length (written, then the aggregator died before its
    commit) is cut on restart, and the records are written again exactly once."""
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(10):
        w.log(f"r {i}")
    w.close()
    agg = cli(tmp_path)
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    path = log_path(tmp_path)
    committed = path.read_bytes()
    with path.open("ab") as f:  # what a killed aggregator may leave behind
        f.write(b"2000-01-01 00:00:00,000 [INFO] [x] uncommitted half line")
    w2 = FakeWriter(spool_dir(tmp_path), writer="00000000000000c3")
    w2.log("after restart")
    w2.close()
    (tmp_path / "done").unlink()
    agg = cli(tmp_path)
    wait_for(lambda: "after restart" in messages(path), what="new record")
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    text = path.read_bytes()
    assert text.startswith(committed)
    assert b"uncommitted" not in text
    assert messages(path) == [f"r {i}" for i in range(10)] + ["after restart"]


def test_first_run_killed_before_any_regular_commit_is_cut_too(tmp_path: Path) -> None:
    """The very first aggregator commits the node log's length before writing anything: if
    it is killed before its first regular commit, the restart still cuts what it wrote."""
    path = log_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a line from an earlier job\n")
    agg = cli(tmp_path)
    started(tmp_path, agg)
    agg.send_signal(signal.SIGKILL)
    agg.wait(timeout=10)
    with path.open("ab") as f:  # what it may have written before it died
        f.write(b"2000-01-01 00:00:00,000 [INFO] [x] written, never committed\n")
    w = FakeWriter(spool_dir(tmp_path))
    w.log("the record")
    w.close()
    agg = cli(tmp_path)
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert path.read_text().splitlines()[0] == "a line from an earlier job"
    assert "never committed" not in path.read_text()
    assert messages(path) == ["the record"]
