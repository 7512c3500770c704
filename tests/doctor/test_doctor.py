"""``nvrx-otel doctor``: identity, configuration with sources, spool state, endpoint check,
and an exit status that is non-zero exactly when records would be lost."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import orjson
import pytest

from nvrx_otel.cli import main
from nvrx_otel.logging import setup_logger
from nvrx_otel.spool.registry import close_writers
from tests.aggregator.spoolkit import FakeWriter, config, running, spool_dir
from tests.otlp_receiver import OtlpReceiver


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["doctor", *args])
    out, err = capsys.readouterr()
    return code, out, err


def doctor_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = doctor(capsys, "--json", *args)
    return code, orjson.loads(out)


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A spool root under ``tmp_path`` and job ``job1`` in the environment."""
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    monkeypatch.setenv("SLURM_JOB_ID", "job1")
    return spool_dir(tmp_path)


def test_identity_launcher_ranks_node_job(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "4242",
        "RANK": "5",
        "WORLD_SIZE": "16",
        "NVRX_OTEL_NODE_ID": "node007",
        "OTEL_TRACES_EXPORTER": "none",  # else spans go to the SDK's default endpoint
    }.items():
        monkeypatch.setenv(name, value)
    code, doc = doctor_json(capsys)
    ident = doc["identity"]
    assert ident["launcher"] == "Slurm (SLURM_PROCID)"
    assert ident["workload rank"] == "5/16"
    assert ident["infra rank"] == "5"
    assert ident["node"] == "node007 (NVRX_OTEL_NODE_ID)"
    assert ident["job"] == "4242 (SLURM_JOB_ID)"
    assert code == 0, doc["problems"]  # no spool, no endpoint: warnings only
    assert any("no spool" in w for w in doc["warnings"])


def test_configuration_is_printed_with_sources(
    capsys: pytest.CaptureFixture[str], job: Path
) -> None:
    code, out, _ = doctor(capsys)
    assert code == 0, out
    root = next(line for line in out.splitlines() if line.strip().startswith("root "))
    assert "(environment variable NVRX_NODE_LOCAL_TMPDIR)" in root
    budget = next(line for line in out.splitlines() if "budget bytes" in line)
    assert "(NVRX_LOG_MAX_LOG_FILES x NVRX_LOG_MAX_FILE_SIZE_KB x NVRX_OTEL_SPOOL_SCALE)" in budget
    assert out.rstrip().endswith("doctor: no problem found")


def test_endpoint_that_answers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        code, doc = doctor_json(capsys)
        assert receiver.requests == 2  # an empty export request per signal
    assert code == 0, doc["problems"]
    assert [(p["signal"], p["ok"]) for p in doc["otlp"]] == [("logs", True), ("traces", True)]
    assert doc["otlp"][0]["detail"].startswith("HTTP 200 in ")
    assert doc["otlp"][0]["tls"] is None


def test_closed_port_exits_non_zero_with_one_line_naming_the_endpoint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    code, out, _ = doctor(capsys, "--timeout", "10")
    assert code == 1
    expected = [
        f"OTLP {signal} endpoint {base}/v1/{signal} does not answer: connection refused"
        for signal in ("logs", "traces")
    ]
    lines = out.splitlines()
    problems = lines[lines.index("problems") + 1 : -1]
    assert problems == [f"  - {line}" for line in expected]
    assert lines[-1] == "doctor: 2 problems: records would be lost"
    code, _, err = doctor(capsys, "--json")
    assert code == 1
    assert err.splitlines() == [f"nvrx-otel doctor: {line}" for line in expected]


