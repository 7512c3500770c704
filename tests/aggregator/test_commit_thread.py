"""A commit's fsync and state write run on a thread of their own: the loop reads and writes
on while a busy disk holds the fsync, and the state on disk never says more than the node
log holds durably (``aggregator/commit_thread.py``)."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from nvrx_otel.aggregator import commit_thread
from nvrx_otel.aggregator import state as st
from tests.aggregator.spoolkit import (
    FakeWriter,
    config,
    log_path,
    messages,
    running,
    spool_dir,
    wait_for,
)


def _committed_length(job_dir: Path) -> int:
    saved = st.load(job_dir)
    assert saved is not None and saved.log is not None
    return saved.log.length


def test_the_loop_reads_on_while_a_commits_fsync_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node log's fsync of a commit is held: records written meanwhile still reach the
    node log, no other commit starts, and the state on disk stays the previous commit's
    until the fsync returns; then the commit lands, and the next one covers the rest."""
    real = commit_thread.fsync_node_log
    entered = threading.Event()
    release = threading.Event()
    calls: list[str] = []

    def held_fsync(fd: int) -> None:
        calls.append(threading.current_thread().name)
        entered.set()
        if not release.wait(60):
            raise AssertionError("the test never released the fsync")
        real(fd)

    monkeypatch.setattr(commit_thread, "fsync_node_log", held_fsync)
    w = FakeWriter(spool_dir(tmp_path))
    w.log("first")
    try:
        with running(config(tmp_path)) as agg:
            wait_for(entered.is_set, timeout=30, what="a commit's fsync")
            before = _committed_length(agg.job_dir)  # the open's commit: nothing written yet
            assert before == 0
            w.log("second")
            w.log("third")
            wait_for(
                lambda: messages(log_path(tmp_path)) == ["first", "second", "third"],
                timeout=30,
                what="records read and written while the fsync waits",
            )
            assert agg._committing is not None  # still that one: one commit at a time
            assert calls == ["nvrx-otel-commit"]
            assert _committed_length(agg.job_dir) == before
            release.set()
            size = log_path(tmp_path).stat().st_size
            wait_for(
                lambda: _committed_length(agg.job_dir) == size,
                timeout=30,
                what="the held commit and the next one durable",
            )
            w.close()
    finally:
        release.set()
    assert messages(log_path(tmp_path)) == ["first", "second", "third"]
    assert _committed_length(agg.job_dir) == log_path(tmp_path).stat().st_size


def test_a_commit_whose_fsync_fails_is_resumed_from_the_last_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The fsync of a commit fails (EIO): the loop says so, cuts the node log back to the
    last commit and reads on from there; every record is in the node log exactly once."""
    real = commit_thread.fsync_node_log
    failed = threading.Event()

    def failing_once(fd: int) -> None:
        if not failed.is_set():
            failed.set()
            raise OSError(errno.EIO, "injected I/O error")
        real(fd)

    monkeypatch.setattr(commit_thread, "fsync_node_log", failing_once)
    w = FakeWriter(spool_dir(tmp_path))
    w.log("first")
    with running(config(tmp_path)) as agg:
        wait_for(failed.is_set, timeout=30, what="the failing fsync")
        w.log("second")
        wait_for(lambda: agg.health.written >= 2, timeout=30, what="the second record")
        w.close()
    assert messages(log_path(tmp_path)) == ["first", "second"]
    assert _committed_length(agg.job_dir) == log_path(tmp_path).stat().st_size
    err = capfd.readouterr().err
    assert "cannot write the node log or commit: [Errno 5] injected I/O error" in err
