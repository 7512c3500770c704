"""A writer on a file system too full for a spool file or a drop ledger keeps its loss
count in a tally's name, and says on stderr only what is true about its records."""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel.spool import rotation, sidecar, tally
from nvrx_otel.spool.writer import SpoolWriter


def _log(i: int) -> dict[str, Any]:
    return {"k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO", "lg": "t", "msg": f"r{i}"}


def _full(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(rotation, "create", _full)
    monkeypatch.setattr(sidecar.DropLedger, "create", classmethod(_full))
    return monkeypatch


def test_drops_are_kept_in_a_tally_name(
    tmp_path: Path, full_disk: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    w = SpoolWriter(tmp_path)
    for i in range(50):
        w.emit(_log(i))
    w.close()
    (name,) = [p.name for p in tmp_path.iterdir()]
    m = tally.NAME.match(name)
    assert m is not None and m["count"] == "50" and m["reason"] == "write_error"
    err = capsys.readouterr().err
    assert "reported as dropped if the count can be kept" in err
    assert "cannot keep the count" not in err


def test_stderr_says_when_not_even_the_tally_can_be_kept(
    tmp_path: Path, full_disk: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full_disk.setattr(tally.Tally, "_make", _full)
    w = SpoolWriter(tmp_path)
    for i in range(50):
        w.emit(_log(i))
    w.close()
    assert not list(tmp_path.iterdir())
    err = capsys.readouterr().err
    assert "cannot keep the count of dropped records" in err
    assert "reported only if writing works again" in err


def test_the_tally_goes_once_the_ledger_can_be_made(
    tmp_path: Path, full_disk: pytest.MonkeyPatch
) -> None:
    """Space is back: the ledger (tried again after a second) takes the count over."""
    w = SpoolWriter(tmp_path)
    for i in range(20):
        w.emit(_log(i))
    assert list(tmp_path.glob(".*.lost.*"))
    full_disk.undo()
    w.drops.next_ledger_ns = 0  # (the second has passed)
    w._next_try_ns = 0
    w.emit(_log(20))
    assert not list(tmp_path.glob(".*.lost.*"))
    (ledger,) = [p for p in tmp_path.iterdir() if sidecar.NAME.match(p.name)]
    w.close()
    lines = [x for p in tmp_path.glob("*.jsonl") for x in p.read_bytes().splitlines()]
    assert any(b'"count":20' in x for x in lines)  # the drop record reports them
    assert not ledger.exists()  # and it holds every drop: nothing left to report
