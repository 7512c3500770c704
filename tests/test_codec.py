"""Every encoder of the spool codec round-trips: random records written by each writer path
(the stdlib fast path, SpoolHandler's full path, the loguru bridge, span start/end, drop
records, file headers) decode with ``record.decode`` to the record that was written."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from nvrx_otel import record as rec
from nvrx_otel.logging import setup_logger
from nvrx_otel.spool.writer import SpoolWriter
from nvrx_otel.tracing import reset_tracing, setup_tracing

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_ODD = ["\ud800", "\udfff", "\udce9", "\u2028", "\u2029", "\x00", "\x1b", "\n", "\r", "\t"]
_ODD += ['"', "\\", "%", "%s", "%d", "{}", "\x7f", "\ufeff", "\U0001f600", "é"]

texts = st.lists(st.one_of(st.characters(), st.sampled_from(_ODD)), max_size=40).map("".join)
"""Any unicode: lone surrogates, line separators, control characters, format directives."""
big_ints = st.one_of(st.integers(), st.integers(min_value=2**63, max_value=2**200))
values = st.one_of(
    texts, big_ints, st.booleans(), st.none(), st.floats(allow_nan=False, allow_infinity=False)
)
attr_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
trace_ids = st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.booleans())


def scrubbed(value: Any) -> Any:
    """What a value decodes to: lone surrogates become U+FFFD, ints beyond 64 bits text."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    raise AssertionError(value)


