"""A writer's count of the records it could not spool, and its drop ledger.

Records a writer drops (over budget, a failed write) are counted here until a ``drop``
record reports them (``record.drop_line``). Every count is also stored in the writer's
drop ledger (``sidecar.py``, shared memory), so it outlives ``os._exit`` and ``kill -9``:
the aggregator reads what no drop record reported. While the ledger cannot be made (a
full file system) the count not yet in a drop record is kept in the name of an empty file
instead (``tally.py``), and making the ledger is tried again at most every second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from nvrx_otel.record import drop_line
from nvrx_otel.semconv import DropReasonValues
from nvrx_otel.spool.attempt import Attempt
from nvrx_otel.spool.sidecar import DropLedger
from nvrx_otel.spool.tally import Tally

_WRITE_ERROR = DropReasonValues.WRITE_ERROR.value


_LEDGER_RETRY_NS: Final = 1_000_000_000


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
        self.next_ledger_ns = 0  # when to try making the ledger (again)
        self.tally: Tally | None = None  # the count in a file name, while there is no ledger
        self._making = Attempt()

    @property
    def unrecorded(self) -> bool:
        """Whether drops no drop record holds are on no disk either: the ledger could not
        be made, nor the tally named after them."""
        if self.ledger is not None or self.tally is None or self.total == self.written:
            return False
        return not self.tally.held()

    def open_ledger(
        self,
        dir_fd: int,
        directory: Path,
        proc: str,
        pid: int,
        writer_id: str,
        identity: dict[str, Any],
        report: Callable[[str], None],
        now: int,
    ) -> None:
        """Make the ledger in the directory open as ``dir_fd`` (``directory``, for
        messages) while there is none, at most every second; without one, drops go into
        drop records and the tally."""
        if self.tally is None:
            self.tally = Tally(dir_fd, proc, pid, writer_id, identity.get("rank"))
        try:
            ledger = DropLedger.create(dir_fd, proc, pid, writer_id, identity, self._making)
        except OSError as exc:
            self.next_ledger_ns = now + _LEDGER_RETRY_NS
            report(f"cannot create the drop ledger in {directory}: {exc}")
            if self.total > self.written:
                self.tally.store(self.total - self.written, self.reason or _WRITE_ERROR)
            return
        if self.total:
            ledger.written(self.written)
            ledger.reason(self.reason or _WRITE_ERROR)
            ledger.dropped(self.total, self.first, self.last)
        self.ledger = ledger
        self._making.tmp = ""
        self.tally.remove()  # the ledger holds the count now

    def count(self, ts: int, reason: str, n: int = 1) -> None:
        """``n`` more records dropped at ``ts``."""
        ledger = self.ledger
        if not self.pending:
            self.first = ts
            self.reason = reason or _WRITE_ERROR
            if ledger is not None:
                ledger.reason(self.reason)
        self.pending += n
        self.total += n
        self.last = ts
        if ledger is not None:  # stores into shared memory: kept however the process ends
            ledger.dropped(self.total, self.first, ts)
        elif self.tally is not None:  # no ledger (a full disk): a rename per drop
            self.tally.store(self.total - self.written, self.reason)

    def write_record(
        self, fd: int, seq: int, writer_id: str, identity: dict[str, Any], *, newline: bool
    ) -> tuple[int, int]:
        """Write the drop record of the pending count (key seq ``seq``; after a ``\\n``
        with ``newline``) to ``fd``: ``(bytes written, bytes of the line)``.

        The count is taken first (a signal handler may count another drop meanwhile) and
        given back whatever line fails: all of it when nothing was written, all but one
        when the record is torn (a full disk: the reader reports its piece as one corrupt
        record). A short write is completed or it is torn."""
        count, self.pending = self.pending, 0
        line = b""
        lead = done = 0  # the line's leading newline (0 or 1), the bytes of it written
        try:
            line = drop_line(
                writer_id=writer_id,
                seq=seq,
                ts=time.time_ns(),
                count=count,
                first_ts=self.first,
                last_ts=self.last,
                reason=self.reason,
                identity=identity,
            )
            if newline:
                line, lead = b"\n" + line, 1
            if self.ledger is not None:  # killed during the write: the aggregator looks
                self.ledger.writing(count, seq)
            while done < len(line):
                done += os.write(fd, line[done:])
        except OSError:
            pass
        finally:
            whole = done == len(line) > 0
            self._wrote(count, ok=whole, torn=not whole and done > lead)
        return done, len(line)

    def _wrote(self, count: int, ok: bool, torn: bool = False) -> None:
        """The drop record of ``count`` was written (``ok``), or not (still pending), or
        only in part (``torn``: the reader reports its piece as one corrupt record, which
        accounts for one of them; the rest are pending)."""
        if ok:
            self.written += count
        elif torn:
            self.written += 1
            self.pending += count - 1
        else:
            self.pending += count  # the next attempt reports all of them
        if self.ledger is not None:
            self.ledger.written(self.written)
        elif self.tally is not None and (ok or torn):
            self.tally.store(self.total - self.written, self.reason)

    def forget_in_child(self) -> None:
        """In a forked child: the ledger and the tally are the parent's."""
        if self.ledger is not None:
            self.ledger.forget_in_child()
        if self.tally is not None:
            self.tally.forget_in_child()

    def close(self) -> None:
        """Close the ledger; removed when drop records hold every drop. A tally stays (for
        the aggregator to report) unless drop records hold every drop."""
        ledger, self.ledger, self.next_ledger_ns = self.ledger, None, 0
        done = self.total == self.written and not self.pending
        if ledger is not None:  # nothing left to report: no need for the aggregator to look
            ledger.close(remove=done)
        tally, self.tally = self.tally, None
        if tally is not None:
            if done:
                tally.remove()
            else:
                tally.forget_in_child()  # closed: unlocked, the aggregator reports it
        self._making.clear()
