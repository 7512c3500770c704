"""A rank of the end-to-end job: stdlib logging inside the span helpers' spans.

    python job_rank.py RECORDS MODE [GATE [STEP_S]]

MODE ``aggregator``: ``setup_tracing()`` puts the spans into the spool beside the logs (the
node's aggregator exports both). MODE ``filelog``: the logs go to the spool (the agent
tails it) and, with ``NVRX_OTEL_SPOOL_SPANS=0``, ``setup_tracing()`` sends the spans to
the agent over OTLP/HTTP (``OTEL_EXPORTER_OTLP_ENDPOINT``) through the SDK path.

Two restart cycles, each a cycle span holding RECORDS // 2 "step" records and a checkpoint
span holding one "checkpoint" record: RECORDS + 2 records and 4 spans per rank. With GATE
the rank prints "half" after the first cycle and waits until the file GATE exists; with
STEP_S it then logs one step of the second cycle every STEP_S seconds (a stream that lasts,
for faults injected while it flows).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import CkptSpanKind, FtSpanKind
from nvrx_otel.tracing import checkpoint_span, ft_span, setup_tracing

records = int(sys.argv[1])
mode = sys.argv[2]
gate = Path(sys.argv[3]) if len(sys.argv) > 3 else None
step_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
rank = os.environ["RANK"]
log = setup_logger()
if mode == "filelog":
    os.environ["NVRX_OTEL_SPOOL_SPANS"] = "0"  # spans over OTLP; the agent tails only logs
provider = setup_tracing()

half = records // 2
for cycle, steps in enumerate((range(half), range(half, records))):
    with ft_span(FtSpanKind.CYCLE, cycle=cycle):
        for i in steps:
            log.info("step %d of rank %s", i, rank)
            if cycle == 1 and step_s:
                time.sleep(step_s)  # pacing the stream, not waiting for anything
        with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=cycle + 1, iteration=steps.stop):
            log.warning("checkpoint %d of rank %s", cycle, rank)
    if cycle == 0 and gate is not None:
        print("half", flush=True)
        while not gate.exists():
            time.sleep(0.05)
provider.force_flush()  # type: ignore[attr-defined]  # spans still in a batch processor
print("done", flush=True)
