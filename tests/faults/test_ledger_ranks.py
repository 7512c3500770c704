"""Ledger scenarios around ranks: killed with SIGKILL mid-burst and mid-span, a torn
record, non-UTF-8 bytes, a spool file deleted and recreated, a fork storm."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nvrx_otel import record as rec
from tests.aggregator.spoolkit import FakeWriter, wait_for
from tests.faults.ledger import LedgerError, count_node_log, settle
from tests.faults.node import Node, finish
from tests.otlp_receiver import OtlpReceiver


def test_rank_kill_9_mid_burst(tmp_path: Path) -> None:
    """Ranks SIGKILL themselves in the middle of their bursts, right after a log call
    returned: everything they logged is in the node log."""
    node = Node(tmp_path)
    node.start()
    ranks = [node.rank(r, f"r{r}", 5000 + 777 * r, "kill") for r in range(3)]
    for p in ranks:
        assert finish(p) < 0
    code, err = node.stop()
    assert code == 0, err
    settle("rank kill -9 mid-burst", sum(5000 + 777 * r for r in range(3)), node.log_path)


@pytest.mark.parametrize("end", ["kill", "exit"])
def test_rank_ends_with_pending_drops(tmp_path: Path, end: str) -> None:
    """A rank over its spool budget (no aggregator yet) ends by SIGKILL or os._exit (a
    multiprocessing child): the records it could not spool must still be reported."""
    node = Node(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="4", NVRX_LOG_MAX_LOG_FILES="4")
    finish(node.rank(0, "r0", 2000, end))
    node.start()
    code, err = node.stop()
    assert code == 0, err
    settle(f"rank {'kill -9' if end == 'kill' else 'os._exit'} with pending drops", 2000,
           node.log_path)  # fmt: skip


def test_rank_kill_9_mid_span(tmp_path: Path) -> None:
    """Ranks die with SIGKILL inside two open spans, OTLP on: their records are in the node
    log and at the receiver, and the spans arrive ended by the aggregator."""
    node = Node(tmp_path)
    with OtlpReceiver() as receiver:
        node.start("--otlp-endpoint", receiver.endpoint)
        ranks = [node.rank(r, f"r{r}", 300 + r, "kill_span") for r in range(2)]
        for p in ranks:
            assert finish(p) < 0
        code, err = node.stop()
        assert code == 0, err
        with receiver.lock:
            logs, spans = list(receiver.logs), list(receiver.spans)
    settle("rank kill -9 mid-span (OTLP)", 601, node.log_path, logs)
    assert len({s["span_id"] for s in spans}) == 4  # two open spans per rank, ended for them


def test_torn_record(tmp_path: Path) -> None:
    """A rank writes the first half of its last record and dies: one corrupt record."""
    node = Node(tmp_path)
    node.start()
    assert finish(node.rank(0, "r0", 500, "torn")) == 0
    code, err = node.stop()
    assert code == 0, err
    row = settle("torn record", 501, node.log_path)
    assert row.corrupt == 1


def test_non_utf8_bytes(tmp_path: Path) -> None:
    """Records with invalid UTF-8, lone surrogate escapes and a NUL are kept (bytes
    replaced); a line of pure garbage bytes in between is one corrupt record."""
    node = Node(tmp_path)
    w = FakeWriter(node.job_dir, pid=os.getpid(), writer="00000000000000f1")
    emitted = 0
    for i in range(200):
        line = rec.encode(w.record(f"r0-{i} clean"))
        if i % 3 == 0:
            line = line.replace(b" clean", b" \xff\xfe\xc3(")
        elif i % 3 == 1:
            line = line.replace(b" clean", b" \\ud800\\u0000")
        w.raw(line)
        emitted += 1
        if i % 50 == 49:
            w.raw(b"\xff\xfe\x00\x80garbage\xc0\n")
            emitted += 1
    w.close()
    node.start()
    code, err = node.stop()
    assert code == 0, err
    row = settle("non-UTF-8 bytes", emitted, node.log_path)
    assert row.corrupt == 4


def test_spool_file_deleted_and_recreated(tmp_path: Path) -> None:
    """A spool file the aggregator has read is deleted and a file of the same name made
    again with new records: those are read from its start, none lost, none twice."""
    node = Node(tmp_path)
    node.start()
    w = FakeWriter(node.job_dir, pid=os.getpid(), writer="00000000000000d1")
    for i in range(100):
        w.log(f"r0-{i}")
    wait_for(lambda: count_node_log(node.log_path).unique == 100, timeout=60, what="first 100")
    w.close()
    os.unlink(w.path)
    w2 = FakeWriter(node.job_dir, pid=os.getpid(), writer="00000000000000d1")
    assert w2.path == w.path
    for i in range(100, 250):
        w2.log(f"r0-{i}")
    w2.close()
    code, err = node.stop()
    assert code == 0, err
    settle("spool file deleted and recreated", 250, node.log_path)


def test_fork_storm_with_logging_thread(tmp_path: Path) -> None:
    """A rank's thread logs while its main thread forks 40 children that log and leave with
    os._exit: every child's and the thread's records are accounted for."""
    node = Node(tmp_path)
    node.start()
    children, count = 40, 3000
    ranks = [node.rank(r, f"r{r}", count, "forks", children) for r in range(2)]
    for p in ranks:
        assert finish(p) == 0
    code, err = node.stop()
    assert code == 0, err
    nl = count_node_log(node.log_path)
    per_tag = nl.per_tag()
    assert len(per_tag) == 2 * (children + 1)
    settle("fork storm with logging thread", 2 * (count + children * 50), node.log_path)


def test_live_spool_file_truncated_under_the_reader(tmp_path: Path) -> None:
    """Something cuts a live spool file to half its length after the aggregator read it;
    the writer goes on appending. Nothing read is written twice and every record the
    writer emitted is in the node log or reported."""
    node = Node(tmp_path)
    node.start()
    w = FakeWriter(node.job_dir, pid=os.getpid(), writer="00000000000000c1")
    for i in range(100):
        w.log(f"r0-{i}")
    wait_for(lambda: count_node_log(node.log_path).unique == 100, timeout=60, what="first 100")
    os.truncate(w.path, w.path.stat().st_size // 2)
    for i in range(100, 300):
        w.log(f"r0-{i}")
    w.close()
    code, err = node.stop()
    assert code == 0, err
    settle("live spool file truncated under the reader", 300, node.log_path)


def test_signal_handler_logs_during_rotation(tmp_path: Path) -> None:
    """SIGALRM every 0.3 ms logs from its handler while the rank logs into 4 KiB files (a
    rotation every few records): the rank never hangs, and every record is accounted for."""
    node = Node(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="4", NVRX_LOG_MAX_LOG_FILES="4000")
    node.start()
    rank = node.rank(0, "r0", 5000, "alarm")
    try:
        out, err = rank.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        rank.kill()
        rank.communicate()
        node.stop()
        raise LedgerError("the rank hung (killed after 20 s)") from None
    assert rank.returncode == 0, err
    fired = int(out.split("handler ")[1].split()[0])
    code, err = node.stop()
    assert code == 0, err
    settle("signal handler logs during rotation", 5000 + fired, node.log_path)
