"""Ledger scenarios with OTLP on: the endpoint down for a while then up; torn and corrupt
lines reported in the node log and at the receiver alike."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.aggregator.spoolkit import FakeWriter, wait_for
from tests.faults.ledger import count_node_log, count_otlp, settle
from tests.faults.node import Node, finish
from tests.otlp_receiver import OtlpReceiver

OUTAGE_S = float(os.environ.get("FAULTS_OUTAGE_S", "15"))
"""How long the endpoint is down (the field case is 60 s; 15 s keeps the suite short)."""


def _otlp_complete(receiver: OtlpReceiver, emitted: int) -> bool:
    count = count_otlp(receiver.logs)
    return count.unique + count.reported >= emitted


def test_endpoint_down_then_up(tmp_path: Path) -> None:
    """Ranks log while the OTLP endpoint is down for OUTAGE_S seconds; once it is up again
    everything arrives (or is reported) and the node log never waited for it."""
    node = Node(tmp_path)
    receiver = OtlpReceiver(max_lifetime=600).start()
    try:
        receiver.stop()  # down: nothing listens on its port
        down_at = time.monotonic()
        node.start("--otlp-endpoint", receiver.endpoint)
        ranks = [node.rank(r, f"r{r}", 4000, arg=100) for r in range(4)]
        for p in ranks:
            assert finish(p) == 0
        # the node log does not wait for the endpoint
        wait_for(lambda: count_node_log(node.log_path).unique == 16_000, timeout=60,
                 what="the node log")  # fmt: skip
        # the outage is the scenario (a duration), not a wait for a condition
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        receiver.start()
        receiver.wait_for(lambda r: _otlp_complete(r, 16_000), timeout=90)
        code, err = node.stop()
        assert code == 0, err
        with receiver.lock:
            logs = list(receiver.logs)
    finally:
        receiver.stop()
    settle(f"OTLP endpoint down {OUTAGE_S:g} s then up", 16_000, node.log_path, logs)


@pytest.mark.parametrize(
    "otlp",
    [
        False,
        pytest.param(True),
    ],
    ids=["nodelog", "otlp"],
)  # fmt: skip
def test_torn_and_corrupt_lines(tmp_path: Path, otlp: bool) -> None:
    """Garbage lines between records and a torn tail: each is a corrupt record, reported
    in the node log and at the OTLP receiver alike."""
    node = Node(tmp_path)
    w = FakeWriter(node.job_dir, pid=os.getpid(), writer="00000000000000e1")
    for i in range(300):
        w.log(f"r0-{i}")
        if i % 100 == 99:
            w.raw(b"{not a record\n")
    w.raw(b'{"v":1,"k":"log","msg":"r0-torn')
    w.close()
    emitted = 300 + 3 + 1
    with OtlpReceiver() as receiver:
        node.start(*(["--otlp-endpoint", receiver.endpoint] if otlp else []))
        if otlp:
            # the records are there (reports travel with them, in spool order)
            receiver.wait_for(lambda r: count_otlp(r.logs).unique >= 300, timeout=60)
        code, err = node.stop()
        assert code == 0, err
        with receiver.lock:
            logs = list(receiver.logs)
    settle(f"torn + corrupt lines{' (OTLP)' if otlp else ''}", emitted, node.log_path,
           logs if otlp else None)  # fmt: skip
