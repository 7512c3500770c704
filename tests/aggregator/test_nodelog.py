"""The node log: NVRx's line grammar with our additions (continuation lines, escapes,
``?`` ranks, trace suffix), the fast path equal to the careful one, and size rotation
with the report of what rotation deletes."""

from __future__ import annotations

import os
import re
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nvrx_otel import record as rec
from nvrx_otel.aggregator.nodelog import (
    format_clean_records,
    format_record,
    format_records,
    is_clean,
    local_time,
)
from tests.aggregator.spoolkit import (
    LINE,
    FakeWriter,
    config,
    log_lines,
    log_path,
    messages,
    running,
    spool_dir,
    wait_for,
)

TS = 1_700_000_000_123_456_789


def _rec(**fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"v": 1, "k": "log", "ts": TS, "lvl": "INFO", "msg": "hello"}
    d.update({"file": "train.py", "line": 45, "rank": 0, "lrank": 0, "irank": 3, "ilrank": 1})
    d.update(fields)
    return {k: v for k, v in d.items() if v is not ...}


def test_line_grammar_is_nvrx_format() -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(TS // 10**9))
    assert format_record(_rec(), "node001") == (
        f"{stamp},123 [INFO] [node001] [workload:0(0) infra:3(1)] train.py:45 hello\n"
    )
    assert local_time(TS) == f"{stamp},123"


def test_unknown_ranks_are_question_marks() -> None:
    text = format_record(_rec(rank=..., lrank=..., irank=None), "n")
    assert "[workload:?(?) infra:?(1)] " in text
    assert LINE.match(text.rstrip("\n"))


def test_trace_suffix_ends_the_record_line() -> None:
    text = format_record(_rec(trace_id="ab" * 16, span_id="cd" * 8, msg="in span"), "n")
    assert text.endswith(f" in span [trace_id={'ab' * 16} span_id={'cd' * 8}]\n")
    m = LINE.match(text.rstrip("\n"))
    assert m and m["trace"] == "ab" * 16 and m["span"] == "cd" * 8 and m["msg"] == "in span"


def test_multi_line_message_and_traceback_become_indented_continuation_lines() -> None:
    exc = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n'
    text = format_record(
        _rec(msg="step failed\n2024-01-01 00:00:00,000 [INFO] fake", exc=exc, trace_id="a" * 32),
        "n",
    )
    lines = text.split("\n")
    assert lines[-1] == ""
    first, *rest = lines[:-1]
    assert LINE.match(first) and first.endswith(
        " step failed [trace_id=" + "a" * 32 + " span_id=?]"
    )
    assert rest == [
        "    2024-01-01 00:00:00,000 [INFO] fake",
        "    Traceback (most recent call last):",
        '      File "x.py", line 1',
        "    ValueError: bad",
    ]


def test_control_characters_are_escaped_tab_kept() -> None:
    text = format_record(
        _rec(msg="\x1b[31mred\x1b[0m\tcol\r\x00\x7f\x85end", file="a\nb.py", lvl="INFO"), "n\x07"
    )
    assert text.count("\n") == 1
    assert "[n\\x07]" in text
    assert "a\\x0ab.py:45 " in text
    assert text.rstrip("\n").endswith("\\x1b[31mred\\x1b[0m\tcol\\x0d\\x00\\x7f\\x85end")
    assert "\x1b" not in text


def test_clean_detection_sees_every_control_character() -> None:
    """The hot path is taken only for lines without any control character in a string:
    C0 (escaped by JSON), DEL (raw in JSON) and C1 (0xc2 lead byte) all send a batch to
    the careful path, which escapes them."""
    assert is_clean(rec.encode(_rec(msg="plain text, tabs aside")))
    for ch in ("\x1b", "\n", "\x00", "\x7f", "\x85", "\x9b"):
        assert not is_clean(rec.encode(_rec(msg=f"a{ch}b"))), repr(ch)


def test_control_characters_in_the_spool_are_escaped_in_the_node_log(tmp_path: Path) -> None:
    w = FakeWriter(spool_dir(tmp_path))
    for ch in ("\x1b", "\x00", "\x7f", "\x85", "\r"):
        w.log(f"a{ch}b")
    w.log("last")
    w.close()
    with running(config(tmp_path)) as agg:
        wait_for(lambda: agg.health.written == 6, what="records")
    assert messages(log_path(tmp_path)) == [
        "a\\x1bb",
        "a\\x00b",
        "a\\x7fb",
        "a\\x85b",
        "a\\x0db",
        "last",
    ]


def test_line_and_paragraph_separators_are_escaped_on_the_clean_and_careful_paths(
    tmp_path: Path,
) -> None:
    """U+2028 and U+2029 end a line for readers that split on Unicode line breaks: the node
    log holds them escaped, whether the chunk takes the clean fast path (nothing else to
    escape) or the careful one (another control character in the same chunk)."""
    for ch in ("\u2028", "\u2029"):
        assert not is_clean(rec.encode(_rec(msg=f"a{ch}b"))), repr(ch)
        assert format_record(_rec(msg=f"a{ch}b"), "n").endswith(f"a\\u{ord(ch):04x}b\n")
    fast = FakeWriter(spool_dir(tmp_path), writer="00000000000000f1")
    fast.log("fast \u2028 line")
    fast.log("fast \u2029 paragraph")
    fast.close()
    careful = FakeWriter(spool_dir(tmp_path), writer="00000000000000f2", pid=4343)
    careful.log("careful \x1b \u2028 line")
    careful.log("careful \u2029 paragraph")
    careful.close()
    with running(config(tmp_path)) as agg:
        wait_for(lambda: agg.health.written == 4, what="records")
    raw = log_path(tmp_path).read_bytes()
    assert "\u2028".encode() not in raw and "\u2029".encode() not in raw
    text = raw.decode()
    assert len(text.splitlines()) == 4  # str.splitlines splits on U+2028/U+2029 too
    assert sorted(messages(log_path(tmp_path))) == sorted(
        [
            "careful \\x1b \\u2028 line",
            "careful \\u2029 paragraph",
            "fast \\u2028 line",
            "fast \\u2029 paragraph",
        ]
    )


def test_odd_fields_never_raise() -> None:
    for odd in (
        {"ts": "yesterday"},
        {"ts": 1.5},
        {"ts": -(10**30)},
        {"lvl": ...},
        {"msg": None},
        {"msg": ["a", 1]},
        {"line": None},
        {"msg": "lone \ud800 surrogate"},
        {"exc": 42},
    ):
        text = format_record(_rec(**odd), "n")
        assert text.endswith("\n")
        text.encode("utf-8", "replace")


_tricky = st.text(alphabet=st.sampled_from(list("ab :[]\t\n\r\x00\x1b\x7f\x85\x9b\xa0\u2028é\\")))
_text = st.text(max_size=40) | _tricky
_fields = {
    "ts": st.integers(min_value=0, max_value=2**62),
    "lvl": st.sampled_from(["INFO", "WARNING", "DEBUG", "SUCCESS"]) | st.text(max_size=8),
    "file": st.text(max_size=12),
    "line": st.integers(min_value=0, max_value=10**6),
    "msg": _text,
}
_optional = {
    "rank": st.integers(min_value=0, max_value=10**5) | st.none(),
    "lrank": st.integers(min_value=0, max_value=64),
    "irank": st.integers(min_value=0, max_value=10**5),
    "ilrank": st.integers(min_value=0, max_value=64),
    "trace_id": st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    "span_id": st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
    "exc": _text,
}
records = st.fixed_dictionaries(_fields, optional=_optional)


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=5))
@example([_rec(msg="del \x7f only")])
@example([_rec(msg="c1 \x85 only"), _rec(msg="plain")])
def test_every_output_line_is_a_record_line_or_indented(batch: list[dict[str, Any]]) -> None:
    """Whatever the fields hold, the text has one record line per record and every other
    line is indented; no control character except tab and the line ends reaches it; the
    fast path (clean chunks) gives exactly the careful path's text."""
    text = format_records(batch, "node")
    assert text == "".join(format_record(r, "node") for r in batch)
    lines = text.split("\n")
    assert lines.pop() == ""
    assert sum(1 for line in lines if not line.startswith("    ")) == len(batch)
    for line in lines:
        assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in line), repr(line)
        assert "\u2028" not in line and "\u2029" not in line, repr(line)
    raw = b"".join(rec.encode(r) for r in batch)
    if is_clean(raw):
        assert format_clean_records(batch, "node") == text


