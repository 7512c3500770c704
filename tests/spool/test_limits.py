"""The writer's limits: records larger than what is left of the budget, the per-record
cap, and logging from a signal handler while its own thread rotates."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from nvrx_otel import record as rec
from nvrx_otel.spool.truncate import MARK
from nvrx_otel.spool.writer import SpoolWriter
from tests.conftest import log_records, read_spool


def _log(msg: str, **extra: object) -> dict[str, object]:
    return {
        "k": "log",
        "ts": time.time_ns(),
        "sev": 9,
        "lvl": "INFO",
        "lg": "t",
        "msg": msg,
        **extra,
    }


def _consume_all_but_newest(directory: Path, seen: dict[str, dict[str, object]]) -> None:
    """What the aggregator does: read every file, delete consumed ones but never the live
    one."""
    files = sorted(directory.glob("*.jsonl"))
    for f in files:
        for line in f.read_bytes().splitlines():
            r = orjson.loads(line)
            if "key" in r:
                seen[r["key"]] = r
    for f in files[:-1]:
        f.unlink()


def test_record_larger_than_the_budget_less_one_file_does_not_end_logging(
    tmp_path: Path,
) -> None:
    # The budget is less than two files: once the live file holds more than the budget
    # less one file, a rotation never fit, and the live file is never deleted.
    w = SpoolWriter(tmp_path, max_file_size=8192, budget=10000)
    w.emit(_log("big " + "b" * 6000))
    seen: dict[str, dict[str, object]] = {}
    emitted = 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _consume_all_but_newest(tmp_path, seen)
        if sum(1 for r in seen.values() if str(r.get("msg")).startswith("after")) >= 5:
            break
        w.emit(_log(f"after {emitted} " + "a" * 6000))
        emitted += 1
    w.close()
    _consume_all_but_newest(tmp_path, seen)
    kept = [r for r in seen.values() if r["k"] == "log"]
    dropped = sum(int(r["count"]) for r in seen.values() if r["k"] == "drop")  # type: ignore[call-overload]
    assert sum(1 for r in kept if str(r["msg"]).startswith("after")) >= 5, (
        "the writer never resumed after one large record"
    )
    assert len(kept) + dropped == emitted


def test_record_larger_than_a_file_is_cut_and_logging_goes_on(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=10**9)
    w.emit(_log("x" * 100_000))
    for i in range(50):
        w.emit(_log(f"small {i}"))
    w.close()
    recs = log_records(tmp_path)
    assert len(recs) == 51
    big = recs[0]
    assert big["msg"].startswith("x" * 64)
    assert big["msg"].endswith(" bytes]") and "… [truncated " in big["msg"]
    assert all(f.stat().st_size <= 4096 + 4096 for f in tmp_path.glob("*.jsonl"))


def test_ten_megabyte_message_is_cut_to_the_record_cap_with_a_marker(tmp_path: Path) -> None:
    w = SpoolWriter(tmp_path)
    msg = "m" * (10 << 20)
    w.emit(_log(msg, exc="Traceback\n" + "t" * (1 << 20), attrs={"a": "v" * (1 << 20), "n": 1}))
    w.emit(_log("next"))
    w.close()
    path = next(tmp_path.glob("*.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3  # header, the cut record, the next one
    assert len(lines[1]) <= 1 << 20
    big = log_records(tmp_path)[0]
    kept = big["msg"].split("…")[0]
    assert msg.startswith(kept)
    assert big["msg"] == kept + MARK % (len(msg) - len(kept))
    assert "[truncated " in big["exc"] and "[truncated " in big["attrs"]["a"]
    assert big["attrs"]["n"] == 1 and big["key"] == f"{w.writer_id}-0"
    assert log_records(tmp_path)[1]["msg"] == "next"


def test_record_cap_setting_applies_to_the_stdlib_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVRX_OTEL_MAX_RECORD_KB", "16")
    from nvrx_otel.logging import setup_logger

    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    for i in range(3):
        log.info("line %d %s", i, "é" * 100_000)
    log.info("plain")
    recs = [r for r in log_records(tmp_path) if r["lg"] == "nvrx"]
    assert [r["msg"][:7] for r in recs] == ["line 0 ", "line 1 ", "line 2 ", "plain"]
    for r in recs[:3]:
        assert len(rec.encode(r)) <= 16 * 1024 + 1024  # identity, re-spacing aside
        assert r["msg"].endswith(" bytes]")
    for path in tmp_path.rglob("*.jsonl"):
        assert max(len(x) for x in path.read_bytes().splitlines()) <= 16 * 1024


_SIGNAL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    os.environ["NVRX_LOG_MAX_FILE_SIZE_KB"] = "4"
    os.environ["NVRX_OTEL_SPOOL_BUDGET_MB"] = "512"
    from nvrx_otel.logging import setup_logger
    from nvrx_otel.spool.registry import close_writers

    log = setup_logger(node_local_tmp_dir=sys.argv[1])
    emitted = [0]

    def on_alarm(signum, frame):
        emitted[0] += 1
        log.info("from the handler %d", emitted[0])

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    for i in range(20000):
        emitted[0] += 1
        log.info("from the loop %d %s", i, "p" * 40)
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    close_writers()
    print(emitted[0], flush=True)
    """
)


def test_signal_handler_logging_while_its_thread_rotates_never_hangs(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    proc = subprocess.run(
        [sys.executable, "-c", _SIGNAL_SCRIPT, str(spool)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    emitted = int(proc.stdout.split()[-1])
    lines = read_spool(spool)
    kept = sum(1 for r in lines if r["k"] == "log")
    dropped = sum(r["count"] for r in lines if r["k"] == "drop")
    assert emitted > 20000  # the handler did log
    assert kept + dropped == emitted
