"""``nvrx-otel report`` reads the gateway's file exporter output (``logs.jsonl``,
``traces.jsonl``): the hand-written job of :mod:`tests.report.fixture`, sent to the gateway
as OTLP/JSON over HTTP, gives the same findings from the gateway's files as from the
fixture's own."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from nvrx_otel.report import analyse
from nvrx_otel.view.read import Problems
from tests.collector.harness import MakeCollector, Ports, gateway_env, running, wait_until
from tests.collector.test_agent_gateway import post
from tests.report import fixture


def _count(out: Path, pattern: str, key: bytes) -> int:
    total = 0
    for path in out.glob(pattern):
        data = path.read_bytes()
        total += data[: data.rfind(b"\n") + 1].count(key)
    return total


@pytest.mark.collector
def test_report_reads_the_gateway_files(make_collector: MakeCollector, tmp_path: Path) -> None:
    job = fixture.write(tmp_path / "job")
    expected = analyse([str(job)], problems=Problems(io.StringIO()))
    (ports,) = Ports.pick(1)
    out = tmp_path / "out"
    gateway = make_collector("gateway", ["gateway.yaml"], gateway_env(ports, out), ports.health)
    with running(gateway):
        for path in sorted(job.glob("*.jsonl")):
            signal = "logs" if path.name.startswith("logs") else "traces"
            for line in path.read_text().splitlines():
                if line.startswith("{not json"):
                    continue
                post(ports.http, f"/v1/{signal}", line, "application/json")
        wait_until(
            lambda: (
                _count(out, "logs*.jsonl", b'"timeUnixNano"') == expected.logs
                and _count(out, "traces*.jsonl", b'"startTimeUnixNano"') == expected.spans
            ),
            "every record in the gateway's files",
            on_fail=gateway.log_tail,
        )
        assert gateway.stop() == 0
    problems = io.StringIO()
    got = analyse([str(out)], problems=Problems(problems))
    assert problems.getvalue() == ""
    assert (got.logs, got.spans, got.nodes, got.ranks) == (112, 18, ["n0", "n1"], 4)
    assert got.phases == expected.phases
    assert got.stragglers == expected.stragglers
    assert got.first_failure is not None and expected.first_failure is not None
    assert got.first_failure.rank == 1
    # the same failure, read from another file
    assert replace(got.first_failure, origin="", last_lines=[]) == replace(
        expected.first_failure, origin="", last_lines=[]
    )
    assert [ln.text for ln in got.first_failure.last_lines] == [
        ln.text for ln in expected.first_failure.last_lines
    ]
    assert got.first_failure_by_trace is not None
    assert got.first_failure_by_trace.rank == 2
    assert [(s.rank, s.cycle, s.behind_s) for s in got.silent] == [
        (s.rank, s.cycle, s.behind_s) for s in expected.silent
    ]
    assert got.cycles[1].recovery_s == expected.cycles[1].recovery_s
