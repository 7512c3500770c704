"""The aggregator's command line speaks with one voice: every stderr line of a run starts
with the same prefix (the command it was run as), whoever says it (the aggregator, the
settings' warnings, the OTel SDK's exporters, a signal handler, argparse), and counts
agree with their nouns (``1 record``, ``2 records``)."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest

from tests.aggregator.spoolkit import FakeWriter, cli, finish, spawn, spool_dir, started, wait_for

MODULE = [sys.executable, "-m", "nvrx_otel.logging.aggregator"]
MODULE_PREFIX = "python -m nvrx_otel.logging.aggregator: "
COMMAND_PREFIX = "nvrx-otel aggregate: "
_NOUNS = r"(?:log |truncated |corrupt |spool |uncommitted )?(?:record|span|writer|file|byte)"
ONE_WITH_PLURAL = re.compile(rf"(?<![\d.,])1 {_NOUNS}s\b(?!/s)")
MANY_WITH_SINGULAR = re.compile(rf"(?<![\d.,])(?:0|[2-9]|\d{{2,}}) {_NOUNS}\b")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _check(err: str, prefix: str) -> list[str]:
    """Every line starts with ``prefix``; no count disagrees with its noun."""
    lines = err.splitlines()
    assert lines, "nothing said"
    strays = [line for line in lines if not line.startswith(prefix)]
    assert not strays, "\n".join(strays)
    for line in lines:
        assert not ONE_WITH_PLURAL.search(line), line
        assert not MANY_WITH_SINGULAR.search(line), line
    return lines


def test_every_line_of_a_run_has_the_run_prefix_and_right_plurals(tmp_path: Path) -> None:
    """One record, one corrupt line, one writer; an OTLP endpoint that is down (the SDK's
    metrics exporter complains), a malformed resource variable (a one-time settings
    warning), a workload signal (said from the signal handler)."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("one")
    w.raw(b"not a record\n")
    w.close()
    env = {"OTEL_RESOURCE_ATTRIBUTES": "team=a,oops", "NVRX_OTEL_STATUS_INTERVAL_S": "0.2"}
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    agg = cli(tmp_path, "--otlp-endpoint", endpoint, "--otlp-json", str(tmp_path / "otlp"),
              "--drain-timeout", "1", env=env)  # fmt: skip
    started(tmp_path, agg)
    wait_for(lambda: "status:" in agg.err(), 30, "a status line")
    os.kill(agg.pid, signal.SIGUSR1)
    wait_for(lambda: "SIGUSR1" in agg.err(), 30, "the signal's line")
    (tmp_path / "done").touch()
    code, err = finish(agg, timeout=90)
    assert code == 0, err
    lines = _check(err, MODULE_PREFIX)
    said = "\n".join(lines)
    assert "SIGUSR1: a signal for the workload, still aggregating" in said
    assert "OTEL_RESOURCE_ATTRIBUTES: ignoring 'oops'" in said
    assert "OTLP/JSON: exported 2 log records, 0 spans, 0 truncated spans;" in said  # + report
    assert re.search(
        r"wrote 2 records to .*; reported 0 dropped and 1 corrupt record; 1 writer", said
    )
    assert re.search(r"status: .* 2 written, 0 dropped, 1 corrupt, 1 writer \(0 live\)", said)


@pytest.mark.parametrize(("writers", "each"), [(1, 1), (2, 3)])
def test_counts_agree_with_their_nouns(tmp_path: Path, writers: int, each: int) -> None:
    for n in range(writers):
        w = FakeWriter(spool_dir(tmp_path), writer=f"{n + 1:016x}", pid=4242 + n)
        for i in range(each):
            w.log(f"record {i}")
        w.close()
    agg = cli(tmp_path, "--otlp-json", str(tmp_path / "otlp"))
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    said = "\n".join(_check(err, MODULE_PREFIX))
    total = writers * each
    records = "1 log record" if total == 1 else f"{total} log records"
    assert f"OTLP/JSON: exported {records}, 0 spans, 0 truncated spans; 0 dropped" in said
    wrote = "1 record" if total == 1 else f"{total} records"
    ws = "1 writer" if writers == 1 else f"{writers} writers"
    assert re.search(rf"wrote {wrote} to .*; reported 0 dropped and 0 corrupt records; {ws}$", said)


def test_nvrx_otel_aggregate_speaks_as_itself(tmp_path: Path) -> None:
    w = FakeWriter(spool_dir(tmp_path))
    w.log("one")
    w.close()
    env = {**os.environ, "NVRX_OTEL_NODE_ID": "testnode"}
    proc = spawn(
        tmp_path,
        [sys.executable, "-m", "nvrx_otel.cli", "aggregate", "--log-dir", str(tmp_path / "logs"),
         "--wait-file", str(tmp_path / "done"), "--spool-dir", str(tmp_path / "spool"),
         "--job-id", "job1", "--check-interval", "0.05"],
        env,
    )  # fmt: skip
    started(tmp_path, proc)
    (tmp_path / "done").touch()
    code, err = finish(proc)
    assert code == 0, err
    lines = _check(err, COMMAND_PREFIX)
    assert lines[0].startswith(f"{COMMAND_PREFIX}aggregating ")


def test_bad_arguments_are_one_prefixed_line(tmp_path: Path) -> None:
    for argv, prefix in (
        ([*MODULE, "--log-dir", str(tmp_path), "--wait-file", "w", "--bogus"], MODULE_PREFIX),
        ([*MODULE, "--wait-file", "w"], MODULE_PREFIX),  # a required flag missing
        ([sys.executable, "-m", "nvrx_otel.cli", "aggregate", "--nice", "99"], COMMAND_PREFIX),
    ):
        proc = spawn(tmp_path, argv, dict(os.environ))
        code, err = finish(proc)
        assert code == 2
        (line,) = _check(err, prefix)
        assert "error: " in line and line.endswith("--help)"), line
