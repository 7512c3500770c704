"""The doctor judges as the aggregator does and never shows a secret: an endpoint the
aggregator refuses to start with, a malformed headers variable, a spool file the aggregator
will not read, a malformed identity variable, and its own arguments."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from nvrx_otel.aggregator.config import AggregatorConfig
from nvrx_otel.aggregator.otlp_transport import redact_url
from nvrx_otel.aggregator.service import Aggregator
from nvrx_otel.logging import setup_logger
from nvrx_otel.spool.registry import close_writers
from tests.doctor.test_doctor import closed_port, doctor, doctor_json, job  # noqa: F401
from tests.otlp_receiver import OtlpReceiver

REFUSED = ["gw.example:4318", "localhost:99999", "ftp://gw:4318"]


@pytest.mark.parametrize("endpoint", REFUSED)
def test_doctor_fails_when_the_aggregator_would_refuse_the_endpoint(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    endpoint: str,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    config = AggregatorConfig.from_env(strict=True, log_dir=tmp_path, spool_root=tmp_path)
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        Aggregator(config)  # what `nvrx-otel aggregate` exits 2 on
    code, doc = doctor_json(capsys)
    assert code == 1
    refusal = [p for p in doc["problems"] if "aggregator would refuse to start" in p]
    assert len(refusal) == 1 and f"OTEL_EXPORTER_OTLP_ENDPOINT={endpoint!r}" in refusal[0]
    assert not any("OTEL_EXPORTER_OTLP_ENDPOINT" in w for w in doc["warnings"])  # once


def test_doctor_fails_on_an_aggregator_variable_it_would_refuse(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_OTEL_NODE_LOG_MAX_MB", "lots")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    code, doc = doctor_json(capsys)
    assert code == 1
    assert any("NVRX_OTEL_NODE_LOG_MAX_MB='lots'" in p for p in doc["problems"])


def test_doctor_never_prints_a_header_value(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer TOPSECRET")
    logged: list[str] = []  # what OTel's header parser would log, wherever it would go
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        for args in ((), ("--json",)):
            code, out, err = doctor(capsys, *args)
            assert code == 1
            assert "TOPSECRET" not in out + err + "".join(logged)
            assert "OTEL_EXPORTER_OTLP_HEADERS is malformed: headers are dropped" in out + err
    finally:
        logging.getLogger().removeHandler(handler)
    with OtlpReceiver() as receiver:  # an endpoint that takes records without the header
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        code, doc = doctor_json(capsys)
    assert code == 1  # the exporter would send without its authorization
    assert doc["problems"] == [
        "OTEL_EXPORTER_OTLP_HEADERS is malformed: headers are dropped: "
        "records would be sent without them"
    ]


def test_url_credentials_are_masked_in_every_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://alice:s3cr3tpw@127.0.0.1:{port}/?api_key=TOPSECRET"
    )
    for args in ((), ("--json",)):
        code, out, err = doctor(capsys, *args)
        assert code == 1  # the closed port
        assert "s3cr3tpw" not in out + err and "TOPSECRET" not in out + err
        assert f"http://***@127.0.0.1:{port}/?api_key=***" in out
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://alice:pw@gw/?token=TOPSECRET")
    code, out, err = doctor(capsys)
    assert code == 1 and "TOPSECRET" not in out + err and "'ftp://***@gw/?token=***'" in out


def test_redact_url_masks_userinfo_and_every_query_value() -> None:
    assert redact_url("https://u:p@h:1/x?a=1&tok&b=2") == "https://***@h:1/x?a=***&***&b=***"
    assert redact_url("u:p@gw:4317") == "***@gw:4317"
    assert redact_url("http://gw:4318/v1/logs") == "http://gw:4318/v1/logs"
    assert redact_url("http://h/a@b") == "http://h/a@b"  # an @ in the path is no userinfo


@pytest.mark.parametrize("value", ["inf", "-1", "0", "nan", "soon"])
def test_bad_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        doctor(capsys, "--timeout", value)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"--timeout: expected a finite number of seconds > 0, got {value!r}" in err


def test_a_fifo_named_as_a_spool_file_is_a_problem(
    capsys: pytest.CaptureFixture[str],
    job: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    job.mkdir(parents=True, exist_ok=True, mode=0o700)
    fifo = job / "ftl.p999999.0123456789abcdef.000000.jsonl"
    os.mkfifo(fifo)
    code, doc = doctor_json(capsys)
    assert code == 1
    assert any(str(fifo) in p and "not a regular file" in p for p in doc["problems"])


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_spool_file_is_a_problem(
    capsys: pytest.CaptureFixture[str],
    job: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    log = setup_logger()
    for i in range(5):
        log.info("rec %d", i)
    close_writers()
    (spooled,) = job.glob("*.jsonl")
    os.chown(spooled, 1234, 1234)
    code, doc = doctor_json(capsys)
    assert code == 1
    assert any(
        str(spooled) in p and "owned by uid 1234" in p and "never be delivered" in p
        for p in doc["problems"]
    ), doc["problems"]


def test_a_malformed_identity_variable_is_a_warning(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    for _ in range(2):  # also when this process said it before
        code, doc = doctor_json(capsys)
        assert code == 0
        assert any("RANK='abc'" in w for w in doc["warnings"]), doc["warnings"]
        assert doc["identity"]["workload rank"] == "?"
