"""A writer's count of the records it could not spool, and its drop ledger.

Records a writer drops (over budget, a failed write) are counted here until a ``drop``
record reports them (``record.drop_line``). Every count is also stored in the writer's
drop ledger (``sidecar.py``, shared memory), so it outlives ``os._exit`` and ``kill -9``:
the aggregator reads what no drop record reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.sidecar import DropLedger

_WRITE_ERROR = DropReasonValues.WRITE_ERROR.value


class DropCount:
    """Records dropped since the last drop record (``pending``, between ``first`` and
    ``last``, for ``reason``), and the totals kept in the ledger: ``total`` dropped since
    the writer started, of which drop records hold ``written``."""

    def __init__(self) -> None:
        self.pending = 0
        self.reason = ""
        self.first = 0
        self.last = 0
        self.total = 0
        self.written = 0
        self.ledger: DropLedger | None = None
        self.ledger_tried = False

    def open_ledger(
        self,
        directory: Path,
        proc: str,
        pid: int,
        writer_id: str,
        identity: dict[str, Any],
        report: Callable[[str], None],
    ) -> None:
        """Make the ledger (once; without one, drops still go into drop records, only a
        process that ends abruptly then loses its pending count)."""
        self.ledger_tried = True
        try:
            ledger = DropLedger.create(directory, proc, pid, writer_id, identity)
        except OSError as exc:
            report(f"cannot create the drop ledger in {directory}: {exc}")
            return
        if self.total:
            ledger.written(self.written)
            ledger.reason(self.reason or _WRITE_ERROR)
            ledger.dropped(self.total, self.first, self.last)
        self.ledger = ledger

    def count(self, ts: int, reason: str) -> None:
        """One more record dropped at ``ts``."""
        ledger = self.ledger
        if not self.pending:
            self.first = ts
            self.reason = reason or _WRITE_ERROR
            if ledger is not None:
                ledger.reason(self.reason)
        self.pending += 1
        self.total += 1
        self.last = ts
        if ledger is not None:  # stores into shared memory: kept however the process ends
            ledger.dropped(self.total, self.first, ts)

    def take(self) -> int:
        """The pending count, taken for a drop record (taken first: a signal handler may
        count another drop while that record is being made)."""
        count, self.pending = self.pending, 0
        return count

    def writing(self, count: int, seq: int) -> None:
        """The drop record of ``count`` with key ``seq`` is about to be written."""
        if self.ledger is not None:  # killed during the write: the aggregator looks for it
            self.ledger.writing(count, seq)

    def wrote(self, count: int, ok: bool) -> None:
        """The drop record of ``count`` was written (``ok``) or not (still pending)."""
        if ok:
            self.written += count
        else:
            self.pending += count  # the next attempt reports all of them
        if self.ledger is not None:
            self.ledger.written(self.written)

    def forget_in_child(self) -> None:
        """In a forked child: the ledger is the parent's."""
        if self.ledger is not None:
            self.ledger.forget_in_child()

    def close(self) -> None:
        """Close the ledger; removed when drop records hold every drop."""
        ledger, self.ledger, self.ledger_tried = self.ledger, None, False
        if ledger is not None:  # nothing left to report: no need for the aggregator to look
            ledger.close(remove=self.total == self.written and not self.pending)


def append_whole(fd: int, line: bytes, size: int) -> tuple[bool, int]:
    """Append a drop record's ``line`` to the file ``fd`` (``size`` bytes long) whole or not
    at all: (written whole, bytes of a torn piece that could not be cut off again). A torn
    drop record would hide its count from the reader, so a short write (a full disk) is
    finished, or cut off again: the reader never consumes a line without its newline, so
    cutting the file's own incomplete tail takes nothing it read."""
    written = 0
    try:
        while written < len(line):
            written += os.write(fd, line[written:])
    except OSError:
        if written:
            try:
                os.ftruncate(fd, size)
            except OSError:
                return False, written
        return False, 0
    return True, 0
