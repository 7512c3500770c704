"""What a rank tells its watcher, and how: one JSON object per line on the notes pipe.

Each note is one ``write`` of less than ``PIPE_BUF`` bytes (atomic on a pipe), sent
without blocking: a note that finds the pipe full is dropped (the watcher is gone or
stuck; a rank never waits for it). Kinds:

- ``expect``: lines about to be printed on stream ``s`` (1 or 2) that are records already
  (a traceback the uncaught-exception hook recorded, a console handler's copy of a
  record); ``h`` holds the hash of each line, and the watcher forwards those lines but
  does not record them a second time, also with a ``[<tag>]: `` prefix that a hook
  wrapping ours added (torch.distributed prefixes each line with ``[rank<N>]: ``), and
  also once its colour codes (ANSI CSI sequences) are taken out.
- ``exc``: the process is ending on an uncaught exception of type ``t``.
- ``exit``: the interpreter is exiting normally (``atexit`` ran).
"""

from __future__ import annotations

import os
import re
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import orjson

PIPE_BUF: Final = 4096
_CSI: Final = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
_MAX_HASHES: Final = 300  # ids of up to 10 digits: a note stays under PIPE_BUF


def line_hash(line: bytes) -> int:
    """The hash both sides compute of a line (its bytes without ``\\r`` and ``\\n``)."""
    return zlib.crc32(line.rstrip(b"\r"))


def send(fd: int, note: dict[str, Any]) -> bool:
    """Write one note without blocking; False when it could not be written whole."""
    data = orjson.dumps(note) + b"\n"
    if len(data) >= PIPE_BUF:
        return False
    try:
        return os.write(fd, data) == len(data)
    except OSError:  # full (EAGAIN), or the watcher is gone
        return False


def send_expected(fd: int, stream: int, text: bytes) -> None:
    """Tell the watcher that ``text`` is about to be written to ``stream``, recorded."""
    hashes = [line_hash(line) for line in text.split(b"\n") if line.strip(b"\r")]
    for i in range(0, len(hashes), _MAX_HASHES):
        send(fd, {"k": "expect", "s": stream, "h": hashes[i : i + _MAX_HASHES]})


class Expected:
    """The watcher's side of ``expect``: a bounded multiset of line hashes per stream, each
    forgotten :data:`TTL_S` after it arrived (a line announced and then not printed, by a
    handler that formats without printing, must not swallow a later line like it)."""

    LIMIT: Final = 100_000
    TTL_S: Final = 30.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_stream: dict[int, dict[int, deque[float]]] = {1: {}, 2: {}}
        self._count = 0

    def add(self, stream: int, hashes: list[int]) -> None:
        by_hash = self._by_stream.get(stream)
        if by_hash is None:
            return
        if self._count + len(hashes) > self.LIMIT:
            for other in self._by_stream.values():  # never matched: start over
                other.clear()
            self._count = 0
        now = self._clock()
        for h in hashes:
            if isinstance(h, int):
                by_hash.setdefault(h, deque()).append(now)
                self._count += 1

    def _take_hash(self, by_hash: dict[int, deque[float]], h: int) -> bool:
        times = by_hash.get(h)
        if not times:
            return False
        oldest = self._clock() - self.TTL_S
        while times and times[0] < oldest:
            times.popleft()
            self._count -= 1
        if not times:
            del by_hash[h]
            return False
        times.popleft()
        self._count -= 1
        if not times:
            del by_hash[h]
        return True

    def take(self, stream: int, line: bytes) -> bool:
        """True (and forgotten) when ``line`` was expected on ``stream``."""
        by_hash = self._by_stream.get(stream)
        if not by_hash:
            return False
        if self._take_hash(by_hash, line_hash(line)):
            return True
        if line.startswith(b"["):
            # a wrapping hook's prefix (torch.distributed's "[rank3]: ") around the line
            end = line.find(b"]: ", 1, 40)
            if end > 0 and self._take_hash(by_hash, line_hash(line[end + 3 :])):
                return True
        # coloured: announced as the plain text
        return b"\x1b[" in line and self._take_hash(by_hash, line_hash(_CSI.sub(b"", line)))


def parse(data: bytes) -> list[dict[str, Any]]:
    """The notes in ``data`` (whole lines); anything undecodable is skipped."""
    out = []
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            note = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(note, dict):
            out.append(note)
    return out
