"""Fuzzing ``reader.read_chunk`` on real spool files: random bytes, cuts at every offset,
records of several threads of one writer interleaved with torn and half-finished writes,
huge records. It never raises, yields only records some writer wrote whole, accounts for
every line (records + corrupt) and reads a huge line in bounded memory."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvrx_otel import record as rec
from nvrx_otel.aggregator import reports
from nvrx_otel.aggregator.reader import MAX_LINE, Chunk, SpoolFile, read_chunk
from nvrx_otel.aggregator.spooldir import SpoolDir
from nvrx_otel.spool.paths import SpoolFileName

FAST = settings(
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PARTS = SpoolFileName(writer="00000000000000b7", index=0, pid=77, proc="rank0")
HEADER = rec.encode({"v": 1, "k": "hdr", "w": PARTS.writer, "f": 0, "ts": 1, "pid": 77,
                     "ppid": 1, "proc": "rank0", "res": {}})  # fmt: skip
LIMITS = st.sampled_from([64, 200, 4096, 1 << 20])


class Spool:
    """One spool file being written and read: what the reader gave back so far."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.path = directory / PARTS.name
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        os.write(self.fd, HEADER)
        spool = SpoolDir(directory)  # opens the file as the aggregator does
        spool.scan()
        self.file: SpoolFile = spool.by_name[PARTS.name]
        assert self.file.fd >= 0
        self.limit = limit
        self.records: list[dict[str, Any]] = []
        self.corrupt = 0
        self.dropped = 0

    def write(self, data: bytes) -> None:
        if data:
            os.write(self.fd, data)

    def read(self, *, final: bool) -> None:
        """Read as the aggregator does: chunk after chunk until nothing changes."""
        for _ in range(100_000):
            chunk = read_chunk(self.file, final=final, limit=self.limit, want_ends=True,
                               now_ns=time.time_ns())  # fmt: skip
            if chunk is None:
                return
            self.take(chunk)
        raise AssertionError("read_chunk never settles")

    def take(self, chunk: Chunk) -> None:
        assert chunk.ends is not None and len(chunk.ends) == len(chunk.records)
        assert chunk.ends == sorted(chunk.ends) and all(e <= chunk.end for e in chunk.ends)
        for i, d in enumerate(chunk.records):
            if i in chunk.reports:
                assert d["lg"] == reports.LOGGER
            else:
                self.records.append(d)
        self.corrupt += chunk.corrupt
        self.dropped += chunk.dropped

    def close(self) -> None:
        os.close(self.fd)
        self.file.close()


def _line(thread: int, i: int, pad: int) -> bytes:
    msg = f"t{thread}-{i} " + "é" * pad
    return rec.encode({"v": 1, "k": "log", "ts": 10 + i, "sev": 9, "lvl": "INFO", "msg": msg,
                       "key": f"{PARTS.writer}-{i:x}"})  # fmt: skip


# one write: ("whole" | "torn" | "split", thread, cut fraction, padding) or ("junk", bytes)
_op = st.one_of(
    st.tuples(st.sampled_from(["whole", "whole", "torn", "split"]), st.integers(0, 3),
              st.floats(0, 1), st.integers(0, 300)),
    st.tuples(st.just("junk"), st.binary(min_size=1, max_size=40).filter(lambda b: b"{" not in b)),
)  # fmt: skip


@FAST
@given(st.lists(_op, max_size=40), LIMITS, st.booleans())
def test_interleaved_writes_yield_only_whole_records(
    tmp_path_factory: pytest.TempPathFactory, ops: list[Any], limit: int, read_often: bool
) -> None:
    """Threads of one writer append whole records, torn pieces (the next write then starts
    with ``\\n``, as the writer does) and records finished by a second write (the reader
    may look in between); junk lines too. Read as it grows, then once the writer is gone."""
    sp = Spool(tmp_path_factory.mktemp("spool"), limit)
    whole: list[bytes] = []
    corrupt = 0
    need_newline = False
    seq = 0
    pending_torn: bytes | None = None  # the last write was torn: the file ends in it
    for op in ops:
        prefix = b"\n" if need_newline else b""
        if pending_torn is not None:
            # the torn piece is now a line of its own: whole only if the cut left it so
            try:
                rec.decode(pending_torn)
                whole.append(pending_torn + b"\n")
            except ValueError:
                corrupt += 1
            pending_torn = None
        need_newline = False
        if op[0] == "junk":
            sp.write(prefix + op[1] + b"\n")
            corrupt += sum(1 for ln in op[1].split(b"\n") if ln)
        else:
            kind, thread, frac, pad = op
            line = _line(thread, seq, pad)
            seq += 1
            cut = 1 + int(frac * (len(line) - 2))  # 1 .. len - 1: never empty, never whole
            if kind == "whole":
                sp.write(prefix + line)
                whole.append(line)
            elif kind == "split":
                sp.write(prefix + line[:cut])
                sp.read(final=False)  # the reader sees the half: it must wait for the rest
                sp.write(line[cut:])
                whole.append(line)
            else:
                sp.write(prefix + line[:cut])
                pending_torn = line[:cut]
                need_newline = True
        if read_often:
            sp.read(final=False)
    if pending_torn is not None:
        corrupt += 1  # a tail without its newline, once the writer is gone
    sp.read(final=True)
    assert [orjson.dumps(d) for d in sp.records] == [orjson.dumps(rec.decode(w)) for w in whole]
    assert sp.corrupt == corrupt
    assert sp.file.offset == os.fstat(sp.fd).st_size
    sp.close()


