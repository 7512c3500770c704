"""A rank of the end-to-end job: stdlib logging inside the span helpers' spans.

    python job_rank.py RECORDS MODE [GATE]

MODE ``aggregator``: ``setup_tracing()`` puts the spans into the spool beside the logs (the
node's aggregator exports both). MODE ``filelog``: the logs go to the spool (the agent
tails it) and the spans to the agent over OTLP/HTTP through the OpenTelemetry SDK
(``OTEL_EXPORTER_OTLP_ENDPOINT``), installed globally so that the helpers use it:
``setup_tracing()`` writes spans into the spool whenever a spool is configured.

Two restart cycles, each a cycle span holding RECORDS // 2 "step" records and a checkpoint
span holding one "checkpoint" record: RECORDS + 2 records and 4 spans per rank. With GATE
the rank prints "half" after the first cycle and waits until the file GATE exists.
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
rank = os.environ["RANK"]
log = setup_logger()
sdk_provider = None
if mode == "filelog":
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from nvrx_otel.identity import get_identity

    sdk_provider = TracerProvider(resource=get_identity().resource())
    sdk_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(sdk_provider)
else:
    setup_tracing()

half = records // 2
for cycle, steps in enumerate((range(half), range(half, records))):
    with ft_span(FtSpanKind.CYCLE, cycle=cycle):
        for i in steps:
            log.info("step %d of rank %s", i, rank)
        with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=cycle + 1, iteration=steps.stop):
            log.warning("checkpoint %d of rank %s", cycle, rank)
    if cycle == 0 and gate is not None:
        print("half", flush=True)
        while not gate.exists():
            time.sleep(0.05)
if sdk_provider is not None:
    sdk_provider.shutdown()  # exports the spans still in the batch processor
print("done", flush=True)
