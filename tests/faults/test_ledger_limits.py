"""Ledger scenarios at the limits: a spool file system that fills up, a record far over
the size cap, and messages with the Unicode line and paragraph separators."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import spawn, tmpfs
from tests.faults.ledger import require, settle
from tests.faults.node import ROOT, Node, finish


def test_spool_file_system_fills_up(tmp_path: Path) -> None:
    """Four ranks, each spooling already, log about 8 MB more into a 2 MB file system while
    the aggregator drains: writes fail with ENOSPC, the aggregator cannot commit next to
    the spool and commits next to the node log instead. Every record is in the node log or
    reported dropped, and the aggregator exits 0 (everything it read was delivered)."""
    node = Node(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="64", NVRX_LOG_MAX_LOG_FILES="64")
    with tmpfs(node.spool, "2m"):
        node.start()
        ranks = [node.rank(r, f"r{r}", 1, mode="pause", arg=7_000) for r in range(4)]
        for p in ranks:  # each has its spool file and drop ledger before the disk fills
            assert p.stdout is not None and p.stdout.readline().strip() == "paused"
        for p in ranks:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in ranks:
            assert finish(p) == 0
        code, err = node.stop()
    require(code == 0, f"exit status {code}: {err}")
    row = settle("spool file system fills up (2 MB tmpfs)", 4 * 7_001, node.log_path)
    assert row.dropped > 0, err  # the scenario did fill the file system
    assert "committing to" in err, err


def test_rank_starts_on_a_full_spool_file_system(tmp_path: Path) -> None:
    """The spool's file system is full before the rank's first record: it can make neither
    a spool file nor its drop ledger, and its records are dropped; the node log must still
    say how many."""
    node = Node(tmp_path)
    with tmpfs(node.spool, "1m"):
        node.start()
        filler = node.spool / "filler"
        with filler.open("wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        rank = node.rank(0, "r0", 200)
        assert finish(rank) == 0
        filler.unlink()
        code, err = node.stop()
    assert code == 0, err
    settle("rank starts on a full spool file system", 200, node.log_path)


def test_record_far_over_the_cap_is_cut_not_lost(tmp_path: Path) -> None:
    """A 100 MB message, then 20 small ones: the big one is cut to the record cap with a
    marker and kept, like the others; the aggregator's line limit never sees it."""
    node = Node(tmp_path)
    node.start()
    rank = node.rank(0, "r0", 20, mode="big", arg=100)
    assert finish(rank) == 0
    code, err = node.stop()
    assert code == 0, err
    settle("record of 100 MB (cap 1 MB), then 20", 21, node.log_path)
    text = node.log_path.read_text(encoding="utf-8")
    assert "[truncated " in text
    assert max(len(line) for line in text.split("\n")) < 2 << 20


def test_line_and_paragraph_separators_stay_inside_their_record(tmp_path: Path) -> None:
    """Messages with U+2028, U+2029 and a newline: each record is one node-log line plus
    one indented continuation, and no separator reaches the file raw (readers that split
    on Unicode line breaks see the same records)."""
    node = Node(tmp_path)
    node.start()
    rank = node.rank(0, "r0", 300, mode="seps")
    assert finish(rank) == 0
    code, err = node.stop()
    assert code == 0, err
    settle("messages with U+2028/U+2029", 300, node.log_path)
    text = node.log_path.read_text(encoding="utf-8")
    assert "\u2028" not in text and "\u2029" not in text
    assert len(text.splitlines()) == len(text.split("\n")) - 1 == 600


TORN_DROP_RECORD_RANK = """
import os, resource, signal, sys
from nvrx_otel.logging import setup_logger

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit is short or EFBIG
log = setup_logger(node_local_tmp_dir=os.environ["NVRX_NODE_LOCAL_TMPDIR"])
unlimited = resource.getrlimit(resource.RLIMIT_FSIZE)
for i in range(10):
    log.info("r0-%d before the limit", i)
live = max((e for e in os.scandir(sys.argv[1]) if not e.name.startswith(".")),
           key=lambda e: e.stat().st_mtime_ns)
size = os.stat(live.path).st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size, unlimited[1]))
for i in range(10, 30):  # every write fails: dropped, counted
    log.info("r0-%d at the limit", i)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, unlimited[1]))
for i in range(30, 40):  # the drop record's write is cut after 20 bytes: still dropped
    log.info("r0-%d twenty bytes past the limit", i)
resource.setrlimit(resource.RLIMIT_FSIZE, unlimited)
for i in range(40, 60):
    log.info("r0-%d after the limit", i)
"""


def test_drop_record_cut_by_a_short_write_keeps_its_drops(tmp_path: Path) -> None:
    """A write of the writer's drop record is cut short (the file system fills up while it
    is written; here a file size limit cuts it after 20 bytes): the drops it held stay
    pending and reach the node log in the next drop record; the torn piece is one corrupt
    line that stands for one of them (counting the torn record written while its drops were
    lost was how a filling disk lost records unreported)."""
    node = Node(tmp_path)
    node.start()
    argv = [sys.executable, "-c", TORN_DROP_RECORD_RANK, str(node.job_dir)]
    env = dict(node.env, RANK="0")
    rank = spawn(argv, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    _, err = rank.communicate(timeout=60)
    assert rank.returncode == 0, err
    code, agg_err = node.stop()
    assert code == 0, agg_err
    row = settle("drop record cut by a short write", 60, node.log_path)
    # the torn piece is one corrupt line standing for one of the 30 drops
    require(row.dropped >= 29 and row.dropped + row.corrupt == 30,
            f"dropped {row.dropped} + corrupt {row.corrupt}, 30 expected")  # fmt: skip
