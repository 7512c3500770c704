"""A rank whose console is a broken pipe (``python train.py | head``, a launcher's log
reader gone): a log call must not raise into training, whatever the console does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.conftest import log_records, spawn
from tests.faults.node import ROOT

BROKEN_CONSOLE_RANK = """
import sys
from nvrx_otel.logging import configure_logging, get_logger

configure_logging(log_dir=sys.argv[2], console_level="INFO")
log = get_logger("t")
raised = []
for i in range(10):
    try:
        log.info("r0-{} to a console nobody reads", i)
    except BaseException as exc:
        raised.append(f"{i}: {type(exc).__name__}({exc})")
with open(sys.argv[1], "w") as out:
    out.write("\\n".join(raised))
"""


def _on_a_broken_pipe(tmp: Path, script: str, env: dict[str, str], *args: str) -> str:
    """Run a rank ``script`` whose stdout and stderr are a pipe nobody reads (every write
    fails with EPIPE); what its log calls raised, as the rank wrote it down."""
    r, broken = os.pipe()
    os.close(r)
    result = tmp / "raised.txt"
    argv = [sys.executable, "-c", script, str(result), *args]
    rank = spawn(argv, env=env, cwd=tmp, stdout=broken, stderr=broken)
    os.close(broken)
    rank.wait(timeout=60)
    assert result.exists(), f"the rank died before its report (exit {rank.returncode})"
    return result.read_text()


def test_loguru_console_on_a_broken_pipe_never_raises(tmp_path: Path) -> None:
    """configure_logging's console sink writes to stderr, a pipe whose reader is gone: the
    loguru log calls return normally (the console line is lost, the record is spooled)."""
    env = dict(os.environ, NVRX_NODE_LOCAL_TMPDIR=str(tmp_path / "spool"), PYTHONPATH=str(ROOT))
    raised = _on_a_broken_pipe(tmp_path, BROKEN_CONSOLE_RANK, env, str(tmp_path / "run"))
    assert not raised, f"log calls raised into the caller: {raised}"
    spooled = [r["msg"] for r in log_records(tmp_path / "spool")]
    assert sum("to a console nobody reads" in m for m in spooled) == 10, spooled


STDLIB_CONSOLE_RANK = """
import sys
from nvrx_otel.logging import setup_logger

log = setup_logger()  # no spool configured: NVRx's stream handler on stderr
raised = []
for i in range(10):
    try:
        log.info("r0-%d to a console nobody reads", i)
    except BaseException as exc:
        raised.append(f"{i}: {type(exc).__name__}({exc})")
with open(sys.argv[1], "w") as out:
    out.write("\\n".join(raised))
"""


def test_stdlib_console_on_a_broken_pipe_never_raises(tmp_path: Path) -> None:
    """setup_logger without a spool logs to stderr through a stream handler; stderr is a
    pipe whose reader is gone: the log calls return normally."""
    env = {k: v for k, v in os.environ.items() if k != "NVRX_NODE_LOCAL_TMPDIR"}
    env["PYTHONPATH"] = str(ROOT)
    raised = _on_a_broken_pipe(tmp_path, STDLIB_CONSOLE_RANK, env)
    assert not raised, f"log calls raised into the caller: {raised}"
