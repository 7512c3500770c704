"""Attacks on the default run file's cached-pieces handler (:mod:`.textfile`): its lines
against loguru's own file sink in the run file's format, for the same calls in the same
process (odd call-site fields, times, levels, messages); a run file that cannot be
written; threads and forked children at once; removing, re-adding and reconfiguring."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loguru import logger

from nvrx_otel.logging.logflow import configure_logging, get_logger
from nvrx_otel.logging.logflow.configure import current_run_file, shutdown_logging
from nvrx_otel.logging.logflow.textfile import TextFile


def _run_file_handler() -> Any:
    handlers = logger._core.handlers.values()  # type: ignore[attr-defined]
    (handler,) = [h for h in handlers if isinstance(getattr(h._sink, "_stream", None), TextFile)]
    return handler


def _configure_with_reference(tmp_path: Path) -> Path:
    """The run file with its fast path in place, and loguru's own file sink in the run
    file's format beside it (the bytes to match)."""
    configure_logging(script_name="run", file_level="TRACE", console_level="CRITICAL")
    handler = _run_file_handler()
    assert handler.emit == handler._sink._stream.emit
    fmt = handler._decolorized_format[: -len("\n{exception}")]
    path = tmp_path / "reference.log"
    logger.add(
        str(path), format=fmt, level="TRACE", colorize=False, diagnose=False,
        encoding="utf-8", errors="backslashreplace",
    )  # fmt: skip
    return path


def _same_bytes_as(reference: Path) -> None:
    shutdown_logging()
    run_file = current_run_file()
    assert run_file is not None
    ours, theirs = run_file.read_bytes(), reference.read_bytes()
    assert ours.splitlines() == theirs.splitlines()
    assert ours == theirs


def test_equal_but_differently_typed_site_fields_are_not_one_cached_piece(
    tmp_path: Path,
) -> None:
    """``1.0 == True`` as dict keys: a patched line (or name) of another type at the same
    call site must not reuse the piece another type made."""
    reference = _configure_with_reference(tmp_path)
    log = get_logger("t")
    for line in (1.0, True, 1):
        log.patch(lambda r, line=line: r.update(line=line)).info("line {!r}", line)
    for name in (1, 1.0, True):
        log.patch(lambda r, name=name: r.update(name=name, line=7)).info("name {!r}", name)

    class Loud(str):
        def __format__(self, spec: str) -> str:
            return "loud:" + str.__format__(self, spec)

    for name in ("t", Loud("t")):
        log.patch(lambda r, name=name: r.update(name=name, line=8)).info("str subclass")
    _same_bytes_as(reference)
