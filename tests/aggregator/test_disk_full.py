"""A full spool file system: the aggregator cannot write its state next to the spool, so
it commits next to the node log instead and keeps draining (deleting what it consumed frees
space for the writers); every record is in the node log or reported lost. When the node
log cannot be written either, it exits with status 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.aggregator.spoolkit import (
    FakeWriter,
    cli,
    finish,
    ledger,
    log_path,
    messages,
    spool_dir,
    started,
    wait_for,
)
from tests.conftest import tmpfs


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


BURST = r"""
import sys, time
from pathlib import Path
from nvrx_otel.spool.writer import SpoolWriter
directory, go, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
w = SpoolWriter(directory, max_file_size=64 * 1024, budget=64 << 20)
def log(msg):
    w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t",
            "msg": msg, "file": "w.py", "line": 1, "pid": 0})
for i in range(count):
    log(f"burst {i} " + "p" * 160)
print("burst done", flush=True)
while not go.exists():
    time.sleep(0.01)
log("last")
w.close()
"""


def test_full_spool_file_system_keeps_draining_and_accounts_for_every_record(
    tmp_path: Path,
) -> None:
    """A writer spools 4 MB into a 2 MB file system while the aggregator runs: the node
    log keeps filling (commits go next to the node log), space is freed, and every record
    is in the node log or reported dropped or corrupt; the writer's last record is kept."""
    count = 20_000
    go = tmp_path / "go"
    with tmpfs(tmp_path / "spool", "2m"):
        agg = cli(tmp_path)
        writer = None
        try:
            started(tmp_path, agg)
            job = spool_dir(tmp_path)
            writer = subprocess.Popen(
                [sys.executable, "-c", BURST, str(job), str(go), str(count)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert writer.stdout is not None and writer.stdout.readline() == "burst done\n"
            wait_for(lambda: _free(job) > 1 << 20, timeout=60, what="consumed spool files freed")
            wait_for(lambda: len(messages(log_path(tmp_path))) > 1000, timeout=60, what="drain")
            go.touch()
            assert writer.wait(timeout=60) == 0
            (tmp_path / "done").touch()
            code, err = finish(agg, timeout=120)
        finally:
            go.touch()
            if writer is not None:
                writer.wait(timeout=60)
                if writer.stdout is not None:
                    writer.stdout.close()
            if agg.poll() is None:
                agg.kill()
                agg.wait()
    assert code == 0, err
    assert "committing to" in err, err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert kept[-1] == "last", err
    assert len(kept) + dropped + corrupt == count + 1, (len(kept), dropped, corrupt, err)
    assert len(set(kept)) == len(kept)


def test_node_log_and_spool_both_full_exits_with_status_1(tmp_path: Path) -> None:
    """Neither the node log nor any state can be written: the records stay in the spool
    for a later aggregator, and the exit status says they were not delivered."""
    with tmpfs(tmp_path / "spool", "1m"), tmpfs(tmp_path / "logs", "1m"):
        agg = cli(tmp_path, "--drain-timeout", "2")
        try:
            started(tmp_path, agg)
            job = spool_dir(tmp_path)
            staged = FakeWriter(tmp_path / "spool" / "staging")
            for i in range(100):
                staged.log(f"record {i}")
            staged.close()
            for fs in (job, tmp_path / "logs"):
                _fill(fs)
            os.rename(staged.path, job / staged.path.name)  # in place, no space needed
            (tmp_path / "done").touch()
            code, err = finish(agg, timeout=60)
        finally:
            if agg.poll() is None:
                agg.kill()
                agg.wait()
    assert code == 1, err
    assert "exit status 1" in err, err


def test_node_log_full_says_so_once_and_exits_with_status_1(tmp_path: Path) -> None:
    """Each resume met the same full disk at once: the error and the cut were said
    hundreds of times a second, as fast as the loop went round."""
    with tmpfs(tmp_path / "logs", "1m"):
        _fill(tmp_path / "logs")
        w = FakeWriter(spool_dir(tmp_path))
        for i in range(100):
            w.log(f"record {i} " + "x" * 100)
        w.close()
        agg = cli(tmp_path, "--drain-timeout", "2")
        try:
            started(tmp_path, agg)
            wait_for(lambda: "cannot write the node log" in agg.err(), what="the write error")
            (tmp_path / "done").touch()
            code, err = finish(agg, timeout=60)
        finally:
            if agg.poll() is None:
                agg.kill()
                agg.wait()
    assert code == 1, err
    assert err.count("cannot write the node log or commit") == 1, err
    assert "uncommitted bytes" not in err and "exit status 1" in err.splitlines()[-1]
    assert len(list(spool_dir(tmp_path).glob("*.jsonl"))) == 1  # the records stay


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_kill_9_while_committing_to_the_fallback_then_restart_keeps_exactly_once(
    tmp_path: Path,
) -> None:
    """An aggregator drains a spool file while the spool's file system is full (progress
    in the fallback, the consumed file deleted) and is killed; the next one, with space
    back, resumes from the fallback, the newer state: every record once, none lost."""
    with tmpfs(tmp_path / "spool", "1m"):
        agg = cli(tmp_path)
        try:
            started(tmp_path, agg)
            job = spool_dir(tmp_path)
            staged = FakeWriter(tmp_path / "spool" / "staging")
            for i in range(2000):
                staged.log(f"record {i}")
            staged.close()
            filler = _fill(job)
            os.rename(staged.path, job / staged.path.name)
            wait_for(
                lambda: not list(job.glob("*.jsonl")), timeout=60, what="file consumed, deleted"
            )
            wait_for(lambda: "committing to" in agg.err(), timeout=10, what="fallback commit")
        finally:
            agg.kill()
            agg.wait()
        filler.unlink()
        again = cli(tmp_path)
        started(tmp_path, again)
        (tmp_path / "done").touch()
        code, err = finish(again)
    assert code == 0, err
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert kept == [f"record {i}" for i in range(2000)], err
    assert (dropped, corrupt) == (0, 0)
