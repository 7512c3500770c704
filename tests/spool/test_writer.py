"""The spool writer: crash durability, fork safety, rotation, budget and drop accounting."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nvrx_otel import record as rec
from nvrx_otel.spool import slowpath
from nvrx_otel.spool.paths import SpoolPathError, parse_name
from nvrx_otel.spool.writer import SpoolWriter
from tests.conftest import log_records, read_spool


def _log(seq_text: str) -> dict[str, object]:
    return {"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t", "msg": seq_text}


def test_first_line_is_a_header_unique_to_the_writer(tmp_path: Path) -> None:
    a = SpoolWriter(tmp_path, proc="ftlauncher")
    b = SpoolWriter(tmp_path, proc="ftlauncher")
    a.emit(_log("a"))
    b.emit(_log("b"))
    a.close()
    b.close()
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == 2
    firsts = [f.read_bytes().split(b"\n", 1)[0] for f in files]
    assert firsts[0] != firsts[1]
    for f in files:
        parts = parse_name(f.name)
        assert parts is not None and parts.proc == "ftlauncher" and parts.pid == os.getpid()


def test_records_carry_key_seq_and_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("NVRX_OTEL_NODE_ID", "n7")
    w = SpoolWriter(tmp_path)
    for i in range(12):
        w.emit(_log(str(i)))
    w.close()
    recs = log_records(tmp_path)
    assert [rec.seq_of(r["key"]) for r in recs] == list(range(12))
    assert [r["key"][-2:] for r in recs[9:]] == ["-9", "-a", "-b"]  # the seq in hex
    assert all(r["key"] == f"{w.writer_id}-{i:x}" for i, r in enumerate(recs))
    assert all(r["rank"] == 3 and r["irank"] == 1 and r["node"] == "n7" for r in recs)
    assert "lrank" not in recs[0]  # unknown stays absent


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(SpoolPathError, match="symlink"):
        SpoolWriter(link)
    assert list(real.iterdir()) == []


def test_foreign_owned_directory_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "theirs"
    d.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory away")  # CI runs as root
    os.chown(d, 12345, 12345)
    with pytest.raises(SpoolPathError, match="owned by uid 12345"):
        SpoolWriter(d)


def test_rotation_keeps_every_record_in_order(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=10**9)
    for i in range(500):
        w.emit(_log(f"record {i} " + "x" * 50))
    w.close()
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) > 5
    assert all(f.stat().st_size <= 4096 for f in files)
    recs = log_records(tmp_path)
    assert [rec.seq_of(r["key"]) for r in recs] == list(range(500))


def test_budget_overrun_is_counted_and_reported_when_space_frees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slowpath, "_RECHECK_NS", 0)  # look for freed space at every record
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=3 * 4096)
    emitted = 400
    for i in range(emitted // 2):
        w.emit(_log(f"record {i} " + "x" * 50))
    on_disk = sorted(tmp_path.glob("*.jsonl"))
    assert len(on_disk) == 3  # the budget holds
    for f in on_disk[:-1]:  # an aggregator consumed and deleted the older files
        f.unlink()
    for i in range(emitted // 2, emitted):
        w.emit(_log(f"record {i} " + "x" * 50))
    w.close()
    lines = read_spool(tmp_path)
    drops = [r for r in lines if r["k"] == "drop"]
    kept = [r for r in lines if r["k"] == "log"]
    assert drops and all(d["reason"] == "budget" for d in drops)
    # Records in the deleted (consumed) files are the seqs below the first kept one.
    consumed = min(rec.seq_of(r["key"]) for r in kept)
    dropped = sum(d["count"] for d in drops)
    assert consumed + len(kept) + dropped == emitted
    all_seqs = [rec.seq_of(r["key"]) for r in kept] + [rec.seq_of(d["key"]) for d in drops]
    assert len(set(all_seqs)) == len(all_seqs)


def test_pending_drops_are_written_at_close(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=4096)
    for i in range(200):
        w.emit(_log(f"r{i} " + "y" * 60))
    w.close()
    lines = read_spool(tmp_path)
    kept = [r for r in lines if r["k"] == "log"]
    dropped = sum(r["count"] for r in lines if r["k"] == "drop")
    assert dropped > 0 and len(kept) + dropped == 200


def test_emit_never_raises_on_unencodable_values(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path)
    rec = _log("lone \ud800 surrogate")
    rec["attrs"] = {"obj": object(), "big": 2**80}
    w.emit(rec)
    w.close()
    (got,) = log_records(tmp_path)
    assert got["msg"] == "lone \ufffd surrogate"
    assert got["attrs"]["big"] == str(2**80) and got["attrs"]["obj"].startswith("<object")


CHILD_BURST = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from nvrx_otel.spool.writer import SpoolWriter
    w = SpoolWriter(Path(sys.argv[1]))
    i = 0
    while True:
        w.emit({"k": "log", "ts": 1, "sev": 9, "lvl": "INFO", "lg": "t", "msg": "m" * 80})
        i += 1
        if i == 2000:
            os.write(1, b"go\\n")
    """
)


def test_kill_9_mid_burst_loses_nothing_already_logged(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD_BURST, str(tmp_path)], stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"go\n"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl"))
    assert raw.endswith(b"\n")  # no torn record: each call completed its one write
    seqs = [rec.seq_of(r["key"]) for r in log_records(tmp_path)]
    assert len(seqs) >= 2000
    assert seqs == list(range(len(seqs)))


def _fork_storm_child_log(w: SpoolWriter, i: int) -> None:
    w.emit(_log(f"child {i}"))


def test_fork_storm_while_a_thread_logs(tmp_path: Path) -> None:
    """A thread logs (and rotates) while the main thread forks 200 times: no child hangs
    and every child's record is kept, in its own file."""
    w = SpoolWriter(tmp_path, max_file_size=8192, budget=10**9)
    stop = threading.Event()

    def chatter() -> None:
        while not stop.is_set():
            w.emit(_log("parent thread " + "z" * 40))

    t = threading.Thread(target=chatter)
    t.start()
    pids = []
    try:
        for i in range(200):
            pid = os.fork()
            if pid == 0:
                try:
                    _fork_storm_child_log(w, i)
                    w.close()
                finally:
                    os._exit(0)
            pids.append(pid)
    finally:
        stop.set()
        t.join()
    deadline = time.monotonic() + 60
    hung = 0
    for pid in pids:
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                hung += 1
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
    w.close()
    assert hung == 0
    recs = log_records(tmp_path)
    children = [r for r in recs if r["msg"].startswith("child ")]
    assert sorted(int(r["msg"].split()[1]) for r in children) == list(range(200))
    assert len({r["pid"] for r in children}) == 200
    writers = {r["key"].split("-")[0] for r in children}
    assert len(writers) == 200 and w.writer_id not in writers


def _mp_child(directory: str) -> None:
    from nvrx_otel.logging import setup_logger

    setup_logger(node_local_tmp_dir=directory).info("from %s", mp.current_process().name)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_children_log(tmp_path: Path, method: str) -> None:
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=_mp_child, args=(str(tmp_path),), name=f"w{i}") for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    msgs = sorted(r["msg"] for r in log_records(tmp_path))
    assert msgs == ["from w0", "from w1", "from w2"]
