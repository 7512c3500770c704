"""A rank of a test job for the report: logs through ``setup_logger`` and traces through
the helpers as a workload would.

    python report_rank.py MODE STEPS DIR

Startup and import spans, then STEPS steps, each a ``step <i>`` record and a checkpoint
``write`` span (``MODE=slow``: ten times longer). Then by MODE:

- ``ok`` / ``slow``: exit 0.
- ``crash``: raise inside the ``run`` span, log the exception, exit 1 (with
  ``CRASH_AFTER_HANGS=N``: once N ranks wait in ``hang``).
- ``hang``: enter a ``completion_sync`` span and stay there, silent (until killed); it
  creates DIR/hang<RANK> once it waits (and its watcher, if any, has made its file).
- ``beat``: log ``waiting in allreduce`` every 50 ms until DIR/release exists; after 40
  of them create DIR/beat<RANK> (so the test knows the others went on).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import CkptSaveSpanKind, FtSpanKind
from nvrx_otel.tracing import checkpoint_span, ft_span, import_span, setup_tracing, startup_spans

log = setup_logger()
setup_tracing()
startup_spans().record()
with import_span():
    import json  # noqa: F401  (what a workload would import: torch, ...)

mode, steps, directory = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
rank = os.environ["RANK"]
cycle = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
write_s = 0.1 if mode == "slow" else 0.01

with ft_span(FtSpanKind.RUN, cycle=cycle):
    for i in range(steps):
        log.info("step %d", i)
        with checkpoint_span(CkptSaveSpanKind.WRITE, call_idx=i):
            time.sleep(write_s)  # the work the span measures (not a synchronisation)
    if mode == "crash":
        while len(list(directory.glob("hang*"))) < int(os.environ.get("CRASH_AFTER_HANGS", "0")):
            time.sleep(0.01)  # the others are to be waiting when this one fails
        try:
            raise RuntimeError(f"CUDA error on rank {rank}")
        except RuntimeError:
            log.exception("step %d failed", steps)
            raise SystemExit(1) from None
    if mode == "hang":
        with checkpoint_span(CkptSaveSpanKind.COMPLETION_SYNC, call_idx=steps):
            log.info("entering the completion barrier")
            if os.environ.get("NVRX_OTEL_CAPTURE_STACKS") == "on":  # its watcher is up
                spool = Path(os.environ["NVRX_NODE_LOCAL_TMPDIR"])
                while not list(spool.glob(f"*/rank{rank}-watch.*")):
                    time.sleep(0.01)
            (directory / f"hang{rank}").touch()
            while True:
                time.sleep(1)  # hung in a collective: killed by the test
    if mode == "beat":
        beats = 0
        while not (directory / "release").exists():
            log.warning("waiting in allreduce")
            beats += 1
            if beats == 40:
                (directory / f"beat{rank}").touch()
            time.sleep(0.05)  # the heartbeat's period
