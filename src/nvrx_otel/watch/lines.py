"""Bytes written to a stream, cut into the lines that become records.

A line ends at ``\\n``. A carriage return rewrites the line in place (a progress bar), so
only what follows the last ``\\r`` of a line is kept: a bar updated 10,000 times is one
record of its final state, and the pending buffer never holds more than one state of it.
A line longer than ``cap`` bytes keeps its first ``cap`` bytes (the spool's record cap
then cuts it with its marker) and the rest of it is skipped up to its end; the count of
skipped bytes rides along so the record can say so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple


class Line(NamedTuple):
    """One finished line: its bytes (no ``\\n``, no rewritten states) and how many bytes
    of it were cut beyond the cap."""

    data: bytes
    cut: int


def final_state(line: bytes) -> bytes:
    """What a terminal would leave of ``line`` after its carriage returns: the text after
    the last ``\\r`` that is followed by something (``"50%\\r100%\\r"`` → ``"100%"``)."""
    body = line.rstrip(b"\r")
    cr = body.rfind(b"\r")
    return body if cr < 0 else body[cr + 1 :]


class LineSplitter:
    """Feeds of bytes in, finished lines out; ``finish()`` yields the unterminated rest."""

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self._pending = bytearray()
        self._cut = 0  # bytes of the current line skipped beyond the cap

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held."""
        return len(self._pending)

    def feed(self, data: bytes) -> Iterator[Line]:
        start = 0
        end = len(data)
        while start < end:
            nl = data.find(b"\n", start)
            stop = end if nl < 0 else nl
            self._add(data, start, stop)
            if nl < 0:
                return
            yield self._take()
            start = nl + 1

    def finish(self) -> Iterator[Line]:
        if self._pending or self._cut:
            yield self._take()

    def _add(self, data: bytes, start: int, stop: int) -> None:
        pending = self._pending
        cr = data.rfind(b"\r", start, stop)
        if cr < 0:
            pending += data[start:stop]
        else:  # only the last state of the line matters: drop the ones before it
            pending += data[start:stop]
            body = pending.rstrip(b"\r")
            last = body.rfind(b"\r")
            if last >= 0:
                del pending[: last + 1]
                self._cut = 0
        if len(pending) > self.cap:
            self._cut += len(pending) - self.cap
            del pending[self.cap :]

    def _take(self) -> Line:
        line = Line(final_state(bytes(self._pending)), self._cut)
        self._pending.clear()
        self._cut = 0
        return line
