"""The aggregator's memory stays bounded whatever a spool file holds: a 100 MB line is
skipped as one corrupt record, read a block at a time, never held."""

from __future__ import annotations

import sys
from pathlib import Path

from nvrx_otel import record as rec
from tests.aggregator.spoolkit import FakeWriter, cli, finish, ledger, log_path, spool_dir, wait_for

PEAK_RSS = r"""
import resource, subprocess, sys
out = sys.argv[1]
code = subprocess.call([sys.executable, "-m", "nvrx_otel.logging.aggregator", *sys.argv[2:]])
with open(out, "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""

MIB = 1 << 20
EXTRA_RSS_KIB = 16 * 1024
"""What a 100 MB line may add to the aggregator's peak RSS: the reader holds at most a
4 MiB window and a 1 MiB block of it."""


def _peak_rss(tmp: Path, big_mib: int) -> tuple[int, list[str], int, int]:
    """Run an aggregator over a spool whose writer logs ``big_mib`` MiB in one line
    (written while the aggregator runs) between small records; its peak RSS (KiB) and
    the node log's ledger."""
    tmp.mkdir()
    rss = tmp / "rss"
    agg = cli(tmp, command=[sys.executable, "-c", PEAK_RSS, str(rss)])
    wait_for(lambda: ": aggregating " in agg.err(), timeout=30, what="aggregator start")
    w = FakeWriter(spool_dir(tmp))
    w.log("before")
    if big_mib:
        head = rec.encode(w.record("big "))
        w.raw(head[: head.index(b'"big ') + 5])
        block = b"x" * MIB
        for _ in range(big_mib):
            w.raw(block)
        w.raw(head[head.index(b'"big ') + 5 :])
    for i in range(3):
        w.log(f"after {i}")
    w.close()
    (tmp / "done").touch()
    code, err = finish(agg, timeout=240)
    assert code == 0, err
    return int(rss.read_text()), *ledger(log_path(tmp))


def test_100mb_line_keeps_aggregator_memory_bounded(tmp_path: Path) -> None:
    """The aggregator's peak RSS with a 100 MB line in the spool stays within 16 MiB of its
    peak over the same spool without it; the line is one corrupt record, nothing else lost."""
    base_rss, kept, dropped, corrupt = _peak_rss(tmp_path / "small", 0)
    assert (kept, dropped, corrupt) == (["before", "after 0", "after 1", "after 2"], 0, 0)
    big_rss, kept, dropped, corrupt = _peak_rss(tmp_path / "big", 100)
    assert (kept, dropped, corrupt) == (["before", "after 0", "after 1", "after 2"], 0, 1)
    assert big_rss < base_rss + EXTRA_RSS_KIB, (base_rss, big_rss)
