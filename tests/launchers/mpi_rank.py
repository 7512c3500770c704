"""A rank of a job under a real MPI launcher: says what the launcher gave it, then logs
through NVRx's ``setup_logger()`` inside spans.

    python -m tests.launchers.mpi_rank OUT_DIR RECORDS [FAIL_RANK linger|exit]

1. Writes ``OUT_DIR/seen.<pid>.json``: the launcher's variables as this process saw them
   (``OMPI_*``, ``PMIX_*``, ``PMI_*``, ``MPI_*``), so tests compare with what the launcher
   really exported rather than with what they expect it to.
2. Logs RECORDS records ``mpi record <i> of pid <pid>`` inside a ``cycle`` span and one in
   a ``schedule`` span inside it, then writes ``OUT_DIR/done.<pid>``.
3. With FAIL_RANK: the rank of that number waits until every rank is done (the world size
   from its identity), logs ``failing now of pid <pid>`` and exits 3. The others wait,
   inside an open ``fault`` span, until it failed; then with ``linger`` for the launcher
   to kill them (at most 120 s; a survivor logs ``not killed of pid <pid>`` and exits 0),
   with ``exit`` they exit 0.

Rank-program deadlines keep a broken launcher from hanging a test forever.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nvrx_otel.identity import get_identity
from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import CkptSpanKind, FtSpanKind
from nvrx_otel.tracing import checkpoint_span, ft_span, setup_tracing

LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "MPI_")
FAIL_CODE = 3


def _wait(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def main() -> None:
    out, records = Path(sys.argv[1]), int(sys.argv[2])
    fail_rank = int(sys.argv[3]) if len(sys.argv) > 3 else None
    after_failure = sys.argv[4] if len(sys.argv) > 4 else "exit"
    pid = os.getpid()
    seen = {k: v for k, v in os.environ.items() if k.startswith(LAUNCHER_PREFIXES)}
    (out / f"seen.{pid}.json").write_text(json.dumps({"pid": pid, "env": seen}))

    log = setup_logger()
    setup_tracing()
    me = get_identity()
    with ft_span(FtSpanKind.CYCLE, cycle=0):
        for i in range(records):
            log.info("mpi record %d of pid %d", i, pid)
        with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=1, iteration=records):
            log.warning("mpi checkpoint of pid %d", pid)
        (out / f"done.{pid}").touch()
        if fail_rank is None:
            return
        if me.workload_rank == fail_rank:
            size = me.world_size or 0
            _wait(lambda: len(list(out.glob("done.*"))) >= size, 120)
            log.error("failing now of pid %d", pid)
            (out / "failed").touch()
            sys.exit(FAIL_CODE)
        with ft_span(FtSpanKind.FAULT, cycle=0):
            _wait(lambda: (out / "failed").exists(), 120)
            if after_failure == "linger":
                time.sleep(120)  # the launcher is to kill this process now
                log.info("not killed of pid %d", pid)


if __name__ == "__main__":
    main()