class Tail:
    """The records appended under ``directory`` since the last look, decoded by the codec
    (the reader's decoder: a line it refuses fails the test)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.seen: dict[Path, int] = {}

    def new(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.directory.rglob("*.jsonl")):
            data = path.read_bytes()
            start = self.seen.get(path, 0)
            self.seen[path] = len(data)
            out += [rec.decode(line) for line in data[start:].splitlines()]
        return [r for r in out if r["k"] != rec.KIND_HEADER]


def _one(tail: Tail) -> dict[str, Any]:
    (record,) = tail.new()
    assert rec.valid(record)
    assert rec.seq_of(record["key"]) >= 0 and re.fullmatch(r"[0-9a-f]{16}-[0-9a-f]+", record["key"])
    return record


def _same_identity(record: dict[str, Any]) -> None:
    assert record["pid"] == os.getpid() and isinstance(record["node"], str)


def _ids(record: dict[str, Any], ids: tuple[int, int, bool] | None) -> None:
    if ids is None:
        assert "trace_id" not in record
        return
    assert (record["trace_id"], record["span_id"]) == (f"{ids[0]:032x}", f"{ids[1]:016x}")
    assert record["tf"] == int(ids[2])


def _in_span(ids: tuple[int, int, bool] | None) -> Any:
    if ids is None:
        return trace.use_span(trace.INVALID_SPAN)
    ctx = SpanContext(ids[0], ids[1], is_remote=False, trace_flags=TraceFlags(int(ids[2])))
    return trace.use_span(NonRecordingSpan(ctx))


def test_stdlib_fast_and_full_path_lines_decode_to_the_record(tmp_path: Path) -> None:
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    tail = Tail(tmp_path)

    @SETTINGS
    @given(
        msg=texts,
        ids=st.none() | trace_ids,
        extra=st.dictionaries(attr_names.map(lambda n: "x_" + n), values, max_size=4),
        exc_msg=st.none() | texts,
    )
    def check(
        msg: str, ids: tuple[int, int, bool] | None, extra: dict[str, Any], exc_msg: str | None
    ) -> None:
        with _in_span(ids):
            log.warning(msg)  # the lean path (its bytes from the cached template)
            lean = _one(tail)
            kwargs: dict[str, Any] = {"extra": extra}
            if exc_msg is not None:
                try:
                    raise KeyError(exc_msg)
                except KeyError:
                    log.error(msg, exc_info=True, **kwargs)
            else:
                log.error(msg, **kwargs)
            full = _one(tail)
        assert lean["msg"] == full["msg"] == scrubbed(msg)
        assert (lean["lvl"], lean["sev"], full["lvl"], full["sev"]) == ("WARNING", 13, "ERROR", 17)
        assert lean["lg"] == full["lg"] == "nvrx"
        for r in (lean, full):
            _same_identity(r)
            _ids(r, ids)
        assert full.get("attrs", {}) == {k: scrubbed(v) for k, v in extra.items()}
        if exc_msg is not None:
            assert full["exc_type"] == "KeyError" and full["exc_msg"] == scrubbed(repr(exc_msg))
            assert full["exc"].startswith("Traceback")
        assert rec.seq_of(full["key"]) == rec.seq_of(lean["key"]) + 1

    check()


def test_loguru_bridge_lines_decode_to_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvrx_otel.logging.logflow import configure_logging, get_logger, reset_logging

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("NVRX_NODE_LOCAL_TMPDIR", str(tmp_path / "spool"))
    reset_logging()
    try:
        configure_logging(script_name="run", file_level="TRACE")
        tail = Tail(tmp_path / "spool")

        @SETTINGS
        @given(
            msg=texts,
            ids=st.none() | trace_ids,
            extra=st.dictionaries(attr_names.map(lambda n: "y_" + n), values, max_size=4),
        )
        def check(msg: str, ids: tuple[int, int, bool] | None, extra: dict[str, Any]) -> None:
            with _in_span(ids):
                get_logger("trainer").bind(**extra).info(msg)
            r = _one(tail)
            assert (r["msg"], r["lg"], r["lvl"], r["sev"]) == (scrubbed(msg), "trainer", "INFO", 9)
            assert r.get("attrs", {}) == {k: scrubbed(v) for k, v in extra.items()}
            _same_identity(r)
            _ids(r, ids)

        check()
    finally:
        reset_logging()


def test_span_start_and_end_lines_decode_to_the_record(tmp_path: Path) -> None:
    reset_tracing()
    try:
        setup_tracing(spool_dir=tmp_path)
        tracer = trace.get_tracer("codec.scope", "1.0")
        tail = Tail(tmp_path)
        plain = st.one_of(texts, st.integers(-(2**63), 2**63 - 1), st.booleans(), st.floats(0, 1))

        @SETTINGS
        @given(name=texts, attrs=st.dictionaries(attr_names, plain, max_size=4), event=texts)
        def check(name: str, attrs: dict[str, Any], event: str) -> None:
            with tracer.start_as_current_span(name, attributes=attrs) as span:
                span.add_event(event)
            start, end = tail.new()
            ctx = span.get_span_context()
            for r in (start, end):
                assert rec.valid(r)
                assert (r["trace_id"], r["span_id"]) == (
                    f"{ctx.trace_id:032x}",
                    f"{ctx.span_id:016x}",
                )
                assert r["name"] == scrubbed(name) and r["scope"] == "codec.scope"
                _same_identity(r)
            assert (start["k"], end["k"]) == (rec.KIND_SPAN_START, rec.KIND_SPAN_END)
            assert end["attrs"] == {k: scrubbed(v) for k, v in attrs.items()}
            assert [e["name"] for e in end["events"]] == [scrubbed(event)]
            assert rec.seq_of(end["key"]) > rec.seq_of(start["key"])

        check()
    finally:
        reset_tracing()


@SETTINGS
@given(
    writer=st.from_regex(r"[0-9a-f]{16}", fullmatch=True),
    seq=st.integers(0, 2**64),
    ts=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    count=st.integers(1, 2**63 - 1),
    reason=st.sampled_from(["budget", "write_error"]),
    identity=st.fixed_dictionaries({"node": texts, "pid": st.integers(0, 2**31)}),
)
def test_drop_lines_decode_to_the_record(
    writer: str,
    seq: int,
    ts: tuple[int, int, int],
    count: int,
    reason: str,
    identity: dict[str, Any],
) -> None:
    line = rec.drop_line(
        writer_id=writer, seq=seq, ts=ts[0], count=count, first_ts=ts[1], last_ts=ts[2],
        reason=reason, identity=identity,
    )  # fmt: skip
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    d = rec.decode(line)
    assert (d["k"], d["ts"], d["first_ts"], d["last_ts"]) == (rec.KIND_DROP, *ts)
    assert (d["count"], d["reason"], rec.seq_of(d["key"])) == (count, reason, seq)
    assert d["key"] == rec.record_key(writer, seq)
    assert {k: d[k] for k in identity} == {k: scrubbed(v) for k, v in identity.items()}


@SETTINGS
@given(
    index=st.integers(0, 2**31),
    proc=texts,
    sizes=st.tuples(st.integers(4096, 2**62), st.integers(4096, 2**62)),
    res=st.dictionaries(texts, st.one_of(texts, st.integers(-(2**63), 2**63 - 1)), max_size=4),
)
def test_header_lines_decode_to_the_header(
    index: int, proc: str, sizes: tuple[int, int], res: dict[str, Any]
) -> None:
    line = rec.header_line(
        writer_id="00000000000000aa", index=index, ts=5, pid=7, ppid=1, proc=proc,
        budget=sizes[0], max_file_size=sizes[1], resource=res,
    )  # fmt: skip
    assert line.count(b"\n") == 1
    d = rec.decode(line)
    assert (d["k"], d["w"], d["f"], d["proc"]) == (
        rec.KIND_HEADER,
        "00000000000000aa",
        index,
        scrubbed(proc),
    )
    assert (d["budget"], d["max"]) == sizes
    assert d["res"] == {scrubbed(k): scrubbed(v) for k, v in res.items()}
    assert list(d)[-1] == "res"  # the collector's filelog mode takes it at the line's end
    assert set(d) <= rec.FIELDS[rec.KIND_HEADER]


def test_the_writers_own_lines_decode_with_their_fields_in_the_table(tmp_path: Path) -> None:
    """The writer's header, a record through ``emit`` and a drop record after a failed
    write decode, and hold only fields of the codec's table for their kind."""
    w = SpoolWriter(tmp_path, max_file_size=1 << 20)
    w.emit({"k": rec.KIND_LOG, "ts": 1, "sev": 9, "lvl": "INFO", "lg": "x", "msg": "a\u2028b"})
    w.write_failed(OSError(28, "full"), 2)  # counted dropped; reported at the next record
    w.emit({"k": rec.KIND_LOG, "ts": 3, "sev": 9, "lvl": "INFO", "lg": "x", "msg": "c"})
    w.close()
    raw = [x for p in tmp_path.glob("*.jsonl") for x in p.read_bytes().splitlines()]
    lines = [rec.decode(x) for x in raw if x]  # an empty line ends what a failed write left
    assert [d["k"] for d in lines] == ["hdr", "log", "drop", "log"]
    for d in lines:
        assert set(d) <= rec.FIELDS[d["k"]], set(d) - rec.FIELDS[d["k"]]
    assert lines[1]["msg"] == "a\u2028b" and lines[2]["count"] == 1
    assert sorted(rec.seq_of(d["key"]) for d in lines[1:]) == [0, 1, 2]


def test_level_and_logger_names_with_percent_signs_keep_their_bytes(tmp_path: Path) -> None:
    """The templates escape ``%`` in their constant parts (head and identity)."""
    logging.addLevelName(35, "50%")
    log = setup_logger(node_local_tmp_dir=str(tmp_path))
    tail = Tail(tmp_path)
    log.log(35, "m %s", "%d")
    assert _one(tail)["msg"] == "m %d"
