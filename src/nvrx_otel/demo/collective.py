"""Collectives among the demo's ranks, through files: no network, but the shape of a
real one.

Each collective has a sequence number; a rank arrives by creating
``<cycle dir>/<seq>/<rank>`` and leaves when all ``world_size`` ranks have arrived. While
it waits it logs a watchdog line every :data:`~nvrx_otel.demo.plan.HEARTBEAT_S` naming
the ranks it waits for, as NCCL's watchdog would, inside an open collective span.

The collective span is the demo workload's own span, not one of NVRx's: a training
script makes its spans through the OpenTelemetry API with names of its own, and they go
through the same spool as the helpers' spans.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from opentelemetry import trace

from nvrx_otel._version import __version__

TRACER: Final = "nvrx_otel.demo"
"""The instrumentation scope of the demo workload's own spans."""

COLLECTIVE_SPAN: Final = "demo.collective"
"""One collective call of a rank, from its arrival until every rank has arrived."""

COLLECTIVE_OP: Final = "demo.collective.op"
"""The collective's operation (``allreduce``, ``barrier``)."""

COLLECTIVE_SEQ: Final = "demo.collective.seq"
"""The collective's sequence number within the cycle (the same on every rank)."""

COLLECTIVE_WAITED: Final = "demo.collective.waited_s"
"""How long the rank waited for the others, in seconds."""

POLL_S: Final = 0.01


class Collectives:
    """The collectives of one rank in one cycle."""

    def __init__(
        self,
        directory: Path,
        rank: int,
        world_size: int,
        log: logging.Logger,
        *,
        heartbeat: float,
        on_wait: Callable[[str, int, list[int], float], None],
        check: Callable[[], None],
    ) -> None:
        self.directory = directory
        self.rank = rank
        self.world_size = world_size
        self.log = log
        self.heartbeat = heartbeat
        self.on_wait = on_wait
        self.check = check  # raises when the rank is told to stop
        self.seq = 0
        self._tracer = trace.get_tracer(TRACER, __version__)

    def __call__(self, op: str, *, step: int, hang: bool = False) -> None:
        """Run collective ``op`` of ``step``; with ``hang`` never come back (the rank is
        stuck: it ignores SIGTERM, as a process in a device call does). ``check`` is
        called at each look while waiting: what it raises ends the wait and the span."""
        self.seq += 1
        seq = self.seq
        attributes: dict[str, str | int] = {COLLECTIVE_OP: op, COLLECTIVE_SEQ: seq}
        with self._tracer.start_as_current_span(COLLECTIVE_SPAN, attributes=attributes) as span:
            meeting = self.directory / f"{seq:06d}"
            meeting.mkdir(parents=True, exist_ok=True)
            if hang:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                while True:  # stuck for good: only SIGKILL ends this process
                    time.sleep(3600)
            (meeting / str(self.rank)).touch()
            start = time.monotonic()
            next_beat = start + self.heartbeat
            while True:
                arrived = os.listdir(meeting)
                if len(arrived) >= self.world_size:
                    break
                now = time.monotonic()
                if now >= next_beat:
                    missing = sorted(set(range(self.world_size)) - {int(a) for a in arrived})
                    waited = now - start
                    self.log.warning(
                        "watchdog: waiting for %s in %s #%d at step %d for %.1f s",
                        _ranks(missing),
                        op,
                        seq,
                        step,
                        waited,
                    )
                    self.on_wait(op, step, missing, waited)
                    next_beat += self.heartbeat
                time.sleep(POLL_S)
                self.check()
            span.set_attribute(COLLECTIVE_WAITED, round(time.monotonic() - start, 3))


def _ranks(missing: list[int]) -> str:
    if len(missing) == 1:
        return f"rank {missing[0]}"
    return "ranks " + ",".join(map(str, missing))
