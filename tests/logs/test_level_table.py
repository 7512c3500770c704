"""The level table: one level name has one OTel severity whichever front end wrote it, every
named level round-trips, and custom levels keep their order."""

from __future__ import annotations

import logging
from itertools import pairwise
from pathlib import Path

import pytest
from loguru import logger as loguru_logger

from nvrx_otel import levels
from nvrx_otel import record as rec
from nvrx_otel.logging import SpoolHandler, setup_logger
from nvrx_otel.logging.logflow import console
from tests.conftest import log_records

CUSTOM_NUMBERS = (1, 5, 7, 12, 15, 20, 21, 22, 24, 25, 26, 27, 29, 33, 45, 50, 55, 70)


@pytest.fixture
def stdlib_success(monkeypatch: pytest.MonkeyPatch) -> int:
    """stdlib level 25 named SUCCESS (as NVRx-style code registers it), undone afterwards."""
    monkeypatch.setitem(logging._levelToName, 25, "SUCCESS")  # type: ignore[attr-defined]
    monkeypatch.setitem(logging._nameToLevel, "SUCCESS", 25)  # type: ignore[attr-defined]
    return 25


def _spool_handler_records(root: Path, numbers: tuple[int, ...]) -> list[dict[str, object]]:
    handler = SpoolHandler(root)
    log = logging.getLogger(f"level.table.{id(handler)}")
    log.propagate = False
    log.setLevel(1)
    log.addHandler(handler)
    try:
        for n in numbers:
            log.log(n, "at %d", n)
    finally:
        log.removeHandler(handler)
        handler.close()
    return log_records(root)


def test_stdlib_success_has_loguru_successs_severity_on_both_stdlib_paths(
    tmp_path: Path, stdlib_success: int
) -> None:
    """stdlib 25 "SUCCESS" was severity 11 while loguru's SUCCESS was 10 (INFO2)."""
    want = levels.SEVERITY_BY_LEVEL["SUCCESS"]
    assert want == 10 == levels.severity_for("SUCCESS", loguru_logger.level("SUCCESS").no)
    (handler_rec,) = _spool_handler_records(tmp_path / "handler", (stdlib_success,))
    assert (handler_rec["lvl"], handler_rec["sev"]) == ("SUCCESS", want)
    fast = setup_logger(node_local_tmp_dir=str(tmp_path / "fast"))
    fast.log(stdlib_success, "fast")
    (fast_rec,) = log_records(tmp_path / "fast")
    assert (fast_rec["lvl"], fast_rec["sev"]) == ("SUCCESS", want)


def test_stdlib_custom_levels_keep_their_order(tmp_path: Path) -> None:
    got = _spool_handler_records(tmp_path, CUSTOM_NUMBERS)
    sevs = [r["sev"] for r in got]
    assert sevs == [levels.severity_of(n) for n in CUSTOM_NUMBERS]
    assert sevs == sorted(sevs) and min(sevs) >= 1 and max(sevs) <= levels.SEVERITY_MAX  # type: ignore[type-var]


def test_every_named_level_round_trips() -> None:
    numbers = [lv.loguru for lv in levels.LEVELS]
    severities = [lv.severity for lv in levels.LEVELS]
    assert numbers == sorted(set(numbers)) and severities == sorted(set(severities))
    for lv in levels.LEVELS:
        assert levels.BY_NAME[lv.name] is lv
        assert levels.severity_of(lv.loguru) == lv.severity
        assert levels.severity_for(lv.name, lv.loguru) == lv.severity
        assert levels.severity_of_name(lv.name.lower()) == lv.severity
        assert levels.level_of_severity(lv.severity) is lv
        assert rec.SEVERITY_BY_LEVEL[lv.name] == lv.severity
        assert loguru_logger.level(lv.name).no == lv.loguru
        if lv.stdlib is not None:
            assert lv.stdlib == lv.loguru
            assert logging.getLevelName(lv.stdlib) == lv.name
            assert logging.getLevelName(lv.name) == lv.stdlib
        assert console._STYLES[lv.name] == lv.style
    for alias, name in levels.ALIASES.items():
        assert levels.SEVERITY_BY_LEVEL[alias] == levels.SEVERITY_BY_LEVEL[name]
        assert logging.getLevelName(alias) == logging.getLevelName(name)


def test_a_custom_level_between_two_names_stays_between_them() -> None:
    anchors = [(lv.loguru, lv.severity) for lv in levels.LEVELS]
    for (lo_no, lo_sev), (hi_no, hi_sev) in pairwise(anchors):
        for n in range(lo_no, hi_no):
            assert lo_sev <= levels.severity_of(n) < hi_sev
    assert [levels.severity_of(n) for n in range(0, 200)] == sorted(
        levels.severity_of(n) for n in range(0, 200)
    )
    assert levels.severity_of(10_000) == levels.SEVERITY_MAX


def test_otlp_encoder_takes_a_missing_severity_from_the_level_name() -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
    )

    from nvrx_otel.aggregator.otlp_encode import encode_logs

    base = {"k": "log", "ts": 1, "lg": "app", "msg": "m", "key": "ab-1"}
    records = [
        {**base, "lvl": "warning"},
        {**base, "lvl": "SUCCESS", "sev": 10},
        {**base, "lvl": "NOTICE"},
    ]
    raw = encode_logs([({}, records)], observed_ns=2).SerializeToString()
    got = ExportLogsServiceRequest.FromString(raw).resource_logs[0].scope_logs[0].log_records
    assert [lr.severity_number for lr in got] == [levels.SEVERITY_BY_LEVEL["WARNING"], 10, 0]