_site_fields = {
    "ts": st.integers(min_value=0, max_value=2**62),
    "lvl": st.sampled_from(["INFO", "WARNING"]),
    "path": st.sampled_from(["/w/train.py", "/w/data.py", "eval.py", "/w/", ""]),
    "line": st.sampled_from([7, 45]),
    "msg": st.text(alphabet="ab :[]\té", max_size=20) | _text,
    "rank": st.sampled_from([0, 1, None]),
    "lrank": st.sampled_from([0, 1]),
    "irank": st.just(3),
}
_site_optional = {
    "ilrank": st.just(1),  # left out: the record's middle is made on its own
    "file": st.sampled_from(["given.py", ""]),
    "trace_id": st.just("ab" * 16),
}
site_records = st.fixed_dictionaries(_site_fields, optional=_site_optional)


@settings(max_examples=300, deadline=None)
@given(st.lists(site_records, min_size=1, max_size=12))
def test_records_of_shared_call_sites_give_the_careful_paths_text(
    batch: list[dict[str, Any]],
) -> None:
    """The fast path makes a call site's middle (level, ranks, file and line) once: records
    sharing it, or without one of its fields, or with a ``file`` of their own, read as the
    careful path writes them."""
    text = "".join(format_record(r, "node") for r in batch)
    if is_clean(b"".join(rec.encode(r) for r in batch)):
        assert format_clean_records(batch, "node") == text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                **_site_fields,
                "rank": st.sampled_from([1, 1.0, True, "1", None]),
                "lrank": st.sampled_from([0, 0.0, False, -0.0]),
                "ilrank": st.just(1),
            }
        ),
        min_size=1,
        max_size=8,
    )
)
def test_ranks_equal_as_values_but_of_other_types_keep_their_own_text(
    batch: list[dict[str, Any]],
) -> None:
    """The identity fields' type is free (shown as they are): ``1``, ``1.0`` and ``true``
    are one cache key but three texts; the fast path writes each as the careful path does."""
    text = "".join(format_record(r, "node") for r in batch)
    if is_clean(b"".join(rec.encode(r) for r in batch)):
        assert format_clean_records(batch, "node") == text


