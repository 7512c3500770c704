"""The chronological merge fed by the de-duplication stage: a collapsed record and the
records taken out for it (tombstones) are released by one ``pop``, so a commit after any
``pop`` holds a collapsed record exactly when it holds its members' spool positions.

A property test drives ``DedupWindow(tombstones=True)`` and ``ChronoMerge.add_window`` as
the service does (windows of chunks of several writers, pops at arbitrary times between
them, a held bound that releases everything) and checks, after every ``pop``, what a
``kill -9`` right after its commit would leave: the records whose positions are committed
are exactly those written or collapsed into a written record, each once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvrx_otel import semconv
from nvrx_otel.aggregator.dedup import DedupWindow
from nvrx_otel.aggregator.merge import ChronoMerge, Released
from nvrx_otel.aggregator.reader import Chunk, SpoolFile
from nvrx_otel.nodeline import parse_ranges
from nvrx_otel.spool.paths import SpoolFileName


def _file(w: int) -> SpoolFile:
    parts = SpoolFileName(f"{w + 1:016x}", 0, 1000 + w, "proc")
    return SpoolFile(name=parts.name, parts=parts, fd=-1, ino=w + 1)


def _record(w: int, i: int, kind: int, ts: int) -> dict[str, Any]:
    msg = f"storm {kind}" if kind >= 0 else f"writer {w} record {i}"
    return {"ts": ts, "rank": w, "msg": msg, "line": 1, "lvl": "ERROR", "lg": "x",
            "path": "train.py", "uid": f"{w}:{i}"}  # fmt: skip


def _chunk(f: SpoolFile, records: list[dict[str, Any]], first: int) -> Chunk:
    """A chunk of ``records``, the record at index ``i`` of its writer ending at
    ``10 * (i + 1)``."""
    ends = [10 * (first + i + 1) for i in range(len(records))]
    f.offset = ends[-1]
    return Chunk(f, records, ends, ends[-1], clean=True)


class _Committed:
    """What the node log and a commit right after each ``pop`` would hold: positions per
    file (as ``Output.released`` advances them), written records, collapsed count."""

    def __init__(self, files: list[SpoolFile], uid_at: dict[tuple[int, int], str]) -> None:
        self.files = files
        self.uid_at = uid_at  # (writer, end offset) -> uid
        self.done = [0] * len(files)
        self.written: list[str] = []
        self.collapsed = 0

    def take(self, out: Released, keep: bool) -> list[str]:
        texts = out.texts
        if not out.pieces:  # nothing released
            assert not out.count and not texts
            return []
        assert texts is not None
        if keep:
            assert [r["uid"] for r in out.records] == texts
        assert out.count == len(texts)
        for p in out.pieces:
            w = self.files.index(p.file)
            p.file.held -= p.count
            assert p.file.held >= 0
            self.done[w] = p.file.offset if not p.file.held else p.end
            self.collapsed += p.collapsed
        self.written += texts
        return texts

    def consumed(self) -> set[str]:
        """Records a restart would not read again."""
        return {uid for (w, end), uid in self.uid_at.items() if end <= self.done[w]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_is_written_or_collapsed_once_and_committed_with_its_group(
    data: st.DataObject,
) -> None:
    writers = data.draw(st.integers(2, 5), label="writers")
    keep = data.draw(st.booleans(), label="keep_records")
    hold = data.draw(st.integers(0, 60), label="hold")
    max_held = data.draw(st.integers(3, 60), label="max_held")
    files = [_file(w) for w in range(writers)]
    records: list[list[dict[str, Any]]] = []
    uid_at: dict[tuple[int, int], str] = {}
    for w in range(writers):
        n = data.draw(st.integers(1, 12), label=f"records of {w}")
        kinds = data.draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
        stamps = data.draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
        records.append(
            [_record(w, i, k, ts) for i, (k, ts) in enumerate(zip(kinds, stamps, strict=True))]
        )
        uid_at.update({(w, 10 * (i + 1)): f"{w}:{i}" for i in range(n)})
    # reading order: chunks of each writer, interleaved, cut into windows
    read = [0] * writers
    order: list[tuple[int, int]] = []  # (writer, records in the chunk)
    while any(read[w] < len(records[w]) for w in range(writers)):
        w = data.draw(st.sampled_from([w for w in range(writers) if read[w] < len(records[w])]))
        size = data.draw(st.integers(1, len(records[w]) - read[w]))
        order.append((w, size))
        read[w] += size
    merge = ChronoMerge(hold_ns=hold, max_held=max_held, keep_records=keep)
    committed = _Committed(files, uid_at)
    now = 0
    groups: dict[str, set[str]] = {}  # collapsed record's uid -> its members' uids
    ranks_of: dict[str, list[int]] = {}
    released_with: dict[str, int] = {}  # uid -> the pop that released it (or its tombstone)
    pops = 0
    read = [0] * writers
    at = 0
    while at < len(order):
        window = DedupWindow(1, tombstones=True)  # 1 ms: every stamp here is within it
        size = data.draw(st.integers(1, len(order) - at), label="window")
        for w, n in order[at : at + size]:
            chunk = _chunk(files[w], [dict(r) for r in records[w][read[w] : read[w] + n]], read[w])
            window.add(chunk, 10 * read[w])
            read[w] += n
        at += size
        flushed = [c for c, _ in window.flush()]
        for c in flushed:
            for i, gid in (c.leads or {}).items():
                groups.setdefault(f"g{gid}", set()).add(c.records[i]["uid"])
            for _, end, _, gid in c.tombs or []:
                groups.setdefault(f"g{gid}", set()).add(uid_at[files.index(c.file), end])
        for c in flushed:  # each group's record: which uids it stands for
            for i in c.leads or {}:
                leader = c.records[i]
                gid = f"g{c.leads[i]}"
                members = groups.pop(gid)
                assert leader["uid"] in members
                groups[leader["uid"]] = members - {leader["uid"]}
                ranks_of[leader["uid"]] = parse_ranges(leader["attrs"][semconv.DEDUP_RANKS])
                assert leader["attrs"][semconv.DEDUP_COUNT] == len(members)
        merge.add_window([(c, [r["uid"] for r in c.records]) for c in flushed])
        for _ in range(data.draw(st.integers(0, 2), label="pops")):
            now += data.draw(st.integers(0, 80))
            _check_pop(merge.pop(now), committed, keep, groups, released_with, pops)
            pops += 1
    _check_pop(merge.pop(None), committed, keep, groups, released_with, pops)
    assert merge.held == 0 and all(f.held == 0 for f in files)
    everything = {uid for rs in records for uid in (r["uid"] for r in rs)}
    # every record once: written, or a member of exactly one written collapsed record
    members = [m for leader in committed.written if leader in groups for m in groups[leader]]
    assert sorted(committed.written + members) == sorted(everything)
    assert committed.collapsed == len(members)
    for leader, ms in groups.items():  # a collapsed record names its members' ranks
        assert sorted(int(u.split(":")[0]) for u in {leader, *ms}) == ranks_of[leader]
    for w in range(writers):  # each writer's records in its order
        mine = [int(u.split(":")[1]) for u in committed.written if u.startswith(f"{w}:")]
        assert mine == sorted(mine)


def _check_pop(
    out: Released,
    committed: _Committed,
    keep: bool,
    groups: dict[str, set[str]],
    released_with: dict[str, int],
    pop: int,
) -> None:
    """What a ``kill -9`` right after this ``pop``'s commit leaves: the positions committed
    are exactly those of the records written and of the members of written collapsed
    records, so a restart reads again exactly the others."""
    texts = committed.take(out, keep)
    for uid in texts:
        assert uid not in released_with, f"{uid} written twice"
        released_with[uid] = pop
        for m in groups.get(uid, ()):
            assert m not in released_with, f"{m} written and collapsed"
            released_with[m] = pop
    accounted = {u for u, _ in released_with.items()}
    assert committed.consumed() == accounted
    assert committed.collapsed == sum(len(groups.get(u, ())) for u in committed.written)


def test_crossing_groups_share_a_key_and_no_writer_order_breaks() -> None:
    """Writer a logs storm X then storm Y, writer b logs Y then X (a group each, crossing):
    both groups get one key, the larger (X's, 40), so each is released whole and each
    writer's records stay in its order."""
    a, b = _file(0), _file(1)
    window = DedupWindow(1, tombstones=True)
    ra = [_record(0, 0, 0, 10), _record(0, 1, 1, 20), _record(0, 2, -1, 45)]
    rb = [_record(1, 0, 1, 30), _record(1, 1, 0, 40), _record(1, 2, -1, 50)]
    window.add(_chunk(a, ra, 0), 0)
    window.add(_chunk(b, rb, 0), 0)
    chunks = [c for c, _ in window.flush()]
    merge = ChronoMerge(hold_ns=0)
    merge.add_window([(c, [r["uid"] for r in c.records]) for c in chunks])
    assert merge.held == 6 and a.held == 3 and b.held == 3
    early = merge.pop(39)  # the groups are keyed 40 (X's largest: b's 40): neither is due
    assert early.texts == [] and early.pieces == []
    out = merge.pop(40)
    assert out.texts == ["0:0", "0:1"]  # Y's record keyed 40 too: after X's, in a's order
    assert sum(p.collapsed for p in out.pieces) == 2
    assert {p.file.name: p.end for p in out.pieces} == {a.name: 20, b.name: 20}
    rest = merge.pop(None)
    assert rest.texts == ["0:2", "1:2"] and merge.held == 0


@pytest.mark.parametrize("keep", [True, False], ids=["records", "texts"])
def test_a_batch_of_tombstones_only_waits_for_its_record(keep: bool) -> None:
    """Rank 1's batch is all collapsed into rank 0's record, which is newer than the cutoff:
    it is held (rank 1's position does not move) until the record is released with it."""
    a, b = _file(0), _file(1)
    window = DedupWindow(1, tombstones=True)
    window.add(_chunk(a, [_record(0, 0, -1, 5), _record(0, 1, 0, 50)], 0), 0)
    window.add(_chunk(b, [_record(1, 0, 0, 60)], 0), 0)
    chunks = [c for c, _ in window.flush()]
    assert chunks[1].records == [] and chunks[1].tombs == [(0, 10, 60, 0)]
    merge = ChronoMerge(hold_ns=0, keep_records=keep)
    merge.add_window([(c, [r["uid"] for r in c.records]) for c in chunks])
    first = merge.pop(59)
    assert first.texts == ["0:0"] and [p.file for p in first.pieces] == [a]
    assert b.held == 1
    out = merge.pop(60)
    assert out.texts == ["0:1"] and out.count == 1 and out.last_ts == 50
    assert {(p.file.name, p.count, p.weight, p.collapsed) for p in out.pieces} == {
        (a.name, 1, 1, 0),
        (b.name, 1, 1, 1),
    }
    assert keep == bool(out.records)
