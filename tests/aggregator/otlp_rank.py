"""A rank of a test job: logs with the stdlib front end inside spans of the helpers.

    python otlp_rank.py RECORDS MODE     MODE: normal | die_in_span | fork

Prints "ready" once it has logged everything it will log before the end of MODE
(``die_in_span`` then waits inside an open span to be killed).
"""

from __future__ import annotations

import os
import sys
import time

from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import CkptSpanKind, FtSpanKind
from nvrx_otel.tracing import checkpoint_span, ft_span, setup_tracing

records = int(sys.argv[1])
mode = sys.argv[2]
log = setup_logger()
setup_tracing()

with ft_span(FtSpanKind.CYCLE, cycle=0):
    for i in range(records):
        log.info("step %d of rank %s", i, os.environ.get("RANK"))
    with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=1, iteration=records):
        log.warning("checkpoint scheduled")
    if mode == "fork":
        pid = os.fork()
        if pid == 0:
            log.info("from the forked child")
            with ft_span(FtSpanKind.HEALTH_CHECK, cycle=0):
                log.info("child inside its own span")
            os._exit(0)
        os.waitpid(pid, 0)
    if mode == "die_in_span":
        with ft_span(FtSpanKind.FAULT, cycle=0):
            log.error("about to die inside the fault span")
            print("ready", flush=True)
            time.sleep(600)
print("ready", flush=True)
