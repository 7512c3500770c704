"""Every filter: ranks (workload, infra), node, minimum level, trace id, time range."""

from __future__ import annotations

import time

import pytest

from nvrx_otel.view.filters import Filters, parse_level, parse_ranks, parse_time, parse_trace
from tests.view.viewkit import entry

S = 1_000_000_000


def test_rank_lists_and_ranges() -> None:
    assert parse_ranks("0-3,7") == ((0, 3), (7, 7))
    keep = Filters(ranks=parse_ranks("0-3,7"))
    assert [r for r in (0, 3, 4, 7, 8, None) if keep(entry(0, rank=r))] == [0, 3, 7]
    infra = Filters(infra_ranks=parse_ranks("2"))
    assert [r for r in (1, 2, None) if infra(entry(0, rank=9, irank=r))] == [2]
    for bad in ("x", "3-1", "-1", "1,,2"):
        with pytest.raises(ValueError, match="rank"):
            parse_ranks(bad)


def test_node_names_and_patterns() -> None:
    keep = Filters(nodes=("node001", "gpu-*"))
    assert [n for n in ("node001", "node002", "gpu-7", None) if keep(entry(0, node=n))] == [
        "node001",
        "gpu-7",
    ]


def test_minimum_level_by_name_or_number() -> None:
    assert parse_level("warn") == parse_level("WARNING") == 13
    assert parse_level("17") == 17
    with pytest.raises(ValueError, match="unknown level"):
        parse_level("loud")
    keep = Filters(min_severity=parse_level("warning"))
    levels = [("INFO", 9), ("WARNING", 13), ("ERROR", 17), ("Level 5", 0)]
    assert [lv for lv, sev in levels if keep(entry(0, level=lv, severity=sev))] == [
        "WARNING",
        "ERROR",
    ]


def test_trace_id_or_prefix() -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    keep = Filters(trace=parse_trace("4BF92F35"))
    assert keep(entry(0, trace_id=trace))
    assert not keep(entry(0, trace_id="0" * 32)) and not keep(entry(0))
    with pytest.raises(ValueError, match="trace id"):
        parse_trace("xyz")


def test_time_range_iso_and_relative() -> None:
    now = 1_700_000_000 * S
    assert parse_time("-10m", now) == now - 600 * S
    assert parse_time("2h", now) == now - 7200 * S
    assert parse_time("2023-11-14T22:13:20Z") == now
    assert parse_time("2023-11-14T23:13:20.5+01:00") == now + S // 2
    local = time.mktime(time.strptime("2023-11-14 22:13:20", "%Y-%m-%d %H:%M:%S"))
    assert parse_time("2023-11-14 22:13:20") == int(local) * S  # no offset: local time
    with pytest.raises(ValueError, match="bad time"):
        parse_time("yesterday")
    keep = Filters(since_ns=10, until_ns=20)
    assert [t for t in (9, 10, 20, 21) if keep(entry(t))] == [10, 20]