# --- rotation ------------------------------------------------------------------------------


def _rotated(tmp: Path) -> list[Path]:
    base = log_path(tmp)
    return sorted(base.parent.glob(base.name + ".*"), key=lambda p: int(p.suffix[1:]))


def _account(paths: list[Path]) -> dict[int, int]:
    """Per rank: records in these node-log files plus records reported lost."""
    seen: dict[int, int] = {}
    for path in paths:
        for line in log_lines(path):
            m = LINE.match(line)
            assert m, line
            lost = re.match(
                r"dropped (\d+) records from rank (\d+) pid \d+ between .*: rotation$", m["msg"]
            )
            if lost:
                seen[int(lost[2])] = seen.get(int(lost[2]), 0) + int(lost[1])
            else:
                seen[int(m["r"])] = seen.get(int(m["r"]), 0) + 1
    return seen


def test_rotation_keeps_backups_and_reports_what_it_deletes(tmp_path: Path) -> None:
    """With NVRX_OTEL_NODE_LOG_BACKUPS=1 each rotation deletes the older backup and writes
    one WARNING per writer it held (count, rank, pid, time range): per rank, records in
    the remaining files plus reported ones add up to what was emitted."""
    a = FakeWriter(spool_dir(tmp_path), identity={"rank": 3, "lrank": 0}, pid=111)
    b = FakeWriter(spool_dir(tmp_path), writer="00000000000000b2", identity={"rank": 4}, pid=222)
    cfg = config(tmp_path, max_log_bytes=4096, log_backups=1, chunk_bytes=1024)
    with running(cfg) as agg:
        for i in range(300):
            a.log(f"a {i}")
            if i % 2:
                b.log(f"b {i}")
        a.close()
        b.close()
        wait_for(lambda: agg.health.written >= 450, what="all records")
    files = [log_path(tmp_path), *_rotated(tmp_path)]
    assert [p.name for p in files[1:]] == [log_path(tmp_path).name + ".1"]
    assert _account(files) == {3: 300, 4: 150}
    text = log_path(tmp_path).read_text() + files[1].read_text()
    assert re.search(r"dropped \d+ records from rank 3 pid 111 between .* and .*: rotation", text)
    assert agg.health.dropped > 0
    assert os.path.getsize(files[1]) < 4096 + 4096  # rotated near the limit


