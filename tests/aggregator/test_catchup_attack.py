"""The aggregator's recent speed paths attacked from outside: real aggregator processes
killed (``kill -9``) at chosen points of a commit (in its fsync on the commit thread, right
after the state write before the loop takes it, right after consumed files are deleted),
``SIGTERM`` in a commit, the chronological merge on and off (and switched between
restarts), OTLP on to a receiver on 127.0.0.1, rank processes that fork, loss reports and
corrupt lines between the records, and call sites whose fields differ only in type.

After each, the ledger holds: every record a rank emitted is in the node log exactly once
(loss reports left out), and the node log reports exactly the records the ranks reported
dropped and the lines that were corrupt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvrx_otel import record as rec
from nvrx_otel.aggregator.reader import read_chunk
from nvrx_otel.nodeline import format_record
from tests.aggregator.spoolkit import (
    ROOT,
    AggProc,
    FakeWriter,
    cli,
    finish,
    ledger,
    log_lines,
    log_path,
    spool_dir,
    started,
    wait_for,
)
from tests.aggregator.test_reader_fuzz import HEADER, LIMITS, PARTS, Spool
from tests.conftest import _spawned, tmpfs
from tests.conftest import spawn as spawn_killed_at_end
from tests.otlp_receiver import OtlpReceiver

# --- a rank that logs until told to stop ----------------------------------------------------

RANK = r"""
import json, os, sys, time
from pathlib import Path
from tests.aggregator.spoolkit import FakeWriter
directory, stop, n, fork = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def run(tag, n, pid):
    ident = {"node": "testnode", "rank": n, "lrank": n % 8, "irank": n, "ilrank": n % 8}
    w = FakeWriter(directory, writer=f"{n + 1:016x}", pid=pid, proc=f"rank{n}", identity=ident)
    i = dropped = corrupt = 0
    while not stop.exists() or i < 300:
        d = w.record(f"{tag} {i}", path=f"/w/site{i % 3}.py", line=10 + i % 2, fn=f"f{i % 5}")
        del d["file"]  # the call site's middle is cached per chunk for records without one
        d["lg"] = f"lg{i % 4}"  # the same call site from another logger
        w.raw(rec_encode(d))
        i += 1
        if i % 97 == 0:
            w.drop(3, d["ts"], d["ts"])
            dropped += 3
        if i % 131 == 0:
            w.raw(b'{"v":1,"k":"log","ts":"not a number","msg":"x"}\n')
            corrupt += 1
        if i % 173 == 0:
            w.raw(b"\x00garbage\n")
            corrupt += 1
        if i % 1500 == 0:
            w.rotate()
        if i % 10 == 0:
            time.sleep(0.004)  # pacing: a rank logs for as long as the test needs it to
    w.close()
    return {"tag": tag, "count": i, "dropped": dropped, "corrupt": corrupt}

from nvrx_otel.record import encode as rec_encode
out = Path(sys.argv[5])
if fork == "fork":
    child = os.fork()
    if child == 0:  # the forked rank: a writer of its own, its own tally
        done = run(f"r{n}c", n + 50, os.getpid())
        (out.parent / (out.name + ".child")).write_text(json.dumps(done))
        os._exit(0)
    result = run(f"r{n}", n, os.getpid())
    _, status = os.waitpid(child, 0)
    assert status == 0
else:
    result = run(f"r{n}", n, os.getpid())
out.write_text(json.dumps(result))
"""

KILLER = r"""
import os, runpy, signal
from nvrx_otel.aggregator import commit, commit_thread, state
point, _, nth = os.environ["ATTACK"].partition(":")
nth = int(nth)
calls = [0]

def hit():
    calls[0] += 1
    return calls[0] == nth

if point in ("fsync", "sigterm"):
    real_fsync = commit_thread.fsync_node_log
    def fsync(fd):
        if hit():
            if point == "fsync":
                os.kill(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGTERM)  # handled on the loop's thread
        real_fsync(fd)
    commit_thread.fsync_node_log = fsync
elif point == "state":
    real_write = state.StateStore.write
    def write(self, data):
        real_write(self, data)
        if hit():  # durable on disk, not yet taken by the loop
            os.kill(os.getpid(), signal.SIGKILL)
    state.StateStore.write = write
