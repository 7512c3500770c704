"""Loss reports of what an OTLP endpoint refused or rejected: per writer when the request
is known record by record, rank ``?`` when a partial success spans several writers, and
never a report of a refused report of a refusal."""

from __future__ import annotations

from typing import Any

from nvrx_otel import semconv
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.otlp_encode import encode_logs
from nvrx_otel.aggregator.otlp_losses import UNKNOWN_WRITER, rejection
from nvrx_otel.aggregator.state import WriterState


def _records(writer: str, n: int, pid: int) -> list[dict[str, Any]]:
    return [{"v": 1, "k": "log", "ts": 1_000 + i, "sev": 9, "lvl": "INFO", "lg": "t",
             "msg": f"m{i}", "pid": pid, "key": f"{writer}-{i:x}"} for i in range(n)]  # fmt: skip


def _drop(count: int) -> dict[str, Any]:
    return reports.loss_report(
        what="dropped", count=count, reason="budget", pid=7, identity={"rank": 3},
        first_ts=1, last_ts=2, ts=3, key="d",
    )  # fmt: skip


WRITERS = {"a": WriterState(identity={"rank": 3}), "b": WriterState(identity={"rank": 4})}


def test_a_refused_request_is_reported_per_writer_with_what_its_reports_held() -> None:
    logs = {"a": [*_records("a", 10, 7), _drop(5)], "b": _records("b", 3, 8)}
    out = rejection(logs, WRITERS, lost=14)
    assert out.records == 13 and out.given_up == 0
    by_writer = {w: r for w, r in out.reports}
    assert by_writer["a"]["attrs"][semconv.DROP_COUNT] == 15  # 10 records + the 5 reported
    assert by_writer["b"]["attrs"][semconv.DROP_COUNT] == 3
    assert by_writer["a"]["attrs"][semconv.DROP_RANK] == 3 and by_writer["a"]["pid"] == 7
    assert by_writer["a"]["attrs"][semconv.DROP_REASON] == "otlp_rejected"
    assert by_writer["a"]["key"] != by_writer["b"]["key"]
    again = rejection(logs, WRITERS, lost=14)  # made again (after a restart): the same key
    assert [r["key"] for _, r in again.reports] == [r["key"] for _, r in out.reports]


def test_a_refused_rejection_report_is_given_up_not_made_again() -> None:
    first = rejection({"a": _records("a", 4, 7)}, WRITERS, lost=4)
    ((_, report),) = first.reports
    second = rejection({"a": [report]}, WRITERS, lost=1)
    assert second.reports == [] and second.given_up == 4 and second.records == 0


def test_a_partial_success_of_several_writers_is_reported_without_a_rank() -> None:
    logs = {"a": _records("a", 10, 7), "b": _records("b", 10, 8)}
    out = rejection(logs, WRITERS, lost=6)
    ((writer, report),) = out.reports
    assert writer == UNKNOWN_WRITER and out.records == 6
    assert report["attrs"][semconv.DROP_COUNT] == 6
    assert semconv.DROP_RANK not in report["attrs"] and "pid" not in report
    encode_logs([({}, [report])], 0)  # it goes out with an empty resource


def test_a_partial_success_of_one_writer_is_its_own() -> None:
    out = rejection({"b": _records("b", 10, 8)}, WRITERS, lost=2)
    ((writer, report),) = out.reports
    assert writer == "b" and report["attrs"][semconv.DROP_RANK] == 4 and report["pid"] == 8


def test_nothing_lost_nothing_reported() -> None:
    assert rejection({"a": _records("a", 3, 7)}, WRITERS, lost=0).reports == []