def test_rotation_without_backup_limit_deletes_nothing(tmp_path: Path) -> None:
    a = FakeWriter(spool_dir(tmp_path))
    cfg = config(tmp_path, max_log_bytes=3000, chunk_bytes=1024)
    with running(cfg) as agg:
        for i in range(200):
            a.log(f"a {i}")
        a.close()
        wait_for(lambda: agg.health.written >= 200, what="all records")
    files = [*reversed(_rotated(tmp_path)), log_path(tmp_path)]
    assert len(files) > 3
    assert [m for p in files for m in messages(p)] == [f"a {i}" for i in range(200)]
    assert agg.health.dropped == 0


def test_rotation_interrupted_midway_is_finished_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure in the middle of a rotation (after the old backup was deleted, before the
    log was renamed; a crash there is the same) is finished from the committed plan on
    resume: the deleted backup is still reported, no record is lost or doubled."""
    real_replace = os.replace
    calls: list[str] = []

    def flaky_replace(src: Any, dst: Any) -> None:
        if str(dst).endswith(".log.1"):
            calls.append(str(dst))
            if len(calls) == 2:  # the second rotation: .1 is already deleted by now
                raise OSError(28, "No space left on device (injected)")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    a = FakeWriter(spool_dir(tmp_path), identity={"rank": 1})
    cfg = config(tmp_path, max_log_bytes=2500, log_backups=1, chunk_bytes=1024)
    with running(cfg) as agg:
        for i in range(200):
            a.log(f"a {i}")
        a.close()
        wait_for(lambda: len(calls) > 2, what="rotations after the failure")
    files = [log_path(tmp_path), *_rotated(tmp_path)]
    assert len(files) == 2
    assert _account(files) == {1: 200}
    assert agg.health.dropped > 0


def test_file_name_comes_from_path_when_the_record_has_none() -> None:
    """The stdlib fast path writes only ``path``; the node log shows its base name."""
    from nvrx_otel.aggregator.nodelog import format_clean_records, format_record

    record = {"ts": 1_700_000_000_000_000_000, "lvl": "INFO", "path": "/src/pkg/train.py",
              "line": 12, "msg": "m", "rank": 0}  # fmt: skip
    assert " train.py:12 m" in format_record(record, "n")
    assert " train.py:12 m" in format_clean_records([record], "n")
    assert " train.py:12 m" in format_record({**record, "exc": "Traceback"}, "n")


@pytest.mark.parametrize("how", ["deleted", "renamed away", "replaced", "directory removed"])
def test_node_log_gone_from_its_path_carries_what_is_not_committed(
    tmp_path: Path, how: str
) -> None:
    """The path stops naming the open node log between two commits: ``follow`` moves on to
    a file at the path and carries over exactly the bytes written since the last commit
    (the committed ones stay where the operator put them)."""
    import shutil

    from nvrx_otel.aggregator.nodelog import NodeLogFile

    path = tmp_path / "logs" / "node.log"
    log = NodeLogFile(path)
    log.open()
    log.write(b"committed\n")
    log.committed = log.length
    assert log.follow() is None  # the path still names it
    log.write(b"not committed\n")
    if how == "deleted":
        path.unlink()
    elif how == "renamed away":
        path.rename(path.with_name("node.log.old"))
    elif how == "replaced":
        path.with_name("other").write_bytes(b"someone else's\n")
        path.with_name("other").replace(path)
    else:
        shutil.rmtree(path.parent)
    assert log.follow() == len(b"not committed\n")
    log.write(b"after\n")
    log.sync()
    before = b"someone else's\n" if how == "replaced" else b""
    assert path.read_bytes() == before + b"not committed\nafter\n"
    assert log.length == path.stat().st_size and log.committed == len(before)
    assert log.follow() is None
    log.close()
