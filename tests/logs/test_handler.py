"""SpoolHandler: a plain record's line (from cached pieces) says what the record's dict
would say; every record that is not plain still takes the dict path."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from nvrx_otel import record as rec
from nvrx_otel.logging import SpoolHandler
from nvrx_otel.logging.handler import from_log_record
from tests.conftest import log_records
from tests.logs.forked import check_child_writes_its_own_keys

HERE = Path(__file__).name


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[logging.Logger, SpoolHandler]]:
    handler = SpoolHandler(tmp_path)
    log = logging.getLogger(f"app.handler.{id(handler)}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    yield log, handler
    log.removeHandler(handler)
    handler.close()


def _expected(lr: logging.LogRecord) -> dict[str, Any]:
    fields = from_log_record(lr)
    fields.pop("ts")
    return fields


def test_plain_records_say_what_their_dict_says(
    tmp_path: Path, app: tuple[logging.Logger, SpoolHandler]
) -> None:
    log, handler = app
    dict_path: list[object] = []
    handler.writer.emit = dict_path.append  # type: ignore[method-assign]
    seen: list[logging.LogRecord] = []
    log.addFilter(lambda r: seen.append(r) or True)
    logging.addLevelName(25, "NOTICE%")  # a custom level, with a % in its name
    tracer = TracerProvider().get_tracer("t")
    log.info("step %d loss %.3f", 1, 0.5)
    with tracer.start_as_current_span("s"):
        log.log(25, "in a span: 100%% of %s", "it")
    worker = threading.Thread(target=lambda: log.debug("from %s", "a thread"), name="w%1")
    worker.start()
    worker.join()
    log.error('quote " backslash \\ esc \x1b')
    got = log_records(tmp_path)
    assert dict_path == []  # every one of them took the cached-line path
    assert len(got) == len(seen) == 4
    for line, lr in zip(got, seen, strict=True):
        assert lr.__dict__.get("nvrx_spooled") is True
        want = _expected(lr)
        assert {k: line[k] for k in want} == want
        assert abs(line["ts"] - int(lr.created * 1e9)) < 1_000  # float rounding only
        assert line["key"].startswith(handler.writer.writer_id + "-")
        assert line["node"] and line["pid"] == os.getpid()
    assert got[1]["lvl"] == "NOTICE%" and got[1]["sev"] == rec.severity_of(25)
    assert "span_id" in got[1] and "span_id" not in got[0]
    assert got[2]["tn"] == "w%1" and got[2]["tid"] != got[0]["tid"]
    seqs = [rec.seq_of(r["key"]) for r in got]
    assert seqs == list(range(seqs[0], seqs[0] + 4))


def test_records_that_are_not_plain_take_the_dict_path(
    tmp_path: Path, app: tuple[logging.Logger, SpoolHandler]
) -> None:
    log, handler = app
    dict_path: list[dict[str, Any]] = []
    emit = handler.writer.emit

    def counting(record: dict[str, Any]) -> None:
        dict_path.append(record)
        emit(record)

    handler.writer.emit = counting  # type: ignore[method-assign]
    log.info("extra", extra={"step": 3})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    log.info("stack", stack_info=True)
    log.info("lone \udc80 surrogate")
    got = {r["msg"]: r for r in log_records(tmp_path)}
    assert got["extra"]["attrs"] == {"step": 3}
    assert got["failed"]["exc_type"] == "ValueError" and "boom" in got["failed"]["exc"]
    assert "Stack (most recent call last)" in got["stack"]["exc"]
    assert "lone \ufffd surrogate" in got
    assert len(dict_path) == 4


def test_a_forked_child_writes_its_own_writer_id(
    tmp_path: Path, app: tuple[logging.Logger, SpoolHandler]
) -> None:
    check_child_writes_its_own_keys(app[0], tmp_path)
