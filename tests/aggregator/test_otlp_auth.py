"""Credentials refused (HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED) are a
configuration error: reported loudly, retried, never a reason to count records dropped or
to delete spool files. A mistyped token used to lose every record: the batch was counted
dropped and its spool files deleted.

Ledger of the process tests: 50 records emitted; all 50 in the node log at once; none at
the receiver while the token is wrong, all still in the spool; all 50 at the receiver once
the token is right, 0 dropped, no ``otlp_rejected`` report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nvrx_otel import semconv
from nvrx_otel.aggregator import otlp_delivery
from nvrx_otel.aggregator.otlp_delivery import Delivery
from nvrx_otel.aggregator.otlp_transport import Result
from tests.aggregator.spoolkit import (
    FakeWriter,
    cli,
    finish,
    log_path,
    messages,
    spool_dir,
    started,
    wait_for,
)
from tests.otlp_receiver import OtlpReceiver

TOKEN = "right-token"
RECORDS = 50


class Answers:
    """An exporter answering from a script (then OK), with the errors to go with them."""

    def __init__(self, *answers: tuple[Result, str]) -> None:
        self.answers = list(answers)
        self.last_error = ""
        self.rejected = 0
        self.sent = 0

    def deliver(self, signal: str, message: Any, payload: bytes, timeout: float) -> Result:
        self.sent += 1
        if not self.answers:
            return Result.OK
        result, self.last_error = self.answers.pop(0)
        return result


def test_denied_is_retried_reported_and_nothing_dropped(monkeypatch: Any) -> None:
    """Three refusals of the credentials, then the endpoint takes the request: it is sent
    four times, none of its items lost; the report names the answer, is made once per
    answer (not once per retry), and the return is said."""
    monkeypatch.setattr(otlp_delivery, "BACKOFF_START_S", 0.01)
    said: list[str] = []
    exporter = Answers(
        (Result.DENIED, "HTTP 401 from https://c/v1/logs"),
        (Result.DENIED, "HTTP 401 from https://c/v1/logs"),
        (Result.DENIED, "HTTP 403 from https://c/v1/logs"),
    )
    delivery = Delivery([exporter], on_report=said.append, give_way=lambda: False)
    assert delivery.send("logs", b"payload", 7) == 0
    assert exporter.sent == 4 and delivery.dropped == 0 and delivery.denied == ""
    denied = [m for m in said if m.startswith("OTLP configuration error")]
    assert len(denied) == 2, said
    assert "HTTP 401" in denied[0] and "HTTP 403" in denied[1]
    assert "OTEL_EXPORTER_OTLP_HEADERS" in denied[0] and "Nothing is dropped" in denied[0]
    assert said[-1] == "OTLP logs export works again"


def test_denied_is_said_again_while_it_lasts(monkeypatch: Any) -> None:
    monkeypatch.setattr(otlp_delivery, "BACKOFF_START_S", 0.01)
    monkeypatch.setattr(otlp_delivery, "DENIED_REMIND_S", 0.0)
    said: list[str] = []
    exporter = Answers(*[(Result.DENIED, "gRPC StatusCode.UNAUTHENTICATED")] * 3)
    delivery = Delivery([exporter], on_report=said.append, give_way=lambda: False)
    assert delivery.send("traces", b"payload", 2) == 0
    assert sum(m.startswith("OTLP configuration error") for m in said) == 3


def test_denied_gives_way_like_an_endpoint_that_is_down() -> None:
    """The drain's deadline ends the retries: the request is not delivered (None: send it
    again later), not counted lost."""
    said: list[str] = []
    exporter = Answers(*[(Result.DENIED, "HTTP 401 from x")] * 1000)
    delivery = Delivery([exporter], on_report=said.append, give_way=lambda: False)
    delivery.drain_by(time.monotonic() + 1.0)
    assert delivery.send("logs", b"payload", 3) is None
    assert delivery.dropped == 0 and "HTTP 401" in delivery.denied


def _spooled_logs(tmp: Path) -> int:
    return sum(
        p.read_bytes().count(b'"k":"log"')
        for p in spool_dir(tmp).iterdir()
        if p.name.endswith(".jsonl")
    )


def _received(receiver: OtlpReceiver) -> tuple[int, int]:
    """Records (by key) and records reported rejected at the receiver (a copy of its list,
    without its lock: ``wait_for`` holds that while it asks)."""
    logs = list(receiver.logs)
    keys = {r["attributes"][semconv.RECORD_KEY] for r in logs if r["body"].startswith("auth ")}
    rejected = sum(
        r["attributes"][semconv.DROP_COUNT]
        for r in logs
        if r["attributes"].get(semconv.DROP_REASON) == "otlp_rejected"
    )
    return len(keys), rejected


def test_wrong_token_keeps_every_record_in_the_spool_until_the_right_one(tmp_path: Path) -> None:
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(RECORDS):
        w.log(f"auth {i}")
    w.close()
    with OtlpReceiver() as receiver:
        receiver.token = TOKEN
        endpoint = ("--otlp-endpoint", receiver.endpoint, "--drain-timeout", "2")
        wrong = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer typo"}
        proc = cli(tmp_path, *endpoint, env=wrong)
        started(tmp_path, proc)
        wait_for(lambda: len(messages(log_path(tmp_path))) == RECORDS, timeout=60, what="log")
        wait_for(lambda: receiver.refused.get("logs", 0) >= 2, timeout=60, what="refusals")
        wait_for(lambda: "OTLP configuration error" in proc.err(), timeout=30, what="report")
        assert "HTTP 401" in proc.err()
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
        assert code == 0, err
        assert "; 0 dropped; not caught up" in err, err
        assert "a configuration error: HTTP 401" in err, err
        assert _received(receiver) == (0, 0)
        assert _spooled_logs(tmp_path) == RECORDS  # nothing deleted

        (tmp_path / "done").unlink()
        right = {"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {TOKEN}"}
        proc = cli(tmp_path, *endpoint, env=right)
        started(tmp_path, proc)
        assert receiver.wait_for(lambda r: _received(r)[0] == RECORDS, timeout=60)
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
    assert code == 0, err
    assert f"exported {RECORDS} log records" in err and "; 0 dropped" in err, err
    assert "not caught up" not in err and "configuration error" not in err, err
    assert _received(receiver) == (RECORDS, 0)
    assert len(messages(log_path(tmp_path))) == RECORDS  # the node log once, not twice


def test_a_token_fixed_at_the_endpoint_delivers_without_a_restart(tmp_path: Path) -> None:
    """The endpoint's configuration was the wrong one: once it accepts the token, the
    retries deliver everything, none counted dropped."""
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(RECORDS):
        w.log(f"auth {i}")
    w.close()
    with OtlpReceiver() as receiver:
        receiver.token = "what-the-endpoint-expected-by-mistake"
        proc = cli(
            tmp_path,
            "--otlp-endpoint",
            receiver.endpoint,
            env={"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {TOKEN}"},
        )
        started(tmp_path, proc)
        wait_for(lambda: "OTLP configuration error" in proc.err(), timeout=60, what="report")
        receiver.token = TOKEN
        assert receiver.wait_for(lambda r: _received(r)[0] == RECORDS, timeout=90)
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
    assert code == 0, err
    assert "OTLP logs export works again" in err
    assert f"exported {RECORDS} log records" in err and "; 0 dropped" in err, err
    assert _received(receiver) == (RECORDS, 0)
