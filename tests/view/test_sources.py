"""Node-log text read back into entries: every part of the grammar."""

from __future__ import annotations

import time

from nvrx_otel.aggregator.reports import loss_report
from nvrx_otel.nodeline import format_records
from nvrx_otel.view.sources import read_node_log
from tests.view.viewkit import BASE_NS, record


def _read(text: str) -> tuple[list, list[tuple[str, int, str]]]:
    bad: list[tuple[str, int, str]] = []
    lines = list(enumerate(text.splitlines(), 1))
    entries = list(read_node_log(lines, "n.log", lambda p, n, line: bad.append((p, n, line))))
    return entries, bad


def test_fields_of_a_record_line_are_read_back() -> None:
    ts = BASE_NS + 123_456_789
    text = format_records(
        [
            record(
                ts,
                "hello world",
                lvl="WARNING",
                rank=5,
                lrank=1,
                irank=2,
                ilrank=0,
                file="step.py",
                line=44,
            )
        ],
        "node-7",
    )
    (e,), bad = _read(text)
    assert bad == []
    assert (e.ts_ns, e.level, e.severity, e.node) == (
        BASE_NS + 123_000_000,
        "WARNING",
        13,
        "node-7",
    )
    assert (e.rank, e.lrank, e.irank, e.ilrank) == (5, 1, 2, 0)
    assert (e.file, e.line, e.text, e.trace_id, e.span_id) == (
        "step.py",
        44,
        "hello world",
        None,
        None,
    )
    assert e.origin == "n.log:1"


def test_time_is_read_as_local_time_as_written() -> None:
    ts = BASE_NS + 7_000_000
    (e,), _ = _read(format_records([record(ts, "x")], "n"))
    assert e.ts_ns == ts  # written in this process's local time, read back in it
    shown = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts // 1_000_000_000))
    assert format_records([record(ts, "x")], "n").startswith(shown + ",007")


def test_unknown_ranks_are_none() -> None:
    r = record(BASE_NS, "launcher up", rank=None, lrank=None, irank=3, ilrank=0)
    for key in ("rank", "lrank"):
        del r[key]
    (e,), _ = _read(format_records([r], "n"))
    assert (e.rank, e.lrank, e.irank, e.ilrank) == (None, None, 3, 0)


def test_trace_suffix_gives_the_ids_and_leaves_the_message() -> None:
    r = record(
        BASE_NS,
        "in a span",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        span_id="00f067aa0ba902b7",
    )
    (e,), _ = _read(format_records([r], "n"))
    assert (e.text, e.trace_id, e.span_id) == (
        "in a span",
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    )


def test_continuation_lines_stay_with_their_record() -> None:
    exc = 'Traceback (most recent call last):\n  File "s.py", line 1\nValueError: bad'
    recs = [
        record(BASE_NS, "first\nsecond line", trace_id="ab" * 16, span_id="cd" * 8),
        record(BASE_NS + 1_000_000, "failed", lvl="ERROR", exc=exc),
        record(BASE_NS + 2_000_000, "plain"),
    ]
    entries, bad = _read(format_records(recs, "n"))
    assert bad == []
    assert [e.text for e in entries] == ["first\nsecond line", f"failed\n{exc}", "plain"]
    assert entries[0].trace_id == "ab" * 16
    assert [e.number for e in entries] == [1, 3, 7]


def test_loss_reports_are_recognised() -> None:
    report = loss_report(
        what="dropped",
        count=12,
        reason="budget",
        pid=42,
        identity={"rank": 3},
        first_ts=BASE_NS,
        last_ts=BASE_NS,
        ts=BASE_NS,
        key="k",
    )
    corrupt = loss_report(
        what="corrupt",
        count=2,
        reason="corrupt",
        pid=None,
        identity={},
        first_ts=BASE_NS,
        last_ts=BASE_NS,
        ts=BASE_NS,
        key="k2",
    )
    plain = record(BASE_NS, "dropped 5 records from rank 1 pid 2 between a and b: budget")
    entries, _ = _read(format_records([report, corrupt, plain], "n"))
    assert [(e.loss.what, e.loss.count, e.loss.reason) if e.loss else None for e in entries] == [
        ("dropped", 12, "budget"),
        ("corrupt", 2, "corrupt"),
        None,
    ]


def test_malformed_lines_are_named_and_the_rest_read() -> None:
    good = format_records([record(BASE_NS, "one"), record(BASE_NS + 1, "two")], "n")
    first, second = good.splitlines()
    text = "\n".join(["    orphan continuation", first, "not a record at all", second])
    entries, bad = _read(text)
    assert [e.text for e in entries] == ["one", "two"]
    assert bad == [("n.log", 1, "    orphan continuation"), ("n.log", 3, "not a record at all")]


def test_a_record_without_a_time_keeps_its_place() -> None:
    r = record(BASE_NS, "before")
    odd = record("soon", "no time")  # the formatter's careful path writes ????-??-??
    entries, bad = _read(format_records([r, odd], "n"))
    assert bad == []
    assert [(e.text, e.ts_ns) for e in entries] == [("before", BASE_NS), ("no time", BASE_NS)]
