"""Ranks and the aggregator together, as real processes: every record in the node log once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.aggregator.spoolkit import holds_lock, process_env
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver

RANK = (
    "import os, sys\n"
    "from nvrx_otel.logging import setup_logger\n"
    "log = setup_logger(node_local_tmp_prefix=sys.argv[1])\n"
    "for i in range(int(sys.argv[2])):\n"
    "    log.info('%s record %d', sys.argv[1], i)\n"
)
LINE = re.compile(r" (?P<who>\w+) record (?P<i>\d+)$")


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return process_env(tmp, "n0", **extra)


def _run_ranks(tmp: Path, names: list[tuple[int, str]], n: int, **extra: str) -> None:
    procs = [
        spawn([sys.executable, "-c", RANK, name, str(n)], env=_env(tmp, RANK=str(r), **extra))
        for r, name in names
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0


def _aggregate(tmp: Path, *args: str) -> str:
    (tmp / "wait").unlink(missing_ok=True)
    agg = spawn(
        [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp / "logs"),
         "--wait-file", str(tmp / "wait"), "--check-interval", "0.1", *args],
        env=_env(tmp), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return _finish(agg, tmp)


def _finish(agg: subprocess.Popen[str], tmp: Path) -> str:
    holds_lock(tmp, agg)  # started: a wait file made now is newer than its start
    (tmp / "wait").touch()
    _, err = agg.communicate(timeout=120)
    assert agg.returncode == 0, err
    return err


def _per_writer(tmp: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in (tmp / "logs" / "nvrx_log_n0.log").read_text().splitlines():
        m = LINE.search(line)
        if m:
            out.setdefault(m["who"], []).append(int(m["i"]))
    return out


def test_eight_ranks_two_processes_each_into_the_node_log(tmp_path: Path) -> None:
    names = [(r, f"{role}{r}") for r in range(8) for role in ("worker", "monitor")]
    agg = spawn(
        [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp_path / "logs"),
         "--wait-file", str(tmp_path / "wait"), "--check-interval", "0.1",
         "--en-chronological-ordering"],
        env=_env(tmp_path, NVRX_OTEL_HOLD_WINDOW_MS="200"), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _run_ranks(tmp_path, names, 1000)
    _finish(agg, tmp_path)
    got = _per_writer(tmp_path)
    assert sorted(got) == sorted(name for _, name in names)
    assert all(seq == list(range(1000)) for seq in got.values())  # each once, in order


def test_aggregator_down_while_ranks_rotate_then_started(tmp_path: Path) -> None:
    """Ranks rotate through many small spool files with no aggregator running; started
    later, it writes every record once and leaves the spool empty."""
    names = [(r, f"rank{r}") for r in range(4)]
    _run_ranks(tmp_path, names, 3000, NVRX_LOG_MAX_FILE_SIZE_KB="16", NVRX_LOG_MAX_LOG_FILES="1000")
    spool_files = list((tmp_path / "spool").rglob("*.jsonl"))
    assert len(spool_files) > 4 * 10  # they rotated a lot
    err = _aggregate(tmp_path)
    got = _per_writer(tmp_path)
    assert all(got[name] == list(range(3000)) for _, name in names), err
    assert not list((tmp_path / "spool").rglob("*.jsonl"))


def test_health_metrics_reach_the_endpoint(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        agg = spawn(
            [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
             str(tmp_path / "logs"), "--wait-file", str(tmp_path / "wait"),
             "--check-interval", "0.1", "--otlp-endpoint", receiver.endpoint],
            env=_env(tmp_path, NVRX_OTEL_STATUS_INTERVAL_S="1"), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _run_ranks(tmp_path, [(0, "rank0")], 100)
        assert receiver.wait_for(lambda r: "nv.nvrx.aggregator.records" in r.metrics, 30)
        _finish(agg, tmp_path)
        names = set(receiver.metrics)
    assert {"nv.nvrx.aggregator.records", "nv.nvrx.aggregator.backlog",
            "nv.nvrx.aggregator.lag", "nv.nvrx.aggregator.dropped",
            "nv.nvrx.aggregator.corrupt", "nv.nvrx.aggregator.rate"} <= names  # fmt: skip


def test_a_fork_after_an_in_process_aggregator_stopped_exports_no_metrics(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The SDK's metric reader restarts its ticker in a forked child even after shutdown;
    its last collection then warned "Exporter already shutdown" in the child (a training
    process that ran NodeLogAggregator, then forked its dataloader workers)."""
    from tests.aggregator.spoolkit import config, running, wait_for

    with OtlpReceiver() as receiver:
        with running(config(tmp_path, otlp_endpoint=receiver.endpoint, status_interval=1.0)):
            assert receiver.wait_for(lambda r: "nv.nvrx.aggregator.records" in r.metrics, 30)
        before = len(receiver.metrics)
        pid = os.fork()
        if pid == 0:  # the child: give a restarted ticker time to run its last collection
            time.sleep(1.5)
            os._exit(0)
        wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, timeout=30, what="the child")
        assert len(receiver.metrics) == before
    assert "Exporter already shutdown" not in capfd.readouterr().err
