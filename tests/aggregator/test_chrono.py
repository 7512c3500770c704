"""--en-chronological-ordering: all ranks in timestamp order within the hold window, each
rank's own records always in their order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nvrx_otel.aggregator.service import AggregatorConfig
from tests.aggregator.spoolkit import (
    FakeWriter,
    config,
    log_path,
    messages,
    running,
    spool_dir,
    wait_for,
)

MS = 1_000_000


def test_records_of_all_ranks_come_out_in_timestamp_order(tmp_path: Path) -> None:
    base = time.time_ns() - 10_000 * MS
    writers = [
        FakeWriter(spool_dir(tmp_path), writer=f"{n + 1:016x}", identity={"rank": n})
        for n in range(3)
    ]
    for i in range(50):
        for n, w in enumerate(writers):
            w.log(f"r{n} {i}", ts=base + (i * 3 + (2 - n)) * MS)
    for w in writers:
        w.close()
    with running(config(tmp_path, chrono=True, hold_window_ms=200)) as agg:
        wait_for(lambda: agg.health.written == 150, what="all records")
    want = [f"r{n} {i}" for i in range(50) for n in (2, 1, 0)]
    assert messages(log_path(tmp_path)) == want


def test_a_rank_keeps_its_own_order_even_when_its_timestamps_do_not(tmp_path: Path) -> None:
    """A writer whose threads stamped records out of order: its records stay in file order,
    other ranks' records are placed around them by timestamp."""
    base = time.time_ns() - 10_000 * MS
    a = FakeWriter(spool_dir(tmp_path), writer="000000000000000a")
    b = FakeWriter(spool_dir(tmp_path), writer="000000000000000b")
    for name, ts in (("a1", 10), ("a2", 30), ("a3", 20), ("a4", 40)):
        a.log(name, ts=base + ts * MS)
    for name, ts in (("b1", 15), ("b2", 25), ("b3", 35)):
        b.log(name, ts=base + ts * MS)
    a.close()
    b.close()
    with running(config(tmp_path, chrono=True, hold_window_ms=200)) as agg:
        wait_for(lambda: agg.health.written == 7, what="all records")
    assert messages(log_path(tmp_path)) == ["a1", "b1", "b2", "a2", "a3", "b3", "a4"]


@pytest.mark.parametrize("chrono", [True, False])
def test_an_earlier_record_read_later_goes_first_within_the_hold_window(
    tmp_path: Path, chrono: bool
) -> None:
    """Rank 1's record is read after rank 0's newer one, within the window: with ordering
    on it still goes first (with ordering off, the node log has it in reading order)."""
    a = FakeWriter(spool_dir(tmp_path), writer="000000000000000a")
    b = FakeWriter(spool_dir(tmp_path), writer="000000000000000b")
    cfg = config(tmp_path, chrono=chrono, hold_window_ms=1500)
    with running(cfg) as agg:
        now = time.time_ns()
        a.log("newer, read first", ts=now)
        wait_for(lambda: agg._spool.tracked[0].offset > 200, what="first record read")
        b.log("older, read later", ts=now - 50 * MS)
        wait_for(lambda: agg.health.written == 2, timeout=15, what="both records")
        a.close()
        b.close()
    got = messages(log_path(tmp_path))
    if chrono:
        assert got == ["older, read later", "newer, read first"]
    else:
        assert got == ["newer, read first", "older, read later"]


def test_hold_window_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_OTEL_HOLD_WINDOW_MS", "750")
    cfg = AggregatorConfig.from_env(log_dir=Path("l"), spool_root=Path("s"), strict=True)
    assert cfg.hold_window_ms == 750
    monkeypatch.delenv("NVRX_OTEL_HOLD_WINDOW_MS")
    cfg = AggregatorConfig.from_env(log_dir=Path("l"), spool_root=Path("s"), strict=True)
    assert cfg.hold_window_ms == 2000


def test_losses_and_rotations_are_accounted_in_chronological_mode(tmp_path: Path) -> None:
    """Records wait in the blocks the reader made: a block released in parts, a loss report
    counting for many records and a writer's rotation to its next file must all still add
    up (emitted = in the node log + reported dropped) and every file must be done."""
    base = time.time_ns() - 10_000 * MS
    a = FakeWriter(spool_dir(tmp_path), writer="000000000000000a", identity={"rank": 0})
    b = FakeWriter(spool_dir(tmp_path), writer="000000000000000b", identity={"rank": 1})
    for i in range(30):
        a.log(f"a{i}", ts=base + (2 * i) * MS)
        b.log(f"b{i}", ts=base + (2 * i + 1) * MS)
        if i == 10:
            a.drop(5, base + 20 * MS, base + 21 * MS)
        if i == 20:
            a.rotate()
    a.close()
    b.close()
    with running(config(tmp_path, chrono=True, hold_window_ms=50)) as agg:
        wait_for(lambda: agg.health.written == 61, what="all records")
        wait_for(  # a's first file may be deleted already: consumed, its writer moved on
            lambda: all(f.done == f.size and not f.held for f in agg._spool.tracked),
            what="files consumed",
        )
    got = messages(log_path(tmp_path))
    assert len(got) == 61
    for w in "ab":  # (the loss report's timestamp is now: a's later records follow all of b's)
        assert [m for m in got if m[0] == w] == [f"{w}{i}" for i in range(30)]
    assert got[:22] == [f"{w}{i}" for i in range(11) for w in "ab"]
    assert agg.health.dropped == 5
    stats = agg._out.log.stats  # per writer: rank, pid, records accounted, first, last
    assert stats["000000000000000a"][2] == 30 + 5 and stats["000000000000000b"][2] == 30
