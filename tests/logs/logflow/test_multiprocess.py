"""Children: ``enqueue=True`` with fork (200 forks from a process whose threads log, none
hangs) and spawn; children write where their parent does (run file and spool); and
``reset_logging`` returns to the unconfigured state."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from loguru import logger

from nvrx_otel import env
from nvrx_otel.logging.logflow import (
    configure_logging,
    gate,
    get_logger,
    intercept,
    reset_logging,
)
from nvrx_otel.logging.logflow.configure import current_run_file
from tests.logs.logflow.kit import messages, run_script, spool_logs

FORK_STORM = """
import json, logging, os, threading, time
from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging

configure_logging(script_name="storm", enqueue=True, console_level="CRITICAL",
                  module_levels={"noisy": {"file": "TRACE"}})
log = get_logger("storm")
stop = threading.Event()

def chatter(n):
    i = 0
    while not stop.is_set():
        log.debug("thread {} line {}", n, i)
        logging.getLogger("lib").info("stdlib thread %d line %d", n, i)
        i += 1

threads = [threading.Thread(target=chatter, args=(n,), daemon=True) for n in range(2)]
for t in threads:
    t.start()
children, hung, failed = {}, 0, 0
for i in range(200):
    pid = os.fork()
    if pid == 0:
        get_logger("child").info("child {}", i)
        logging.getLogger("lib").warning("stdlib child %d", i)
        shutdown_logging()  # must not wait for the parent's queue
        os._exit(0)
    children[pid] = time.monotonic()
    while len(children) >= 16 or (i == 199 and children):
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                failed += os.waitstatus_to_exitcode(status) != 0
                del children[pid]
            elif time.monotonic() - children[pid] > 20:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                hung += 1
                del children[pid]
        time.sleep(0.001)
stop.set()
for t in threads:
    t.join()
shutdown_logging()
print(json.dumps({"hung": hung, "failed": failed}))
"""


def test_two_hundred_forks_with_logging_threads_and_enqueue(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    proc = run_script(tmp_path, "storm", FORK_STORM, timeout=120, NVRX_NODE_LOCAL_TMPDIR=str(spool))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"hung": 0, "failed": 0}
    lines = messages(tmp_path / "logs" / "storm.log")
    assert sorted(m for m in lines if m.startswith("child")) == sorted(
        f"child {i}" for i in range(200)
    )
    assert sum(m.startswith("stdlib child") for m in lines) == 200
    children = [r for r in spool_logs(spool) if "child" in r["msg"]]
    assert len(children) == 400 and len({r["pid"] for r in children}) == 200
    assert any(m.startswith("thread") for m in lines)  # the threads logged throughout


SPAWN = """
import multiprocessing, os
from nvrx_otel.logging import configure_logging, get_logger, shutdown_logging

def child(n):
    get_logger("child").warning("spawned child {} pid {}", n, os.getpid())
    get_logger("child").debug("child debug dropped (parent's file_level)")
    shutdown_logging()

if __name__ == "__main__":
    configure_logging(log_dir="custom", script_name="job", file_level="INFO", enqueue=True)
    get_logger("parent").info("parent before")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=child, args=(n,)) for n in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    get_logger("parent").info("parent after")
    shutdown_logging()
    raise SystemExit(max(p.exitcode for p in procs))
"""


def test_spawned_children_write_where_the_parent_does(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "job.log").write_text("an earlier run\n")
    proc = run_script(tmp_path, "spawner", SPAWN, NVRX_NODE_LOCAL_TMPDIR=str(spool))
    assert proc.returncode == 0, proc.stderr
    lines = messages(tmp_path / "custom" / "job.log")
    assert lines[0] == "parent before" and lines[-1] == "parent after"
    assert sorted(m.split(" pid")[0] for m in lines[1:-1]) == ["spawned child 0", "spawned child 1"]
    assert "spawned child" not in proc.stderr  # children are not the main process: no console
    assert len(list((tmp_path / "custom").glob("job.*.log"))) == 1  # only the parent rotated
    assert not (tmp_path / "logs").exists()
    spooled = [r for r in spool_logs(spool) if r["msg"].startswith("spawned")]
    assert len({r["pid"] for r in spooled}) == 2


def test_reset_returns_to_the_unconfigured_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = dict(logger._core.handlers)  # type: ignore[attr-defined]
    configure_logging(script_name="run", module_levels={"x": {"file": "TRACE"}})
    assert os.environ.get(env.NVRX_OTEL_LOGFLOW_PARENT) and gate.is_active()
    assert intercept.installed() and current_run_file() is not None
    reset_logging()
    reset_logging()  # idempotent
    assert env.NVRX_OTEL_LOGFLOW_PARENT not in os.environ
    assert not gate.is_active() and not intercept.installed() and current_run_file() is None
    handlers = logger._core.handlers  # type: ignore[attr-defined]
    assert len(handlers) == len(before)  # loguru's default handler is back (if it was there)
    get_logger().info("implicit configure after reset")
    assert messages(tmp_path / "logs" / f"{current_run_file().stem}.log") == [  # type: ignore[union-attr]
        "implicit configure after reset"
    ]
