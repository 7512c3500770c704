"""An exception surfacing in the middle of making a file (a signal handler raising, as a
timeout does, between any two steps): the writer keeps a consistent state, leaves no
half-made file behind, counts the record that got the exception as dropped, and every
later record is written."""

from __future__ import annotations

import fcntl
import mmap
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from nvrx_otel.spool import sidecar
from nvrx_otel.spool.writer import SpoolWriter
from tests.conftest import read_spool


class Interrupt(Exception):
    """What the signal handler raises."""


def _log(msg: str) -> dict[str, Any]:
    return {"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t", "msg": msg}


STEPS = [
    (os, "open"),
    (os, "write"),
    (fcntl, "flock"),
    (os, "rename"),
    (os, "posix_fallocate"),
    (os, "pwrite"),
    (mmap, "mmap"),
]
"""The calls that make a spool file or a drop ledger."""


@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize(("module", "name"), STEPS, ids=[n for _, n in STEPS])
def test_an_exception_after_any_step_of_making_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, nth: int
) -> None:
    """The ``nth`` call of ``name`` does its work, then the exception surfaces (as a
    handler's does, at the end of a call). 40 records then, 40 once it is over: every one
    of them is in a spool file or counted in a drop record, the last 40 are all written,
    and no temporary file is left."""
    w = SpoolWriter(tmp_path, max_file_size=4096)
    real = getattr(module, name)
    calls = 0

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        out = real(*args, **kwargs)
        calls += 1
        if calls == nth:
            raise Interrupt(name)
        return out

    monkeypatch.setattr(module, name, interrupted)
    for i in range(40):  # 4 KiB files: several rotations
        w.emit(_log(f"before {i} " + "x" * 60))
    monkeypatch.undo()
    for i in range(40):
        w.emit(_log(f"after {i} " + "x" * 60))
    w.close()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    lines = read_spool(tmp_path)
    kept = [r["msg"].split(" x")[0] for r in lines if r["k"] == "log"]
    dropped = sum(r["count"] for r in lines if r["k"] == "drop")
    assert len(kept) == len(set(kept))
    assert {f"after {i}" for i in range(40)} <= set(kept)
    assert len(kept) + dropped >= 80
    assert not list(tmp_path.glob(".*.lost.*"))  # drop records hold every drop
    assert not _open_under(tmp_path)  # not even a descriptor lost right after os.open


def _open_under(directory: Path) -> list[str]:
    """This process's descriptors open on files under ``directory`` (Linux)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(str(directory.resolve())):
            out.append(target)
    return out


def test_an_interrupted_ledger_that_got_its_name_is_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exception surfaces right after the ledger was renamed into place: the next
    attempt takes that ledger over (one ledger, locked, counting) instead of leaving it."""
    real = os.rename
    calls = 0

    def interrupted(src: Any, dst: Any, **dir_fds: Any) -> None:
        nonlocal calls
        real(src, dst, **dir_fds)
        calls += 1
        if calls == 1:
            raise Interrupt("rename")

    monkeypatch.setattr(os, "rename", interrupted)
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=4096)
    for i in range(100):  # over the budget: drops, counted in the ledger
        w.emit(_log(f"r{i} " + "y" * 60))
    monkeypatch.undo()
    ledgers = [p for p in tmp_path.iterdir() if sidecar.NAME.match(p.name)]
    assert len(ledgers) == 1
    view = sidecar.read_view(ledgers[0].read_bytes())
    assert view is not None and view.dropped == w.drops.total > 0
    with ledgers[0].open("rb") as fh, pytest.raises(BlockingIOError):
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its writer holds it
    w.close()


def test_a_drop_record_torn_by_a_full_disk_is_not_counted_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while a drop record is written: the write is short, then fails. The
    torn piece is one corrupt record, so it accounts for one drop; the others stay pending
    and are reported by the next drop record (not counted as written, which lost them)."""
    w = SpoolWriter(tmp_path, max_file_size=4096, budget=4096)
    for i in range(100):  # over the budget: drops pending
        w.emit(_log(f"r{i} " + "y" * 60))
    assert w.drops.pending
    real = os.write
    writes = 0

    def full_disk(fd: int, data: bytes) -> int:
        nonlocal writes
        writes += 1
        if writes == 1:
            return real(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    w.close()  # writes the pending drop record: torn
    monkeypatch.undo()
    ledgers = [p for p in tmp_path.iterdir() if sidecar.NAME.match(p.name)]
    assert len(ledgers) == 1
    view = sidecar.read_view(ledgers[0].read_bytes())
    assert view is not None
    raw = [x for p in sorted(tmp_path.glob("*.jsonl")) for x in p.read_bytes().splitlines()]
    corrupt = 0
    kept = dropped = 0
    for x in raw:
        try:
            r = orjson.loads(x)
        except orjson.JSONDecodeError:
            corrupt += 1
            continue
        kept += r["k"] == "log"
        dropped += r["count"] if r["k"] == "drop" else 0
    assert corrupt == 1
    unreported = view.dropped - view.written
    assert kept + dropped + corrupt + unreported == 100
    assert unreported == view.dropped - 1 > 0


def test_a_keyboard_interrupt_mid_rotation_reaches_the_caller_and_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a spool file is renamed into place: the KeyboardInterrupt is not
    swallowed (training stops as asked), the record of that call is counted as dropped,
    and the writer goes on working."""
    w = SpoolWriter(tmp_path, max_file_size=4096)
    real = os.rename

    def interrupted(src: Any, dst: Any, **dir_fds: Any) -> None:
        real(src, dst, **dir_fds)
        if str(dst).endswith(".jsonl"):
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        w.emit(_log("interrupted"))
    monkeypatch.undo()
    for i in range(20):
        w.emit(_log(f"after {i}"))
    w.close()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    lines = read_spool(tmp_path)
    assert [r["msg"] for r in lines if r["k"] == "log"] == [f"after {i}" for i in range(20)]
    assert sum(r["count"] for r in lines if r["k"] == "drop") == 1
