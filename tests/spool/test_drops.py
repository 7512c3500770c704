"""A drop record is appended whole or not at all: a torn one would hide its count."""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

from nvrx_otel.spool.drops import append_whole


def test_a_drop_record_cut_short_by_a_full_disk_is_undone(tmp_path: Path) -> None:
    """The disk fills in the middle of a drop record (here the file size limit): the
    piece written is cut off again, so the file ends where it did and the count stays
    pending for the next attempt (before, the torn record counted as written)."""
    path = tmp_path / "spool.jsonl"
    path.write_bytes(b'{"v":1}\n' * 10)
    size = path.stat().st_size
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, limits[1]))
    try:
        assert append_whole(fd, b'{"v":1,"k":"drop","count":5000}\n', size) == (False, 0)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert path.stat().st_size == size
    assert append_whole(fd, b'{"v":1,"k":"drop","count":5000}\n', size) == (True, 0)
    os.close(fd)
    assert path.read_bytes().endswith(b'"count":5000}\n')
