"""Attacks on the default run file's cached-pieces handler (:mod:`.textfile`): its lines
against loguru's own file sink in the run file's format, for the same calls in the same
process (odd call-site fields, times, levels, messages); a run file that cannot be
written; threads and forked children at once; removing, re-adding and reconfiguring."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
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
from tests.logs.logflow.kit import loguru_reference, messages, run_file_handler, run_script


def _configure_with_reference(tmp_path: Path) -> Path:
    """The run file with its fast path in place, and loguru's own file sink in the run
    file's format beside it (the bytes to match)."""
    configure_logging(script_name="run", file_level="TRACE", console_level="CRITICAL")
    handler = run_file_handler()
    assert handler.emit == handler._sink._stream.emit
    return loguru_reference(tmp_path)


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
    """Removing the handler while a line is written leaves the close to the line's writer:
    the line lands in the run file, never in a file opened after the removal on the
    descriptor number the run file's close freed; removal does not wait for the line."""
    configure_logging(script_name="run", console_level="CRITICAL")
    handler = run_file_handler()
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
    assert removed.wait(60)  # removal does not wait for the line being written
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


def _every_edge(log: Any) -> None:
    """Calls at the edges of what the pieces are made of: the time, the level, the call
    site, the message, and loguru's options."""
    for us in (0, 999, 1000, 999_999):
        log.patch(_setting_time(microsecond=us)).info("microsecond {}", us)
    log.patch(_setting_time(second=59, microsecond=999_999)).info("end of a minute")
    log.patch(_setting_time(year=5, month=1, day=1, hour=0, minute=0, second=0)).info("year 5")
    odd = datetime.timezone(datetime.timedelta(hours=5, minutes=45, seconds=30))
    log.patch(lambda r: r.update(time=r["time"].astimezone(odd))).info("an odd offset")
    log.log(3, "a level number only")
    log.log(60, "a level number above CRITICAL")
    for icon in ("a", "b"):
        log.log("ATTACK", "custom level, icon {}", icon)
        logger.level("ATTACK", icon=icon, color="<magenta>")
    (lambda: log.info("in a lambda"))()

    for fn in ("first", "second", "<lambda>"):  # one name, one line, other functions
        code = f"def {fn if fn[0] != '<' else 'x'}(): log.info('same line')"
        scope: dict[str, Any] = {"log": log, "__name__": "one.module"}
        exec(code.replace("def x()", "x = lambda"), scope)  # line 1 of each
        scope["x" if fn[0] == "<" else fn]()
    exec("log.info('exec, no __name__')", {"log": log})
    odd_module = compile("log.info('a <module> named <odd>')", "<x>.py", "exec")
    exec(odd_module, {"log": log, "__name__": "<odd>"})
    eval("log.info('eval')", {"log": log, "__name__": "m{0}%s\u00e9"})
    log.patch(_setting(function="f{x}%s\u00e9\udcff")).info("a function named with braces")
    for message in ("{} {x} {{", "%s %d %", "lone \ud800 \udcff", "nul \x00 cr \r cr", "", "é中"):
        log.opt(raw=False).info(message)
    log.info("x" * 70_000)  # > 64 KiB
    log.info("y" * 1_100_000)  # > the largest pipe
    log.opt(depth=1).info("depth 1")
    log.opt(lazy=True).info("lazy {}", lambda: 7)
    log.opt(colors=True).info("<red>coloured</red> {}", "<b>")
    log.opt(record=True).info("record {record[function]}")
    log.bind(key="v").info("bound")
    with logger.contextualize(ctx=1):
        log.info("contextualized")
    try:
        raise ValueError("é \udcff {x}")
    except ValueError:
        log.exception("logger.exception")
    log.opt(exception=KeyError("k")).error("opt(exception=...)")
    log.opt(raw=True).info("raw {}\n", 1)


def _setting_time(**fields: int) -> Callable[[Any], None]:
    """A patcher changing the record's time (loguru's datetime kept)."""
    return lambda record: record.update(time=record["time"].replace(**fields))


def test_edges_of_time_level_site_and_message_are_loguru_bytes(tmp_path: Path) -> None:
    try:
        logger.level("ATTACK", no=23, icon="a", color="<red>")
    except ValueError:  # loguru's levels are global: added by the first run only
        pass
    reference = _configure_with_reference(tmp_path)
    _every_edge(get_logger("edge"))
    _same_bytes_as(reference)


