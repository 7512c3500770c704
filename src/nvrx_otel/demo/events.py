"""The demo's progress events: one JSON object per line, rank -> launcher -> command.

Ranks write them on stdout; the launcher reads every rank's stdout, adds its own and
writes them all on its stdout; the command reads that to drive the progress display. They
are for the display only: what the job logged and traced goes through the spool.
"""

from __future__ import annotations

import os
from typing import Any, Final

import orjson

STARTED: Final = "started"
"""A rank is up (``rank``, ``cycle``, ``step``: where it starts)."""
STEP: Final = "step"
"""A rank finished a step (``rank``, ``step``, ``loss``)."""
CHECKPOINT: Final = "checkpoint"
"""A rank saved a checkpoint (``rank``, ``step``)."""
WAITING: Final = "waiting"
"""A rank still waits in a collective (``rank``, ``step``, ``op``, ``missing``, ``waited``)."""
DONE: Final = "done"
"""A rank finished its last step (``rank``)."""
CYCLE: Final = "cycle"
"""The launcher started a cycle (``cycle``, ``start``: the step it resumes from)."""
EXITED: Final = "exited"
"""A rank's process ended (``rank``, ``code``; ``signal`` when the launcher stopped it)."""
FAULT: Final = "fault"
"""The launcher saw a fault (``kind``: ``failure`` or ``hang``, ``rank``, ``detail``)."""
END: Final = "end"
"""The launcher is done (``code``: the job's exit status, ``outcome``: one line)."""


def encode(kind: str, /, **fields: Any) -> bytes:
    return orjson.dumps({"event": kind, **fields}) + b"\n"


def emit(kind: str, /, **fields: Any) -> None:
    """Write one event on stdout at once; never raises (nobody may be reading)."""
    try:
        os.write(1, encode(kind, **fields))
    except OSError:
        pass


def decode(line: bytes) -> dict[str, Any] | None:
    """The event on ``line``, or None for anything else a process printed."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and "event" in value else None


class LineBuffer:
    """Splits what is read from a pipe into whole lines."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[bytes]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return lines
