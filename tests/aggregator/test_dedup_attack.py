"""Storm de-duplication under attack: real aggregator processes killed (``kill -9``) at
awkward moments (mid-flush, while the chronological merge holds part of a collapsed group),
rank restarts, look-alike records, loss reports, storms past the held bound, OTLP on, a
spool file deleted while held, and the window off. After each, every record the ranks
emitted is accounted for exactly once: node log (and its backups) + committed ``collapsed``
total + dropped + corrupt, and every storm record's rank is in exactly one node-log record."""

from __future__ import annotations

import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from nvrx_otel import semconv
from nvrx_otel.aggregator.service import Aggregator
from nvrx_otel.nodeline import parse_ranges
from nvrx_otel.spool.paths import STATE_NAME
from tests.aggregator.spoolkit import (
    LINE,
    FakeWriter,
    cli,
    config,
    finish,
    ledger,
    log_lines,
    log_path,
    spool_dir,
    started,
    wait_for,
)
from tests.otlp_receiver import OtlpReceiver

STORM = "NCCL watchdog: collective operation timed out"
NOTE = re.compile(r" \[repeated (?P<n>\d+)x across ranks (?P<ranks>[0-9,-]+)\]$")


def _writer(tmp: Path, rank: int | None, *, n: int = 0, pid: int | None = None) -> FakeWriter:
    """Rank ``rank``'s writer (``n``: its restart number, a new writer id and pid)."""
    who = 0xFFFF if rank is None else rank
    identity: dict[str, Any] = {"node": "testnode"}
    resource: dict[str, Any] = {semconv.NODE_ID: "testnode"}  # (OTLP's resource)
    if rank is not None:
        identity.update(rank=rank, lrank=rank % 8)
        resource[semconv.WORKLOAD_RANK] = rank
    return FakeWriter(
        spool_dir(tmp),
        writer=f"{n:04x}{who + 1:012x}",
        pid=pid if pid is not None else 1000 + who + 100_000 * n,
        proc=f"rank{who}",
        identity=identity,
        resource=resource,
    )


def _log_files(tmp: Path) -> list[Path]:
    """The node log and its rotated backups."""
    base = log_path(tmp)
    return sorted(base.parent.glob(base.name + "*"))


def _kept(tmp: Path) -> tuple[list[str], int, int]:
    """Kept messages, dropped, corrupt over the node log and every backup."""
    kept: list[str] = []
    dropped = corrupt = 0
    for p in _log_files(tmp):
        k, d, c = ledger(p)
        kept += k
        dropped += d
        corrupt += c
    return kept, dropped, corrupt


def _lines(tmp: Path) -> list[re.Match[str]]:
    return [m for p in _log_files(tmp) for line in log_lines(p) if (m := LINE.match(line))]


def _storm_ranks(tmp: Path, msg: str = STORM) -> Counter[int]:
    """How many node-log records stand for each rank's ``msg`` record (a collapsed record
    counts once for each of its ranks)."""
    out: Counter[int] = Counter()
    for m in _lines(tmp):
        if not m["msg"].startswith(msg):
            continue
        note = NOTE.search(m["msg"])
        if note is None:
            out[int(m["r"])] += 1
        else:
            ranks = parse_ranges(note["ranks"])
            assert len(ranks) == int(note["n"]), m.string
            out.update(ranks)
    return out


def _totals(tmp: Path) -> dict[str, int]:
    """The totals the aggregator committed last."""
    doc = orjson.loads((spool_dir(tmp) / STATE_NAME).read_bytes())
    totals: dict[str, int] = doc["totals"]
    return totals


def _committed_collapsed(tmp: Path) -> int:
    try:
        return _totals(tmp).get("collapsed", 0)
    except (FileNotFoundError, orjson.JSONDecodeError):
        return -1


def _assert_ledger(tmp: Path, emitted: int) -> None:
    kept, dropped, corrupt = _kept(tmp)
    collapsed = _totals(tmp).get("collapsed", 0)
    assert len(kept) + collapsed + dropped + corrupt == emitted, (
        f"kept {len(kept)} + collapsed {collapsed} + dropped {dropped} + corrupt {corrupt}"
        f" != emitted {emitted}"
    )


