"""The default run file's handler builds its lines from cached pieces: the bytes loguru's
own file sink writes for the same records (plain, raw, coloured, exceptions, patched
fields, custom levels, stdlib and ``warnings`` records), with and without the spool and
a rank tag; its caches hit for a repeated call; it leaves the handler to loguru when its
sample line disagrees; a write error is counted and said once; removing the handler closes
the descriptor."""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import re
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from nvrx_otel.logging.logflow import configure_logging, get_logger, reset_logging, textfile
from nvrx_otel.logging.logflow.bridge import SpoolBridge
from nvrx_otel.logging.logflow.configure import current_run_file, shutdown_logging
from nvrx_otel.logging.logflow.textfile import TextFile
from tests.logs.logflow.kit import loguru_reference, messages, run_file_handler, run_script


def _text_file() -> TextFile:
    sink: TextFile = run_file_handler()._sink._stream
    return sink


def _log_every_kind() -> None:
    log = get_logger("trainer")
    log.info("plain {} \u00e9 \u4e2d", 1)
    log.debug("multi\nline\n")
    log.trace("trace")
    log.success("ok {x}", x=3)
    log.warning("braces {{}} {}", "{}")
    log.error("lone surrogate \udcff")
    log.critical("")
    log.log(7, "a level number")
    log.log("NOTICE", "a custom level")
    log.opt(raw=True).info("raw line {}\n", 1)
    log.opt(raw=True).info("raw without newline ")
    log.opt(colors=True).info("<red>coloured</red> {}", 2)
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.exception("caught")
    log.opt(exception=ValueError("x")).error("with an exception object")
    log.patch(lambda r: r.update(name="renamed.mod")).info("patched name")
    log.patch(lambda r: r.update(name=None)).info("name None")
    log.patch(lambda r: r.update(line="L")).info("line as a str")
    utc = datetime.timezone.utc
    log.patch(lambda r: r.update(time=r["time"].astimezone(utc))).info("time in UTC")
    plain = datetime.datetime(2030, 1, 2, 3, 4, 5, 678901)
    log.patch(lambda r: r.update(time=plain)).info("a stdlib datetime")
    log.patch(lambda r: r.update(message=5)).info("message not a str")
    log.patch(lambda r: r.update(name=["unhashable"])).info("unhashable name")
    exec("log.info('no __name__')", {"log": log})
    log.bind(a=1, b={"c": 2}).info("extra")
    logging.getLogger("std.lib").warning("from stdlib %s", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a warning", UserWarning, stacklevel=1)
    for i in range(3):
        log.info("loop {}", i)


@pytest.mark.parametrize(
    ("spool", "rank"), [(False, None), (True, None), (True, "3")], ids=["file", "spool", "rank3"]
)
def test_run_file_lines_are_loguru_file_sinks_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spool: bool, rank: str | None
) -> None:
    if spool:
        monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    if rank is not None:
        monkeypatch.setenv("RANK", rank)
    try:
        logger.level("NOTICE")
    except ValueError:  # loguru's levels are global: added by the first run only
        logger.level("NOTICE", no=27)
    configure_logging(script_name="run", file_level="TRACE", console_level="CRITICAL")
    handler = run_file_handler()
    assert handler.emit == _text_file().emit  # the fast path is in place
    reference = loguru_reference(tmp_path)
    _log_every_kind()
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    ours = path.read_bytes()
    assert ours == reference.read_bytes()
    assert ours.count(b"\n") > 30 and b"Traceback" in ours and b"raw without newline" in ours
    if rank is not None:
        assert b"| [rank 3] | " in ours


def test_caches_hit_for_a_repeated_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("x")
    for i in range(5):
        log.info("step {}", i)  # one call site, one level, one thread
    sink = _text_file()
    bridge = run_file_handler()._filter
    assert type(bridge) is SpoolBridge
    assert len(sink.sites) == 1
    assert (len(bridge.templates), len(bridge.sites), len(bridge.threads)) == (1, 1, 1)
    shutdown_logging()
    assert messages(tmp_path / "logs" / "run.log") == [f"step {i}" for i in range(5)]


def test_a_sample_line_that_disagrees_leaves_the_handler_to_loguru(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = TextFile.line

    def off_by_one(self: TextFile, record: Any, level: Any) -> str:
        return real(self, record, level) + " "

    monkeypatch.setattr(TextFile, "line", off_by_one)
    configure_logging(script_name="run", console_level="CRITICAL")
    handler = run_file_handler()
    assert handler.emit != _text_file().emit  # loguru's own emit
    reference = loguru_reference(tmp_path)
    get_logger("x").info("formatted by loguru")
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    assert path.read_bytes() == reference.read_bytes()
    assert messages(path) == ["formatted by loguru"]


def test_a_format_it_does_not_build_is_left_to_loguru() -> None:
    time = "{time:YYYY-MM-DD HH:mm:ss.SSS}"
    assert textfile._middle_format(time + " | {level.no} | {message}") is None
    assert textfile._middle_format("{time} | {level} | {message}") is None
    assert textfile._middle_format(time + " | {extra[x]} {message}") is None
    assert textfile._middle_format(time + " | {level: <8} | {message}") == " | {level: <8} | "


WRITE_ERROR = """
    import resource
    from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("t")
    resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, resource.RLIM_INFINITY))
    for j in range(500): log.info("line {} {}", j, "y" * 60)
    shutdown_logging()
"""


def test_a_write_error_is_counted_and_said_once(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "run", WRITE_ERROR)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cannot write the run file") == 1, proc.stderr
    assert re.search(r"\d+ run-file line\(s\) could not be written \(EFBIG: \d+\)", proc.stderr)
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "logs" / "run.log").stat().st_size <= 10_000


