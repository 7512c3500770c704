"""The bridge's template path writes exactly the bytes of its dict path; it sits on the
run file's handler (one handler less per record) and on a handler of its own without a
run file; a call no handler takes returns before loguru's ``_log``. A record with ``extra``
beyond the bound name takes the template path too (flattened attributes, in and out of a
span), values orjson refuses the dict path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from nvrx_otel.logging.logflow import bridge, configure_logging, get_logger
from nvrx_otel.logging.logflow.bridge import SpoolBridge

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


def _lines(directory: Path) -> list[bytes]:
    out: list[bytes] = []
    for path in sorted(directory.rglob("*.jsonl")):
        out.extend(path.read_bytes().splitlines(keepends=True)[1:])  # no header
    return out


def _bridges() -> list[tuple[int, SpoolBridge]]:
    handlers = logger._core.handlers  # type: ignore[attr-defined]
    return [(hid, h._filter) for hid, h in handlers.items() if type(h._filter) is SpoolBridge]


def _log_all(log: Any) -> None:
    log.info("plain {} %s \u00e9", 1)
    log.warning('quote " and \\ backslash')
    with trace.use_span(NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1)))):
        log.info("in a span")
    get_logger().info("unnamed")


def test_template_path_writes_the_dict_paths_bytes(
    spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_logging(log_dir=tmp_path / "logs", script_name="run")
    _log_all(get_logger("trainer"))
    fast = _lines(spool)

    def refuse(value: Any) -> bytes:
        raise TypeError("take the dict path")

    monkeypatch.setattr(bridge, "_dumps", refuse)
    _log_all(get_logger("trainer"))
    slow = _lines(spool)[len(fast) :]
    assert len(fast) == len(slow) == 4

    def comparable(line: bytes) -> bytes:  # ts and key differ between the two calls
        return re.sub(rb'"(ts|key)":("[^"]*"|\d+)', b"", line)

    assert [comparable(line) for line in fast] == [comparable(line) for line in slow]
    assert b'"trace_id":"0af7651916cd43dd8448eb211c80319c"' in fast[2]


def test_the_bridge_filters_the_run_files_handler(spool: Path, tmp_path: Path) -> None:
    configure_logging(
        log_dir=tmp_path / "logs", script_name="run", console_level="CRITICAL", file_level="INFO"
    )
    ((hid, found),) = _bridges()
    assert found.keep
    handler = logger._core.handlers[hid]  # type: ignore[attr-defined]
    assert "run" in repr(handler)  # the run file's handler
    get_logger("x").info("both")
    get_logger("x").debug("neither")
    spooled = b"".join(_lines(spool))
    assert b'"msg":"both"' in spooled and b'"msg":"neither"' not in spooled
    run_file = next((tmp_path / "logs").rglob("*.log"))
    logger.complete()
    text = run_file.read_text()
    assert "| both" in text and "| neither" not in text


def test_without_a_run_file_the_bridge_has_a_handler_of_its_own(
    spool: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")  # the log directory cannot be made: no run file
    configure_logging(log_dir=blocked / "logs", script_name="run", console_level="CRITICAL")
    ((_, found),) = _bridges()
    assert not found.keep
    get_logger("x").info("spooled")
    assert b'"msg":"spooled"' in b"".join(_lines(spool))


def test_a_disabled_call_never_reaches_loguru(
    spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_logging(log_dir=tmp_path / "logs", script_name="run", file_level="INFO")
    log = get_logger("x")
    calls: list[str] = []
    real = type(log)._log

    def spy(self: Any, level: Any, *args: Any) -> None:
        calls.append(level)
        real(self, level, *args)

    monkeypatch.setattr(type(log), "_log", spy)
    log.debug("off")
    log.trace("off")
    log.info("on")
    assert calls == ["INFO"]


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def _log_with_extras(log: Any) -> None:
    log.bind(step=1, epoch=2).info("flat")
    log.bind(run={"id": 3, "tags": {"a": "b"}}, empty={}).info("nested")
    log.bind(values=[1, 2.5, None, True], text='\u00e9 "q" \\').warning("kinds")
    get_logger(None).bind(name=5).info("a name that is not a str")
    get_logger(None).bind(other="x").info("unnamed with extra")
    with logger.contextualize(request="r-1"):
        log.info("contextualized")
    with trace.use_span(NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1)))):
        log.bind(step=2).info("in a span")
    log.bind(big=2**70).info("an int orjson refuses")
    log.bind(obj=_Opaque()).info("a value orjson refuses")
    log.bind(bad="\udcff").info("a lone surrogate")


def test_extras_take_the_template_path_with_the_dict_paths_bytes(
    spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_logging(log_dir=tmp_path / "logs", script_name="run", console_level="CRITICAL")
    log = get_logger("trainer")
    _log_with_extras(log)
    fast = _lines(spool)

    def refuse(value: Any) -> bytes:
        raise TypeError("take the dict path")

    monkeypatch.setattr(bridge, "_dumps", refuse)
    _log_with_extras(log)
    slow = _lines(spool)[len(fast) :]
    assert len(fast) == len(slow) == 10

    def comparable(line: bytes) -> bytes:  # ts and key differ between the two calls
        return re.sub(rb'"(ts|key)":("[^"]*"|\d+)', b"", line)

    assert [comparable(line) for line in fast] == [comparable(line) for line in slow]
    assert b'"attrs":{"step":1,"epoch":2}' in fast[0]
    assert b'"attrs":{"run.id":3,"run.tags.a":"b","empty":{}}' in fast[1]
    assert b'"trace_id":"0af7651916cd43dd8448eb211c80319c"' in fast[6]
    assert b'"attrs":{"step":2}' in fast[6]


def test_a_record_with_extras_reuses_its_template(
    spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_logging(log_dir=tmp_path / "logs", script_name="run", console_level="CRITICAL")
    dict_path: list[bytes] = []
    real = bridge.rec.headed_line

    def spy(head: bytes, fields: dict[str, Any], suffix: bytes) -> bytes:
        dict_path.append(head)
        return real(head, fields, suffix)

    monkeypatch.setattr(bridge.rec, "headed_line", spy)
    log = get_logger("trainer")
    for i in range(3):
        log.bind(step=i).info("step")
        log.info("plain")
    assert dict_path == []
    handlers = logger._core.handlers.values()  # type: ignore[attr-defined]
    (found,) = [h._filter for h in handlers if type(h._filter) is SpoolBridge]
    assert len(found.templates) == 1  # one level, one logger: extras or not
    lines = _lines(spool)
    assert [b'"attrs":{"step":' in line for line in lines] == [True, False] * 3
