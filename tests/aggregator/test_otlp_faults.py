"""OTLP under faults: every record reaches the receiver or is reported, as in the node log.

Real aggregator processes, real rank processes (or hand-made spool files for bytes no
writer makes), the real test receiver. Each test is named after the scenario it pins.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from nvrx_otel import record as rec
from nvrx_otel import semconv
from tests.aggregator.spoolkit import (
    FakeWriter,
    cli,
    finish,
    log_path,
    messages,
    process_env,
    spool_dir,
    started,
    wait_for,
)
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver

RANK = (
    "import sys\n"
    "from nvrx_otel.logging import setup_logger\n"
    "log = setup_logger()\n"
    "for i in range(int(sys.argv[1])):\n"
    "    log.info('record %05d %s', i, 'x' * 200)\n"
)


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return process_env(tmp, "n1", **extra)


def _aggregator(tmp: Path, receiver: OtlpReceiver, *args: str, env: dict[str, str]) -> Any:
    cmd = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp / "logs"),
           "--wait-file", str(tmp / "wait"), "--check-interval", "0.05",
           "--otlp-endpoint", receiver.endpoint, *args]  # fmt: skip
    with (tmp / f"agg-{time.monotonic_ns()}.err").open("w") as err:
        return spawn(cmd, env=env, stderr=err, stdout=subprocess.DEVNULL)


def _err(tmp: Path) -> str:
    return "".join(p.read_text() for p in sorted(tmp.glob("agg-*.err")))


def _by_key(receiver: OtlpReceiver) -> dict[str, dict[str, Any]]:
    with receiver.lock:
        return {log["attributes"][semconv.RECORD_KEY]: log for log in receiver.logs}


def _reported(logs: dict[str, dict[str, Any]], reason: str) -> int:
    return sum(
        log["attributes"][semconv.DROP_COUNT]
        for log in logs.values()
        if log["attributes"].get(semconv.DROP_REASON) == reason
    )


def _node_log_counts(path: Path) -> tuple[int, int]:
    """Records (``record ...``) and records reported lost in the node log."""
    text = path.read_text() if path.exists() else ""
    lost = sum(
        int(line.split(word)[1].split()[0])
        for line in text.splitlines()
        for word in ("dropped ", "corrupt ")
        if f"] nvrx_aggregator:0 {word}" in line
    )
    return text.count(" record "), lost


# --- the backlog of writers that exited --------------------------------------------------


def test_backlog_of_writers_that_exited_is_exported_in_full(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """4 ranks spool more than half their budget while no aggregator runs, and exit; an
    aggregator started afterwards with an endpoint exports all of it: nothing is writing,
    so nothing presses the OTLP backlog to give way."""
    env = _env(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="16", NVRX_LOG_MAX_LOG_FILES="40")
    ranks = [
        spawn([sys.executable, "-c", RANK, "1200"], env=env | {"RANK": str(r)}) for r in range(4)
    ]
    for p in ranks:
        assert p.wait(timeout=120) == 0
    agg = _aggregator(tmp_path, receiver, env=env)
    wait_for(
        lambda: (
            sum(1 for k in _by_key(receiver).values() if k["body"].startswith("record ")) >= 4800
        ),
        timeout=120,
        what="every record at the receiver",
    )
    (tmp_path / "wait").touch()
    assert agg.wait(timeout=90) == 0, _err(tmp_path)
    logs = _by_key(receiver)
    assert _reported(logs, "otlp_backlog") == 0
    assert "OTLP backlog: skipped" not in _err(tmp_path)
    written, lost = _node_log_counts(tmp_path / "logs" / "nvrx_log_n1.log")
    assert (written, lost) == (4800, 0)


# --- backlog reports survive kill -9 ---------------------------------------------------------


def test_otlp_backlog_report_survives_aggregator_kill_9(tmp_path: Path) -> None:
    """A live writer presses the OTLP backlog while the endpoint refuses: files are skipped
    and reported. The aggregator is killed with SIGKILL once such a skip is committed, the
    restarted one delivers: what reached the receiver plus what it was told was skipped is
    every record of the node log."""
    env = _env(tmp_path, NVRX_LOG_MAX_FILE_SIZE_KB="4", NVRX_LOG_MAX_LOG_FILES="40")
    slow = RANK.replace("import sys\n", "import sys, time\n").replace(
        "    log.info(", "    time.sleep(0.01)\n    log.info("
    )
    with OtlpReceiver() as receiver:
        receiver.status = 503
        agg = _aggregator(tmp_path, receiver, env=env)
        rank = spawn([sys.executable, "-c", slow, "800"], env=env | {"RANK": "0"})
        wait_for(lambda: "OTLP backlog: skipped" in _err(tmp_path), timeout=120, what="a skip")
        state = next((tmp_path / "spool").glob("*/.nvrx_aggregator.state.json"))
        seen = state.stat().st_mtime_ns
        wait_for(lambda: state.stat().st_mtime_ns != seen, timeout=60, what="a commit")
        agg.send_signal(signal.SIGKILL)
        agg.wait(timeout=30)
        agg = _aggregator(tmp_path, receiver, env=env)
        wait_for(lambda: _err(tmp_path).count(": aggregating ") == 2, timeout=30, what="start")
        receiver.status = 200
        assert rank.wait(timeout=120) == 0
        (tmp_path / "wait").touch()
        assert agg.wait(timeout=120) == 0, _err(tmp_path)
        logs = _by_key(receiver)
    written, lost = _node_log_counts(tmp_path / "logs" / "nvrx_log_n1.log")
    assert written + lost == 800
    delivered = sum(1 for log in logs.values() if log["body"].startswith("record "))
    skipped = _reported(logs, "otlp_backlog")
    assert skipped > 0
    assert delivered + skipped >= written  # a skipped file may have been sent before too


# --- the drain cuts the retry backoff short ---------------------------------------------------


def test_drain_cuts_a_long_retry_backoff_short(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """The endpoint refuses long enough for the retry backoff to reach 16 s, then works
    again; a drain of 8 s starts at once. The exporter retries at the drain's start instead
    of sleeping out its backoff past the drain, and delivers everything."""
    env = _env(tmp_path)
    receiver.status = 503
    agg = _aggregator(tmp_path, receiver, "--drain-timeout", "8", env=env)
    rank = spawn([sys.executable, "-c", RANK, "50"], env=env | {"RANK": "0"})
    assert rank.wait(timeout=60) == 0
    # refused at 0, 0.5, 1.5, 3.5, 7.5 and 15.5 s: the next try is 16 s later
    wait_for(lambda: receiver.refused.get("logs", 0) >= 6, timeout=90, what="six refused requests")
    receiver.status = 200
    (tmp_path / "wait").touch()
    assert agg.wait(timeout=60) == 0, _err(tmp_path)
    logs = _by_key(receiver)
    assert sum(1 for log in logs.values() if log["body"].startswith("record ")) == 50


# --- corrupt and wrong-typed records ------------------------------------------------------


def _wrong_typed(w: FakeWriter) -> int:
    """Lines no sink can take: each is one corrupt record (the count returned)."""
    bad = [
        w.record("ts is text", ts="x"),
        w.record("sev is text", sev="high"),
        w.record("trace id is not hex", trace_id="z" * 32, span_id="1" * 16),
        {"v": 1, "k": "span_end", "ts": 5, "trace_id": "a" * 32, "span_id": 7, "name": "s"},
    ]
    for d in bad:
        w.raw(rec.encode(d))
        w.log("between")  # each its own corrupt run
    return len(bad)


def test_corrupt_and_wrong_typed_records_are_reported_in_node_log_and_otlp_alike(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """Undecodable bytes and records with wrong-typed fields (``ts`` text, ``sev`` text, a
    span id that is an integer, a header whose ``budget`` is text) are counted corrupt in
    the node log and reach OTLP as the same corrupt reports, while every other record of
    every writer flows."""
    directory = spool_dir(tmp_path)
    a = FakeWriter(directory, writer="00000000000000a1", pid=11)
    b = FakeWriter(directory, writer="00000000000000b2", pid=12, proc="rank1")
    os.close(b.fd)  # b's file: a header with a budget that is text
    header = {"v": 1, "k": "hdr", "w": b.writer, "f": 0, "ts": time.time_ns(), "pid": 12}
    b.path.write_bytes(rec.encode(header | {"budget": "x", "max": 4096, "res": {}}))
    b.fd = os.open(b.path, os.O_WRONLY | os.O_APPEND)
    a.log("first of a")
    a.raw(b"\xff{not json at all\n")
    a.log("after garbage")
    corrupt = 1 + _wrong_typed(a)
    for i in range(20):
        a.log(f"a {i}")
        b.log(f"b {i}")
    a.close()
    b.close()
    proc = cli(tmp_path, "--otlp-endpoint", receiver.endpoint)
    started(tmp_path, proc)
    (tmp_path / "done").touch()
    code, err = finish(proc, timeout=60)
    assert code == 0, err
    msgs = messages(log_path(tmp_path))
    node_corrupt = sorted(m for m in msgs if m.startswith("corrupt ") and m.endswith(": corrupt"))
    logs = _by_key(receiver)
    otlp_corrupt = sorted(
        log["body"]
        for log in logs.values()
        if log["attributes"].get(semconv.DROP_REASON) == "corrupt"
    )
    assert len(node_corrupt) == corrupt  # b's header is ignored, not a lost record
    assert otlp_corrupt == node_corrupt
    assert _reported(logs, "corrupt") == corrupt
    bodies = {log["body"] for log in logs.values()}
    assert {f"a {i}" for i in range(20)} | {f"b {i}" for i in range(20)} <= bodies
    assert {"first of a", "after garbage", "between"} <= bodies
    assert "OTLP export error" not in err


# --- a live spool file truncated under the readers ------------------------------------------


def test_live_file_truncated_under_the_readers_reports_the_cut_without_duplicates(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """Records 0-9 are in the node log and at the receiver when something truncates the
    live file back into record 5; the writer goes on appending (its records 10-12 were
    cut, 13-19 follow). Neither output reads records 0-5 again, and both report the three
    records cut as corrupt."""
    w = FakeWriter(spool_dir(tmp_path))
    keys = [f"{w.writer}-{i:x}" for i in range(20)]
    ends = []
    proc = cli(tmp_path, "--otlp-endpoint", receiver.endpoint)
    try:
        started(tmp_path, proc)
        for i in range(10):
            w.log(f"r {i}", key=keys[i])
            ends.append(os.fstat(w.fd).st_size)
        wait_for(lambda: len(messages(log_path(tmp_path))) == 10, timeout=30, what="node log")
        assert receiver.wait_for(lambda r: len(r.logs) >= 10, timeout=60)
        os.truncate(w.path, ends[5])
        w.log("r 13", key=keys[13])  # still short of where the readers are: they see the cut
        wait_for(lambda: "r 13" in messages(log_path(tmp_path)), timeout=30, what="r 13")
        for i in range(14, 20):
            w.log(f"r {i}", key=keys[i])
        w.close()
        (tmp_path / "done").touch()
        code, err = finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    msgs = messages(log_path(tmp_path))
    records = [m for m in msgs if m.startswith("r ")]
    assert records == [f"r {i}" for i in (*range(10), *range(13, 20))]
    assert sum(1 for m in msgs if m.startswith("corrupt 3 records")) == 1
    with receiver.lock:
        bodies = [log["body"] for log in receiver.logs]
    assert sorted(b for b in bodies if b.startswith("r ")) == sorted(records), bodies
    assert sum(1 for b in bodies if b.startswith("corrupt 3 records")) == 1


# --- OTLP cursors hold no descriptors ---------------------------------------------------------


def test_otlp_cursors_hold_no_descriptor_with_the_endpoint_down(tmp_path: Path) -> None:
    """300 short-lived writers while the endpoint refuses: OTLP's cursors keep no file
    open, so the aggregator holds at most one descriptor per spool file (the node-log
    reader's), not one more per file for OTLP."""
    directory = spool_dir(tmp_path)
    for n in range(300):
        w = FakeWriter(directory, writer=f"{n + 1:016x}", pid=1000 + n)
        w.log(f"short-lived {n}")
        w.close()
    with OtlpReceiver() as receiver:
        receiver.status = 503
        proc = cli(tmp_path, "--otlp-endpoint", receiver.endpoint, "--drain-timeout", "1")
        try:
            started(tmp_path, proc)
            wait_for(lambda: len(messages(log_path(tmp_path))) == 300, timeout=60, what="log")
            wait_for(lambda: receiver.refused.get("logs", 0) >= 2, timeout=60, what="refusals")

            def spool_fds() -> int:
                n = 0
                for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                    try:
                        target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                    except OSError:
                        continue
                    n += target.startswith(str(directory)) and target.endswith(".jsonl")
                return n

            files = sum(1 for p in directory.iterdir() if p.name.endswith(".jsonl"))
            assert files == 300  # none deleted: OTLP has not got them
            assert spool_fds() <= files
        finally:
            (tmp_path / "done").touch()
            code, err = finish(proc, timeout=60)
    assert code == 0, err
    state = orjson.loads((directory / ".nvrx_aggregator.state.json").read_bytes())
    assert len(state["otlp"]["cursors"]) <= 300
