"""When this process started, as the kernel recorded it."""

from __future__ import annotations

import os
import time
from typing import Final

TICK_NS: Final = 10_000_000
"""The start time's resolution: one clock tick (``SC_CLK_TCK`` is 100 on Linux)."""


def process_start_ns(stat_path: str = "/proc/self/stat") -> int | None:
    """When this process started, in ns since the epoch, from the OS; None if unknown.

    Linux gives the start in clock ticks since boot (field 22 of ``/proc/<pid>/stat``);
    it is turned into wall-clock time through ``CLOCK_BOOTTIME``, the clock it counts
    in, so the result is good to one tick (rounded down).
    """
    try:
        with open(stat_path, "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces and ")"
        start_ticks = int(fields[19])  # field 22; fields[0] is field 3 (state)
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        since_boot_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        now_ns = time.time_ns()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return now_ns - (since_boot_ns - start_ticks * 1_000_000_000 // ticks_per_s)