elif point == "deleted":
    real_delete = commit.Progress._delete_consumed
    def delete(self):
        before = len(self._spool.tracked)
        real_delete(self)
        if len(self._spool.tracked) < before and hit():
            os.kill(os.getpid(), signal.SIGKILL)
    commit.Progress._delete_consumed = delete
runpy.run_module("nvrx_otel.logging.aggregator", run_name="__main__", alter_sys=True)
"""


def _agg(tmp: Path, *args: str, **kwargs: Any) -> AggProc:
    """An aggregator process (``spoolkit.cli``), killed when the test ends, passed or
    failed (a failed wait would otherwise leave it running)."""
    proc = cli(tmp, *args, **kwargs)
    _spawned.append(proc)
    return proc


def _ranks(tmp: Path, count: int, *, fork: bool = False) -> list[subprocess.Popen[Any]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return [
        spawn_killed_at_end(
            [
                sys.executable, "-c", RANK, str(spool_dir(tmp)), str(tmp / "stop"), str(n),
                "fork" if fork else "-", str(tmp / f"rank{n}.json"),
            ],
            env=env,
        )
        for n in range(count)
    ]  # fmt: skip


def _emitted(tmp: Path, ranks: list[subprocess.Popen[Any]]) -> dict[str, Any]:
    """Stop the ranks; what they emitted: messages, records reported dropped, corrupt lines."""
    (tmp / "stop").touch()
    for r in ranks:
        assert r.wait(timeout=120) == 0
    msgs: set[str] = set()
    dropped = corrupt = 0
    for path in sorted(tmp.glob("rank*.json*")):
        result = json.loads(path.read_text())
        msgs.update(f"{result['tag']} {i}" for i in range(result["count"]))
        dropped += result["dropped"]
        corrupt += result["corrupt"]
    return {"msgs": msgs, "dropped": dropped, "corrupt": corrupt}


def _attacked(tmp: Path, attack: str, *args: str, env: dict[str, str] | None = None) -> None:
    """One aggregator run that dies (or stops) at ``attack`` (``point:nth``)."""
    agg = _agg(
        tmp, "--nice", "0", *args, env={"ATTACK": attack, **(env or {})},
        command=[sys.executable, "-c", KILLER],
    )  # fmt: skip
    code, err = finish(agg, timeout=120)
    if attack.startswith("sigterm"):
        assert code == 0, err
        assert "draining (SIGTERM)" in err, err
    else:
        assert code == -signal.SIGKILL, err


def _final(tmp: Path, *args: str, env: dict[str, str] | None = None) -> str:
    agg = _agg(tmp, "--nice", "0", *args, env=env)
    started(tmp, agg)
    (tmp / "done").touch()
    code, err = finish(agg, timeout=120)
    assert code == 0, err
    (tmp / "done").unlink()
    return err


def _node_logs(tmp: Path) -> list[Path]:
    """The node log and its rotated backups, oldest first."""
    base = log_path(tmp)
    backups = sorted(base.parent.glob(base.name + ".*"), key=lambda p: -int(p.suffix[1:]))
    return [*backups, base]


def _assert_exactly_once(tmp: Path, emitted: dict[str, Any]) -> None:
    kept: list[str] = []
    dropped = corrupt = 0
    for path in _node_logs(tmp):
        more, d, c = ledger(path)
        kept += more
        dropped += d
        corrupt += c
    twice = sorted(m for m, c in Counter(kept).items() if c > 1)
    assert twice == [], f"{len(twice)} records written twice, e.g. {twice[:5]}"
    missing = sorted(emitted["msgs"] - set(kept))
    assert missing == [], f"{len(missing)} records lost, e.g. {missing[:5]}"
    assert set(kept) == emitted["msgs"]
    assert (dropped, corrupt) == (emitted["dropped"], emitted["corrupt"])
    assert [n for n in os.listdir(spool_dir(tmp)) if not n.startswith(".")] == []


def _run_attack(
    tmp: Path,
    rounds: list[tuple[str, list[str]]],
    final: list[str],
    env: dict[str, str] | None = None,
) -> None:
    ranks = _ranks(tmp, 3)
    try:
        for attack, args in rounds:
            _attacked(tmp, attack, *args, env=env)
        emitted = _emitted(tmp, ranks)
    finally:
        (tmp / "stop").touch()
    _final(tmp, *final, env=env)
    _assert_exactly_once(tmp, emitted)


CHRONO = ["--en-chronological-ordering"]


@pytest.mark.parametrize("point", ["fsync", "state", "deleted"])
@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_kill_9_at_a_commit_point_loses_and_duplicates_nothing(
    tmp_path: Path, point: str, chrono: bool
) -> None:
    """Ranks log records (from call sites that share file and line but not function or
    logger), drop reports and corrupt lines while the aggregator is killed at the 2nd, 3rd
    and 5th time it reaches ``point`` of a commit; a last aggregator drains. Every record is
    in the node log once and every loss is reported once."""
    flags = CHRONO if chrono else []
    rounds = [(f"{point}:{n}", flags) for n in (2, 3, 5)]
    _run_attack(tmp_path, rounds, flags)


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_kill_9_at_commit_points_while_the_node_log_rotates(tmp_path: Path, chrono: bool) -> None:
    """The node log rotates every 64 KiB (every backup kept) while the aggregator is killed
    in commits (a rotation commits on the loop's thread: the state write is where it
    dies): the node log and its backups hold every record once."""
    flags = CHRONO if chrono else []
    rounds = [(f"{p}:{n}", flags) for p, n in (("state", 3), ("deleted", 1), ("state", 8))]
    _run_attack(tmp_path, rounds, flags, env={"NVRX_OTEL_NODE_LOG_MAX_MB": "0.0625"})
    assert len(_node_logs(tmp_path)) > 3


def test_restarts_switching_chronological_ordering_on_and_off(tmp_path: Path) -> None:
    """An aggregator with the merge on (texts-only release: no record sink) is killed in a
    commit's fsync while it holds records; the next runs without the merge, the next with
    it, each killed after its state write; the last drains without it."""
    rounds = [
        ("fsync:2", CHRONO),
        ("state:3", []),
        ("state:4", CHRONO),
        ("fsync:3", []),
    ]
    _run_attack(tmp_path, rounds, [])


def test_sigterm_in_a_commit_drains_and_a_restart_writes_nothing_again(tmp_path: Path) -> None:
    """SIGTERM arrives while a commit's fsync runs (merge on, then off): the aggregator
    drains and exits 0; the next ones write nothing twice."""
    rounds = [("sigterm:2", CHRONO), ("sigterm:3", []), ("fsync:2", CHRONO)]
    _run_attack(tmp_path, rounds, CHRONO)


def test_forking_ranks_and_kill_9_keep_exactly_once(tmp_path: Path) -> None:
    """Each rank forks a child that logs through a writer of its own while the parent logs
    on; the aggregator (merge on) is killed in commits; every record of parents and
    children is in the node log once."""
    ranks = _ranks(tmp_path, 2, fork=True)
    try:
        for attack in ("fsync:2", "state:3", "deleted:1"):
            _attacked(tmp_path, attack, *CHRONO)
        emitted = _emitted(tmp_path, ranks)
    finally:
        (tmp_path / "stop").touch()
    assert any(m.startswith("r0c ") for m in emitted["msgs"])
    _final(tmp_path, *CHRONO)
    _assert_exactly_once(tmp_path, emitted)


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_kill_9_with_otlp_on_keeps_the_node_log_exact_and_otlp_complete(
    tmp_path: Path, receiver: OtlpReceiver, chrono: bool
) -> None:
    """OTLP to a receiver on 127.0.0.1 (the merge then keeps its records for the sink):
    kill -9 in commits; the node log holds every record once, and every record reached the
    receiver (at least once: a restart may send again what it had not committed)."""
    flags = ["--otlp-endpoint", receiver.endpoint, *(CHRONO if chrono else [])]
    rounds = [(f"{p}:{n}", flags) for p, n in (("fsync", 2), ("state", 3), ("deleted", 1))]
    _run_attack(tmp_path, rounds, flags)
    emitted = set(ledger(log_path(tmp_path))[0])
    with receiver.lock:
        bodies = {r["body"] for r in receiver.logs}
    missing = sorted(emitted - bodies)
    assert missing == [], f"{len(missing)} records never reached OTLP, e.g. {missing[:5]}"


# --- the call site's cached middle -----------------------------------------------------------


def _site_record(w: FakeWriter, msg: str, **fields: Any) -> dict[str, Any]:
    d = w.record(msg, path="/w/train.py", line=7, **fields)
    del d["file"]
    return d


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_equal_rank_values_of_other_types_keep_their_own_text(tmp_path: Path, chrono: bool) -> None:
    """The identity fields are shown as they are (the schema leaves their type free): one
    call site's records whose rank is 1, 1.0 or true (equal as Python values, so equal as a
    cache key) read in one chunk each keep their own text, as the careful path writes it."""
    w = FakeWriter(spool_dir(tmp_path))
    wanted = []
    for n, (rank, lrank) in enumerate([(1, 0), (1.0, 0), (True, 0), (1, False), (1, 0.0), (1, 0)]):
        d = _site_record(w, f"m{n}", rank=rank, lrank=lrank, fn=f"f{n}", lg=f"lg{n}")
        w.raw(rec.encode(d))
        wanted.append(format_record(d, "testnode").rstrip("\n"))
    w.close()
    _final(tmp_path, *(CHRONO if chrono else []))
    got = [line for line in log_lines(log_path(tmp_path)) if " train.py:7 m" in line]
    assert got == wanted


def test_a_corrupt_run_reported_with_an_earlier_chunks_identity_is_escaped(
    tmp_path: Path,
) -> None:
    """A rank field holding a newline (the schema leaves its type free; JSON escapes it, so
    its chunk takes the careful path) is remembered as the writer's identity; a later chunk
    holding only a corrupt line is clean by its bytes, but its report names that rank: the
    node log must still hold no line the rank did not write as one record."""
    forged = "7\n2026-01-01 00:00:00,000 [ERROR] [testnode] forged line"
    ident = {"node": "testnode", "rank": forged, "lrank": 0, "irank": 0, "ilrank": 0}
    w = FakeWriter(spool_dir(tmp_path), identity=ident)
    w.log("first")
    agg = _agg(tmp_path, "--nice", "0")
    started(tmp_path, agg)
    path = log_path(tmp_path)
    wait_for(lambda: any(" first" in line for line in log_lines(path)), what="the first record")
    w.raw(b"garbage\n")  # a chunk of its own, after the first one was written
    wait_for(lambda: "corrupt 1 records" in path.read_text(), what="the corrupt report")
    w.close()
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    lines = log_lines(path)
    assert not any(line.startswith("2026-01-01") for line in lines), lines
    assert sum(1 for line in lines if not line.startswith("    ")) == 2, lines


# --- the reader's plain-record loop: offsets across reports and corrupt lines ---------------

_ITEM = st.sampled_from(["log", "log", "log", "shape", "drop", "corrupt", "badtype", "empty",
                         "span", "header"])  # fmt: skip


def _item_line(kind: str, i: int) -> bytes:
    base: dict[str, Any] = {"v": 1, "k": "log", "ts": 100 + i, "sev": 9, "lvl": "INFO"}
    base.update(lg="t", msg=f"m{i}", path="/w/a.py", line=3, key=f"{PARTS.writer}-{i:x}")
    if kind == "log":
        return rec.encode(base)
    if kind == "shape":  # another call site's shape: keys in another order, more of them
        return rec.encode({"fn": "g", **base, "rank": 2})
    if kind == "drop":
        drop = {"v": 1, "k": "drop", "ts": 100 + i, "count": 2, "first_ts": 1, "last_ts": 2}
        return rec.encode({**drop, "reason": "budget", "key": f"{PARTS.writer}-{i:x}"})
    if kind == "corrupt":
        return b"\x00not a record\n"
    if kind == "badtype":
        return rec.encode({**base, "line": "seven"})
    if kind == "empty":
        return b"\n"
    if kind == "span":
        span = {"v": 1, "k": "span_end", "ts": 100 + i, "trace_id": "ab" * 16}
        return rec.encode({**span, "span_id": "cd" * 8, "name": "s", "start": 1})
    return HEADER  # a repeated header: not a record, nothing lost


@settings(deadline=None, max_examples=150)
@given(st.lists(_ITEM, min_size=1, max_size=60), LIMITS, st.booleans())
def test_every_record_ends_where_its_line_ends(
    tmp_path_factory: pytest.TempPathFactory, items: list[str], limit: int, ends: bool
) -> None:
    """Records, drop records, corrupt lines, wrongly typed records, empty lines, spans and
    repeated headers in any order, read in chunks of any size: each record's end offset
    (where the merge commits a file's position) is just past its own line, each report's
    just past the lines it reports, and the counts add up."""
    sp = Spool(tmp_path_factory.mktemp("spool"), limit)
    offset = len(HEADER)
    want: list[tuple[str, int]] = []  # (message, end) of each record
    corrupt = dropped = 0
    for i, kind in enumerate(items):
        line = _item_line(kind, i)
        sp.write(line)
        offset += len(line)
        if kind in ("log", "shape"):
            want.append((f"m{i}", offset))
        elif kind == "drop":
            dropped += 2
        elif kind in ("corrupt", "badtype"):
            corrupt += 1
    got: list[tuple[str, int]] = []
    report_ends: list[int] = []
    while True:
        chunk = read_chunk(sp.file, final=True, limit=limit, want_ends=ends, now_ns=1)
        if chunk is None:
            break
        sp.take(chunk) if ends else None
        for n, d in enumerate(chunk.records):
            end = chunk.ends[n] if chunk.ends is not None else -1
            if n in chunk.reports:
                report_ends.append(end)
            else:
                got.append((d["msg"], end))
        if not ends:
            sp.corrupt += chunk.corrupt
            sp.dropped += chunk.dropped
    assert sp.file.offset == offset
    if ends:
        assert got == want
        assert all(e <= offset for e in report_ends)
    else:
        assert [m for m, _ in got] == [m for m, _ in want]
    assert (sp.corrupt, sp.dropped) == (corrupt, dropped)
    sp.close()


# --- a full file system under the node log ---------------------------------------------------


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_full_node_log_file_system_kill_9_then_space_again_keeps_exactly_once(
    tmp_path: Path, chrono: bool
) -> None:
    """The node log's file system fills up while ranks log (the merge on or off): the
    aggregator says it cannot write, is killed with ``kill -9`` while it retries, the next
    one meets the full disk too; then space comes back and a last one drains: every record
    is in the node log once, every loss reported once."""
    flags = CHRONO if chrono else []
    ranks = _ranks(tmp_path, 2)
    path = log_path(tmp_path)
    try:
        with tmpfs(tmp_path / "logs", "64m"):
            agg = _agg(tmp_path, "--nice", "0", *flags)
            started(tmp_path, agg)
            wait_for(lambda: len(log_lines(path)) > 500, timeout=60, what="records written")
            filler = _fill(tmp_path / "logs")
            wait_for(lambda: "cannot write the node log" in agg.err(), timeout=60, what="ENOSPC")
            agg.send_signal(signal.SIGKILL)
            agg.wait(timeout=30)
            agg = _agg(tmp_path, "--nice", "0", *flags)
            wait_for(lambda: "cannot" in agg.err(), timeout=60, what="the full disk again")
            filler.unlink()
            lines = len(log_lines(path))
            wait_for(lambda: len(log_lines(path)) > lines + 500, timeout=60, what="progress")
            agg.send_signal(signal.SIGKILL)
            agg.wait(timeout=30)
            emitted = _emitted(tmp_path, ranks)
            _final(tmp_path, *flags)
            _assert_exactly_once(tmp_path, emitted)
    finally:
        (tmp_path / "stop").touch()


def _fill(directory: Path) -> Path:
    """A file taking every free byte of ``directory``'s file system (unbuffered writes: a
    buffered file would fail again when closed)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


