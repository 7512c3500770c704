"""A rank whose console is a broken pipe (``python train.py | head``, a launcher's log
reader gone): a log call must not raise into training, whatever the console does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.conftest import spawn
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


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="Rich's console raises SystemExit on a broken pipe and it reaches the log call",
)
def test_loguru_console_on_a_broken_pipe_never_raises(tmp_path: Path) -> None:
    """configure_logging's console sink writes to stderr, a pipe whose reader is gone: the
    loguru log calls return normally (the console line is lost, the record is spooled)."""
    r, broken = os.pipe()
    os.close(r)  # every write to the pipe fails with EPIPE
    result = tmp_path / "raised.txt"
    env = dict(os.environ, NVRX_NODE_LOCAL_TMPDIR=str(tmp_path / "spool"), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-c", BROKEN_CONSOLE_RANK, str(result), str(tmp_path / "run")]
    rank = spawn(argv, env=env, cwd=tmp_path, stdout=broken, stderr=broken)
    os.close(broken)
    rank.wait(timeout=60)
    assert result.exists(), f"the rank died before its report (exit {rank.returncode})"
    raised = result.read_text()
    assert not raised, f"log calls raised into the caller: {raised}"
