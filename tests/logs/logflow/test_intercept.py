"""Interception: stdlib logging (root and library loggers, framework console handlers),
``warnings``, each routed into loguru once, with the caller's file and line; records our
stdlib front end spooled are not spooled again; no recursion; reset puts stdlib back."""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from pathlib import Path

import pytest
from loguru import logger

from nvrx_otel.logging import SpoolHandler, setup_logger
from nvrx_otel.logging.handler import error_count
from nvrx_otel.logging.logflow import configure_logging, get_logger, reset_logging
from nvrx_otel.logging.ownhandlers import Bridge
from tests.logs.logflow.kit import messages, run_file_lines, spool_logs


def _here() -> int:
    return sys._getframe(1).f_lineno


def test_stdlib_records_keep_their_caller(tmp_path: Path) -> None:
    configure_logging(script_name="run")
    line = _here() + 1
    logging.getLogger("somelib.sub").info("library says %s", "hi")
    logging.warning("root says %d", 2)
    rows = run_file_lines(tmp_path / "logs" / "run.log")
    assert [(r["level"], r["msg"]) for r in rows] == [
        ("INFO", "library says hi"),
        ("WARNING", "root says 2"),
    ]
    assert [int(r["line"]) for r in rows] == [line, line + 1]
    assert {(r["name"], r["fn"]) for r in rows} == {
        (__name__, "test_stdlib_records_keep_their_caller")
    }


def test_replayed_record_keeps_its_own_call_site(tmp_path: Path) -> None:
    """A record handled away from its call (QueueListener, another thread) keeps its
    file, line, function and logger name."""
    configure_logging(script_name="run")
    lr = logging.LogRecord("replayed.lib", logging.ERROR, "/src/lib/io.py", 42, "x=%s", (1,), None)
    lr.funcName = "read"
    worker = threading.Thread(target=logging.getLogger("replayed.lib").handle, args=(lr,))
    worker.start()
    worker.join()
    (row,) = run_file_lines(tmp_path / "logs" / "run.log")
    assert (row["name"], row["fn"], row["line"], row["msg"]) == (
        "replayed.lib",
        "read",
        "42",
        "x=1",
    )


class ABSLHandler(logging.Handler):
    """Stands in for absl's root handler (matched by class name, as absl is optional)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(f"ABSL {record.getMessage()}\n")


def test_framework_console_handlers_do_not_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch-style loggers (own stderr handler, no propagation), a basicConfig root handler
    and absl's root handler: each record reaches the console and the file exactly once."""
    root = logging.getLogger()
    basic = logging.StreamHandler(sys.stderr)
    absl = ABSLHandler()
    root.addHandler(basic)
    root.addHandler(absl)
    dynamo = logging.getLogger("torch._dynamo")
    torch_handler = logging.StreamHandler()
    dynamo.addHandler(torch_handler)
    dynamo.propagate = False
    keep = logging.FileHandler(tmp_path / "user.log")
    user = logging.getLogger("userlib")
    user.addHandler(keep)
    try:
        configure_logging(script_name="run")
        dynamo.warning("recompiling")
        user.warning("user lib")
        logging.getLogger("tensorflow").error("tf error")
        err = capsys.readouterr().err
        assert err.count("recompiling") == 1 and err.count("tf error") == 1
        assert "ABSL" not in err
        assert messages(tmp_path / "logs" / "run.log") == ["recompiling", "user lib", "tf error"]
        assert (tmp_path / "user.log").read_text() == "user lib\n"  # a file handler stays
        reset_logging()
        assert basic in root.handlers and absl in root.handlers
        # its own handler back; the bridge stays, idle without a sink on the root
        assert [h for h in dynamo.handlers if not isinstance(h, Bridge)] == [torch_handler]
        assert dynamo.propagate is False
    finally:
        for h in (basic, absl):
            root.removeHandler(h)
        dynamo.removeHandler(torch_handler)
        dynamo.propagate = True
        user.removeHandler(keep)
        keep.close()


def test_reset_restores_root_level_and_showwarning(tmp_path: Path) -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers), warnings.showwarning)
    configure_logging(script_name="run", file_level="TRACE")
    assert root.level == 5 and warnings.showwarning is not before[2]
    reset_logging()
    assert (root.level, list(root.handlers), warnings.showwarning) == before


def test_warnings_are_routed_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(script_name="run")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        line = _here() + 1
        warnings.warn("careful now", DeprecationWarning, stacklevel=1)
    (row,) = run_file_lines(tmp_path / "logs" / "run.log")
    assert row["level"] == "WARNING" and row["line"] == str(line)
    assert row["msg"] == f"DeprecationWarning: careful now ({__file__}:{line})"
    assert capsys.readouterr().err.count("careful now") == 1


def test_nvrx_records_are_not_spooled_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "nvrx" logger (SpoolHandler) propagating into loguru: in the run file, but in the
    spool once; likewise a SpoolHandler the user put on the root logger."""
    spool = tmp_path / "spool"
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(spool))
    nvrx = setup_logger()
    configure_logging(script_name="run")
    nvrx.propagate = True
    root_spool = SpoolHandler(str(spool))
    try:
        nvrx.info("from nvrx")
        logging.getLogger().addHandler(root_spool)  # added after ours: runs after it
        logging.getLogger("lib").warning("from lib")
        get_logger("app").info("from loguru")
    finally:
        nvrx.propagate = False
        logging.getLogger().removeHandler(root_spool)
    assert messages(tmp_path / "logs" / "run.log") == ["from nvrx", "from lib", "from loguru"]
    spooled = sorted((r["msg"], r["lg"]) for r in spool_logs(spool))
    assert spooled == [("from lib", "lib"), ("from loguru", "app"), ("from nvrx", "nvrx")]


def test_stdlib_logging_from_inside_a_sink_does_not_recurse(tmp_path: Path) -> None:
    configure_logging(script_name="run")
    errors = error_count()

    def sink(message: object) -> None:
        logging.getLogger("inner").error("from the sink")

    hid = logger.add(sink, level="INFO", filter=lambda r: r["message"] == "start")
    try:
        logging.getLogger("outer").info("start")
    finally:
        logger.remove(hid)
    assert messages(tmp_path / "logs" / "run.log") == ["start"]
    assert error_count() == errors + 1