# --- real writers over their budget, forking, and the drop ledgers ---------------------------

BUDGETED_RANK = r"""
import json, os, sys, time
from pathlib import Path
from nvrx_otel.spool.writer import SpoolWriter
directory, stop, tag, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
w = SpoolWriter(directory, max_file_size=16 * 1024, budget=48 * 1024)

def run(tag):
    i = 0
    while not stop.exists() or i < 300:
        w.emit({"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": f"lg{i % 3}",
                "msg": f"{tag} {i}", "path": "/w/site.py", "line": 5, "fn": f"f{i % 4}",
                "pid": os.getpid()})
        i += 1
        if i % 10 == 0:
            time.sleep(0.002)
    w.flush()
    return i

child = os.fork()
if child == 0:
    n = run(tag + "c")
    w.close()
    (out.parent / (out.name + ".child")).write_text(json.dumps({"tag": tag + "c", "count": n}))
    os._exit(0)
n = run(tag)
w.close()
_, status = os.waitpid(child, 0)
assert status == 0
out.write_text(json.dumps({"tag": tag, "count": n}))
"""


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_forking_writers_over_budget_and_kill_9_account_for_every_record(
    tmp_path: Path, chrono: bool
) -> None:
    """Real spool writers with a small budget fork (parent and child each log through the
    writer, the child under a new writer id) and drop records while the aggregator is
    killed at commit points (so files wait to be deleted): at the end every record is in
    the node log once or reported dropped (by a drop record or the writer's ledger), and
    kept + dropped = emitted."""
    flags = CHRONO if chrono else []
    env = dict(os.environ, PYTHONPATH=str(ROOT), SLURM_JOB_ID="job1")
    env["NVRX_NODE_LOCAL_TMPDIR"] = str(tmp_path / "spool")
    ranks = [
        spawn_killed_at_end(
            [sys.executable, "-c", BUDGETED_RANK, str(spool_dir(tmp_path)), str(tmp_path / "stop"),
             f"r{n}", str(tmp_path / f"rank{n}.json")],
            env=env,
        )
        for n in range(2)
    ]  # fmt: skip
    try:
        for attack in ("fsync:2", "state:3", "deleted:2", "sigterm:2"):
            _attacked(tmp_path, attack, *flags)
        (tmp_path / "stop").touch()
        for r in ranks:
            assert r.wait(timeout=120) == 0
    finally:
        (tmp_path / "stop").touch()
    emitted = 0
    msgs: set[str] = set()
    for path in tmp_path.glob("rank*.json*"):
        result = json.loads(path.read_text())
        emitted += result["count"]
        msgs.update(f"{result['tag']} {i}" for i in range(result["count"]))
    _final(tmp_path, *flags)
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert [m for m, c in Counter(kept).items() if c > 1] == []
    assert set(kept) <= msgs
    assert (len(kept) + dropped, corrupt) == (emitted, 0)
    assert dropped > 0  # the budget was hit


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_a_quiet_writers_consumed_files_are_deleted_while_it_lives(
    tmp_path: Path, chrono: bool
) -> None:
    """A rank logs a burst over three files, then stays alive without logging (or is
    blocked at its budget, waiting for the aggregator to delete its files). The records
    the merge releases after its hold window must be committed too, so that the rank's
    older files are deleted and it can write again; otherwise it drops every record."""
    w = FakeWriter(spool_dir(tmp_path))
    for index in range(3):
        for i in range(50):
            w.log(f"file {index} record {i}")
        if index < 2:
            w.rotate()
    first = spool_dir(tmp_path) / w.path.name.replace(".000002.", ".000000.")
    assert first.exists()
    agg = _agg(tmp_path, "--nice", "0", *(CHRONO if chrono else []))
    try:
        started(tmp_path, agg)
        path = log_path(tmp_path)
        wait_for(lambda: len(log_lines(path)) == 150, timeout=60, what="every record written")
        wait_for(lambda: not first.exists(), timeout=60, what="the first file deleted")
    finally:
        w.close()
        (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_a_chunk_of_changing_call_sites_reads_as_the_careful_path_writes_it(
    tmp_path: Path, chrono: bool
) -> None:
    """One chunk whose records change call site at every step: the same file and line from
    another function or logger, the same base name in another directory, another level,
    another line, a ``file`` of its own (empty too), a rank left out or null, a string
    rank, trace ids, an exception, a null line. Each record's node-log text is the
    careful path's (``format_record``), in the order written."""
    w = FakeWriter(spool_dir(tmp_path))
    variants: list[dict[str, Any]] = [
        {},
        {"fn": "other"},
        {"lg": "another.logger"},
        {"path": "/elsewhere/train.py"},
        {"lvl": "WARNING", "sev": 13},
        {"line": 8},
        {"file": "given.py"},
        {"file": ""},
        {"rank": None},
        {"rank": "3"},
        {"rank": 2},
        {"irank": 9, "ilrank": 1},
        {"trace_id": "ab" * 16, "span_id": "cd" * 8},
        {"exc": "Traceback (most recent call last):\n  boom"},
        {"line": None},
        {"path": None, "file": "x.py"},
        {},
    ]
    wanted = []
    for n, change in enumerate(variants * 3):
        d = _site_record(w, f"v{n}")
        d.update(change)
        w.raw(rec.encode(d))
        wanted.append(format_record(d, "testnode"))
    w.close()
    _final(tmp_path, *(CHRONO if chrono else []))
    assert log_path(tmp_path).read_text() == "".join(wanted)


def test_a_drain_with_the_merge_and_otlp_deletes_every_delivered_file(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """Records still held by the merge when the drain ends are released, written, sent to
    OTLP and committed: the spool files they came from are consumed by every sink and are
    deleted before the aggregator exits, as without the merge."""
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(200):
        w.log(f"held {i}")
    w.close()
    env = {"NVRX_OTEL_HOLD_WINDOW_MS": "600000"}  # held until the drain's end
    agg = _agg(tmp_path, "--nice", "0", "--otlp-endpoint", receiver.endpoint, *CHRONO, env=env)
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert ledger(log_path(tmp_path))[0] == [f"held {i}" for i in range(200)]
    with receiver.lock:
        assert {r["body"] for r in receiver.logs} == {f"held {i}" for i in range(200)}
    assert list(spool_dir(tmp_path).glob("*.jsonl")) == [], err


OTLP_LAGS_UNTIL_THE_END = r"""
import runpy, threading
from nvrx_otel.aggregator import otlp_export, service
go = threading.Event()
# the sink lags (as with its queue full, or restarted behind the node log): it takes no
# batch from the loop and reads the spool itself, only once the drain delivers
otlp_export.OtlpExport.take = lambda self, chunk, start: None
catch_up = otlp_export.OtlpExport._catch_up
otlp_export.OtlpExport._catch_up = lambda self, views: go.is_set() and catch_up(self, views)
deliver_and_stop = service.deliver_and_stop
def deliver(sinks, deadline):
    go.set()
    deliver_and_stop(sinks, deadline)
service.deliver_and_stop = deliver
runpy.run_module("nvrx_otel.logging.aggregator", run_name="__main__", alter_sys=True)
"""


def test_files_otlp_delivers_in_the_drain_are_deleted_before_exit(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """With the merge on, the drain may end with OTLP behind (it compares OTLP with the
    node log's committed positions, which stay behind the held records): the last records
    are exported while the drain delivers. They are committed before the aggregator
    exits, and their spool files, consumed by every sink, are deleted then too."""
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(200):
        w.log(f"late {i}")
    w.close()
    env = {"NVRX_OTEL_HOLD_WINDOW_MS": "600000"}  # held until the drain's end
    agg = _agg(
        tmp_path, "--nice", "0", "--otlp-endpoint", receiver.endpoint, *CHRONO, env=env,
        command=[sys.executable, "-c", OTLP_LAGS_UNTIL_THE_END],
    )  # fmt: skip
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    with receiver.lock:
        assert {r["body"] for r in receiver.logs} == {f"late {i}" for i in range(200)}
    assert list(spool_dir(tmp_path).glob("*.jsonl")) == [], err


@pytest.mark.parametrize("chrono", [False, True], ids=["arrival", "chrono"])
def test_a_catch_up_that_rotates_the_node_log_deletes_consumed_files_as_it_goes(
    tmp_path: Path, chrono: bool
) -> None:
    """A long catch-up (ranks gone, many files) while the node log rotates more often than
    the aggregator commits on its own: each rotation commits, and the files those commits
    hold whole are deleted then, not only once the catch-up is over (live ranks at their
    budget would drop records meanwhile). The aggregator is killed at its first deletion:
    the node log does not hold every record yet."""
    total = 0
    for n in range(3):
        w = FakeWriter(spool_dir(tmp_path), writer=f"{n + 1:016x}", pid=100 + n)
        for index in range(12):
            for i in range(1500):
                w.log(f"w{n} f{index} r{i} " + "x" * 80)
                total += 1
            if index < 11:
                w.rotate()
        w.close()
    env = {"NVRX_OTEL_NODE_LOG_MAX_MB": "0.0625"}
    _attacked(tmp_path, "deleted:1", *(CHRONO if chrono else []), env=env)
    written = sum(len(ledger(p)[0]) for p in _node_logs(tmp_path))
    assert written < total
