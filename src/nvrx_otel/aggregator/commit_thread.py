"""A commit's durable part on a thread of its own: the node log's fsync, then the state file.

The loop makes a commit's state document (``Progress._begin_commit``: every file's
position, the node log's length, every sink's cursors, encoded there and then) and hands it
here with a duplicate of the node log's descriptor (the loop may rotate or reopen the node
log meanwhile). This thread fsyncs the node log, and only once that returned replaces the
state file durably (``StateStore.write``). The commit takes effect back on the loop's
thread (``Progress._end_commit``: cursors moved, consumed spool files and ledgers deleted),
only after both. Meanwhile the loop reads and writes on: an fsync that waits for a busy
disk's journal holds no record back from the node log. A crash at any point leaves the
previous commit's state or this one's, and the node log holds at least what either says.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from nvrx_otel.aggregator.state import StateStore


def fsync_node_log(fd: int) -> None:
    """The node log's fsync (a seam for tests that make it slow or fail)."""
    os.fsync(fd)


class CommitThread:
    """One commit's fsync and state write, started at once; ``wake`` is called when done."""

    def __init__(self, fd: int, data: bytes, store: StateStore, wake: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(fd, data, store, wake), name="nvrx-otel-commit", daemon=True
        )
        self._thread.start()

    def _run(self, fd: int, data: bytes, store: StateStore, wake: Callable[[], None]) -> None:
        try:
            try:
                fsync_node_log(fd)
            finally:
                os.close(fd)
            store.write(data)  # only after the node log holds what the state says
        except BaseException as exc:  # to the loop, which handles it as its own commit's
            self.error = exc
        finally:
            wake()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> BaseException | None:
        """Wait for the commit to end; what it raised (None when it is durable)."""
        self._thread.join()
        return self.error
