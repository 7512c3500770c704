"""Storm de-duplication (``--dedup-window``): identical records of many ranks within the
window become one record with the ``nv.nvrx.dedup.*`` attributes, in the node log and in
OTLP alike; emitted = kept + collapsed + dropped + corrupt, across a rank killed mid-storm
and an aggregator killed mid-window and restarted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from nvrx_otel import semconv
from nvrx_otel.aggregator.dedup import DedupWindow
from nvrx_otel.aggregator.reader import Chunk, SpoolFile
from nvrx_otel.spool.paths import SpoolFileName
from nvrx_otel.view.otlpjson import parse_line
from nvrx_otel.view.sources import parse_head
from tests.aggregator.spoolkit import (
    LINE,
    ROOT,
    FakeWriter,
    cli,
    config,
    finish,
    ledger,
    log_lines,
    log_path,
    running,
    spool_dir,
    started,
    wait_for,
)

STORM = "NCCL watchdog: collective operation timed out"
NOTE = re.compile(r" \[repeated (?P<n>\d+)x across ranks (?P<ranks>[0-9,-]+)\]$")


# --- the stage alone ---------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _file(n: int) -> SpoolFile:
    parts = SpoolFileName(f"{n + 1:016x}", 0, 1000 + n, f"rank{n}")
    return SpoolFile(parts.name, parts, -1, n + 1)


def _rec(rank: int, ts: int, msg: str = STORM, **fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"v": 1, "k": "log", "ts": ts, "sev": 17, "lvl": "ERROR", "lg": "nccl"}
    d.update(msg=msg, path="/w/train.py", line=42, rank=rank, key=f"{rank:016x}-{ts:x}")
    d.update(fields)
    return d


def _chunk(f: SpoolFile, records: list[dict[str, Any]], end: int = 100) -> Chunk:
    f.offset = end
    return Chunk(file=f, records=records, ends=None, end=end)


def test_identical_records_of_distinct_ranks_become_their_earliest_with_the_attributes() -> None:
    window = DedupWindow(1000)
    files = [_file(n) for n in range(4)]
    t = 1_700_000_000_000_000_000
    chunks = [
        _chunk(files[0], [_rec(0, t + 30), _rec(0, t + 31, msg="rank 0 alone")]),
        _chunk(files[1], [_rec(1, t + 10, attrs={"a": 1})]),  # attributes differ: its own
        _chunk(files[2], [_rec(2, t + 5)]),  # the earliest: the one kept
        _chunk(files[3], [_rec(3, t + 50)]),
    ]
    for c in chunks:
        window.add(c, 0)
    before = sum(c.weight for c in chunks)
    out = [c for c, _ in window.flush()]
    assert [len(c.records) for c in out] == [1, 1, 1, 0]
    kept = out[2].records[0]
    assert kept["rank"] == 2 and kept["ts"] == t + 5 and kept["msg"] == STORM
    assert kept["attrs"] == {
        semconv.DEDUP_COUNT: 3,
        semconv.DEDUP_RANKS: "0,2-3",
        semconv.DEDUP_FIRST_TIME: t + 5,
        semconv.DEDUP_LAST_TIME: t + 50,
    }
    assert out[0].records[0]["msg"] == "rank 0 alone" and out[1].records[0]["attrs"] == {"a": 1}
    assert sum(c.weight for c in out) == before  # collapsed records stay in the accounting
    assert window.collapsed == 2 and window.groups == 1


def test_what_never_collapses() -> None:
    """Another level, call site or text, a rank's own repeat, a record outside the window,
    a record without a rank and a loss report each stay a record of their own."""
    window = DedupWindow(1000)  # 1 s
    t = 1_700_000_000_000_000_000
    f0, f1 = _file(0), _file(1)
    first = [_rec(0, t), _rec(0, t + 1), _rec(0, t + 2, lvl="WARNING"), _rec(0, t + 3, line=7)]
    first += [_rec(0, t + 4, msg="other"), _rec(0, t + 5, lg="nvrx_otel.aggregator")]
    second = [_rec(1, t + 2_000_000_000), {k: v for k, v in _rec(1, t).items() if k != "rank"}]
    second.append(_rec(1, t + 7, attrs={semconv.DROP_COUNT: 3}))
    c0, c1 = _chunk(f0, first), _chunk(f1, second)
    c1.reports = {2: 3}  # a loss report, not a log record
    window.add(c0, 0)
    window.add(c1, 0)
    window.flush()
    assert window.collapsed == 0
    assert len(c0.records) == 6 and len(c1.records) == 3


def test_a_held_file_stays_held_until_the_window_passes() -> None:
    clock = _Clock()
    window = DedupWindow(500, clock=clock)
    f = _file(0)
    window.add(_chunk(f, [_rec(0, 1)], end=80), 10)
    window.add(_chunk(f, [_rec(0, 2, msg="b")], end=160), 80)
    assert f.held == 2 and window.first_start(f) == 10 and window.held == 2
    assert not window.due() and window.wait_s() == 0.5
    clock.now += 0.5
    assert window.due()
    out = window.flush()
    assert [s for _, s in out] == [10, 80] and f.held == 0
    assert window.first_start(f) == 10  # until passed on: the OTLP sink reads no further
    window.passed()
    assert window.first_start(f) is None and not window.holding


# --- the aggregator ----------------------------------------------------------------------------


def _storm(
    tmp: Path,
    ranks: range,
    msg: str = STORM,
    skip: frozenset[int] = frozenset(),
    **fields: Any,
) -> None:
    for r in ranks:
        if r in skip:
            continue
        w = FakeWriter(
            spool_dir(tmp),
            writer=f"{r + 1:016x}",
            pid=1000 + r,
            proc=f"rank{r}",
            identity={"node": "testnode", "rank": r, "lrank": r % 8},
            resource={semconv.NODE_ID: "testnode", semconv.WORKLOAD_RANK: r},
        )
        w.log(msg, line=42, **fields)
        w.log(f"rank {r} step done")
        w.close()


def _collapsed_lines(tmp: Path, msg: str = STORM) -> list[re.Match[str]]:
    out = []
    for line in log_lines(log_path(tmp)):
        m = LINE.match(line)
        if m and m["msg"].startswith(msg):
            note = NOTE.search(m["msg"])
            assert note is not None, f"a storm record not collapsed: {line}"
            out.append(note)
    return out


def test_storm_becomes_one_record_in_node_log_sinks_and_otlp_json(tmp_path: Path) -> None:
    ranks = range(64)
    _storm(tmp_path, ranks, skip=frozenset({40}))
    bad = FakeWriter(spool_dir(tmp_path), writer="00000000000000ff", pid=77, proc="other",
                     identity={"node": "testnode", "rank": 70})  # fmt: skip
    bad.log(STORM, line=42)  # rank 70's joins the storm too
    bad.raw(b"garbage\n")
    bad.drop(5, 1, 2)
    bad.close()
    captured: list[dict[str, Any]] = []
    otlp = tmp_path / "otlp"
    cfg = config(tmp_path, dedup_window_ms=300, otlp_json=otlp, otlp_from_env=False)
    with running(cfg, sinks=[captured.extend]) as agg:
        wait_for(lambda: agg.health.written >= 63 + 2 + 1, timeout=60, what="everything")
        wait_for(lambda: (otlp / "logs_testnode.jsonl").exists(), timeout=60, what="OTLP")
    (note,) = _collapsed_lines(tmp_path)
    assert note["n"] == "64" and note["ranks"] == "0-39,41-63,70"
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    emitted = 63 * 2 + 1 + 1 + 5  # each rank's two, rank 70's storm record, garbage, drops
    collapsed = int(note["n"]) - 1
    assert len(kept) + collapsed + dropped + corrupt == emitted
    assert (agg.health.collapsed, agg.health.dropped, agg.health.corrupt) == (collapsed, 5, 1)
    assert agg._totals["collapsed"] == collapsed
    # per writer, the node log accounts for every record (for rotation reports)
    stats = agg._log.stats
    assert sum(entry[2] for entry in stats.values()) == emitted
    assert all(stats[f"{r + 1:016x}"][2] == 2 for r in ranks if r != 40)
    (storm,) = [d for d in captured if d["msg"] == STORM]
    assert storm["attrs"][semconv.DEDUP_COUNT] == 64
    assert storm["attrs"][semconv.DEDUP_RANKS] == "0-39,41-63,70"
    # OTLP/JSON holds the same one record, and the log view reads its ranks from both
    entries = [
        e
        for line in (otlp / "logs_testnode.jsonl").read_text().splitlines()
        for e in parse_line(line, "otlp", 1)
        if e.text == STORM
    ]
    assert len(entries) == 1 and entries[0].collapsed is not None
    assert entries[0].collapsed.count == 64
    assert entries[0].collapsed.ranks == (*range(40), *range(41, 64), 70)
    (line,) = [ln for ln in log_lines(log_path(tmp_path)) if STORM in ln]
    head = parse_head(line, "node log", 1, 0)
    assert head is not None and head.text == STORM and head.collapsed == entries[0].collapsed


def test_logs_view_shows_the_collapsed_records_ranks(tmp_path: Path) -> None:
    _storm(tmp_path, range(16))
    otlp = tmp_path / "otlp"
    cfg = config(tmp_path, dedup_window_ms=200, otlp_json=otlp, otlp_from_env=False)
    with running(cfg) as agg:
        wait_for(lambda: agg.health.written >= 17, timeout=60, what="the records")
        wait_for(lambda: (otlp / "logs_testnode.jsonl").exists(), timeout=60, what="OTLP")
    for source in (log_path(tmp_path), otlp / "logs_testnode.jsonl"):
        for extra in ([], ["--no-dedup"], ["--json"]):
            out = subprocess.run(
                [sys.executable, "-m", "nvrx_otel", "logs", str(source), *extra],
                capture_output=True, text=True, timeout=60, cwd=ROOT, check=True,
            ).stdout  # fmt: skip
            lines = [line for line in out.splitlines() if "NCCL" in line]
            if extra == ["--json"]:
                (doc,) = [json.loads(line) for line in lines]
                assert doc["repeated"]["count"] == 16
                assert doc["repeated"]["ranks"] == list(range(16))
            else:
                (line,) = lines
                assert line.endswith(f"{STORM} [repeated 16x across ranks 0-15]"), line


def test_report_counts_a_collapsed_failure_for_each_of_its_ranks(tmp_path: Path) -> None:
    """A storm of ERROR records collapsed into one is a failure of every rank it stands
    for, and the report's text names them."""
    from nvrx_otel.report import analyse

    _storm(tmp_path, range(1, 9), sev=17, lvl="ERROR")
    otlp = tmp_path / "otlp"
    cfg = config(tmp_path, dedup_window_ms=200, otlp_json=otlp, otlp_from_env=False)
    with running(cfg) as agg:
        wait_for(lambda: agg.health.written >= 9, timeout=60, what="the records")
        wait_for(lambda: (otlp / "logs_testnode.jsonl").exists(), timeout=60, what="OTLP")
    report = analyse([str(otlp)])
    assert report.first_failure is not None and report.first_failure.rank == 1
    assert f"{STORM} [repeated 8x across ranks 1-8]" == report.first_failure.what
    out = subprocess.run(
        [sys.executable, "-m", "nvrx_otel", "report", str(otlp)],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    assert "[repeated 8x across ranks 1-8]" in out


RANK = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from tests.aggregator.spoolkit import FakeWriter
rank = int(sys.argv[2])
w = FakeWriter(Path(sys.argv[1]), writer=f"{rank + 1:016x}", pid=0, proc=f"rank{rank}",
               identity={"node": "testnode", "rank": rank})
w.log("NCCL watchdog: collective operation timed out", line=42)
if len(sys.argv) > 4:
    w.raw(b'{"v":1,"k":"log","ts":')  # the record being written when it is killed
print("ready", flush=True)
sys.stdin.read()
w.log(f"rank {rank} exits")
"""


def test_rank_killed_mid_storm_is_accounted(tmp_path: Path) -> None:
    """Eight ranks log the storm; one is killed (``kill -9``) while writing its next record
    and while the window holds the storm: the storm is one record of eight ranks, the torn
    record one corrupt report, and emitted = kept + collapsed + dropped + corrupt."""
    directory = spool_dir(tmp_path)
    directory.mkdir(parents=True, mode=0o700)
    victim = 5
    procs = []
    for r in range(8):
        argv = [sys.executable, "-c", RANK, str(directory), str(r), str(ROOT)]
        argv += ["torn"] if r == victim else []
        procs.append(
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    with running(config(tmp_path, dedup_window_ms=1500)) as agg:
        dedup = agg._dedup
        assert dedup is not None
        wait_for(lambda: dedup.held >= 8, timeout=60, what="the storm held by the window")
        os.kill(procs[victim].pid, signal.SIGKILL)
        for r, p in enumerate(procs):
            if r != victim:
                p.communicate("", timeout=60)
        procs[victim].communicate(timeout=60)
        wait_for(lambda: agg.health.written >= 1 + 7 + 1, timeout=60, what="everything")
        wait_for(lambda: not list(directory.glob("*.jsonl")), timeout=60, what="spool consumed")
    (note,) = _collapsed_lines(tmp_path)
    assert note["n"] == "8" and note["ranks"] == "0-7"
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    emitted = 8 + 7 + 1  # the storm, the survivors' exit records, the torn record
    assert (len(kept), dropped, corrupt, agg.health.collapsed) == (8, 0, 1, 7)
    assert len(kept) + agg.health.collapsed + dropped + corrupt == emitted


def test_aggregator_killed_mid_window_restarts_without_loss_or_duplicate(tmp_path: Path) -> None:
    """``kill -9`` of the aggregator while the window holds a storm: nothing of it is in the
    node log; the next aggregator reads it again and collapses it once (no record both
    collapsed and written, none lost), and its summary keeps the ledger."""
    _storm(tmp_path, range(32))
    status = {"NVRX_OTEL_STATUS_INTERVAL_S": "0.1"}
    first = cli(tmp_path, "--dedup-window", "600000", env=status)
    started(tmp_path, first)
    wait_for(lambda: "64 held by the dedup window" in first.err(), timeout=60, what="held")
    first.kill()
    first.wait(timeout=30)
    assert not any(STORM in line for line in log_lines(log_path(tmp_path)))
    second = cli(tmp_path, "--dedup-window", "200")
    started(tmp_path, second)
    _storm(tmp_path, range(100, 132), msg="loss spike")  # a second storm while it runs
    wait_for(lambda: len(_collapsed_lines(tmp_path, "loss spike")) == 1, timeout=60,
             what="the second storm")  # fmt: skip
    (tmp_path / "done").touch()
    code, err = finish(second)
    assert code == 0, err
    (first_storm,) = _collapsed_lines(tmp_path)
    (second_storm,) = _collapsed_lines(tmp_path, "loss spike")
    assert (first_storm["n"], first_storm["ranks"]) == ("32", "0-31")
    assert (second_storm["n"], second_storm["ranks"]) == ("32", "100-131")
    kept, dropped, corrupt = ledger(log_path(tmp_path))
    assert sorted(kept).count(f"{STORM} [repeated 32x across ranks 0-31]") == 1
    assert len(kept) == 2 + 64  # two storm records, every rank's own record once
    assert len(set(kept)) == len(kept)
    assert "collapsed 62 records into identical ones" in err
    assert len(kept) + 62 + dropped + corrupt == 4 * 32


def test_rank_filter_of_the_view_finds_a_collapsed_record_by_any_of_its_ranks() -> None:
    from nvrx_otel.view.filters import Filters, parse_ranks

    line = (
        "2026-12-01 08:23:09,323 [ERROR] [n1] [workload:0(0) infra:?(?)] train.py:42 "
        f"{STORM} [repeated 3x across ranks 0,7-8]"
    )
    e = parse_head(line, "node log", 1, 0)
    assert e is not None and e.collapsed is not None and e.collapsed.ranks == (0, 7, 8)
    assert Filters(ranks=parse_ranks("8"))(e)
    assert not Filters(ranks=parse_ranks("1-6"))(e)


def test_ranks_repeating_a_line_make_one_record_per_repeat() -> None:
    """Three ranks each log the same line three times (read file by file): three collapsed
    records of three ranks each, in each rank's order, never two records of one rank."""
    window = DedupWindow(1000)
    t = 1_700_000_000_000_000_000
    chunks = [_chunk(_file(r), [_rec(r, t + i * 1000 + r) for i in range(3)]) for r in range(3)]
    for c in chunks:
        window.add(c, 0)
    window.flush()
    kept = chunks[0].records
    assert [len(c.records) for c in chunks] == [3, 0, 0]
    assert [d["attrs"][semconv.DEDUP_COUNT] for d in kept] == [3, 3, 3]
    assert [d["attrs"][semconv.DEDUP_RANKS] for d in kept] == ["0-2"] * 3
    assert [d["attrs"][semconv.DEDUP_FIRST_TIME] for d in kept] == [t, t + 1000, t + 2000]
    assert [d["attrs"][semconv.DEDUP_LAST_TIME] for d in kept] == [t + 2, t + 1002, t + 2002]
    assert window.collapsed == 6 and window.groups == 3
