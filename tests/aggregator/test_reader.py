"""Reader rules: only complete records leave the reader, bad bytes never stop it, files
are known by inode (docs/spool-format.md, reader rules 1-3; NVRx hazards H3, H4, H5)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from nvrx_otel import record as rec
from nvrx_otel.aggregator.reader import SpoolFile, read_chunk
from nvrx_otel.aggregator.service import Aggregator
from nvrx_otel.spool.paths import STATE_NAME, parse_name
from tests.aggregator.spoolkit import (
    FakeWriter,
    config,
    log_lines,
    log_path,
    messages,
    running,
    spool_dir,
    wait_for,
)


def test_torn_tail_waits_while_writer_lives_then_is_completed(tmp_path: Path) -> None:
    """A tail without newline is held back while its writer holds the lock; when the writer
    finishes the line, the whole record appears once and nothing is reported corrupt."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("first")
    line = rec.encode(w.record("second, written in two pieces"))
    w.raw(line[:25])
    with running(config(tmp_path)) as agg:
        wait_for(lambda: "first" in messages(log_path(tmp_path)), what="first record")
        # the reader has seen the piece (and keeps cycling) but lets nothing of it out
        wait_for(lambda: [f.tail for f in agg._spool.tracked] == [25], what="tail seen")
        assert messages(log_path(tmp_path)) == ["first"]
        w.raw(line[25:])
        w.log("third")
        wait_for(lambda: len(messages(log_path(tmp_path))) == 3, what="three records")
        w.close()
    assert messages(log_path(tmp_path)) == ["first", "second, written in two pieces", "third"]
    assert agg.health.corrupt == 0


def test_torn_tail_of_dead_writer_is_one_corrupt_record(tmp_path: Path) -> None:
    """A torn piece followed by the writer's next record (which starts with a newline) is one
    corrupt record and the next record is intact; a torn tail left by a writer that died
    is one more; nothing is ever spliced onto another record."""
    w = FakeWriter(spool_dir(tmp_path), identity={"node": "n", "rank": 5, "lrank": 1})
    w.log("before")
    torn = rec.encode(w.record("never finished"))
    w.raw(torn[:30])
    w.raw(b"\n" + rec.encode(w.record("after the tear")))
    w.raw(rec.encode(w.record("killed mid-write"))[:40])
    other = FakeWriter(spool_dir(tmp_path), writer="00000000000000b2", pid=777)
    other.log("other rank")
    with running(config(tmp_path)) as agg:
        wait_for(lambda: "other rank" in messages(log_path(tmp_path)), what="other writer")
        wait_for(lambda: "after the tear" in messages(log_path(tmp_path)), what="after tear")
        assert agg.health.corrupt == 1  # the tail still waits: its writer lives
        w.close()  # the writer dies
        wait_for(lambda: agg.health.corrupt == 2, what="torn tail reported")
        other.close()
    msgs = messages(log_path(tmp_path))
    assert [m for m in msgs if not m.startswith("corrupt")] == [
        "before",
        "after the tear",
        "other rank",
    ] or [m for m in msgs if not m.startswith("corrupt")] == [
        "other rank",
        "before",
        "after the tear",
    ]
    reports = [m for m in msgs if m.startswith("corrupt")]
    assert len(reports) == 2
    assert all(r.startswith("corrupt 1 records from rank 5 pid 4242 between ") for r in reports)
    assert all(r.endswith(": corrupt") for r in reports)
    text = log_path(tmp_path).read_text()
    assert "never finished" not in text and "killed mid-write" not in text
    assert text.count("[WARNING]") == 2
    assert not os.listdir(spool_dir(tmp_path)) or all(
        n.startswith(".") for n in os.listdir(spool_dir(tmp_path))
    )


def test_invalid_utf8_and_lone_surrogates_are_replaced_not_fatal(tmp_path: Path) -> None:
    """Raw invalid UTF-8 inside a record and a lone-surrogate escape are replaced (U+FFFD);
    the aggregator goes on and the records after them are intact (H4)."""
    w = FakeWriter(spool_dir(tmp_path))
    good = rec.encode(w.record("bad byte: XX here"))
    w.raw(good.replace(b"XX", b"\xff\xfe"))
    w.raw(rec.encode(w.record("surrogate: SURR here")).replace(b"SURR", b"\\ud800"))
    w.raw(b"\xff\xff not json at all \xc3\n")
    w.log("still alive")
    w.close()
    with running(config(tmp_path)) as agg:
        wait_for(lambda: "still alive" in messages(log_path(tmp_path)), what="last record")
    msgs = messages(log_path(tmp_path))
    assert msgs[0] == "bad byte: \ufffd\ufffd here"
    assert msgs[1] == "surrogate: \ufffd here"
    assert msgs[2].startswith("corrupt 1 records from rank 0 pid 4242")
    assert msgs[3] == "still alive"
    assert agg.health.corrupt == 1


def test_file_recreated_under_same_name_is_read_from_start(tmp_path: Path) -> None:
    """A spool file deleted and recreated under the same name is a new file: all of its
    records are read, none skipped up to the old offset (H5)."""
    d = spool_dir(tmp_path)
    w = FakeWriter(d)
    for i in range(50):
        w.log(f"old {i}")
    with running(config(tmp_path)) as agg:
        wait_for(lambda: len(messages(log_path(tmp_path))) == 50, what="old records")
        os.unlink(w.path)
        w.close()
        again = FakeWriter(d)  # same writer id, pid and index: the same name
        for i in range(60):
            again.log(f"new {i}")
        again.close()
        wait_for(lambda: len(messages(log_path(tmp_path))) == 110, what="new records")
    assert messages(log_path(tmp_path)) == [f"old {i}" for i in range(50)] + [
        f"new {i}" for i in range(60)
    ]
    assert agg.health.corrupt == 0


