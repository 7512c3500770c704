"""Spool safety: a job directory nobody else can write into, made relative to once.

The job directory is made 0700 by its first writer; one that other users can write into,
or another user's, is refused with one line (the front ends then log to stderr), as is a
spool root that others can write into without the sticky bit. The writer opens the job
directory once and makes every file (spool files, drop ledger, tally) relative to that
descriptor, so a path swapped for a symlink after start redirects nothing, in a forked
child too. Real users (``nobody``), real modes, real symlinks."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel.logging import setup_logger
from nvrx_otel.spool import drops, sidecar, slowpath
from nvrx_otel.spool.paths import SpoolPathError
from nvrx_otel.spool.writer import SpoolWriter
from tests.conftest import as_nobody, read_spool


def _log(msg: str) -> dict[str, Any]:
    return {"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t", "msg": msg}


def test_a_new_job_directory_is_made_0700(tmp_path: Path) -> None:
    old = os.umask(0)  # even with no umask to take bits away
    try:
        w = SpoolWriter(tmp_path / "spool" / "job1")
    finally:
        os.umask(old)
    w.emit(_log("r0"))
    w.close()
    assert stat.S_IMODE((tmp_path / "spool" / "job1").stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o1777], ids=oct)
def test_a_job_directory_others_can_write_into_is_refused(
    shared_tmp: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    """Group- or world-writable (sticky or not): refused; ``setup_logger`` says so in one
    line and logs to stderr; nothing is written into the directory."""
    job = shared_tmp / "spool" / "nojob"  # the job directory of a process without a job id
    job.mkdir(parents=True)
    job.chmod(mode)
    with pytest.raises(SpoolPathError, match="writable by other users"):
        SpoolWriter(job)
    log = setup_logger(node_local_tmp_dir=str(shared_tmp / "spool"), force_reset=True)
    log.error("still logged")
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "writable by other users" in line]
    assert len(said) == 1 and str(job) in said[0] and "logging to stderr instead" in said[0]
    assert "still logged" in err
    assert not list(job.iterdir())


def test_a_job_directory_of_another_user_is_refused(
    shared_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``nobody`` made the job directory first (0700, its own): refused, one line."""
    root = shared_tmp / "spool"
    root.mkdir(mode=0o1777)
    root.chmod(0o1777)  # a /tmp-like root: anyone may make a directory in it
    as_nobody("mkdir", "-m", "700", str(root / "nojob"))
    with pytest.raises(SpoolPathError, match="owned by uid 65534, not this user"):
        SpoolWriter(root / "nojob")
    setup_logger(node_local_tmp_dir=str(root), force_reset=True).error("to stderr")
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if "owned by uid 65534" in line]) == 1


def test_a_spool_root_others_can_write_into_is_refused_unless_sticky(shared_tmp: Path) -> None:
    """Without the sticky bit anyone could rename the job directory away and put their own
    in its place; with it (as /tmp has) only its owner can."""
    root = shared_tmp / "spool"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(SpoolPathError, match="without the sticky bit"):
        SpoolWriter(root / "job1")
    assert not (root / "job1").exists() or not list((root / "job1").iterdir())
    root.chmod(0o1777)
    w = SpoolWriter(root / "job2")
    w.emit(_log("r0"))
    w.close()
    assert [r["msg"] for r in read_spool(root / "job2") if r["k"] == "log"] == ["r0"]


def test_job_directory_swapped_for_a_symlink_after_start(shared_tmp: Path) -> None:
    """After the writer started, ``nobody`` (the root made writable by others later)
    renames the job directory away and plants a symlink to its own directory under its
    name. The writer's rotations, a forked child's files and its drop ledger all land in
    the directory the writer opened; nothing appears in ``nobody``'s directory."""
    root = shared_tmp / "spool"
    job = root / "job1"
    w = SpoolWriter(job, max_file_size=4096)
    w.emit(_log("before"))
    root.chmod(0o777)  # later, by mistake: the check at start cannot see it
    attacker = root / "attacker"
    as_nobody("mkdir", "-m", "777", str(attacker))
    as_nobody("mv", str(job), str(root / "moved"))  # renaming a dir within root: allowed
    as_nobody("ln", "-s", str(attacker), str(job))
    assert job.is_symlink()
    for i in range(100):  # 4 KiB files: many rotations
        w.emit(_log(f"parent {i} " + "x" * 80))
    pid = os.fork()
    if pid == 0:  # the child: a new writer id, a new drop ledger, its own files
        code = 1
        try:
            for i in range(100):
                w.emit(_log(f"child {i} " + "y" * 80))
            w.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.close()
    assert not list(attacker.iterdir())
    moved = root / "moved"
    msgs = [r["msg"].split(" x")[0].split(" y")[0] for r in read_spool(moved) if r["k"] == "log"]
    wanted = ["before", *(f"parent {i}" for i in range(100)), *(f"child {i}" for i in range(100))]
    assert sorted(msgs) == sorted(wanted)
    headers = {r["w"] for r in read_spool(moved) if r["k"] == "hdr"}
    assert len(headers) == 2  # the parent's writer and the child's
    assert all(p.stat().st_uid == 0 for p in moved.iterdir())


def test_drop_ledger_and_tally_are_made_in_the_opened_directory(
    shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger cannot be made at first (a full disk): the tally keeps the count; the
    job directory is then swapped for a symlink, and the ledger made on a later try, the
    tally's renames and its removal all happen in the opened directory."""
    root = shared_tmp / "spool"
    job = root / "job1"
    w = SpoolWriter(job, max_file_size=4096, budget=4096)
    real_create = sidecar.DropLedger.create.__func__  # type: ignore[attr-defined]

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sidecar.DropLedger, "create", classmethod(full))
    monkeypatch.setattr(drops, "_LEDGER_RETRY_NS", 0)  # try to make it at every drop
    monkeypatch.setattr(slowpath, "_RECHECK_NS", 0)  # which takes the slow path every time
    for i in range(200):  # over the one-file budget: drops, counted in the tally
        w.emit(_log(f"r{i} " + "x" * 80))
    assert [p.name for p in job.iterdir() if ".lost." in p.name]
    root.chmod(0o777)
    attacker = root / "attacker"
    as_nobody("mkdir", "-m", "777", str(attacker))
    as_nobody("mv", str(job), str(root / "moved"))
    as_nobody("ln", "-s", str(attacker), str(job))
    monkeypatch.setattr(sidecar.DropLedger, "create", classmethod(real_create))
    for i in range(50):
        w.emit(_log(f"s{i} " + "x" * 80))
    names = [p.name for p in (root / "moved").iterdir()]
    assert [n for n in names if sidecar.NAME.match(n)], names  # the ledger took over
    assert not [n for n in names if ".lost." in n]  # and the tally was removed
    w.close()
    assert not list(attacker.iterdir())


def test_setup_logger_in_a_refused_directory_never_raises(
    shared_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shared_tmp / "spool" / "nojob"
    job.mkdir(parents=True)
    job.chmod(0o777)
    log = setup_logger(node_local_tmp_dir=str(shared_tmp / "spool"), force_reset=True)
    assert not [h for h in log.handlers if type(h).__name__ == "SpoolHandler"]
    log.log(logging.WARNING, "fine")
    assert "fine" in capsys.readouterr().err
