"""A launcher as torchrun behaves, for ``nvrx-otel run``'s tests, without torch:

    python run_launcher.py DIR MODE [MODE ...]

starts one rank per MODE (``tests/report/report_rank.py MODE 3 DIR``) with RANK,
WORLD_SIZE and a rendezvous id of its own choosing (TORCHELASTIC_RUN_ID, random as under
``torchrun --standalone``); when a rank fails it stops the others with SIGTERM and exits 1;
on SIGTERM it passes it on, waits for the ranks and exits 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

RANK_SCRIPT = Path(__file__).with_name("report") / "report_rank.py"

directory, modes = sys.argv[1], sys.argv[2:]
run_id = uuid.uuid4().hex
ranks = [
    subprocess.Popen(
        [sys.executable, str(RANK_SCRIPT), mode, "3", directory],
        env={
            **os.environ,
            "RANK": str(i),
            "WORLD_SIZE": str(len(modes)),
            "TORCHELASTIC_RUN_ID": run_id,
        },
    )
    for i, mode in enumerate(modes)
]
stopping = False


def stop(signum: int, frame: object) -> None:
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
code = 0
while not stopping:
    states = [r.poll() for r in ranks]
    if any(s not in (None, 0) for s in states):
        code = 1
        break
    if all(s == 0 for s in states):
        break
    time.sleep(0.05)  # torchrun's monitor interval
for r in ranks:
    if r.poll() is None:
        r.send_signal(signal.SIGTERM)
for r in ranks:
    r.wait()
sys.exit(143 if stopping else code)