def test_endpoint_that_refuses_is_a_problem(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with OtlpReceiver() as receiver:
        receiver.status = 401
        code, doc = doctor_json(capsys, "--otlp-endpoint", receiver.endpoint)
    assert code == 1
    assert doc["otlp"][0]["endpoint"] == f"{receiver.endpoint}/v1/logs"
    assert "HTTP 401" in doc["otlp"][0]["detail"]
    assert doc["config"]["otlp"]["logs endpoint"]["source"] == "argument --otlp-endpoint"


def test_spans_on_the_sdk_path_check_the_traces_endpoint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No spool and no aggregator endpoint: spans go straight to the SDK's OTLP exporter,
    whose default endpoint is checked."""
    code, doc = doctor_json(capsys, "--timeout", "10")
    assert [(p["signal"], p["endpoint"]) for p in doc["otlp"]] == [
        ("traces", "http://localhost:4318/v1/traces")
    ]
    assert code == 1 and doc["problems"][0].startswith("OTLP traces endpoint")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    code, doc = doctor_json(capsys)
    assert doc["otlp"] == [] and code == 0


def test_writers_nobody_aggregates_are_a_problem(
    capsys: pytest.CaptureFixture[str], job: Path
) -> None:
    w = FakeWriter(job, pid=31337, proc="rank3")
    w.log("waiting for an aggregator")
    code, doc = doctor_json(capsys)
    spool = doc["spool"]
    assert spool["job_dir"] == str(job)
    assert [(x["pid"], x["proc"], x["live"]) for x in spool["writers"]] == [(31337, "rank3", True)]
    assert spool["backlog"] > 0 and spool["aggregator_pid"] is None
    assert code == 1
    assert any("no aggregator serves" in p and str(job) in p for p in doc["problems"])
    w.close()
    code, doc = doctor_json(capsys)
    assert doc["spool"]["writers"][0]["live"] is False
    assert code == 1  # its records are still not in the node log


def test_served_spool_is_fine(
    capsys: pytest.CaptureFixture[str], job: Path, tmp_path: Path
) -> None:
    w = FakeWriter(job)
    w.log("hello")
    with running(config(tmp_path)):
        code, doc = doctor_json(capsys)
        assert doc["spool"]["aggregator_pid"] is not None
        assert code == 0, doc["problems"]
        w.close()  # the aggregator drains at exit: it waits for live writers


def test_writer_at_its_budget_is_a_problem(
    capsys: pytest.CaptureFixture[str], job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live writer whose files leave no room for another within its budget drops new
    records once its file is full: the writer's own rule, read from its header."""
    monkeypatch.setenv("NVRX_LOG_MAX_FILE_SIZE_KB", "4")
    monkeypatch.setenv("NVRX_OTEL_SPOOL_BUDGET_MB", "0.004")  # 4194 bytes: one 4 KB file
    setup_logger().info("one record")
    code, doc = doctor_json(capsys)
    (writer,) = doc["spool"]["writers"]
    assert writer["live"] and writer["max_file"] == 4096
    assert writer["budget"] == int(0.004 * 1024 * 1024)
    assert code == 1
    assert any("drops new records once its current file is full" in p for p in doc["problems"])
    close_writers()


def test_unusable_spool_is_a_problem(
    capsys: pytest.CaptureFixture[str], job: Path, tmp_path: Path
) -> None:
    job.mkdir(parents=True)
    job.chmod(0o777)
    code, doc = doctor_json(capsys)
    assert code == 1
    assert any("writable by other users" in p for p in doc["problems"])


def test_other_jobs_spool_files_are_shown(
    capsys: pytest.CaptureFixture[str], job: Path, tmp_path: Path
) -> None:
    other = FakeWriter(spool_dir(tmp_path, "job2"))
    other.log("a record of another job")
    other.close()
    code, doc = doctor_json(capsys)
    assert [j["path"] for j in doc["spool"]["other_jobs"]] == [str(spool_dir(tmp_path, "job2"))]
    assert any("another job" in w for w in doc["warnings"])
    assert code == 0


def test_kill_switch_is_reported(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, job: Path
) -> None:
    monkeypatch.setenv("NVRX_OTEL_DISABLED", "1")
    code, doc = doctor_json(capsys)
    assert code == 0
    assert any("NVRX_OTEL_DISABLED" in w for w in doc["warnings"])
    assert doc["config"]["tracing"]["spans go to"]["value"] == "off"
