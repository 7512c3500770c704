"""The demo's progress display: what the launcher's events make of it."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from nvrx_otel.demo import events
from nvrx_otel.demo.nodes import NodeStatus
from nvrx_otel.demo.plan import make_plan
from nvrx_otel.demo.progress import MAX_ROWS, JobState, render


def state(tmp_path: Path, nodes: int = 2, per_node: int = 2) -> JobState:
    plan = make_plan(
        nodes=nodes,
        ranks_per_node=per_node,
        steps=10,
        fail_rank=None,
        hang_rank=None,
        out=tmp_path / "out",
        otlp_endpoint=None,
    )
    return JobState(plan)


def shown(s: JobState) -> str:
    console = Console(record=True, width=160, color_system=None)
    console.print(render(s))
    return console.export_text()


def event(line: bytes) -> dict[str, object]:
    found = events.decode(line)
    assert found is not None
    return found


def test_ranks_steps_waits_and_aggregator_lag_are_shown(tmp_path: Path) -> None:
    s = state(tmp_path)
    assert s.apply(event(events.encode(events.CYCLE, cycle=0, start=0))) == (
        "cycle 0: starting 4 ranks"
    )
    s.apply(event(events.encode(events.STEP, rank=0, step=4, loss=1.0)))
    waiting = events.encode(events.WAITING, rank=2, step=5, op="allreduce", missing=[3], waited=1.5)
    s.apply(event(waiting))
    s.nodes = [NodeStatus(lag=0.3, backlog="12 KiB", written=140), NodeStatus()]
    text = shown(s)
    assert "4/10" in text
    assert "waiting 1.5 s for rank 3 in allreduce" in text
    assert "not in allreduce of step 5 (1.5 s)" in text  # rank 3's row
    assert "aggregator node0: lag 0.3 s, backlog 12 KiB, 140 records in the node log" in text
    assert "aggregator node1: lag -" in text


def test_faults_restarts_and_the_end_are_lines_of_their_own(tmp_path: Path) -> None:
    s = state(tmp_path)
    s.apply(event(events.encode(events.CYCLE, cycle=0, start=0)))
    fault = events.encode(
        events.FAULT, kind="failure", rank=3, detail="rank 3 exited with status 1"
    )
    assert s.apply(event(fault)) == "cycle 0: failure: rank 3 exited with status 1"
    s.apply(event(events.encode(events.EXITED, rank=3, code=1)))
    s.apply(event(events.encode(events.EXITED, rank=0, code=-9, stopped=True)))
    text = shown(s)
    assert "failed (exit 1)" in text and "stopped by the launcher (signal 9)" in text
    restart = events.encode(events.CYCLE, cycle=1, start=5)
    assert s.apply(event(restart)) == "cycle 1: starting 4 ranks, resuming after step 5"
    assert s.apply(event(events.encode(events.END, code=0, outcome="the job finished"))) is None
    assert s.outcome == "the job finished" and "the job finished" in shown(s)


def test_a_large_job_shows_the_first_ranks_and_sums_up_the_rest(tmp_path: Path) -> None:
    s = state(tmp_path, nodes=8, per_node=8)
    s.apply(event(events.encode(events.STEP, rank=63, step=7, loss=1.0)))
    text = shown(s)
    assert f"... {64 - MAX_ROWS} more ranks, steps 0 to 7" in text


def test_lines_that_are_not_events_are_ignored() -> None:
    assert events.decode(b"Traceback (most recent call last):") is None
    assert events.decode(b'{"no": "event"}') is None
    buffer = events.LineBuffer()
    assert buffer.feed(b'{"event": "done", "ra') == []
    assert buffer.feed(b'nk": 1}\n{"event"') == [b'{"event": "done", "rank": 1}']
