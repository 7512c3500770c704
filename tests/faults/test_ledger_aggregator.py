"""Ledger scenarios around the aggregator: down while ranks rotate, killed with SIGKILL
and restarted during a run."""

from __future__ import annotations

from pathlib import Path

from tests.aggregator.spoolkit import wait_for
from tests.faults.ledger import settle
from tests.faults.node import Node, finish


def test_aggregator_down_while_ranks_rotate(tmp_path: Path) -> None:
    """Four ranks log 3,000 records each into 4 KiB files (a 16-file budget) while no
    aggregator runs; it starts once they are gone: what did not fit is reported dropped."""
    node = Node(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="4", NVRX_LOG_MAX_LOG_FILES="16")
    ranks = [node.rank(r, f"r{r}", 3000) for r in range(4)]
    for p in ranks:
        assert finish(p) == 0
    node.start()
    code, err = node.stop()
    assert code == 0, err
    row = settle("aggregator down, ranks rotate (4 KiB files)", 12_000, node.log_path)
    assert row.dropped > 0  # the scenario did rotate past the budget


def test_aggregator_kill_9_five_times(tmp_path: Path) -> None:
    """Four ranks log 50,000 records each while the aggregator is killed with SIGKILL five
    times (each time after the node log grew) and restarted: every record exactly once."""
    node = Node(tmp_path)
    ranks = [node.rank(r, f"r{r}", 50_000, arg=500) for r in range(4)]
    for _ in range(5):
        node.start()
        floor = node.node_log_size() + 2_500_000  # of about 19.5 MB in all
        wait_for(lambda f=floor: node.node_log_size() > f, timeout=120, what="progress")
        node.kill9()
    for p in ranks:
        assert finish(p) == 0
    node.start()
    code, err = node.stop()
    assert code == 0, err
    settle("aggregator kill -9 x5, 4 x 50k", 200_000, node.log_path)