@FAST
@given(st.binary(max_size=2000), LIMITS)
def test_random_bytes_are_records_or_corrupt(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, limit: int
) -> None:
    """Any bytes after a header: each non-empty line is a record, a report, something
    skipped (a span, another header) or corrupt; the reader never raises."""
    sp = Spool(tmp_path_factory.mktemp("spool"), limit)
    sp.write(data)
    sp.read(final=True)
    lines = data.split(b"\n")
    logs = corrupt = 0
    for i, ln in enumerate(lines):
        if not ln:
            continue
        if i == len(lines) - 1:
            corrupt += 1  # the unterminated tail
            continue
        try:
            d = rec.decode(ln)
        except ValueError:
            corrupt += 1
            continue
        logs += d["k"] == rec.KIND_LOG
    assert (len(sp.records), sp.corrupt) == (logs, corrupt)
    sp.close()


@FAST
@given(st.lists(st.integers(0, 500), min_size=1, max_size=6), LIMITS, st.data())
def test_records_cut_at_any_offset(
    tmp_path_factory: pytest.TempPathFactory, pads: list[int], limit: int, data: st.DataObject
) -> None:
    """A file cut anywhere (a writer killed mid-write): the records before the cut come
    back whole, the piece after it is one corrupt record, nothing else."""
    lines = [_line(0, i, pad) for i, pad in enumerate(pads)]
    blob = b"".join(lines)
    cut = data.draw(st.integers(0, len(blob)))
    sp = Spool(tmp_path_factory.mktemp("spool"), limit)
    sp.write(blob[:cut])
    sp.read(final=False)
    sp.read(final=True)
    complete = blob[:cut].count(b"\n")
    assert [d["msg"] for d in sp.records] == [rec.decode(ln)["msg"] for ln in lines[:complete]]
    assert sp.corrupt == (0 if cut == sum(len(ln) for ln in lines[:complete]) else 1)
    sp.close()


def test_cut_at_every_offset_of_a_small_file(tmp_path: Path) -> None:
    lines = [_line(t, i, 3) for i, t in enumerate([0, 1, 0])]
    blob = b"".join(lines)
    for cut in range(len(blob) + 1):
        directory = tmp_path / str(cut)
        directory.mkdir()
        sp = Spool(directory, 64)
        sp.write(blob[:cut])
        sp.read(final=True)
        complete = blob[:cut].count(b"\n")
        assert len(sp.records) == complete
        assert sp.corrupt == (0 if blob[:cut].endswith(b"\n") or cut == 0 else 1)
        sp.close()


@pytest.mark.parametrize("size", [MAX_LINE // 2, MAX_LINE - 1024])
def test_huge_record_comes_back_whole_between_small_ones(tmp_path: Path, size: int) -> None:
    """Records up to the line limit (twice the largest record cap) come back whole, even
    when written in two parts around a read."""
    sp = Spool(tmp_path, 1 << 20)
    sp.write(_line(0, 0, 1))
    big = rec.encode({"v": 1, "k": "log", "ts": 1, "msg": "r0-1 " + "x" * size})
    sp.write(big[: len(big) // 2])
    sp.read(final=False)
    sp.write(big[len(big) // 2 :] + _line(0, 2, 1))
    sp.read(final=False)
    sp.read(final=True)
    small = len(rec.decode(_line(0, 0, 1))["msg"])
    assert [len(d["msg"]) for d in sp.records] == [small, 5 + size, small]
    assert sp.corrupt == 0
    sp.close()


def test_line_longer_than_the_limit_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    """A line longer than MAX_LINE is one corrupt record, and the next record comes back;
    reading it holds less than two MAX_LINE windows, less than the line itself."""
    sp = Spool(tmp_path, 1 << 20)
    sp.write(_line(0, 0, 1))
    block = b"y" * (1 << 20)
    for _ in range(2 * (MAX_LINE >> 20) + 16):  # one line longer than two windows
        sp.write(block)
    sp.write(b"\n" + _line(0, 1, 1))
    tracemalloc.start()
    try:
        sp.read(final=False)
        sp.read(final=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [d["key"] for d in sp.records] == [f"{PARTS.writer}-0", f"{PARTS.writer}-1"]
    assert sp.corrupt == 1
    assert peak < 2 * MAX_LINE, f"peak {peak >> 20} MiB"
    sp.close()
