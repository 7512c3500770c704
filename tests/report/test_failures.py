"""Culprit and victims, by the evidence each failure rests on (report/failures.py), on
OTLP/JSON jobs made by hand with the records the watcher writes: the numbers are chosen
so that the earliest record is never the right answer."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from nvrx_otel.report import Report, analyse, failures
from nvrx_otel.view.read import Problems
from tests.report.otlpkit import at, log, logs_line, resource, sid, span, spans_line, tid


def _job(tmp: Path, by_rank: dict[int, list[dict[str, Any]]], spans: Any = ()) -> Report:
    (tmp / "otlp").mkdir()
    with (tmp / "otlp" / "logs_n0.jsonl").open("w") as f:
        for rank, records in by_rank.items():
            f.write(logs_line(resource("n0", rank), records))
    with (tmp / "otlp" / "traces_n0.jsonl").open("w") as f:
        for rank, s in spans:
            f.write(spans_line(resource("n0", rank), [s]))
    return analyse([str(tmp / "otlp")], problems=Problems(io.StringIO()))


def _stopped(t: float, line: int = 20) -> list[dict[str, Any]]:
    """What the watcher records of a rank SIGTERMed at ``t``: its stacks, then its end."""
    return [
        log(at(t), "SIGTERM received: Python stacks of 1 thread", "WARNING", line=line,
            stacks="terminate", signal="SIGTERM"),
        log(at(t + 0.1), "process 9 was killed by SIGTERM", "WARNING", outcome="signal",
            signal="SIGTERM"),
    ]  # fmt: skip


def test_the_rank_that_raised_outranks_the_victims_whose_spans_ended_earlier(
    tmp_path: Path,
) -> None:
    """Ranks 0, 1 and 3 wait inside a span from 5 s (their last record at 6 s), rank 2
    raises at 10 s, the launcher stops the others at 10.5 s: the spans the aggregator ended
    at 6 s are older than the exception, but their ranks are victims."""
    spans = [
        (r, span("train_step", at(5), at(6), trace=tid(r + 1), span_id=sid(r + 1), truncated=True))
        for r in (0, 1, 3)
    ]
    by_rank = {r: [log(at(6), "step 5"), *_stopped(10.5)] for r in (0, 1, 3)}
    by_rank[2] = [
        log(at(10), "loss is NaN", "ERROR", exception_type="ValueError"),
        log(at(10.2), "process 7 ended on an uncaught ValueError (exit code 1)", "ERROR",
            outcome="exception", exit_code=1),
    ]  # fmt: skip
    r = _job(tmp_path, by_rank, spans)
    f = r.first_failure
    assert f is not None and (f.rank, f.what, f.evidence) == (2, "loss is NaN", failures.OWN)
    assert r.stopped == [0, 1, 3] and r.collective == []
    assert r.ordering is not None and r.ordering.sure and r.ordering.note == "the only failing rank"
    assert [c.failed_ranks for c in r.cycles] == [1]  # the victims are not failures


def test_a_hang_is_the_rank_that_did_not_fail_while_the_others_timed_out(tmp_path: Path) -> None:
    """Ranks 0, 2 and 3 time out in a collective at 20-20.2 s (torchrun would name rank 0,
    the first); rank 1 raised nothing and was stopped at 21 s in train.py:31."""
    by_rank: dict[int, list[dict[str, Any]]] = {
        r: [log(at(20 + r / 10), "Timed out waiting 5000ms for recv operation to complete",
                "ERROR", exception_type="RuntimeError")]
        for r in (0, 2, 3)
    }  # fmt: skip
    by_rank[1] = [log(at(3), "step 3"), *_stopped(21, line=31)]
    r = _job(tmp_path, by_rank)
    f = r.first_failure
    assert f is not None and (f.rank, f.evidence) == (1, failures.HUNG)
    assert f.what.startswith("hung: did not fail while ranks 0,2-3 failed in a collective")
    assert f.what.endswith("its stack at SIGTERM ends in train.py:31")
    assert r.collective == [0, 2, 3] and r.stopped == []


def test_a_rank_that_returned_early_is_the_culprit_of_the_collectives_that_failed(
    tmp_path: Path,
) -> None:
    by_rank: dict[int, list[dict[str, Any]]] = {
        r: [log(at(12), "Connection closed by peer [10.0.0.2]:4312", "ERROR",
                exception_type="DistBackendError")]
        for r in (0, 2, 3)
    }  # fmt: skip
    by_rank[1] = [log(at(10), "process 8 exited with code 0", outcome="exit", exit_code=0)]
    r = _job(tmp_path, by_rank)
    f = r.first_failure
    assert f is not None and (f.rank, f.evidence) == (1, failures.RETURNED)
    assert f.what == "returned (exit 0) while ranks 0,2-3 went on to fail in a collective"


def test_a_vanished_process_outranks_the_span_it_was_inside(tmp_path: Path) -> None:
    """Rank 0's span ended (truncated) at its last record, 5 s; it vanished (SIGKILL) at
    9 s; rank 1 logged an ERROR at 7 s. Both are failures of their own: rank 1's is first,
    and rank 0's is dated at its end, not at 5 s."""
    spans = [(0, span("step", at(4), at(5), trace=tid(1), span_id=sid(1), truncated=True))]
    by_rank = {
        0: [log(at(9), "process 3 vanished: no exit status", "ERROR", outcome="vanished")],
        1: [log(at(7), "checkpoint write failed", "ERROR")],
    }
    r = _job(tmp_path, by_rank, spans)
    assert r.first_failure is not None and r.first_failure.rank == 1
    o = r.ordering
    assert o is not None and o.other is not None
    assert (o.other.rank, o.other.ts_ns, o.other.evidence) == (0, at(9), failures.OWN)


def test_an_order_resting_on_a_truncated_span_is_never_certain(tmp_path: Path) -> None:
    spans = [(0, span("step", at(4), at(5), trace=tid(1), span_id=sid(1), truncated=True))]
    r = _job(tmp_path, {0: [log(at(4.5), "step 4")]}, spans)
    f, o = r.first_failure, r.ordering
    assert f is not None and f.evidence == failures.INFERRED
    assert o is not None and not o.sure and "inferred" in o.note


def test_a_span_ended_by_the_launchers_sigterm_makes_its_rank_a_victim(tmp_path: Path) -> None:
    """Without a watcher: the victims' own SIGTERM handlers end their spans with status
    ERROR "Terminated: signal SIGTERM"; that is a stop, not a failure of their own."""
    stop = "Terminated: signal SIGTERM from the launcher"
    spans = [(r, span("collective", at(2), at(9), trace=tid(r + 1), span_id=sid(r + 1),
                      error=stop)) for r in (0, 2)]  # fmt: skip
    spans.append((1, span("step", at(1), at(8), trace=tid(9), span_id=sid(9), error="OOM")))
    r = _job(tmp_path, {r: [log(at(1), "start")] for r in range(3)}, spans)
    assert r.first_failure is not None and r.first_failure.rank == 1
    assert r.stopped == [0, 2] and [c.failed_ranks for c in r.cycles] == [1]