# --- kill -9 at awkward moments ------------------------------------------------------------

KILL_AFTER_ROTATION = r"""
import os, runpy, signal
from nvrx_otel.aggregator import commit
rotate = commit.Progress._rotate
def _rotate(self):
    rotate(self)  # commits: the rotation is done and its state on disk
    os.kill(os.getpid(), signal.SIGKILL)
commit.Progress._rotate = _rotate
runpy.run_module("nvrx_otel.logging.aggregator", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("chrono", [False, True], ids=["reading-order", "chronological"])
def test_kill_9_right_after_a_rotation_in_the_middle_of_a_flush(
    tmp_path: Path, chrono: bool
) -> None:
    """The node log reaches its size limit while a flushed window is being written (with
    ``--en-chronological-ordering``: while the merge releases it): the rotation commits.
    ``kill -9`` right after that commit, then a restart: every rank's storm record is in
    exactly one node-log record, and kept + collapsed = emitted (the commit did not hold
    the whole window's collapsed count with part of it unwritten)."""
    ranks = range(8)
    for r in ranks:
        w = _writer(tmp_path, r)
        for i in range(4):
            w.log(f"rank {r} filler {i} " + "x" * 100)
        w.log(STORM, line=42)
        w.close()
    env = {"NVRX_OTEL_NODE_LOG_MAX_MB": "0.0005"}  # about 520 bytes: rotates on every chunk
    args = ["--dedup-window", "300"]
    if chrono:
        args.append("--en-chronological-ordering")
        env["NVRX_OTEL_HOLD_WINDOW_MS"] = "100"
    first = cli(
        tmp_path, *args, env=env,
        command=[sys.executable, "-c", KILL_AFTER_ROTATION],
    )  # fmt: skip
    wait_for(
        lambda: (
            first.poll() is not None
            or (_storm_ranks(tmp_path) == Counter(ranks) and _committed_collapsed(tmp_path) == 7)
        ),
        timeout=60,
        what="the aggregator killed at a rotation, or the window written and committed",
    )
    first.kill()  # kill -9 (again)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL, first.err()
    second = cli(tmp_path, *args, env=env)
    started(tmp_path, second)
    (tmp_path / "done").touch()
    code, err = finish(second, timeout=60)
    assert code == 0, err
    assert _storm_ranks(tmp_path) == Counter(ranks)
    _assert_ledger(tmp_path, emitted=8 * 5)


CHRONO = ("--dedup-window", "200", "--en-chronological-ordering")
CHRONO_ENV = {"NVRX_OTEL_HOLD_WINDOW_MS": "300"}

KILL_AFTER_FLUSH_COMMIT = r"""
import os, runpy, signal, sys
from nvrx_otel.aggregator import commit, service
flushes = int(sys.argv[1])  # kill -9 after the commit that follows this many flushes
del sys.argv[1]
seen = 0
flush = service.Aggregator._flush_dedup
def _flush_dedup(self):
    global seen
    flush(self)
    seen += 1
service.Aggregator._flush_dedup = _flush_dedup
end = commit.Progress._end_commit
def _end_commit(self, pending):
    end(self, pending)  # durable: the state is on disk
    if seen >= flushes:
        os.kill(os.getpid(), signal.SIGKILL)
commit.Progress._end_commit = _end_commit
runpy.run_module("nvrx_otel.logging.aggregator", run_name="__main__", alter_sys=True)
"""


def _killed_after_flushes(tmp: Path, flushes: int, *args: str, env: dict[str, str]) -> int:
    """An aggregator killed (``kill -9``) right after the first commit that follows its
    ``flushes``-th window flush; the ``collapsed`` total that commit holds."""
    proc = cli(
        tmp, *args, env=env,
        command=[sys.executable, "-c", KILL_AFTER_FLUSH_COMMIT, str(flushes)],
    )  # fmt: skip
    wait_for(lambda: proc.poll() is not None, timeout=60, what="the kill after a flush")
    assert proc.returncode == -signal.SIGKILL, proc.err()
    return _committed_collapsed(tmp)


def _killed_while_the_merge_holds_a_member_file(tmp: Path) -> None:
    """Chronological ordering: the storm of ranks 0-3 is collapsed and written, but rank 3's
    file also holds a later record the merge still holds. The storm record's commit holds
    rank 3's position past its storm record (its tombstone, released with the collapsed
    record), before the later one. ``kill -9`` then, and a restart drains."""
    t0 = time.time_ns()
    for r in range(4):
        w = _writer(tmp, r)
        w.log(STORM, line=42, ts=t0 + r)
        if r == 3:
            w.log("rank 3 later", ts=t0 + 3600 * 10**9)  # held by the merge for long
        w.close()
    first = cli(tmp, *CHRONO, env=CHRONO_ENV)
    started(tmp, first)
    wait_for(lambda: _storm_ranks(tmp) == Counter(range(4)), timeout=60, what="the storm")
    wait_for(lambda: _committed_collapsed(tmp) == 3, timeout=60, what="its commit")
    first.kill()
    first.wait(timeout=30)
    assert "rank 3 later" not in _lines_text(tmp)  # still held by the merge
    _drain(tmp, *CHRONO, env=CHRONO_ENV)


def _lines_text(tmp: Path) -> str:
    return "\n".join(m.string for m in _lines(tmp))


def test_kill_9_while_the_merge_holds_a_member_file_keeps_the_ledger(tmp_path: Path) -> None:
    """... rank 3's storm record is counted collapsed only once its position is committed:
    after the restart emitted = kept + collapsed + dropped + corrupt."""
    _killed_while_the_merge_holds_a_member_file(tmp_path)
    _assert_ledger(tmp_path, emitted=5)


def test_kill_9_while_the_merge_holds_a_member_file_writes_no_member_twice(
    tmp_path: Path,
) -> None:
    """... and rank 3's storm record is in one node-log record, not also in a record of its
    own beside the collapsed one that names rank 3."""
    _killed_while_the_merge_holds_a_member_file(tmp_path)
    assert _storm_ranks(tmp_path) == Counter(range(4))
    assert sum(1 for m in _lines(tmp_path) if m["msg"] == "rank 3 later") == 1


def _killed_while_the_merge_holds_the_collapsed_record(tmp: Path) -> None:
    """Chronological ordering: the storm of ranks 0-3 is collapsed, the collapsed record is
    held by the merge (its time is ahead), and with it the other ranks' storm records as
    tombstones (their batches hold nothing else). ``kill -9`` right after the commit that
    follows the flush: it holds none of them collapsed (their positions are not committed
    either). A restart drains."""
    t0 = time.time_ns() + 3600 * 10**9  # ahead: the merge holds it
    for r in range(4):
        w = _writer(tmp, r)
        w.log(STORM, line=42, ts=t0 + r)
        w.close()
    assert _killed_after_flushes(tmp, 1, *CHRONO, env=CHRONO_ENV) == 0
    assert _storm_ranks(tmp) == Counter()
    _drain(tmp, *CHRONO, env=CHRONO_ENV)


def test_kill_9_while_the_merge_holds_the_collapsed_record_keeps_the_ledger(
    tmp_path: Path,
) -> None:
    _killed_while_the_merge_holds_the_collapsed_record(tmp_path)
    _assert_ledger(tmp_path, emitted=4)


def test_kill_9_while_the_merge_holds_the_collapsed_record_keeps_its_ranks(
    tmp_path: Path,
) -> None:
    """... and the restart's record still stands for all four ranks."""
    _killed_while_the_merge_holds_the_collapsed_record(tmp_path)
    assert _storm_ranks(tmp_path) == Counter(range(4))


@pytest.mark.parametrize("flushes", [1, 2, 3])
def test_kill_9_after_any_flush_with_groups_interleaved_across_writers(
    tmp_path: Path, flushes: int
) -> None:
    """Chronological ordering, six ranks writing in three phases while the aggregator runs,
    one window each: storm #1 of every rank, rank 2 then logging a record an hour ahead (so
    every later record of rank 2, its storm records too, waits in the merge until the
    drain); storms #2 and #3 crossing (even ranks log #2 then #3, odd ranks #3 then #2);
    storm #4 with rank 4's an hour ahead (its group waits for it). ``kill -9`` right after
    the commit that follows the first, second or third flush, the rest written while no
    aggregator runs, then a restart drains. Each storm's ranks are in exactly one node-log
    record each, every other record is there once, and the ledger holds."""
    ranks = range(6)
    writers = {r: _writer(tmp_path, r) for r in ranks}
    marker = _writer(tmp_path, None)
    hour = 3600 * 10**9
    emitted = 0

    def storm(r: int, k: int, ts: int) -> None:
        nonlocal emitted
        writers[r].log(f"{STORM} #{k}", line=40 + k, lvl="ERROR", ts=ts)
        emitted += 1

    def own(r: int, msg: str, ts: int) -> None:
        nonlocal emitted
        writers[r].log(msg, ts=ts)
        emitted += 1

    def phase_1(t: int) -> None:
        for r in ranks:
            own(r, f"rank {r} phase 1", t)
            storm(r, 1, t + r)
        own(2, "rank 2 an hour ahead", t + hour)

    def phase_2(t: int) -> None:
        for r in ranks:
            own(r, f"rank {r} phase 2", t)
            first, second = (2, 3) if r % 2 == 0 else (3, 2)
            storm(r, first, t + r)
            storm(r, second, t + r + 10)

    def phase_3(t: int) -> None:
        for r in ranks:
            own(r, f"rank {r} phase 3", t)
            storm(r, 4, t + r + (hour if r == 4 else 0))

    proc = cli(
        tmp_path, *CHRONO, env=CHRONO_ENV,
        command=[sys.executable, "-c", KILL_AFTER_FLUSH_COMMIT, str(flushes)],
    )  # fmt: skip
    for p, phase in enumerate([phase_1, phase_2, phase_3], 1):
        phase(time.time_ns())
        marker.log(f"phase {p} written")  # rankless: never collapsed, never ahead
        emitted += 1
        wait_for(
            lambda p=p: proc.poll() is not None or f"phase {p} written" in _lines_text(tmp_path),
            timeout=60,
            what=f"phase {p} in the node log, or the kill",
        )
    wait_for(lambda: proc.poll() is not None, timeout=60, what="the kill after a flush")
    assert proc.returncode == -signal.SIGKILL, proc.err()
    for w in [*writers.values(), marker]:
        w.close()
    _drain(tmp_path, *CHRONO, env=CHRONO_ENV)
    for k in range(1, 5):
        assert _storm_ranks(tmp_path, f"{STORM} #{k}") == Counter(ranks), k
    others = Counter(m["msg"] for m in _lines(tmp_path) if not m["msg"].startswith(STORM))
    assert set(others.values()) == {1}, others
    assert len(others) == 6 * 3 + 1 + 3
    _assert_ledger(tmp_path, emitted=emitted)


# --- what collapses and what does not, through a real aggregator ---------------------------


def _drain(tmp: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """A real aggregator over what the spool holds, drained by the wait file; its stderr."""
    proc = cli(tmp, *args, env=env)
    started(tmp, proc)
    (tmp / "done").touch()
    code, err = finish(proc, timeout=90)
    assert code == 0, err
    return err


def test_without_the_flag_nothing_collapses(tmp_path: Path) -> None:
    for r in range(16):
        w = _writer(tmp_path, r)
        w.log(STORM, line=42)
        w.close()
    err = _drain(tmp_path)
    storm = [m for m in _lines(tmp_path) if m["msg"].startswith(STORM)]
    assert len(storm) == 16 and not any(NOTE.search(m["msg"]) for m in storm)
    assert "collapsed" not in err and "dedup" not in err
    assert _totals(tmp_path).get("collapsed", 0) == 0


@pytest.mark.parametrize("chrono", [False, True], ids=["reading-order", "chronological"])
def test_look_alikes_restarts_rankless_and_loss_reports_in_one_window(
    tmp_path: Path, chrono: bool
) -> None:
    """One window holds: the storm of ranks 0-5 and 12; rank 0 again from its restarted
    process (a rank's own repeat: a record of its own); the same text at another level,
    with other attributes, with an exception, at another line, from another logger (each
    pair of ranks collapses with its own kind only); a writer without a rank logging it
    twice (never collapsed); rank 12's drop record and a corrupt line. Every record is
    accounted for."""
    emitted = 0

    def log(w: FakeWriter, **fields: Any) -> None:
        nonlocal emitted
        w.log(STORM, **{"line": 42, **fields})
        emitted += 1

    for r in [*range(6), 12]:
        w = _writer(tmp_path, r)
        log(w)
        if r == 12:
            w.drop(5, 1, 2)
            w.raw(b"not a record\n")
            emitted += 5 + 1
        w.close()
    restarted = _writer(tmp_path, 0, n=1)
    log(restarted)
    restarted.close()
    kinds: list[dict[str, Any]] = [
        {"lvl": "WARNING", "sev": 13},
        {"attrs": {"step": 1}},
        {"attrs": {"step": 2}},
        {"exc": "Traceback (most recent call last):\nRuntimeError: boom"},
        {"line": 43},
        {"lg": "other"},
    ]
    for i, fields in enumerate(kinds):
        for r in (20 + 2 * i, 21 + 2 * i):
            w = _writer(tmp_path, r)
            log(w, **fields)
            w.close()
    nobody = _writer(tmp_path, None)
    log(nobody)
    log(nobody)
    nobody.close()
    args = ["--dedup-window", "500"] + (["--en-chronological-ordering"] if chrono else [])
    _drain(tmp_path, *args, env={"NVRX_OTEL_HOLD_WINDOW_MS": "200"})
    notes = sorted(
        (int(n["n"]), n["ranks"])
        for m in _lines(tmp_path)
        if m["msg"].startswith(STORM) and (n := NOTE.search(m["msg"]))
    )
    pairs = [(2, f"{20 + 2 * i}-{21 + 2 * i}") for i in range(len(kinds))]
    assert notes == sorted([(7, "0-5,12"), *pairs])
    plain = [m for m in _lines(tmp_path) if m["msg"] == STORM]
    assert sorted(m["r"] for m in plain) == ["0", "?", "?"]  # the restart's, the rankless two
    _assert_ledger(tmp_path, emitted)


def test_a_storm_past_the_held_bound_is_flushed_early_and_accounted(tmp_path: Path) -> None:
    """64 ranks x 50 steps of identical records with at most 200 held: the window flushes
    early (held stays near the bound: one cycle's reading over it at most), each (rank,
    step) record is in exactly one node-log record and the ledger holds."""
    ranks, steps = 64, 50
    for r in range(ranks):
        w = _writer(tmp_path, r)
        for s in range(steps):
            w.log(f"step {s}: loss is NaN", line=42)
        w.close()
    cfg = config(tmp_path, dedup_window_ms=60_000, chunk_bytes=4096, drain_timeout=60.0)
    agg = Aggregator(cfg)
    dedup = agg._dedup
    assert dedup is not None
    dedup.max_held = 200
    sizes: list[int] = []
    flush = dedup.flush

    def counted() -> Any:
        sizes.append(dedup.held)
        return flush()

    dedup.flush = counted  # type: ignore[method-assign]
    agg.start_thread()
    agg.shutdown(timeout=120)  # drains: every writer is gone, so it reads all and stops
    assert agg.exit_code == 0
    assert agg.health.written + agg.health.collapsed == ranks * steps
    per_cycle = 16 * 4096 // 100  # a cycle's reading, in records of about 100 bytes at least
    assert len(sizes) >= 2 and max(sizes) <= 200 + per_cycle, sizes
    for s in range(steps):
        assert _storm_ranks(tmp_path, f"step {s}: loss is NaN") == Counter(range(ranks))
    _assert_ledger(tmp_path, ranks * steps)
    assert agg.health.collapsed == _totals(tmp_path)["collapsed"] > 0


def test_a_storm_read_in_two_windows_gives_two_records(tmp_path: Path) -> None:
    """Ranks 0-3 log the storm; once it is written they log it again: two collapsed records
    of the same four ranks (a rank's records in two windows each count once)."""
    writers = [_writer(tmp_path, r) for r in range(4)]
    for w in writers:
        w.log(STORM, line=42)
    proc = cli(tmp_path, "--dedup-window", "200")
    started(tmp_path, proc)
    wait_for(lambda: _storm_ranks(tmp_path) == Counter(range(4)), timeout=60, what="1st storm")
    for w in writers:
        w.log(STORM, line=42)
        w.close()
    wait_for(lambda: sum(_storm_ranks(tmp_path).values()) == 8, timeout=60, what="2nd storm")
    (tmp_path / "done").touch()
    code, err = finish(proc, timeout=60)
    assert code == 0, err
    notes = [n for m in _lines(tmp_path) if (n := NOTE.search(m["msg"]))]
    assert [(n["n"], n["ranks"]) for n in notes] == [("4", "0-3")] * 2
    _assert_ledger(tmp_path, 8)


def test_a_spool_file_deleted_while_held_is_still_collapsed_and_accounted(tmp_path: Path) -> None:
    """Someone deletes rank 3's spool file while the window holds its storm record: the
    aggregator still has it open, the collapsed record stands for rank 3 and nothing is
    lost or written twice."""
    for r in range(8):
        w = _writer(tmp_path, r)
        w.log(STORM, line=42)
        w.log(f"rank {r} own")
        w.close()
    cfg = config(tmp_path, dedup_window_ms=60_000)
    agg = Aggregator(cfg)
    agg.start_thread()
    try:
        dedup = agg._dedup
        assert dedup is not None
        wait_for(lambda: dedup.held >= 16, timeout=60, what="everything held")
        (victim,) = [p for p in spool_dir(tmp_path).glob("*.jsonl") if "rank3" in p.name]
        victim.unlink()
    finally:
        agg.shutdown(timeout=60)
    assert agg.exit_code == 0
    assert _storm_ranks(tmp_path) == Counter(range(8))
    kept, _, _ = _kept(tmp_path)
    assert sorted(k for k in kept if k.endswith(" own")) == [f"rank {r} own" for r in range(8)]
    _assert_ledger(tmp_path, 16)


def test_a_record_with_an_odd_file_field_neither_collapses_nor_stops_the_aggregator(
    tmp_path: Path,
) -> None:
    """``file`` is shown as it is (not type-checked): records whose ``file`` is a list,
    without ``path``, must not stop the aggregator (telemetry never breaks); they stay
    records of their own."""
    for r in range(4):
        w = _writer(tmp_path, r)
        w.log(STORM, line=42)
        d = w.record("odd call site", line=42)
        d["file"] = ["train.py"] if r % 2 else [r]  # (no space: the test grammar)
        w.raw(orjson.dumps(d) + b"\n")
        w.close()
    err = _drain(tmp_path, "--dedup-window", "200")
    assert "failed" not in err
    assert _storm_ranks(tmp_path) == Counter(range(4))
    odd = [line for line in log_lines(log_path(tmp_path)) if "odd call site" in line]
    assert len(odd) == 4 and all(line.endswith("odd call site") for line in odd)  # apart
    _assert_ledger(tmp_path, 8)


def test_records_with_a_null_path_collapse_only_with_the_same_file() -> None:
    """``path`` may be null (``file`` then names the call site): records of the same text
    and line in two files are not identical."""
    from nvrx_otel.aggregator.dedup import DedupWindow
    from nvrx_otel.aggregator.reader import Chunk, SpoolFile
    from nvrx_otel.spool.paths import SpoolFileName

    window = DedupWindow(1000)
    t = 1_700_000_000_000_000_000
    chunks = []
    for r, name in enumerate(["a.py", "b.py", "a.py", "b.py"]):
        parts = SpoolFileName(f"{r + 1:016x}", 0, 1000 + r, f"rank{r}")
        d = {"v": 1, "k": "log", "ts": t + r, "lvl": "ERROR", "lg": "x", "msg": STORM}
        d.update(line=1, path=None, file=name, rank=r)
        chunks.append(Chunk(SpoolFile(parts.name, parts, -1, r + 1), [d], None, 100))
        window.add(chunks[-1], 0)
    window.flush()
    kept = [d for c in chunks for d in c.records]
    assert sorted((d["file"], d["attrs"][semconv.DEDUP_RANKS]) for d in kept) == [
        ("a.py", "0,2"),
        ("b.py", "1,3"),
    ]


# --- OTLP on ----------------------------------------------------------------------------------


@pytest.mark.parametrize("chrono", [False, True], ids=["reading-order", "chronological"])
def test_kill_9_while_held_with_otlp_on_gives_the_receiver_the_collapsed_record_once(
    tmp_path: Path, receiver: OtlpReceiver, chrono: bool
) -> None:
    """OTLP/HTTP on: while the window holds the storm nothing of it reaches the receiver;
    ``kill -9`` then, and the restarted aggregator (with or without chronological
    ordering) gives the receiver and the node log the same collapsed record, once, and
    every rank's own record once."""
    for r in range(16):
        w = _writer(tmp_path, r)
        w.log(STORM, line=42)
        w.log(f"rank {r} own")
        w.close()
    otlp = ("--otlp-endpoint", receiver.endpoint)
    status = {"NVRX_OTEL_STATUS_INTERVAL_S": "0.1"}
    first = cli(tmp_path, "--dedup-window", "600000", *otlp, env=status)
    started(tmp_path, first)
    wait_for(lambda: "32 held by the dedup window" in first.err(), timeout=60, what="held")
    first.kill()
    first.wait(timeout=30)
    with receiver.lock:
        assert not receiver.logs
    args = ["--dedup-window", "200", *otlp] + (["--en-chronological-ordering"] if chrono else [])
    _drain(tmp_path, *args, env={"NVRX_OTEL_HOLD_WINDOW_MS": "200"})
    assert _storm_ranks(tmp_path) == Counter(range(16))
    _assert_ledger(tmp_path, 32)
    with receiver.lock:
        logs = list(receiver.logs)
    bodies = Counter(log["body"] for log in logs)
    assert bodies == Counter([STORM, *(f"rank {r} own" for r in range(16))])
    (storm,) = [log for log in logs if log["body"] == STORM]
    assert storm["attributes"][semconv.DEDUP_COUNT] == 16
    assert storm["attributes"][semconv.DEDUP_RANKS] == "0-15"


# --- the report -------------------------------------------------------------------------------


def test_report_names_the_rank_whose_record_is_earliest_as_the_first_failure(
    tmp_path: Path,
) -> None:
    """Ranks 1-8 log the same ERROR; rank 5's is the earliest, so the collapsed record is
    rank 5's (its time is rank 5's). The others' own times are gone (somewhere between the
    first and last time): the report must not name a lower rank of the record first only
    because the ranks tie on the record's time."""
    from nvrx_otel.report import analyse

    t0 = time.time_ns()
    for r in range(1, 9):
        w = _writer(tmp_path, r)
        w.log(STORM, line=42, sev=17, lvl="ERROR", ts=t0 + (0 if r == 5 else 1_000_000 * r))
        w.close()
    otlp = tmp_path / "otlp"
    _drain(tmp_path, "--dedup-window", "500", "--otlp-json", str(otlp))
    report = analyse([str(otlp)])
    assert report.first_failure is not None
    assert report.first_failure.rank == 5
    assert report.first_failure.what == f"{STORM} [repeated 8x across ranks 1-8]"


# --- real rank processes --------------------------------------------------------------------

REAL_RANK = r"""
import os
from nvrx_otel.logging import setup_logger
log = setup_logger(node_local_tmp_prefix="rank" + os.environ["RANK"])
try:
    raise RuntimeError("collective timed out")
except RuntimeError:
    log.exception("NCCL watchdog: exception")
log.error("NCCL watchdog: collective operation timed out")
log.error("rank %s: loss is NaN", os.environ["RANK"])
"""


def test_real_ranks_with_a_restarted_rank_collapse_per_distinct_rank(tmp_path: Path) -> None:
    """Eight rank processes (the stdlib front end, real spool writers) log the same
    exception and the same error, and a message embedding the rank; rank 3 is restarted
    and logs them again. One window: each storm becomes one record of ranks 0-7 plus rank
    3's second as a record of its own; the per-rank messages are never collapsed."""
    from tests.aggregator.spoolkit import process_env
    from tests.conftest import spawn

    def run(ranks: list[int]) -> None:
        procs = [
            spawn([sys.executable, "-c", REAL_RANK],
                  env=process_env(tmp_path, "testnode", RANK=str(r), SLURM_JOB_ID="job1"))
            for r in ranks
        ]  # fmt: skip
        assert [p.wait(timeout=120) for p in procs] == [0] * len(ranks)

    run(list(range(8)))
    run([3])  # rank 3 restarted
    _drain(tmp_path, "--dedup-window", "600000")  # records' times: minutes apart under load
    for msg in ("NCCL watchdog: exception", STORM):
        storm = [m for m in _lines(tmp_path) if m["msg"].startswith(msg)]
        notes = [(n["n"], n["ranks"]) for m in storm if (n := NOTE.search(m["msg"]))]
        assert notes == [("8", "0-7")], msg
        assert sorted(m["r"] for m in storm if not NOTE.search(m["msg"])) == ["3"], msg
    nan = Counter(int(m["r"]) for m in _lines(tmp_path) if m["msg"].endswith("loss is NaN"))
    assert nan == Counter([*range(8), 3])
    _assert_ledger(tmp_path, 9 * 3)


# --- rotation deleting a collapsed record ----------------------------------------------------


@pytest.mark.parametrize("chrono", [False, True], ids=["reading-order", "chronological"])
def test_a_deleted_backup_holding_a_collapsed_record_keeps_the_ledger(
    tmp_path: Path, chrono: bool
) -> None:
    """Rotation with no backups kept deletes the file holding the collapsed storm: its
    records are reported dropped (each for its own writer, with chronological ordering
    too), and emitted = kept + collapsed
    + dropped + corrupt still holds (no record counted both collapsed and dropped)."""
    writers = [_writer(tmp_path, r) for r in range(8)]
    for w in writers:
        w.log(STORM + " " + "x" * 5000, line=42)  # one line past the size limit
    cfg = config(
        tmp_path, dedup_window_ms=200, max_log_bytes=4000, log_backups=0,
        chrono=chrono, hold_window_ms=100,
    )  # fmt: skip
    agg = Aggregator(cfg)
    agg.start_thread()
    try:
        wait_for(lambda: agg.health.collapsed == 7 and agg.health.written == 1, timeout=60,
                 what="the storm collapsed and written")  # fmt: skip
        writers[0].log("after the storm")  # its write rotates: the storm's file is deleted
        for w in writers:
            w.close()
        wait_for(lambda: agg.health.dropped > 0, timeout=60, what="the rotation report")
    finally:
        agg.shutdown(timeout=60)
    assert agg.exit_code == 0
    kept, dropped, _ = _kept(tmp_path)
    assert kept == ["after the storm"] and dropped == 8
    _assert_ledger(tmp_path, emitted=9)


def test_state_keeps_what_the_node_log_and_its_backups_hold_collapsed() -> None:
    """The collapsed count of the node log and of each backup survives a commit (a restart
    after a crash mid-rotation reports the deleted backup again), and a state written
    before there was one reads as 0."""
    from nvrx_otel.aggregator import state as st
    from nvrx_otel.aggregator.nodelog import Backup

    stats = {"w": [1, 2, 3, 4, 5]}
    log = st.LogProgress("p", 1, 10, stats, [Backup(7, stats, 2), Backup(8, stats)], None, 5)
    back = st.decode(st.encode(st.State(log=log)))
    assert back.log is not None and back.log.collapsed == 5
    assert [b.collapsed for b in back.log.backups] == [2, 0]
    doc = orjson.loads(st.encode(st.State(log=log)))
    del doc["log"]["collapsed"]
    for b in doc["log"]["backups"]:
        b.pop("collapsed", None)
    old = st.decode(orjson.dumps(doc))
    assert old.log is not None and old.log.collapsed == 0
    assert [b.collapsed for b in old.log.backups] == [0, 0]
