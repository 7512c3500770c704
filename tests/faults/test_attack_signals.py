"""A signal handler that raises (a SIGALRM timeout, as watchdogs and timeout decorators
do) while a log call is creating the next spool file: the writer must recover."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import spawn
from tests.faults.ledger import count_node_log, defect, require
from tests.faults.node import ROOT, Node

ALARM_RANK = """
import os, signal, sys, time
from nvrx_otel.logging import setup_logger

job_dir = sys.argv[1]
log = setup_logger(node_local_tmp_dir=os.environ["NVRX_NODE_LOCAL_TMPDIR"])

class Timeout(Exception):
    pass

hit = []

def creating() -> bool:
    try:
        return any(e.name.endswith(".jsonl.tmp") for e in os.scandir(job_dir))
    except OSError:
        return False

def on_alarm(signum, frame):
    if not hit and creating():  # the writer is between creating a file and naming it
        hit.append(1)
        raise Timeout()

signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
i = 0
deadline = time.monotonic() + 15
while not hit and time.monotonic() < deadline:
    try:
        log.info("rs-%d before the alarm", i)
    except Timeout:
        pass
    i += 1
signal.setitimer(signal.ITIMER_REAL, 0, 0)
for j in range(100):
    log.info("rq-%d after the alarm", j)
print("hit" if hit else "missed", flush=True)
"""

ALARM_STORM_RANK = """
import os, signal, sys, time
from nvrx_otel.logging import setup_logger

job_dir = sys.argv[1]
log = setup_logger(node_local_tmp_dir=os.environ["NVRX_NODE_LOCAL_TMPDIR"])

class Timeout(Exception):
    pass

hit = []
armed = True

def creating() -> bool:
    try:
        return any(e.name.endswith(".tmp") for e in os.scandir(job_dir))
    except OSError:
        return False

def on_alarm(signum, frame):
    if armed and creating():  # the writer is making a file (spool file or drop ledger)
        hit.append(1)
        raise Timeout()

signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
i = returned = 0
deadline = time.monotonic() + 15
while i < 200 or not hit and time.monotonic() < deadline:
    try:
        log.info("rs-%d before the alarm", i)
        returned += 1
    except Timeout:
        pass
    i += 1
armed = False
signal.setitimer(signal.ITIMER_REAL, 0, 0)
for j in range(100):
    log.info("rq-%d after the alarm", j)
print("hit" if hit else "missed", returned, flush=True)
"""


@defect("after a signal handler raised inside spool file creation, every later record is lost")
def test_writer_recovers_after_an_alarm_during_file_creation(tmp_path: Path) -> None:
    """An alarm handler raises while the writer creates its next spool file (4 KiB files,
    so files are created often). Once the alarm is off, the rank's next 100 records must
    reach the node log: the aggregator keeps up, nothing forces a drop."""
    node = Node(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="4", NVRX_LOG_MAX_LOG_FILES="64")
    node.start()
    rank = spawn([sys.executable, "-c", ALARM_RANK, str(node.job_dir)],
                 env=dict(node.env, RANK="0"), cwd=ROOT, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = rank.communicate(timeout=60)
    # The handler's exception escaping a log call kills the rank (the defect itself)
    require(rank.returncode == 0, f"the rank died ({rank.returncode}): {err.strip()[-300:]}")
    assert out.strip() == "hit", (out, err)
    code, agg_err = node.stop()
    assert code == 0, agg_err
    nl = count_node_log(node.log_path)
    kept = nl.per_tag()["rq"]
    require(kept == 100, f"{kept} of the 100 records after the alarm kept ({nl.dropped} reported"
            f" dropped); the rank said: {err.strip()[-300:]}")  # fmt: skip


@defect("alarms raising while the writer makes its files: all later records lost, none reported")
def test_alarm_storm_during_file_creation_loses_nothing_silently(tmp_path: Path) -> None:
    """An alarm handler raises whenever the writer is making a file (its spool file or its
    drop ledger) during the first 200 log calls. Every call that returned normally, and the
    100 calls after the alarm, must be in the node log or reported dropped."""
    node = Node(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="4", NVRX_LOG_MAX_LOG_FILES="64")
    node.start()
    rank = spawn([sys.executable, "-c", ALARM_STORM_RANK, str(node.job_dir)],
                 env=dict(node.env, RANK="0"), cwd=ROOT, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = rank.communicate(timeout=60)
    # The handler's exception escaping a log call kills the rank (the defect itself)
    require(rank.returncode == 0, f"the rank died ({rank.returncode}): {err.strip()[-300:]}")
    assert out.split()[0] == "hit", (out, err)
    emitted = int(out.split()[1]) + 100  # calls that returned normally
    code, agg_err = node.stop()
    assert code == 0, agg_err
    nl = count_node_log(node.log_path)
    accounted = nl.unique + nl.dropped + nl.corrupt
    said = err.strip()[-300:]
    require(accounted >= emitted, f"{emitted} log calls returned, node log {nl.unique} + dropped"
            f" {nl.dropped} + corrupt {nl.corrupt}; the rank said: {said}")  # fmt: skip
