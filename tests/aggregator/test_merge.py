"""ChronoMerge on its own: blocks released in parts, in key order, accounted per file."""

from __future__ import annotations

import pytest

from nvrx_otel.aggregator.merge import ChronoMerge
from nvrx_otel.aggregator.reader import Chunk, SpoolFile
from nvrx_otel.spool.paths import SpoolFileName


def _file(writer: str, index: int = 0) -> SpoolFile:
    parts = SpoolFileName(writer, index, 1, "proc")
    return SpoolFile(name=parts.name, parts=parts, fd=-1, ino=index)


def _chunk(f: SpoolFile, stamps: list[int], reports: dict[int, int] | None = None) -> Chunk:
    records = [{"ts": ts, "msg": f"{f.writer[-1]}{ts}"} for ts in stamps]
    ends = [f.offset + 10 * (i + 1) for i in range(len(stamps))]
    f.offset = ends[-1]
    return Chunk(f, records, ends, ends[-1], clean=True, reports=reports or {})


def test_blocks_are_released_in_parts_in_key_order_and_accounted() -> None:
    merge = ChronoMerge(hold_ns=100)
    a0, a1, b0 = _file("a" * 16), _file("a" * 16, 1), _file("b" * 16)
    merge.add(_chunk(a0, [10, 30, 50], reports={1: 4}))  # the record at 30 reports 4 losses
    merge.add(_chunk(b0, [20, 40, 60, 80]))
    merge.add(_chunk(a1, [45, 70]))  # a's next file: its keys never go below a's last (50)
    assert merge.held == 9 and a0.held == 3 and a1.held == 2 and b0.held == 4

    first = merge.pop(now_ns=150)  # due: keys <= 50
    assert [r["msg"] for r in first.records] == ["a10", "b20", "a30", "b40", "a50", "a45"]
    by_file = {(p.file.name, p.count, p.weight, p.first, p.last, p.end) for p in first.pieces}
    assert by_file == {
        (a0.name, 3, 6, 10, 50, 30),
        (a1.name, 1, 1, 50, 50, 10),  # a45 is keyed 50: its writer's running maximum
        (b0.name, 2, 2, 20, 40, 20),
    }
    assert merge.held == 3 and merge.oldest_ts() == 60

    rest = merge.pop(None)
    assert [r["msg"] for r in rest.records] == ["b60", "a70", "b80"]
    assert merge.held == 0 and merge.oldest_ts() is None
    assert merge.pop(None).records == []


def test_one_writer_alone_keeps_file_order_without_a_sort() -> None:
    merge = ChronoMerge(hold_ns=0)
    f = _file("c" * 16)
    merge.add(_chunk(f, [5, 3, 9, 1]))
    assert [r["msg"] for r in merge.pop(None).records] == ["c5", "c3", "c9", "c1"]


def _texts(chunk: Chunk) -> list[str]:
    return [f"text of {r['msg']}" for r in chunk.records]


def test_texts_given_with_the_blocks_are_released_in_the_records_order() -> None:
    merge = ChronoMerge(hold_ns=100)
    a, b = _file("a" * 16), _file("b" * 16)
    for chunk in (_chunk(a, [10, 30, 50]), _chunk(b, [20, 40, 60])):
        merge.add(chunk, _texts(chunk))
    first = merge.pop(now_ns=145)  # keys <= 45, a part of each block
    assert first.texts == [f"text of {r['msg']}" for r in first.records]
    assert [r["msg"] for r in first.records] == ["a10", "b20", "a30", "b40"]
    rest = merge.pop(None)
    assert rest.texts == ["text of a50", "text of b60"]


def test_without_texts_for_every_block_none_are_released() -> None:
    merge = ChronoMerge(hold_ns=0)
    a, b = _file("a" * 16), _file("b" * 16)
    with_texts = _chunk(a, [1, 3])
    merge.add(with_texts, _texts(with_texts))
    merge.add(_chunk(b, [2]))
    merge.add(_chunk(b, [4]), ["one text too many", "for one record"])  # never: dropped
    out = merge.pop(None)
    assert [r["msg"] for r in out.records] == ["a1", "b2", "a3", "b4"] and out.texts is None


def test_without_the_records_texts_and_the_last_timestamp_are_released() -> None:
    merge = ChronoMerge(hold_ns=100, keep_records=False)
    a, b = _file("a" * 16), _file("b" * 16)
    for chunk in (_chunk(a, [10, 30, 50], reports={1: 4}), _chunk(b, [20, 40, 60])):
        merge.add(chunk, _texts(chunk))
    first = merge.pop(now_ns=145)  # keys <= 45, a part of each block
    assert first.records == [] and first.count == 4 and first.last_ts == 40
    assert first.texts == ["text of a10", "text of b20", "text of a30", "text of b40"]
    by_file = {(p.file.name, p.count, p.weight, p.end) for p in first.pieces}
    assert by_file == {(a.name, 2, 5, 20), (b.name, 2, 2, 20)}
    rest = merge.pop(None)
    assert rest.texts == ["text of a50", "text of b60"] and rest.last_ts == 60
    assert merge.held == 0 and merge.pop(None).count == 0


def test_records_not_kept_need_their_texts() -> None:
    merge = ChronoMerge(hold_ns=0, keep_records=False)
    f = _file("c" * 16)
    with pytest.raises(ValueError):
        merge.add(_chunk(f, [1, 2]))
    assert merge.held == 0 and f.held == 0
