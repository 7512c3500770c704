"""Attacks on the default run file's cached-pieces handler (:mod:`.textfile`): its lines
against loguru's own file sink in the run file's format, for the same calls in the same
process (odd call-site fields, times, levels, messages); a run file that cannot be
written; threads and forked children at once; removing, re-adding and reconfiguring."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from nvrx_otel.logging.logflow import configure_logging, get_logger, textfile
from nvrx_otel.logging.logflow.configure import current_run_file, shutdown_logging
from nvrx_otel.logging.logflow.textfile import TextFile
from tests.logs.logflow.kit import messages


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


def _setting(**fields: Any) -> Callable[[Any], None]:
    """A patcher setting ``fields`` of the record."""
    return lambda record: record.update(fields)


def test_equal_but_differently_typed_site_fields_are_not_one_cached_piece(
    tmp_path: Path,
) -> None:
    """``1.0 == True`` as dict keys: a patched line (or name) of another type at the same
    call site must not reuse the piece another type made."""
    reference = _configure_with_reference(tmp_path)
    log = get_logger("t")
    odd: list[Any] = [1.0, True, 1]
    for line in odd:
        log.patch(_setting(line=line)).info("line {!r}", line)
    for name in odd:
        log.patch(_setting(name=name, line=7)).info("name {!r}", name)

    class Loud(str):
        def __format__(self, spec: str) -> str:
            return "loud:" + str.__format__(self, spec)

    for site in ("t", Loud("t")):
        log.patch(_setting(name=site, line=8)).info("str subclass")
    _same_bytes_as(reference)


T = "{time:YYYY-MM-DD HH:mm:ss.SSS}"


def _text_file_beside_loguru(tmp_path: Path, fmt: str) -> tuple[TextFile, Path, Path]:
    """A ``TextFile`` taking over its handler for ``fmt``, and loguru's file sink with the
    same format: (the sink, its path, loguru's path)."""
    ours, theirs = tmp_path / "ours.log", tmp_path / "theirs.log"
    sink = TextFile(ours, fmt)
    hid = logger.add(sink, format=fmt, level="TRACE", colorize=False)
    sink.take_over(logger._core.handlers[hid])  # type: ignore[attr-defined]
    logger.add(str(theirs), format=fmt, level="TRACE", colorize=False, encoding="utf-8")
    return sink, ours, theirs


@pytest.mark.parametrize(
    ("fmt", "fast"),
    [
        (T + " | {level: <8} | {name}:{function}:{line} | {message}", True),
        (T + "|{level:>9}|{name}:{function}:{line}|{message}", True),
        (T + " {level:^12.3} {line:05d} {function:.4} {name!r} {{x}} % {message}", True),
        (T + " | {level: <{line}} | {message}", True),
        (T + " | {level!r} | {message}", False),
        (T + " | {level!s} | {message}", False),
        (T + " | {level.icon} | {message}", False),
        (T + " | {level.no} | {message}", False),
        (T + " | <green>{level}</green> | {message}", False),
        ("{time:YYYY-MM-DD HH:mm:ss.SSS!UTC} | {level} | {message}", False),
        ("{time:YYYY-MM-DD HH:mm:ss.SSSS} | {level} | {message}", False),
        (T + " | {level} | {message} |", False),
        (T + " | {level} | {extra} {message}", False),
    ],
)
def test_a_format_slightly_other_than_logflows_writes_loguru_bytes(
    tmp_path: Path, fmt: str, fast: bool
) -> None:
    """Formats near LogFlow's: taken over where the pieces can make them, else left to
    loguru; either way loguru's bytes, also after a level's icon and colour changed."""
    try:
        logger.level("ATTACK", no=23, icon="a", color="<red>")
    except ValueError:  # loguru's levels are global: added by the first run only
        pass
    logger.remove()
    sink, ours, theirs = _text_file_beside_loguru(tmp_path, fmt)
    assert (sink.handler is not None) == fast
    for i in range(3):
        logger.log("ATTACK", "custom {}", i)
        logger.info("info {}", i)
        logger.level("ATTACK", icon=str(i), color="<blue>" if i % 2 else "<green>")
    logger.remove()
    assert sink.closed
    assert ours.read_bytes() == theirs.read_bytes()
    assert ours.read_bytes().count(b"\n") == 6


class _HeldWrite:
    """``os`` for :mod:`.textfile` whose ``write`` of a line holding ``b"victim"`` waits
    (inside the write, as a slow disk or a descheduled thread would) until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: bytes) -> int:
        if b"victim" in data:
            self.entered.set()
            self.release.wait(60)
        return os.write(fd, data)


def test_removing_the_handler_while_a_line_is_written_never_sends_it_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """loguru's sink writes under its handler's lock, which ``remove`` takes: a line being
    written when the handler is removed lands in the run file, never in a file opened
    after the removal on the descriptor number the run file's close freed."""
    configure_logging(script_name="run", console_level="CRITICAL")
    handler = _run_file_handler()
    hid = next(i for i, h in logger._core.handlers.items() if h is handler)  # type: ignore[attr-defined]
    held = _HeldWrite()
    monkeypatch.setattr(textfile, "os", held)
    log = get_logger("x")
    writer = threading.Thread(target=log.info, args=("victim",))
    writer.start()
    assert held.entered.wait(60)
    other = tmp_path / "other.log"
    removed = threading.Event()

    def remove_then_open() -> None:
        logger.remove(hid)
        fd = os.open(other, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # the lowest free number
        removed.set()
        writer.join(60)
        os.close(fd)

    remover = threading.Thread(target=remove_then_open)
    remover.start()
    removed.wait(2)  # with loguru's lock, removing waits for the write: not set
    held.release.set()
    writer.join(60)
    remover.join(60)
    shutdown_logging()
    assert not other.exists() or b"victim" not in other.read_bytes()
    assert messages(tmp_path / "logs" / "run.log") == ["victim"]


def test_a_child_forked_while_a_thread_writes_a_line_can_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock around a line is held by a thread that does not exist in a forked child:
    the child gets a new one and logs (no hang), whole lines beside the parent's."""
    configure_logging(script_name="run", console_level="CRITICAL")
    held = _HeldWrite()
    monkeypatch.setattr(textfile, "os", held)
    log = get_logger("x")
    writer = threading.Thread(target=log.info, args=("victim",))
    writer.start()
    assert held.entered.wait(60)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            log.info("from the child")
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    held.release.set()
    writer.join(60)
    shutdown_logging()
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, "the child hung"
    assert sorted(messages(tmp_path / "logs" / "run.log")) == ["from the child", "victim"]
