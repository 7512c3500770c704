"""Loggers with handlers of their own, without torch: a record that is spooled and printed
by a console handler is one record (the captured copy is announced), whatever logger
printed it; a non-propagating logger's records reach the root's spool handler."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from tests.aggregator.spoolkit import process_env
from tests.watch.watchkit import Run, run

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


def _counts(r: Run, m: str) -> tuple[int, int, int]:
    """(spooled as a record, recorded as a captured line, printed) for message ``m``."""
    r.watcher_done()
    recs = [x for x in r.records() if m in str(x.get("msg"))]
    captured = sum(1 for x in recs if "log.iostream" in x.get("attrs", {}))
    printed = r.err.read_text().count(m) + r.out.read_text().count(m)
    return len(recs) - captured, captured, printed


def test_a_record_the_spool_filters_out_is_still_captured_from_the_console(
    tmp_path: Path,
) -> None:
    r = run(tmp_path, """\
        import logging
        from nvrx_otel.logging.setup import setup_root_logger
        logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
        setup_root_logger()
        for h in logging.root.handlers:
            if type(h).__name__ == "SpoolHandler":
                h.addFilter(lambda rec: not rec.name.startswith("noisy"))
        logging.getLogger("noisy").warning("f1 filtered from spool")
    """)  # fmt: skip
    assert _counts(r, "f1") == (0, 1, 1)


def test_a_spool_handler_shared_by_a_closed_logger_and_the_root_spools_once(
    tmp_path: Path,
) -> None:
    r = run(tmp_path, """\
        import logging, logging.config
        logging.config.dictConfig({"version": 1,
          "handlers": {"console": {"class": "logging.StreamHandler"},
                       "spool": {"class": "nvrx_otel.logging.SpoolHandler"}},
          "root": {"level": "INFO", "handlers": ["console", "spool"]},
          "loggers": {"app": {"handlers": ["console", "spool"], "propagate": False}}})
        logging.getLogger("app").warning("d1 app warning")
        log = setup_logger(root_logger=True)
        log.addHandler(logging.StreamHandler())  # a console on "nvrx", then a reset
        log = setup_logger(force_reset=True)
        log.warning("n2 after reset")
    """)  # fmt: skip
    assert _counts(r, "d1") == (1, 0, 1)
    assert _counts(r, "n2") == (1, 0, 1)


def test_basicconfig_force_after_the_loguru_front_end_keeps_the_users_console(
    tmp_path: Path,
) -> None:
    r = run(tmp_path, """\
        import logging
        from nvrx_otel.logging.logflow import configure_logging
        configure_logging(log_dir="logs", script_name="run")
        logging.basicConfig(force=True, level=logging.INFO, format="USER %(message)s")
        logging.getLogger("lib").info("b1 info after force")
    """)  # fmt: skip
    assert "USER b1 info after force" in r.err.read_text()
    assert _counts(r, "b1") == (0, 1, 1)  # no longer intercepted: the console is its record


def test_a_line_announced_and_never_printed_does_not_swallow_a_later_one(
    tmp_path: Path,
) -> None:
    r = run(tmp_path, """\
        import logging, io
        from nvrx_otel.logging.setup import setup_root_logger
        setup_root_logger()
        h = logging.StreamHandler(); h.setFormatter(logging.Formatter("%(message)s"))
        lg = logging.getLogger("lib"); lg.addHandler(h)
        h.setStream(io.StringIO())  # formatted, printed elsewhere
        lg.warning("disk full on /scratch")
        h.setStream(sys.stderr)
        print("disk full on /scratch", file=sys.stderr, flush=True)  # not a record: captured
    """)  # fmt: skip
    assert _counts(r, "disk full") == (1, 1, 1)


def test_removing_the_last_console_takes_the_bridge_off_too(tmp_path: Path) -> None:
    """``if not logger.handlers: logger.addHandler(...)`` still works."""
    r = run(tmp_path, """\
        import logging
        from nvrx_otel.logging.setup import setup_root_logger
        setup_root_logger()
        lg = logging.getLogger("lib"); lg.propagate = False
        h = logging.StreamHandler(); lg.addHandler(h)
        lg.removeHandler(h)
        print("handlers", len(lg.handlers), file=sys.stdout, flush=True)
        if not lg.handlers:
            lg.addHandler(logging.StreamHandler())
        lg.warning("l1 visible")
    """)  # fmt: skip
    assert "handlers 0" in r.out.read_text()
    assert _counts(r, "l1") == (1, 0, 1)


def test_configure_and_reset_give_back_every_console_handler(tmp_path: Path) -> None:
    from nvrx_otel.logging.logflow import configure_logging, reset_logging

    app = logging.getLogger("test_ownhandlers.app")
    out, err = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    app.addHandler(out)
    app.addHandler(err)
    try:
        configure_logging(log_dir=str(tmp_path / "logs"), script_name="run")
        assert out not in app.handlers and err not in app.handlers
        reset_logging()
        assert out in app.handlers and err in app.handlers
    finally:
        for h in list(app.handlers):
            app.removeHandler(h)


def test_dictconfig_and_adopting_loggers_in_two_threads_do_not_deadlock() -> None:
    """dictConfig holds logging's lock while it adds handlers (our hook runs then); adopting
    takes the same lock first, never one of its own."""
    script = """\
import logging, logging.config, sys, threading, time, faulthandler
from nvrx_otel.logging import ownhandlers

class SlowStderr(logging.Handler):  # widens the window, as many loggers do
    @property
    def stream(self):
        time.sleep(0.3); return sys.stderr
    def emit(self, r): pass

logging.getLogger("b").handlers.append(SlowStderr())

def adopting():
    ownhandlers.install()

def configuring():
    time.sleep(0.05)
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False,
        "handlers": {"c": {"class": "logging.StreamHandler"}},
        "loggers": {"a": {"handlers": ["c"], "propagate": False}}})

faulthandler.dump_traceback_later(20, exit=True)
ts = [threading.Thread(target=adopting), threading.Thread(target=configuring)]
for t in ts: t.start()
for t in ts: t.join()
print("no deadlock")
"""
    env = process_env(Path("/nonexistent"), "testnode")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.stdout.strip() == "no deadlock", done.stderr