def test_file_recreated_while_aggregator_is_down_is_read_from_start(tmp_path: Path) -> None:
    """Across a restart: committed progress of a file that was replaced (even if the new
    one got the old inode number) does not apply to the new file."""
    d = spool_dir(tmp_path)
    w = FakeWriter(d)
    for i in range(5):
        w.log(f"old {i}")
    with running(config(tmp_path, drain_timeout=0.1)):  # its writer still lives
        wait_for(lambda: len(messages(log_path(tmp_path))) == 5, what="old records")
    os.unlink(w.path)
    w.close()
    again = FakeWriter(d)
    for i in range(8):
        again.log(f"new {i}")
    again.close()
    # Make the committed progress name the new file's inode, as if the old inode was reused:
    # only the header tells the files apart now.
    state_file = d / STATE_NAME
    state = orjson.loads(state_file.read_bytes())
    state["files"][again.path.name][0] = again.path.stat().st_ino
    state_file.write_bytes(orjson.dumps(state))
    with running(config(tmp_path)):
        wait_for(lambda: len(messages(log_path(tmp_path))) == 13, what="new records")
    assert messages(log_path(tmp_path))[5:] == [f"new {i}" for i in range(8)]


def test_empty_lines_and_spans_are_not_records_and_not_corrupt(tmp_path: Path) -> None:
    """An empty line (a write that failed before its first byte) and span records are
    skipped without a corrupt report; a record of another schema version is corrupt."""
    w = FakeWriter(spool_dir(tmp_path))
    w.raw(b"\n")
    span = {"v": 1, "k": "span_start", "ts": 1, "name": "x", "trace_id": "ab" * 16}
    w.raw(rec.encode(span | {"span_id": "cd" * 8}))
    w.raw(rec.encode({"v": 2, "k": "log", "ts": 1, "msg": "future"}))
    w.log("real")
    w.close()
    captured: list[dict[str, Any]] = []
    agg = Aggregator(config(tmp_path), sinks=[captured.extend])
    agg.start_thread()
    wait_for(lambda: len(captured) == 2, what="two records")
    agg.shutdown()
    assert captured[0]["msg"].startswith("corrupt 1 records")
    assert captured[1]["msg"] == "real"
    assert len(log_lines(log_path(tmp_path))) == 2


def test_each_record_is_checked_by_the_check_of_its_own_keys(tmp_path: Path) -> None:
    """The reader keeps the check of the last record's keys while the keys stay the same: a
    record with one more field (of the wrong type) is checked by its own keys' check, and
    the records after it by theirs again."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("first")
    w.log("bad line", line="seven")  # the same keys, a field of the wrong type
    w.log("bad flags", tf="x")  # one more field, of the wrong type
    w.log("second")
    w.log("flags", tf=1)
    w.log("third")
    w.close()
    parts = parse_name(w.path.name)
    assert parts is not None
    fd = os.open(w.path, os.O_RDONLY)
    try:
        f = SpoolFile(name=w.path.name, parts=parts, fd=fd, ino=0)
        chunk = read_chunk(f, final=True, limit=1 << 20, want_ends=False, now_ns=1)
    finally:
        os.close(fd)
    assert chunk is not None and chunk.corrupt == 2
    assert [r["msg"] for r in chunk.records if r["lg"] == "t"] == [
        "first",
        "second",
        "flags",
        "third",
    ]


def test_offsets_after_each_record_hold_across_a_drop_report_and_a_corrupt_line(
    tmp_path: Path,
) -> None:
    """The reader takes a run of plain log records in a loop of its own and the rest (a
    drop record, a corrupt line) in its full loop: the offset after each record it gives
    (for the chronological merge) is the end of that record's line either way."""
    w = FakeWriter(spool_dir(tmp_path))
    start = w.path.stat().st_size  # after the header
    w.log("a")
    w.log("b")
    w.drop(3, 1, 2)
    w.log("c")
    w.raw(b"not a record\n")
    w.log("d")
    w.close()
    data = w.path.read_bytes()
    line_ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n") and i >= start]
    parts = parse_name(w.path.name)
    assert parts is not None
    fd = os.open(w.path, os.O_RDONLY)
    try:
        f = SpoolFile(name=w.path.name, parts=parts, fd=fd, ino=0)
        f.offset = start
        chunk = read_chunk(f, final=True, limit=1 << 20, want_ends=True, now_ns=1)
    finally:
        os.close(fd)
    assert chunk is not None and chunk.dropped == 3 and chunk.corrupt == 1
    msgs = [r["msg"] for r in chunk.records]
    assert msgs[:3] == ["a", "b", msgs[2]] and msgs[2].startswith("dropped 3 records")
    assert msgs[3] == "c" and msgs[4].startswith("corrupt 1 records") and msgs[5] == "d"
    # the corrupt line's report ends where that line ends
    assert chunk.ends == line_ends
    assert chunk.end == len(data) == f.offset
