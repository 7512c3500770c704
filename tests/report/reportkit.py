"""A test job for the report made through the real path: ranks with ``setup_logger`` and
the tracing helpers spooling, one aggregator per node writing ``--otlp-json``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.aggregator.spoolkit import process_env
from tests.conftest import spawn

RANK_SCRIPT = Path(__file__).with_name("report_rank.py")


class Node:
    """One node: its aggregator (spool under ``tmp/<node>``, OTLP/JSON into ``tmp/otlp``)
    and the ranks started with :meth:`rank`."""

    def __init__(self, tmp: Path, node: str) -> None:
        self.tmp = tmp
        self.done = tmp / node / "done"
        self.done.parent.mkdir(parents=True, exist_ok=True)
        self.env = process_env(tmp / node, node, SLURM_JOB_ID="job1")
        self.agg = spawn(
            [
                sys.executable, "-m", "nvrx_otel.logging.aggregator",
                "--log-dir", str(tmp / "logs"),
                "--wait-file", str(self.done),
                "--check-interval", "0.05",
                "--drain-timeout", "60",
                "--job-id", "job1",
                "--otlp-json", str(tmp / "otlp"),
            ],
            env=self.env,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        self.ranks: list[subprocess.Popen[Any]] = []

    def rank(
        self, rank: int, mode: str, steps: int, cycle: int = 0, *, watched: bool = False
    ) -> subprocess.Popen[Any]:
        """Start a rank; ``watched``: with its watcher (its stacks and its end recorded)."""
        env = {**self.env, "RANK": str(rank), "TORCHELASTIC_RESTART_COUNT": str(cycle)}
        if watched:
            env.update(NVRX_OTEL_CAPTURE_OUTPUT="auto", NVRX_OTEL_CAPTURE_STACKS="on")
        p = spawn([sys.executable, str(RANK_SCRIPT), mode, str(steps), str(self.tmp)], env=env)
        self.ranks.append(p)
        return p

    def finish(self) -> None:
        """Let the aggregator drain (the ranks have ended) and exit."""
        self.done.touch()
        _, err = self.agg.communicate(timeout=120)
        assert self.agg.returncode == 0, err.decode()
