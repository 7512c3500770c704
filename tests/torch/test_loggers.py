"""torch's own loggers (``propagate=False``, a ``_StderrHandler`` each, replaced at every
``set_logs``) with real torch 2.15: under the stdlib root handler (``setup_root_logger``,
``setup_logger(root_logger=True)``), the loguru front end and ``opentelemetry-instrument``,
torch imported before or after the setup, each record is in the spool once (not again as
a captured stderr line) and on the console once."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.aggregator.spoolkit import process_env
from tests.conftest import spawn
from tests.torch.test_torchrun import ROOT, torch_site
from tests.watch.watchkit import Run

pytestmark = pytest.mark.torch

SCRIPT = """\
import logging, os
front, order = os.environ["FRONT"], os.environ["ORDER"]
if front != "loguru":  # a console on the root, as basicConfig gives (its copies announced too)
    logging.root.addHandler(logging.StreamHandler())

def setup():
    if front == "stdlib":
        from nvrx_otel.logging.setup import setup_root_logger
        setup_root_logger()
    elif front == "nvrx":
        from nvrx_otel.logging import setup_logger
        setup_logger(root_logger=True)
    elif front == "loguru":
        from nvrx_otel.logging.logflow import configure_logging
        configure_logging(log_dir="logs", script_name="run")
    # "distro": opentelemetry-instrument set it up before this line

if order == "torch-first":
    import torch
    setup()
else:
    setup()
    import torch
logging.getLogger("torch.distributed").warning("m1 distributed warning")
logging.getLogger("torch._dynamo").warning("m2 dynamo warning")
logging.getLogger("torch").error("m3 torch error")
logging.getLogger("torch.distributed.elastic").warning("m4 a child of a torch logger")
torch._logging.set_logs(dynamo=logging.INFO)  # torch replaces its handlers
logging.getLogger("torch._dynamo").info("m5 after set_logs")
logging.getLogger("userlib").warning("m6 a plain logger")
"""
MESSAGES = [
    "m1 distributed warning",
    "m2 dynamo warning",
    "m3 torch error",
    "m4 a child of a torch logger",
    "m5 after set_logs",
    "m6 a plain logger",
]


@pytest.mark.parametrize("order", ["torch-first", "setup-first"])
@pytest.mark.parametrize("front", ["stdlib", "nvrx", "loguru", "distro"])
def test_torch_records_reach_the_spool_once_and_the_console_once(
    tmp_path: Path, front: str, order: str
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    env = process_env(tmp_path, "testnode", RANK="0", SLURM_JOB_ID="job1", FRONT=front,
                      ORDER=order, NVRX_OTEL_CAPTURE_OUTPUT="auto",
                      NVRX_OTEL_CAPTURE_STACKS="on")  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join([torch_site(), str(ROOT)])
    argv = [sys.executable, str(script)]
    if front == "distro":
        argv = [str(Path(sys.executable).parent / "opentelemetry-instrument"), *argv]
        env["OTEL_TRACES_EXPORTER"] = "none"
    out, err = tmp_path / "rank.out", tmp_path / "rank.err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = spawn(argv, stdout=o, stderr=e, env=env, cwd=tmp_path)
    run = Run(tmp_path, proc, out, err)
    assert run.wait(120) == 0, err.read_text()
    run.watcher_done()
    records = run.records()
    console = err.read_text()
    for m in MESSAGES:
        spooled = [r for r in records if m in str(r.get("msg"))]
        assert len(spooled) == 1, (m, spooled)
        assert "log.iostream" not in spooled[0].get("attrs", {}), (m, spooled)
        assert console.count(m) == 1, (m, console)
    assert not run.captured("stderr"), run.captured("stderr")
