"""A rank of a test job for the log view: logs through ``setup_logger`` as a workload
would.

    python view_rank.py STEPS

Each step logs ``rank <r> step <i>`` and ``all ranks at step <i>`` (the same text on every
rank); then a two-line warning, and an exception inside a span.
"""

from __future__ import annotations

import os
import sys
import time

from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import FtSpanKind
from nvrx_otel.tracing import ft_span, setup_tracing

steps = int(sys.argv[1])
rank = os.environ["RANK"]
log = setup_logger()
setup_tracing()
for i in range(steps):
    log.info("rank %s step %d", rank, i)
    log.info("all ranks at step %d", i)
    time.sleep(0.002)  # spreads the records of the ranks over time (not a synchronisation)
log.warning("rank %s saw two\nlines", rank)
with ft_span(FtSpanKind.CYCLE, cycle=0):
    try:
        raise ValueError(f"bad batch on rank {rank}")
    except ValueError:
        log.exception("step failed")
