"""Custom loguru levels reach the spool with the severity their number has in the level
table, the same as a stdlib level of that number, so they keep their order."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from loguru import logger

from nvrx_otel import levels
from nvrx_otel.logging import SpoolHandler
from nvrx_otel.logging.logflow import configure_logging, get_logger
from tests.conftest import log_records
from tests.logs.logflow.kit import spool_logs

NUMBERS = (7, 12, 22, 25, 27, 33, 45, 55)


def test_custom_loguru_levels_keep_their_order_and_match_stdlibs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "spool"
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(root))
    for n in NUMBERS:
        try:
            logger.level(f"CUSTOM{n}", no=n)
        except (TypeError, ValueError):  # already made by an earlier run in this process
            pass
    configure_logging(script_name="run", file_level=1)
    log = get_logger("custom")
    for n in NUMBERS:
        log.log(f"CUSTOM{n}", "at {}", n)
    log.success("named")
    got = {r["lvl"]: r["sev"] for r in spool_logs(root)}
    loguru_sevs = [got[f"CUSTOM{n}"] for n in NUMBERS]
    assert loguru_sevs == sorted(loguru_sevs)
    assert got["SUCCESS"] == levels.SEVERITY_BY_LEVEL["SUCCESS"]

    handler = SpoolHandler(tmp_path / "stdlib")
    stdlib = logging.getLogger("level.table.stdlib")
    stdlib.propagate = False
    stdlib.setLevel(1)
    stdlib.addHandler(handler)
    try:
        for n in NUMBERS:
            stdlib.log(n, "at %d", n)
    finally:
        stdlib.removeHandler(handler)
        handler.close()
    assert [r["sev"] for r in log_records(tmp_path / "stdlib")] == loguru_sevs