ZONES = """
    import sys, time
    from loguru import logger
    from loguru._datetime import datetime as loguru_datetime
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", file_level="TRACE", console_level="CRITICAL")
    (handler,) = [h for h in logger._core.handlers.values() if hasattr(h._sink, "_stream")
                  and type(h._sink._stream).__name__ == "TextFile"]
    assert handler.emit == handler._sink._stream.emit
    fmt = handler._decolorized_format[: -len("\\n{exception}")]
    logger.add("reference.log", format=fmt, level="TRACE", colorize=False, encoding="utf-8")
    log = get_logger("zone")
    # around the 2024 DST changes of Europe and of Lord Howe (a 30-minute step), the epoch
    for ts in (1711846799.9995, 1711846800.0, 1729990799.999999, 1729990800.0,
               1712415599.9999, 1712415600.0, 0.0, -0.001):
        t = loguru_datetime.fromtimestamp(ts).astimezone()
        log.patch(lambda r, t=t: r.update(time=t)).info("at {}", ts)
    end = time.monotonic() + 1.2  # the wall clock crosses a second at least once
    while time.monotonic() < end:
        log.info("now")
    shutdown_logging()
"""


@pytest.mark.parametrize("zone", ["Europe/London", "Australia/Lord_Howe", "XXX-5:30:15"])
def test_local_time_in_other_zones_is_loguru_bytes(tmp_path: Path, zone: str) -> None:
    proc = run_script(tmp_path, "run", ZONES, TZ=zone)
    assert proc.returncode == 0, proc.stderr
    ours = (tmp_path / "logs" / "run.log").read_bytes()
    assert ours == (tmp_path / "reference.log").read_bytes()
    assert ours.count(b"\n") > 8


FORKS_AND_THREADS = """
    import os, threading
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("t")

    def burst(tag):
        for j in range(60):
            log.info("{} {} {}", tag, j, "z" * (j * 7919 % 150_000))

    children = []
    for c in range(3):
        pid = os.fork()
        if pid == 0:
            threads = [threading.Thread(target=burst, args=(f"c{c}t{k}",)) for k in range(2)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            os._exit(0)
        children.append(pid)
    threads = [threading.Thread(target=burst, args=(f"p{k}",)) for k in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for pid in children:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    shutdown_logging()
"""


def test_forked_children_and_threads_write_whole_lines_of_any_length(tmp_path: Path) -> None:
    """Lines up to 150 KB (beyond a pipe's size) from 8 writers in 4 processes at once:
    every line whole, none lost."""
    proc = run_script(tmp_path, "run", FORKS_AND_THREADS)
    assert proc.returncode == 0, proc.stderr
    got = messages(tmp_path / "logs" / "run.log")
    tags = [f"c{c}t{k}" for c in range(3) for k in range(2)] + ["p0", "p1"]
    want = [f"{tag} {j} {'z' * (j * 7919 % 150_000)}" for tag in tags for j in range(60)]
    assert len(got) == len(want) and sorted(got) == sorted(want)


FILE_SIZE_LIMIT = """
    import resource
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("t")
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
    log.info("a" * 70_000)  # written
    log.info("b" * 70_000)  # cut by the limit: torn, counted
    log.opt(raw=True).info("raw\\n")  # loguru's path: counted
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("caught")  # loguru's path: counted
    for i in range(5):
        log.info("small {}", i)
    shutdown_logging()
"""


def test_lines_cut_or_refused_by_a_file_size_limit_are_all_counted(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "run", FILE_SIZE_LIMIT)
    assert proc.returncode == 0, proc.stderr
    assert "8 run-file line(s) could not be written (EFBIG: 8)" in proc.stderr, proc.stderr
    assert proc.stderr.count("cannot write the run file") == 1
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "logs" / "run.log").stat().st_size == 100_000


LIMIT_LIFTED = """
    import resource
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("t")
    log.info("first")
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, resource.RLIM_INFINITY))
    log.info("b" * 5000)  # cut: torn
    log.info("refused")
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)  # space again
    log.info("after the limit lifted")
    log.opt(raw=True).info("raw after\\n")
    log.info("last")
    shutdown_logging()
"""


