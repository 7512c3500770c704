"""Writers wake the node's aggregator: under budget pressure (``test_limits.py``) and when
they open a new spool file, so a job's first records (and the first of each rotation) reach
the node log without waiting for the aggregator's next check interval."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nvrx_otel import record as rec
from nvrx_otel.spool.paths import WAKE_NAME
from nvrx_otel.spool.writer import SpoolWriter
from tests.aggregator.spoolkit import config, log_path, messages, running, spool_dir, wait_for


def _log(w: SpoolWriter, msg: str) -> None:
    w.emit({"k": rec.KIND_LOG, "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "msg": msg})


def _pokes(fd: int) -> int:
    try:
        return len(os.read(fd, 4096))
    except BlockingIOError:
        return 0


def test_a_new_file_pokes_once_after_its_first_record_and_steady_records_do_not(
    tmp_path: Path,
) -> None:
    os.mkfifo(tmp_path / WAKE_NAME, 0o600)
    fifo = os.open(tmp_path / WAKE_NAME, os.O_RDWR | os.O_NONBLOCK)  # as the aggregator
    w = SpoolWriter(tmp_path, max_file_size=4096)
    try:
        assert _pokes(fifo) == 0
        _log(w, "first")
        assert _pokes(fifo) == 1, "the first file was not announced"
        first = w.current_path
        _log(w, "second")
        assert _pokes(fifo) == 0, "a record in a file already announced woke the aggregator"
        while w.current_path == first:
            _log(w, "x" * 300)
        pokes = _pokes(fifo)
        if pokes == 0:  # (rate-limited to one per 50 ms: the rotation came sooner)
            time.sleep(0.06)
            second = w.current_path
            while w.current_path == second:
                _log(w, "x" * 300)
            pokes = _pokes(fifo)
        assert pokes == 1, "a rotation's new file was not announced"
    finally:
        w.close()
        os.close(fifo)


def test_a_new_writers_first_record_reaches_the_node_log_within_a_long_check_interval(
    tmp_path: Path,
) -> None:
    """With a check interval of two minutes, a writer that starts after the aggregator went
    idle has its first record in the node log long before the interval is up."""
    with running(config(tmp_path, check_interval=120.0)):
        wait_for(lambda: (spool_dir(tmp_path) / WAKE_NAME).exists(), 30, "the wake FIFO")
        w = SpoolWriter(spool_dir(tmp_path))
        try:
            _log(w, "first words of a rank")
            wait_for(
                lambda: "first words of a rank" in messages(log_path(tmp_path)),
                timeout=60,
                what="the first record in the node log",
            )
        finally:
            w.close()


def test_a_writer_that_drops_for_its_budget_pokes_with_no_new_file(tmp_path: Path) -> None:
    """Budget pressure wakes the aggregator on its own: a writer whose budget is full makes
    no new file, and still pokes (at most every 50 ms) while it drops."""
    os.mkfifo(tmp_path / WAKE_NAME, 0o600)
    fifo = os.open(tmp_path / WAKE_NAME, os.O_RDWR | os.O_NONBLOCK)
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=3 * 4096)
    try:
        while w.drops.total == 0:  # nobody consumes the files: the budget fills
            _log(w, "x" * 300)
        files = sorted(tmp_path.glob("*.jsonl"))
        _pokes(fifo)
        time.sleep(0.06)  # past the 50 ms between pokes
        _log(w, "x" * 300)  # no more room for it than for the one dropped
        assert sorted(tmp_path.glob("*.jsonl")) == files, "a new file was made"
        assert _pokes(fifo) == 1, "a writer dropping for its budget did not wake anyone"
    finally:
        w.close()
        os.close(fifo)
