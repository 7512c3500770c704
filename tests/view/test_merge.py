"""Streams merged in time order within the reorder window and the hold limit."""

from __future__ import annotations

from pathlib import Path

from nvrx_otel.view.merge import merge, reorder
from tests.view.viewkit import entry


def test_streams_merge_in_time_order_ties_keep_stream_order() -> None:
    a = [entry(t, f"a{t}") for t in (1, 4, 4, 9)]
    b = [entry(t, f"b{t}") for t in (2, 4, 10)]
    got = [e.text for e in merge([iter(a), iter(b)])]
    assert got == ["a1", "b2", "a4", "a4", "b4", "a9", "b10"]


def test_disorder_within_the_window_is_sorted() -> None:
    ts = [5, 3, 4, 1, 10, 8, 9]
    got = [e.ts_ns for e in reorder((entry(t) for t in ts), window_ns=10, hold=100)]
    assert got == sorted(ts)


def test_disorder_beyond_the_window_is_shown_late_never_dropped() -> None:
    ts = [100, 250, 400, 50]  # 100 and 250 are out (400 passed them by 100) when 50 comes
    got = [e.ts_ns for e in reorder((entry(t) for t in ts), window_ns=100, hold=100)]
    assert got == [100, 250, 50, 400]


def test_hold_limit_bounds_what_is_held() -> None:
    out = reorder((entry(t) for t in range(1000, 0, -1)), window_ns=10**9, hold=10)
    first = next(out)
    # with at most 10 held, the first out is the smallest of the first 11 read
    assert first.ts_ns == 990
    assert len(list(out)) == 999


def test_read_all_gives_every_record_of_the_paths_in_time_order(tmp_path: Path) -> None:
    from nvrx_otel.view import read_all
    from tests.view.viewkit import BASE_NS, otlp_line, record, write_log

    write_log(tmp_path / "nvrx_log_a.log", "a", [record(BASE_NS + 2_000_000, "a2")])
    write_log(tmp_path / "nvrx_log_a.log.1", "a", [record(BASE_NS, "a0")])
    (tmp_path / "logs_b.jsonl").write_text(otlp_line("b", 1, [(BASE_NS + 1_000_000, "INFO", "b1")]))
    assert [e.text for e in read_all([str(tmp_path)])] == ["a0", "b1", "a2"]