def test_removing_the_handler_closes_the_descriptor() -> None:
    configure_logging(script_name="run", console_level="CRITICAL")
    sink = _text_file()
    os.fstat(sink.fd)
    with pytest.raises(TypeError, match="cannot pickle"):
        pickle.dumps(sink)
    reset_logging()
    assert sink.closed and sink.fd == -1


def test_a_record_a_patcher_broke_never_raises_into_the_call(
    capfd: pytest.CaptureFixture[str],
) -> None:
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("x")
    log.patch(lambda r: r.pop("exception")).info("no exception key")
    log.patch(lambda r: r.update(level="INFO")).info("a level without .no")
    log.info("after")
    shutdown_logging()
    assert messages(Path("logs") / "run.log")[-1] == "after"
    assert "Logging error in Loguru Handler" in capfd.readouterr().err  # loguru's own report


def test_threads_logging_at_once_write_whole_lines(tmp_path: Path) -> None:
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("x")

    def burst(n: int) -> None:
        for j in range(300):
            log.info("thread {} line {} {}", n, j, "z" * (j % 50))

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shutdown_logging()
    path = tmp_path / "logs" / "run.log"
    assert len(path.read_text().splitlines()) == 4 * 300
    got = messages(path)
    assert sorted(got) == sorted(
        f"thread {n} line {j} {'z' * (j % 50)}" for n in range(4) for j in range(300)
    )


NO_MEMORY_TO_ENCODE = """
    import resource
    from nvrx_otel.logging.logflow import configure_logging, get_logger, shutdown_logging
    configure_logging(script_name="run", console_level="CRITICAL")
    log = get_logger("t")
    log.info("before")
    N = 16 << 20
    big = "\\u00e9" * N  # 1 byte a character; its UTF-8 takes 2

    def address_space():
        with open("/proc/self/status") as f:
            for row in f:
                if row.startswith("VmSize:"):
                    return int(row.split()[1]) * 1024

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    # room for the line (or loguru's message and its copy), not for its UTF-8 as well
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + 5 * N // 2, hard))
    for call in (lambda: log.info(big), lambda: log.opt(raw=True).info(big)):
        try:
            call()
        except MemoryError:
            print("raised into the call")
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    del big
    log.info("after")
    shutdown_logging()
"""


def test_a_line_without_memory_to_encode_is_counted_not_raised(tmp_path: Path) -> None:
    """A ``MemoryError`` while a line is encoded (the cached-pieces path and loguru's path)
    is a lost line like a write error: counted and said once, never raised into the call
    nor a traceback from loguru."""
    proc = run_script(tmp_path, "run", NO_MEMORY_TO_ENCODE)
    assert proc.returncode == 0, proc.stderr
    assert "raised into the call" not in proc.stdout, proc.stdout
    assert "2 run-file line(s) could not be written (MemoryError: 2)" in proc.stderr, proc.stderr
    assert proc.stderr.count("cannot write the run file") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr
    assert messages(tmp_path / "logs" / "run.log") == ["before", "after"]


def test_a_lone_surrogate_is_escaped_where_loguru_s_own_file_sink_loses_the_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """loguru's file sink encodes strictly by default: a line with a lone surrogate (an
    undecodable file name) is lost, with a traceback on stderr. The run file keeps it on
    every path (cached pieces, raw, exception), the surrogate escaped: loguru's bytes with
    ``errors="backslashreplace"`` (the difference docs/loguru-options.md states)."""
    configure_logging(script_name="run", file_level="TRACE", console_level="CRITICAL")
    assert run_file_handler().emit == _text_file().emit  # the fast path is in place
    escaping = loguru_reference(tmp_path)
    fmt = run_file_handler()._decolorized_format[: -len("\n{exception}")]
    strict = tmp_path / "strict.log"
    logger.add(str(strict), format=fmt, level="TRACE", colorize=False, diagnose=False)
    log = get_logger("x")
    name = b"data-\xff.bin".decode("utf-8", "surrogateescape")  # as os.listdir() gives it
    log.info("opening {}", name)
    log.opt(raw=True).info("raw {}\n", name)
    try:
        raise FileNotFoundError(name)
    except FileNotFoundError:
        log.exception("missing {}", name)
    log.info("after")
    shutdown_logging()
    path = current_run_file()
    assert path is not None
    ours = path.read_bytes()
    assert ours == escaping.read_bytes()
    assert messages(path) == ["opening data-\\udcff.bin", "missing data-\\udcff.bin", "after"]
    assert b"raw data-\\udcff.bin\n" in ours and b"FileNotFoundError: data-\\udcff.bin" in ours
    assert messages(strict) == ["after"] and b"udcff" not in strict.read_bytes()
    assert capfd.readouterr().err.count("UnicodeEncodeError") == 3
