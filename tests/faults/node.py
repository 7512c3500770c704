"""A node of a fault scenario: a spool root, ranks as real processes and the real
aggregator CLI as a subprocess that can be killed and restarted."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.aggregator.spoolkit import NO_WATCHER, wait_for
from tests.conftest import spawn

ROOT = Path(__file__).resolve().parents[2]
NODE = "faultnode"


class Node:
    """One node: ``tmp/spool`` (the spool root), ``tmp/logs`` (the node log)."""

    def __init__(self, tmp: Path, **env: str) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.spool = tmp / "spool"
        self.wait_file = tmp / "done"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM", "NVRX", "RANK", "LOCAL_RANK", "OTEL_"))
        }
        self.env.update(NVRX_NODE_LOCAL_TMPDIR=str(self.spool), NVRX_OTEL_NODE_ID=NODE)
        self.env.update(NO_WATCHER)
        self.env["PYTHONPATH"] = str(ROOT)
        self.env.update(env)
        self.agg: subprocess.Popen[str] | None = None
        self.runs = 0

    @property
    def log_path(self) -> Path:
        return self.tmp / "logs" / f"nvrx_log_{NODE}.log"

    @property
    def job_dir(self) -> Path:
        return self.spool / "nojob"

    def rank(self, rank: int, tag: str, count: int, mode: str = "burst", arg: int = 0,
             **env: str) -> subprocess.Popen[str]:  # fmt: skip
        """Start a rank process (``tests/faults/rank.py``)."""
        full = dict(self.env, RANK=str(rank), LOCAL_RANK=str(rank), **env)
        argv = [sys.executable, "-m", "tests.faults.rank", tag, str(count), mode, str(arg)]
        return spawn(argv, env=full, cwd=ROOT, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True)  # fmt: skip

    def start(
        self,
        *args: str,
        check_interval: float = 0.05,
        max_fds: int | None = None,
        wrap: tuple[str, ...] = (),
    ) -> subprocess.Popen[str]:
        """Start the aggregator CLI (behind the command ``wrap``, if any) and wait until it
        is aggregating."""
        assert self.agg is None or self.agg.poll() is not None
        self.runs += 1
        err = (self.tmp / f"aggregator-{self.runs}.err").open("w")
        argv = [*wrap, sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir",
                str(self.tmp / "logs"), "--wait-file", str(self.wait_file), "--nice", "0",
                "--check-interval", str(check_interval), *args]  # fmt: skip
        limit = None if max_fds is None else _fd_limit(max_fds)
        self.agg = spawn(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                         preexec_fn=limit)  # fmt: skip
        err.close()
        agg = self.agg

        def ready() -> bool:
            assert agg.poll() is None, f"aggregator exited early: {self.err()}"
            return ": aggregating " in self.err()

        wait_for(ready, timeout=60, what="aggregator start")
        return agg

    def err(self) -> str:
        return (self.tmp / f"aggregator-{self.runs}.err").read_text()

    def kill9(self) -> None:
        assert self.agg is not None
        self.agg.send_signal(signal.SIGKILL)
        self.agg.wait(timeout=30)

    def stop(self, timeout: float = 120) -> tuple[int, str]:
        """Touch the wait file; the aggregator's exit code and stderr once it drained."""
        assert self.agg is not None
        self.wait_file.touch()
        try:
            self.agg.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.agg.kill()
            self.agg.wait()
            raise AssertionError(f"aggregator did not exit in {timeout} s: {self.err()}") from None
        return self.agg.returncode, self.err()

    def node_log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0


def _fd_limit(n: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return limit


def started_logging(node: Node, procs: list[subprocess.Popen[str]]) -> bool:
    """Every rank has made its spool file (it logs) or has already exited."""
    names = [p.name for p in node.job_dir.glob("*.jsonl")] if node.job_dir.is_dir() else []
    return all(p.poll() is not None or any(f".p{p.pid}." in n for n in names) for p in procs)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> int:
    """Wait for a rank; its exit code (stderr is shown when it failed unexpectedly)."""
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"rank failed ({proc.returncode}): {err}")
    return proc.returncode
