"""Helpers for watcher tests: a rank script run as a real process, its records."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.aggregator.spoolkit import process_env, wait_for
from tests.conftest import log_records, spawn

PRELUDE = """\
import ctypes, faulthandler, os, signal, sys, threading, time
from nvrx_otel.logging import setup_logger
"""


@dataclass
class Run:
    tmp: Path
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    @property
    def spool(self) -> Path:
        return self.tmp / "spool"

    def records(self) -> list[dict[str, Any]]:
        return log_records(self.spool) if self.spool.exists() else []

    def ending(self, timeout: float = 30) -> dict[str, Any]:
        """The watcher's record of how the rank ended (waits for it)."""

        def find() -> dict[str, Any] | None:
            for r in self.records():
                if "nv.nvrx.process.outcome" in r.get("attrs", {}):
                    return r
            return None

        found: dict[str, Any] = wait_for(find, timeout, "the ending record")
        return found

    def watcher_done(self, timeout: float = 30) -> None:
        """Wait until the watcher closed its spool file (it exited)."""
        self.ending(timeout)
        wait_for(lambda: not _watchers_alive(self.proc.pid), timeout, "the watcher to exit")

    def captured(self, stream: str) -> list[str]:
        """The captured lines of ``stream``, once the watcher is done (it records a line
        left without its newline when the stream closes, which may be after the end)."""
        if self.proc.poll() is not None:
            self.watcher_done()
        return [
            r["msg"] for r in self.records() if r.get("attrs", {}).get("log.iostream") == stream
        ]


def watcher_pids(pids: set[int]) -> list[int]:
    """The live watchers of the ranks ``pids``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if b"nvrx_otel.watch.watcher" in cmd and any(f'"pid":{p},'.encode() in env for p in pids):
            found.append(int(entry))
    return found


def _watchers_alive(pid: int) -> bool:
    return bool(watcher_pids({pid}))


def start(tmp: Path, body: str, *, name: str = "rank", stdin: Any = None, **env: str) -> Run:
    """Run ``body`` (after :data:`PRELUDE`) as rank 0 with its stdout and stderr in files."""
    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / f"{name}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    out, err = tmp / f"{name}.out", tmp / f"{name}.err"
    watched = {"NVRX_OTEL_CAPTURE_OUTPUT": "auto", "NVRX_OTEL_CAPTURE_STACKS": "on", **env}
    full = process_env(tmp, "testnode", RANK="0", SLURM_JOB_ID="job1", **watched)
    with out.open("wb") as o, err.open("wb") as e:
        proc = spawn([sys.executable, str(script)], stdout=o, stderr=e, env=full, cwd=tmp,
                     stdin=stdin if stdin is not None else subprocess.DEVNULL)  # fmt: skip
    return Run(tmp, proc, out, err)


def run(tmp: Path, body: str, **env: str) -> Run:
    r = start(tmp, body, **env)
    r.wait()
    return r
