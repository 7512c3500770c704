"""A bad format call through the loguru front end keeps its record, reports once on stderr
and never raises into training, as the stdlib path does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from nvrx_otel.logging import handler
from nvrx_otel.logging.handler import error_count
from nvrx_otel.logging.logflow import configure_logging, get_logger
from tests.logs.logflow.kit import spool_logs


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "spool"
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(root))
    monkeypatch.setattr(handler, "_errors", {"count": 0})  # each test sees its first report
    return root


@pytest.mark.parametrize("rules", [False, True], ids=["no module rules", "module rules"])
def test_bad_format_call_keeps_the_record_and_never_raises(
    rules: bool, spool: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module_levels = {"elsewhere": {"file": "DEBUG"}} if rules else None
    configure_logging(script_name="run", module_levels=module_levels)
    before = error_count()
    line = sys._getframe().f_lineno + 1
    logger.info("bad fmt {} {}", 1)
    get_logger("t").bind(step=3).warning("missing {key}", other=2)
    get_logger("t").opt(colors=True).error("<red>{}</red> {}", "x")
    logger.log("INFO", "{0[k]}", {})
    get_logger("t").info("fine {}", 1)
    assert error_count() == before + 4
    recs = spool_logs(spool)
    assert [r["msg"] for r in recs] == [
        "'bad fmt {} {}' args=(1,) [format error: IndexError: "
        "Replacement index 1 out of range for positional args tuple]",
        "'missing {key}' kwargs={'other': 2} [format error: KeyError: 'key']",
        "'<red>{}</red> {}' args=('x',) [format error: IndexError: tuple index out of range]",
        "'{0[k]}' args=({},) [format error: KeyError: 'k']",
        "fine 1",
    ]
    assert [r["lvl"] for r in recs] == ["INFO", "WARNING", "ERROR", "INFO", "INFO"]
    assert [r["line"] for r in recs] == [line, line + 1, line + 2, line + 3, line + 4]
    assert {r["fn"] for r in recs} == {"test_bad_format_call_keeps_the_record_and_never_raises"}
    assert recs[1]["attrs"] == {"step": 3, "other": 2}  # kwargs are captured as loguru does
    err = capsys.readouterr().err
    assert err.count("bad log format arguments: IndexError") == 1
    assert err.count("bad log format arguments: KeyError") == 1


def test_bad_format_call_before_configure_is_kept_by_the_implicit_configuration(
    spool: Path,
) -> None:
    log = get_logger("t")  # configures with the defaults
    log.info("{} {}", 1)
    (only,) = spool_logs(spool)
    assert only["msg"].startswith("'{} {}' args=(1,) [format error: IndexError")


def test_a_sink_added_with_catch_false_still_raises_its_own_error(spool: Path) -> None:
    """Only what the message's format does: loguru's contract for catch=False stands."""
    configure_logging(script_name="run")

    def broken(message: Any) -> None:
        raise RuntimeError("sink")

    hid = logger.add(broken, catch=False)
    try:
        with pytest.raises(RuntimeError, match="sink"):
            logger.info("fine {}", 1)
    finally:
        logger.remove(hid)


def test_a_lazy_bad_format_call_is_kept(spool: Path) -> None:
    configure_logging(script_name="run")
    logger.opt(lazy=True).info("{} {}", lambda: 1)
    (only,) = spool_logs(spool)
    assert "[format error: IndexError" in only["msg"]