def test_a_line_after_a_torn_one_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """A write cut short leaves a fragment without its newline; the next line written once
    the file takes bytes again must not be glued onto it (unreadable, and not counted)."""
    proc = run_script(tmp_path, "run", LIMIT_LIFTED)
    assert proc.returncode == 0, proc.stderr
    assert "2 run-file line(s) could not be written (EFBIG: 2)" in proc.stderr, proc.stderr
    path = tmp_path / "logs" / "run.log"
    first, fragment, *rest = messages(path)
    assert (first, set(fragment), rest) == ("first", {"b"}, ["after the limit lifted", "last"])
    lines = path.read_bytes().split(b"\n")
    assert lines[1].endswith(b"b" * 100) and len(lines[1]) < 3000  # the fragment
    assert b"raw after" in lines


def test_a_filter_that_raises_is_called_once_per_record_as_by_loguru(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """loguru's handler calls its filter once and reports what it raises; the fast path
    must not call it a second time (a filter's side effects, such as spooling, doubled)."""
    calls = {"ours": 0, "loguru": 0}

    def raising(key: str) -> Callable[[Any], bool]:
        def filter_(record: Any) -> bool:
            calls[key] += 1
            raise RuntimeError("filter fails")

        return filter_

    logger.remove()
    fmt = T + " | {level: <8} | {name}:{function}:{line} | {message}"
    sink = TextFile(tmp_path / "ours.log", fmt)
    hid = logger.add(sink, format=fmt, filter=raising("ours"), colorize=False)
    assert sink.take_over(logger._core.handlers[hid])  # type: ignore[attr-defined]
    logger.add(str(tmp_path / "theirs.log"), format=fmt, filter=raising("loguru"))
    logger.info("judged by a failing filter")
    logger.remove()
    assert calls == {"ours": 1, "loguru": 1}
    assert capfd.readouterr().err.count("RuntimeError: filter fails") == 2


def test_removing_every_handler_then_reconfiguring_leaves_one_open_run_file(
    tmp_path: Path,
) -> None:
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("x")
    log.info("one")
    first = run_file_handler()._sink._stream
    logger.remove()  # the user's own call: every handler gone, ours closed
    assert first.closed and first.fd == -1
    log.info("while removed")
    configure_logging(script_name="run", console_level="CRITICAL", force=True)
    second = run_file_handler()._sink._stream
    assert second is not first and second.handler is not None  # the fast path again
    log.info("two")
    configure_logging(script_name="run", console_level="CRITICAL", force=True)
    assert second.closed
    log.info("three")
    shutdown_logging()
    assert messages(tmp_path / "logs" / "run.log") == ["one", "two", "three"]


RELOAD = """
    import os, signal, time
    from pathlib import Path
    from loguru import logger
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    from nvrx_otel.logging.logflow.configure import _state
    config = Path("logflow.yaml")
    config.write_text("file_level: DEBUG\\nreload_signal: SIGHUP\\nreload_action: reload\\n")
    configure_logging(script_name="run", console_level="CRITICAL")
    fast = [h for h in logger._core.handlers.values() if hasattr(h._sink, "_stream")
            and h.emit == getattr(h._sink._stream, "emit", None)]
    assert len(fast) == 1, "the fast path is not in place"
    log = get_logger("t")
    log.debug("debug before")
    config.write_text("file_level: WARNING\\nreload_signal: SIGHUP\\nreload_action: reload\\n")
    os.kill(os.getpid(), signal.SIGHUP)
    deadline = time.monotonic() + 60
    while _state.applied_levels.file_level != "WARNING" and time.monotonic() < deadline:
        time.sleep(0.02)
    log.debug("debug after")
    log.warning("warning after")
    shutdown_logging()
"""


def test_a_reload_changes_what_the_fast_path_writes(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "run", RELOAD)
    assert proc.returncode == 0, proc.stderr
    assert messages(tmp_path / "logs" / "run.log") == ["debug before", "warning after"]


def test_a_signal_handler_that_logs_while_a_line_is_written_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock around a line is reentrant: a handler running between two bytecodes of the
    write logs its own whole line (loguru's own sink would report a deadlock avoided)."""
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("x")

    class SignalInWrite:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def write(self, fd: int, data: bytes) -> int:
            if b"interrupted" in data:
                signal.raise_signal(signal.SIGUSR2)  # its handler runs before the write
            return os.write(fd, data)

    previous = signal.signal(signal.SIGUSR2, lambda *_: log.info("from the signal handler"))
    monkeypatch.setattr(textfile, "os", SignalInWrite())
    try:
        log.info("interrupted")
    finally:
        signal.signal(signal.SIGUSR2, previous)
    shutdown_logging()
    got = messages(tmp_path / "logs" / "run.log")
    assert got == ["from the signal handler", "interrupted"]


SIGNAL_DURING_REMOVAL = """
    import os, signal, threading, time
    from loguru import logger
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    from nvrx_otel.logging.logflow import textfile
    configure_logging(script_name="run", console_level="CRITICAL")
    (hid, handler), = [(i, h) for i, h in logger._core.handlers.items()
                       if type(getattr(h._sink, "_stream", None)).__name__ == "TextFile"]
    sink = handler._sink._stream
    assert handler.emit == sink.emit, "the fast path is not in place"
    log = get_logger("x")
    remover = threading.Thread(target=logger.remove, args=(hid,))

    def wait_for(condition):
        deadline = time.monotonic() + 60
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert condition()

    class RemovedWhileFormatted(Exception):
        # loguru formats the traceback (str of the exception) before it takes its lock:
        # meanwhile another thread removes the handler and holds loguru's lock by now
        def __str__(self):
            if not remover.is_alive() and remover.ident is None:
                remover.start()
                wait_for(handler._lock.locked)
            return "formatted while the handler is removed"

    def on_signal(signum, frame):
        try:
            raise RemovedWhileFormatted()
        except RemovedWhileFormatted:
            log.exception("from the signal handler")

    class SignalInWrite:
        def __getattr__(self, name):
            return getattr(os, name)

        def write(self, fd, data):
            if b"interrupted" in data:  # under the run file's lock
                signal.raise_signal(signal.SIGUSR2)  # its handler runs before the write
            return os.write(fd, data)

    signal.signal(signal.SIGUSR2, on_signal)
    textfile.os = SignalInWrite()
    log.info("interrupted")
    textfile.os = os
    remover.join(60)
    assert not remover.is_alive(), "the removal hangs"
    print("closed", sink.closed, sink.fd)
    shutdown_logging()
"""


def test_a_signal_handler_logging_an_exception_while_the_handler_is_removed_does_not_hang(
    tmp_path: Path,
) -> None:
    """The main thread writes a line under the run file's lock; a signal handler there logs
    an exception, which loguru writes under its handler's lock; meanwhile another thread
    removes the handler, which holds loguru's lock while it closes the run file. Removing
    must not wait for the run file's lock (each thread would hold the lock the other
    waits for): the line being written closes the descriptor once written."""
    try:
        proc = run_script(tmp_path, "run", SIGNAL_DURING_REMOVAL, timeout=90)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"deadlock: the signal handler and the removal wait for each other ({exc})")
    assert proc.returncode == 0, proc.stderr
    assert "closed True -1" in proc.stdout, proc.stdout + proc.stderr
    assert "Logging error" not in proc.stderr, proc.stderr
    assert messages(tmp_path / "logs" / "run.log") == ["interrupted"]


SIGNAL_WHILE_COUNTED = """
    import resource, signal
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    from nvrx_otel.logging.logflow.runfilewriter import losses
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("t")
    signal.signal(signal.SIGUSR2, lambda *_: log.info("from the signal handler"))

    class SignalWhileCounted(dict):
        # read under the count's lock: the signal handler's line fails too (the file
        # size limit) and is counted while the interrupted line's count is taken
        raised = False

        def get(self, *args):
            if not SignalWhileCounted.raised:
                SignalWhileCounted.raised = True
                signal.raise_signal(signal.SIGUSR2)
            return super().get(*args)

    losses.kinds = SignalWhileCounted()
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    log.info("refused")
    shutdown_logging()
"""


def test_a_signal_handler_whose_line_fails_while_a_loss_is_counted_does_not_hang(
    tmp_path: Path,
) -> None:
    """A line the disk refuses is counted under the count's lock; a signal handler logging
    meanwhile has its line refused too and counts it in the same thread: both counted,
    no hang."""
    try:
        proc = run_script(tmp_path, "run", SIGNAL_WHILE_COUNTED, timeout=90)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"deadlock: the signal handler waits for the count's lock ({exc})")
    assert proc.returncode == 0, proc.stderr
    assert "2 run-file line(s) could not be written (EFBIG: 2)" in proc.stderr, proc.stderr
