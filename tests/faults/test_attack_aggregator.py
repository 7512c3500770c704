"""Aggregator scenarios from outside the suite's own habits: a spool entry it cannot open,
an OTLP receiver that never answers, a stderr whose reader is gone."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nvrx_otel.spool.paths import SpoolFileName
from nvrx_otel.spool.sidecar import ledger_name
from tests.aggregator.spoolkit import FakeWriter, wait_for
from tests.conftest import spawn
from tests.faults.ledger import settle
from tests.faults.node import Node


def test_unopenable_spool_entry_is_not_a_live_writer(tmp_path: Path) -> None:
    """A directory carries a spool file's name (the aggregator cannot open it, as with a
    file of another user): no process writes to it, so the drain must not wait for it nor
    report it as a writer still running."""
    node = Node(tmp_path)
    node.job_dir.mkdir(parents=True)
    (node.job_dir / SpoolFileName("00000000000000aa", 0, 31337, "rank7").name).mkdir()
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000a1", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    node.start("--drain-timeout", "2")
    code, err = node.stop()
    settle("a directory named as a spool file", 100, node.log_path)
    assert code == 0, err
    assert "were still running after" not in err, err


def test_fifo_named_as_a_spool_file_is_not_a_live_writer(tmp_path: Path) -> None:
    """A FIFO carries a spool file's name (opening it for read does not fail, reading it
    does): the drain must neither wait for it nor count it as a writer still running."""
    node = Node(tmp_path)
    node.job_dir.mkdir(parents=True)
    os.mkfifo(node.job_dir / SpoolFileName("00000000000000ab", 0, 31338, "rank8").name)
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000a1", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    node.start("--drain-timeout", "30")
    start = os.times().elapsed
    code, err = node.stop()
    took = os.times().elapsed - start
    settle("a FIFO named as a spool file", 100, node.log_path)
    assert code == 0, err
    assert "were still running after" not in err, err
    assert "cannot read spool entry" in err, err
    assert took < 20, f"the drain waited {took:.1f} s for a FIFO: {err}"


def without_file_access() -> tuple[str, ...]:
    """A command prefix that runs a process unable to open a file its mode denies it (root
    loses the capabilities that override file modes); skips when there is none."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot deny a read")
    return (setpriv, "--bounding-set=-dac_override,-dac_read_search", "--")


def test_live_writer_file_of_another_user_is_not_waited_for(tmp_path: Path) -> None:
    """A live writer's spool file the aggregator may not open (mode 000, as another user's
    file would be): no lock can be probed on it, so the drain must not wait for it, and
    stderr says once that the entry cannot be read."""
    node = Node(tmp_path)
    other = FakeWriter(node.job_dir, pid=20_009, writer="00000000000000b9", proc="rank9")
    other.log("r9-0")
    os.chmod(other.path, 0)  # the writer keeps its descriptor, its lock and going on
    ledger = node.job_dir / ledger_name("rank9", 20_009, "00000000000000b9")
    ledger.write_bytes(b"\0" * 64)  # its drop ledger, as a real writer has, unreadable too
    os.chmod(ledger, 0)
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000a1", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    node.start("--drain-timeout", "30", wrap=without_file_access())
    other.log("r9-1")
    start = os.times().elapsed
    code, err = node.stop()
    took = os.times().elapsed - start
    other.close()
    settle("a live writer's file it may not open", 100, node.log_path)
    assert code == 0, err
    assert "were still running after" not in err, err
    assert err.count("cannot read spool entry") == 1, err
    assert took < 20, f"the drain waited {took:.1f} s for an unreadable file: {err}"


@contextmanager
def silent_endpoint() -> Iterator[tuple[str, list[socket.socket]]]:
    """An HTTP endpoint that accepts connections and never answers (and the connections)."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.05)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", conns
    finally:
        stop.set()
        acceptor.join(timeout=30)  # no connection accepted after the ones closed below
        srv.close()
        for c in conns:
            c.close()


def test_drain_timeout_holds_with_a_silent_receiver(tmp_path: Path) -> None:
    """The receiver never answers and OTLP's timeout is 60 s; a logs request is in flight
    when the wait file appears. The node log is complete, so the aggregator must exit by
    --drain-timeout (1 s) and a margin, not 5 s later."""
    node = Node(tmp_path, OTEL_EXPORTER_OTLP_TIMEOUT="60000")
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000a1", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    with silent_endpoint() as (endpoint, conns):
        node.start("--otlp-endpoint", endpoint, "--drain-timeout", "1")
        wait_for(lambda: conns, timeout=60, what="a request in flight")
        start = os.times().elapsed
        code, err = node.stop()
        took = os.times().elapsed - start
    settle("silent OTLP receiver", 100, node.log_path)
    assert code == 0, err
    assert took < 4.0, f"exit {took:.1f} s after the wait file with --drain-timeout 1: {err}"
    assert "100 records queued or in flight" in err, err  # what OTLP did not get is said


def test_aggregator_with_a_broken_stderr_pipe(tmp_path: Path) -> None:
    """The aggregator's stderr is a pipe nobody reads any more (a launcher's ``| tee`` or log
    collector gone): stderr is only for people, so the node log must still get every record."""
    node = Node(tmp_path)
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000a1", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    r, broken = os.pipe()
    os.close(r)  # every write to the pipe fails with EPIPE
    argv = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
            str(tmp_path / "logs"), "--wait-file", str(node.wait_file), "--nice", "0",
            "--check-interval", "0.05", "--drain-timeout", "2"]  # fmt: skip
    agg = spawn(argv, env=node.env, stdout=subprocess.DEVNULL, stderr=broken)
    os.close(broken)
    wait_for(lambda: node.log_path.exists() or agg.poll() is not None, timeout=60, what="start")
    node.wait_file.touch()
    code = agg.wait(timeout=60)
    settle("aggregator stderr a broken pipe", 100, node.log_path, note=f"exit {code}")
    assert code == 0


def test_aggregator_stderr_reader_gone_mid_run(tmp_path: Path) -> None:
    """The reader of the aggregator's stderr pipe goes away after the start line (a
    launcher's ``| tee`` killed): the drain's lines then meet a broken pipe, and the node
    log must still get every record, with exit status 0."""
    node = Node(tmp_path)
    argv = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
            str(tmp_path / "logs"), "--wait-file", str(node.wait_file), "--nice", "0",
            "--check-interval", "0.05", "--drain-timeout", "2"]  # fmt: skip
    env = dict(node.env, NVRX_OTEL_STATUS_INTERVAL_S="0.05")  # a line every cycle or so
    agg = spawn(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert agg.stderr is not None
    assert b": aggregating " in agg.stderr.readline()
    agg.stderr.close()  # the pipe's only reader is gone: every later line is EPIPE
    w = FakeWriter(node.job_dir, pid=20_001, writer="00000000000000a2", proc="rank0")
    for i in range(100):
        w.log(f"r0-{i}")
    w.close()
    wait_for(lambda: node.log_path.exists() or agg.poll() is not None, timeout=60, what="log")
    node.wait_file.touch()
    code = agg.wait(timeout=60)
    settle("aggregator stderr reader gone mid-run", 100, node.log_path, note=f"exit {code}")
    assert code == 0
