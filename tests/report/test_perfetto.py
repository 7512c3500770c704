"""``--perfetto``: Chrome trace-event JSON checked against the format (required keys,
well-formed complete events, every flow's start matched by its finish)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from nvrx_otel import semconv as sc
from nvrx_otel.report.cli import main
from nvrx_otel.report.otlp import parse_line
from nvrx_otel.report.perfetto import PerfettoWriter
from tests.report import fixture
from tests.report.otlpkit import at, log, logs_line, resource, sid, span, spans_line, tid


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("perfetto")
    directory = fixture.write(tmp / "job")
    out = tmp / "job.json"
    assert main([str(directory), "--perfetto", str(out), "--json"]) == 0
    doc: dict[str, Any] = orjson.loads(out.read_bytes())
    return doc


def test_every_event_has_the_required_keys(trace: dict[str, Any]) -> None:
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] in {"X", "i", "s", "f", "M"}, e
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int)
        if e["ph"] != "M" or e["name"].startswith("thread_"):
            assert isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float))


def test_spans_are_well_formed_complete_events(trace: dict[str, Any]) -> None:
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 18  # every span of the fixture
    for e in complete:
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["cat"], str)
    write = [e for e in complete if e["name"] == sc.SPAN_CKPT_SAVE_WRITE]
    assert sorted(e["dur"] for e in write) == [1e6, 1.1e6, 1.2e6, 3e6]  # microseconds
    stage = next(e for e in complete if e["name"] == sc.SPAN_CKPT_SAVE_STAGE)
    assert stage["args"]["status"] == "ERROR RuntimeError: CUDA error"


def test_one_process_per_node_and_one_track_per_rank(trace: dict[str, Any]) -> None:
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    processes = {e["args"]["name"]: e["pid"] for e in meta if e["name"] == "process_name"}
    assert set(processes) == {"n0", "n1"}
    threads = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert threads == {
        (processes["n0"], "rank 0"),
        (processes["n0"], "rank 1"),
        (processes["n0"], "launcher"),
        (processes["n1"], "rank 2"),
        (processes["n1"], "rank 3"),
    }
    ranks = {
        e["tid"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == processes["n1"]
    }
    assert ranks == {2, 3}


def test_log_records_are_instant_events(trace: dict[str, Any]) -> None:
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert len(instants) == 112
    assert all(e["s"] == "t" for e in instants)
    err = next(e for e in instants if e["name"] == "peer failed")
    assert err["args"]["level"] == "ERROR" and err["tid"] == 1


def test_links_are_flows_whose_starts_and_finishes_match(trace: dict[str, Any]) -> None:
    events = trace["traceEvents"]
    starts = Counter(e["id"] for e in events if e["ph"] == "s")
    finishes = Counter(e["id"] for e in events if e["ph"] == "f")
    assert starts == finishes and len(starts) == 1  # the request's link to its schedule
    (flow,) = starts
    s = next(e for e in events if e["ph"] == "s" and e["id"] == flow)
    f = next(e for e in events if e["ph"] == "f" and e["id"] == flow)
    assert f["bp"] == "e"
    slices = [e for e in events if e["ph"] == "X"]

    def enclosing(point: dict[str, Any]) -> str:
        (hit,) = [
            e["name"]
            for e in slices
            if (e["pid"], e["tid"]) == (point["pid"], point["tid"])
            and e["ts"] <= point["ts"] <= e["ts"] + e["dur"]
            and e["ts"] == point["ts"]
        ]
        return hit

    assert enclosing(s) == sc.SPAN_CKPT_SCHEDULE
    assert enclosing(f) == sc.SPAN_CKPT_REQUEST


def _written(*lines: str) -> tuple[list[dict[str, Any]], PerfettoWriter]:
    """The events a writer given ``lines`` (OTLP/JSON) writes, and the writer."""
    out = io.BytesIO()
    w = PerfettoWriter(out)
    for line in lines:
        for item in parse_line(line, "f", 1):
            w(item)
    w.close()
    return orjson.loads(out.getvalue())["traceEvents"], w


def test_a_link_seen_before_its_span_is_matched_when_the_span_comes() -> None:
    linking = spans_line(
        resource("a", 0),
        [span(sc.SPAN_CKPT_REQUEST, at(2), at(3), trace=tid(1), span_id=sid(2),
              links=[(tid(1), sid(1))])],
    )  # fmt: skip
    target = spans_line(
        resource("a", 0),
        [span(sc.SPAN_CKPT_SCHEDULE, at(1), at(1.5), trace=tid(1), span_id=sid(1))],
    )
    events, w = _written(linking, target)
    assert sorted(e["ph"] for e in events if e["ph"] in ("s", "f")) == ["f", "s"]
    assert w.unmatched == 0


def test_a_link_to_a_span_never_seen_is_left_out() -> None:
    line = spans_line(
        resource("a", 0),
        [span(sc.SPAN_CKPT_REQUEST, at(2), at(3), trace=tid(1), span_id=sid(2),
              links=[(tid(1), sid(9))])],
    )  # fmt: skip
    events, w = _written(line)
    assert not [e for e in events if e["ph"] in ("s", "f")]
    assert w.unmatched == 1


def test_the_output_is_written_while_reading(tmp_path: Path) -> None:
    """The writer holds no events: what it was given is in the file before it closes."""
    out = io.BytesIO()
    w = PerfettoWriter(out)
    for item in parse_line(
        logs_line(resource("a", 0), [log(at(i), "x") for i in range(100)]), "f", 1
    ):
        w(item)
    assert out.getvalue().count(b'"ph":"i"') == 100
