"""A task of the Slurm recipe's workload: ``python slurm_rank.py OUT MODE [COUNT]``.

It writes what Slurm exported to it (``OUT/env-<SLURM_JOB_ID>-<SLURM_PROCID>.json``), then:

  normal COUNT   logs ``t<procid>-<i>`` for i < COUNT inside a span, then exits 0.
  fail CODE      exits with CODE at once, logging nothing.
  until_term     logs ``t<procid>-<i>`` until SIGTERM (or SIGUSR1, Slurm's usual warning
                 signal before a time limit: a training job checkpoints and leaves on it),
                 then writes how many it logged to ``OUT/count-<job>-<procid>`` and exits
                 143, as an unhandled SIGTERM would.
  first_fails S  task 0 logs 100 records and exits 1; the others log one record every
                 50 ms for S seconds (the ranks left hanging after a peer crashed), then
                 exit 0. Each writes how many it logged to ``OUT/count-<job>-<procid>``.

It also writes ``OUT/end-<job>-<procid>`` (the wall-clock end, in seconds) as it leaves.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    job, procid = os.environ["SLURM_JOB_ID"], os.environ["SLURM_PROCID"]
    tag = f"{job}-{procid}"
    seen = {k: v for k, v in os.environ.items() if k.startswith(("SLURM", "PMI", "NVRX"))}
    (out / f"env-{tag}.json").write_text(json.dumps(seen))
    if mode == "fail":
        return int(sys.argv[3])

    from opentelemetry import trace

    from nvrx_otel.logging import setup_logger
    from nvrx_otel.tracing import setup_tracing

    log = setup_logger()
    setup_tracing()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
    count = int(sys.argv[3]) if mode == "normal" else sys.maxsize
    if mode == "first_fails" and procid == "0":
        count = 100
    deadline = time.monotonic() + (float(sys.argv[3]) if mode == "first_fails" else 1e9)
    logged = 0
    with trace.get_tracer("slurm_rank").start_as_current_span("work"):
        while logged < count and not stop and time.monotonic() < deadline:
            log.info("t%s-%d", procid, logged)
            logged += 1
            if mode == "until_term" and logged % 200 == 0:
                time.sleep(0.01)
            if mode == "first_fails" and procid != "0":
                time.sleep(0.05)
    (out / f"end-{tag}").write_text(repr(time.time()))
    if mode in ("until_term", "first_fails"):
        (out / f"count-{tag}").write_text(str(logged))
    if mode == "first_fails":
        return 1 if procid == "0" else 0
    return 143 if mode == "until_term" else 0


if __name__ == "__main__":
    sys.exit(main())
