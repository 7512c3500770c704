"""Capacity with NVRx's settings: as many records survive a burst as NVRx keeps.

NVRx's own logger test runs 50 files x 10 KB, bursts of 2,000 records per process and an
aggregator that checks once a second, and expects every record in the node log. Spool
records are about three times NVRx's lines, so the budget scales (NVRX_OTEL_SPOOL_SCALE)
and a writer under pressure wakes the aggregator (the wake FIFO).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from nvrx_otel.spool import wake
from nvrx_otel.spool.paths import WAKE_NAME
from tests.aggregator.spoolkit import (
    NO_WATCHER,
    cli,
    finish,
    log_path,
    messages,
    spool_dir,
    started,
    wait_for,
)

_BURST = textwrap.dedent(
    """
    import sys
    from nvrx_otel.logging import setup_logger
    logger = setup_logger(node_local_tmp_dir=sys.argv[1])
    for i in range(2000):
        logger.info(f"My Info Logging Message {i}")
    """
)
_DROPPED = re.compile(r"^dropped (\d+) records")


def test_nvrx_burst_of_2000_with_50_files_of_10_kb_keeps_every_record(tmp_path: Path) -> None:
    settings = {"NVRX_LOG_MAX_LOG_FILES": "50", "NVRX_LOG_MAX_FILE_SIZE_KB": "10"}
    agg = cli(tmp_path, "--check-interval", "1", env=settings)
    started(tmp_path, agg)
    ranks = 3
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX", "RANK"))}
    env.update(NO_WATCHER)
    env.update(settings, SLURM_JOB_ID="job1", NVRX_OTEL_NODE_ID="testnode")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BURST, str(tmp_path / "spool")],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(ranks)
    ]
    for p in procs:
        assert p.wait(120) == 0
    (tmp_path / "done").touch()
    code, err = finish(agg, timeout=120)
    assert code == 0, err
    msgs = messages(log_path(tmp_path))
    kept = [m for m in msgs if m.startswith("My Info Logging Message ")]
    assert not [m for m in msgs if _DROPPED.match(m)]
    assert len(kept) == ranks * 2000


def test_writer_under_budget_pressure_wakes_the_aggregator(tmp_path: Path) -> None:
    # A check interval far longer than the test: only a wake-up makes it read in time.
    agg = cli(tmp_path, "--check-interval", "3600")
    started(tmp_path, agg)
    directory = spool_dir(tmp_path)
    wait_for(lambda: (directory / WAKE_NAME).exists(), timeout=30, what="the wake FIFO")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX", "RANK"))}
    env.update(NO_WATCHER)
    env.update(
        SLURM_JOB_ID="job1",
        NVRX_OTEL_NODE_ID="testnode",
        NVRX_LOG_MAX_FILE_SIZE_KB="4",
        NVRX_OTEL_SPOOL_BUDGET_MB="0.02",  # five files: half of it is reached at once
    )
    script = _BURST.replace("2000", "60") + "print('logged', flush=True)\nsys.stdin.read()\n"
    with subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "spool")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline().strip() == "logged"  # the writer lives on, idle
        wait_for(
            lambda: any(m.startswith("My Info") for m in messages(log_path(tmp_path))),
            timeout=60,
            what="records read long before the next check interval",
        )
        writer.stdin.close()
        assert writer.wait(60) == 0
    agg.terminate()
    code, err = finish(agg)
    assert code == 0, err


def test_poke_without_an_aggregator_never_blocks(tmp_path: Path) -> None:
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)  # writers poke by descriptor
    try:
        assert wake.poke(dir_fd) is False  # no FIFO
        os.mkfifo(tmp_path / WAKE_NAME)
        assert wake.poke(dir_fd) is False  # a FIFO nobody reads: ENXIO, not a hang
    finally:
        os.close(dir_fd)
