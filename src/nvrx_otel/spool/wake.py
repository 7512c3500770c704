"""Waking the node's aggregator from a writer under budget pressure.

The aggregator of a job directory makes the FIFO ``.nvrx_aggregator.wake`` there and
waits on it between its scans. A writer pokes it (open, one byte, close) when a rotation
takes it past half its budget or when it starts dropping, so the aggregator consumes the
files now instead of at its next check interval. Both ends are non-blocking: with no
aggregator listening the open fails (``ENXIO``), with the FIFO full the write fails
(``EAGAIN``), and either is simply ignored.
"""

from __future__ import annotations

import os
import stat
from typing import Final

from nvrx_otel.spool.paths import WAKE_NAME

_FLAGS: Final = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def poke(dir_fd: int) -> bool:
    """Wake the aggregator of the directory open as ``dir_fd`` if one listens; True when
    the byte went in. Anything but a FIFO under that name (never made by the aggregator)
    is left alone."""
    try:
        fd = os.open(WAKE_NAME, _FLAGS, dir_fd=dir_fd)
    except OSError:  # no aggregator (ENXIO: no reader; ENOENT: no FIFO)
        return False
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        os.write(fd, b"w")
        return True
    except OSError:  # full: it is being woken already
        return False
    finally:
        os.close(fd)
