"""Loggers with handlers of their own, without torch: a record that is spooled and printed
by a console handler is one record (the captured copy is announced), whatever logger
printed it; a non-propagating logger's records reach the root's spool handler."""

from __future__ import annotations

from pathlib import Path

from tests.watch.watchkit import run

STDLIB = """\
import logging
from nvrx_otel.logging.setup import setup_root_logger
logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
own = logging.getLogger("own")  # propagates, and prints itself too
own.addHandler(logging.StreamHandler(sys.stdout))
setup_root_logger()
closed = logging.getLogger("closed")  # torch's pattern, made after the setup
closed.propagate = False
closed.addHandler(logging.StreamHandler())
logging.getLogger("lib").warning("m1 through the root")
own.warning("m2 on stdout and stderr")
closed.warning("m3 from a closed logger")
logging.getLogger("closed.child").warning("m4 from its child")
closed.propagate = True
closed.warning("m5 once it propagates")
"""


def test_console_copies_of_spooled_stdlib_records_are_not_recorded_again(tmp_path: Path) -> None:
    r = run(tmp_path, STDLIB)
    assert r.proc.returncode == 0, r.err.read_text()
    r.watcher_done()
    msgs = [str(x.get("msg")) for x in r.records() if "m" in str(x.get("msg"))]
    for m, copies in (("m1", 1), ("m2", 2), ("m3", 1), ("m4", 1), ("m5", 2)):
        assert sum(m in x for x in msgs) == 1, (m, msgs)
        printed = r.err.read_text().count(m) + r.out.read_text().count(m)
        assert printed == copies, (m, r.err.read_text(), r.out.read_text())
    assert not r.captured("stderr") and not r.captured("stdout")


def test_an_unspooled_record_a_console_prints_is_still_captured(tmp_path: Path) -> None:
    """A child's console prints it, its parent stops it (no propagation, no console, so no
    bridge): never spooled, so the captured line is its only trace and is recorded."""
    r = run(tmp_path, """\
        import logging
        from nvrx_otel.logging.setup import setup_root_logger
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger("quiet").propagate = False
        logging.getLogger("quiet.child").addHandler(h)
        setup_root_logger()
        logging.getLogger("quiet.child").warning("only on the console")
    """)  # fmt: skip
    assert r.proc.returncode == 0, r.err.read_text()
    assert r.captured("stderr") == ["only on the console"]
    assert [x for x in r.records() if x.get("msg") == "only on the console"] == [
        x for x in r.records() if x.get("lvl") == "STDERR"
    ]


def test_the_loguru_console_line_of_a_spooled_record_is_not_recorded_again(
    tmp_path: Path,
) -> None:
    r = run(tmp_path, """\
        import logging
        from nvrx_otel.logging.logflow import configure_logging
        from loguru import logger
        configure_logging(log_dir="logs", script_name="run")
        logger.warning("m1 loguru\\twith a tab")
        logging.getLogger("lib").warning("m2 stdlib")
        late = logging.getLogger("late")  # a library's console handler, added later
        late.propagate = False
        late.addHandler(logging.StreamHandler())
        late.warning("m3 late")
    """)  # fmt: skip
    assert r.proc.returncode == 0, r.err.read_text()
    r.watcher_done()
    msgs = [str(x.get("msg")) for x in r.records()]
    for m in ("m1", "m2", "m3"):
        assert sum(m in x for x in msgs) == 1, (m, msgs)
        assert r.err.read_text().count(m) == 1, (m, r.err.read_text())
    assert not r.captured("stderr")
