"""When the aggregator stops: the drain's reason and deadline.

A drain the wait file started follows live writers: it ends ``timeout`` seconds after the
last record read (a node's other tasks may outlive the one that made the wait file, and
what they log is what one needs), or once no writer is left. Any other reason (a signal,
``shutdown``), also one during such a drain, sets a fixed deadline ``timeout`` from then:
Slurm's SIGKILL follows its SIGTERM ``KillWait`` seconds later.
"""

from __future__ import annotations

import time
from typing import Final

WAIT_FILE_REASON: Final = "wait file"
"""The stop reason of a drain the wait file started."""
RETELL_S: Final = 0.5
"""The sinks are told a following drain's deadline again once it moved on this far."""


class Drain:
    """The reason and deadline (monotonic) of the drain; no drain until :meth:`request`."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.reason: str | None = None
        self.deadline = float("inf")
        self.follow = False  # the deadline moves on while records are read
        self._told = 0.0  # the deadline the sinks were last given

    def request(self, reason: str) -> None:
        """Begin the drain, or bound a following one (safe from a signal handler)."""
        now = time.monotonic()
        if self.reason is None:
            self.reason = reason
            self.follow = reason == WAIT_FILE_REASON
            self.deadline = now + self.timeout
        elif self.follow and reason != WAIT_FILE_REASON:
            self.follow = False
            self.deadline = min(self.deadline, now + self.timeout)

    def read_on(self, now: float) -> None:
        """Records were read at ``now``: a following drain goes on."""
        if self.follow:
            self.deadline = max(self.deadline, now + self.timeout)

    def retell(self) -> bool:
        """Whether the sinks are to be given the deadline (again): once the drain began,
        then whenever it came sooner or a following drain moved it on."""
        if self.reason is None or self._told <= self.deadline < self._told + RETELL_S:
            return False
        self._told = self.deadline
        return True

    def bound(self) -> str:
        """How the drain is bounded, for people."""
        when = "after the last record read" if self.follow else "at most"
        return f"{when} {self.timeout:g} s"
