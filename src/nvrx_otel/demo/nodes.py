"""The demo's node aggregators: one ``nvrx-otel aggregate`` process per simulated node,
started before the job and drained through its wait file after it (docs/node-log.md, "The
aggregator"), with its status lines read back for the progress display."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvrx_otel import env
from nvrx_otel.demo.plan import Plan

STATUS_INTERVAL_S: Final = 1.0
"""How often the demo's aggregators write their status line (lag, backlog)."""

HOLD_WINDOW_MS: Final = 500
"""How long chronological ordering holds a record (``NVRX_OTEL_HOLD_WINDOW_MS``): the
demo's nodes share one clock, so less than the default 2 s keeps the display's lag low."""

DRAIN_TIMEOUT_S: Final = 10.0
"""The aggregators' ``--drain-timeout``: every writer has exited when they are told to
drain, so this only bounds a drain that goes wrong."""

_STATUS: Final = re.compile(
    r"status: lag (?P<lag>[\d.]+) s, backlog (?P<backlog>[^,]+), (?P<rate>\d+) records/s, "
    r"(?P<written>\d+) written"
)
_SUMMARY: Final = re.compile(r"stopped \(.*?\) after [\d.]+ s: wrote (?P<written>\d+) record")


@dataclass
class NodeStatus:
    """What a node's aggregator said last."""

    lag: float | None = None
    backlog: str = ""
    written: int | None = None
    code: int | None = None  # its exit status once it has exited


class Aggregators:
    """The aggregator processes of a plan's nodes."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.procs: list[subprocess.Popen[bytes]] = []

    def stderr_path(self, node: int) -> Path:
        return self.plan.stderr_dir / f"aggregator-{self.plan.node_name(node)}.txt"

    def start(self) -> None:
        plan = self.plan
        for node in range(plan.nodes):
            environ = plan.node_env(node)
            environ.update(
                {
                    env.NVRX_OTEL_STATUS_INTERVAL_S: str(STATUS_INTERVAL_S),
                    env.NVRX_OTEL_HOLD_WINDOW_MS: str(HOLD_WINDOW_MS),
                }
            )
            args = [
                sys.executable, "-m", "nvrx_otel.logging.aggregator",
                "--log-dir", str(plan.log_dir),
                "--wait-file", str(plan.wait_file(node)),
                "--spool-dir", str(plan.spool_root(node)),
                "--job-id", plan.job_id,
                "--otlp-json", str(plan.otlp_dir),
                "--check-interval", "0.2",
                "--en-chronological-ordering",
                "--drain-timeout", str(DRAIN_TIMEOUT_S),
            ]  # fmt: skip
            if plan.otlp_endpoint is not None:
                args += ["--otlp-endpoint", plan.otlp_endpoint]
            with self.stderr_path(node).open("ab") as err:
                self.procs.append(
                    subprocess.Popen(
                        args,
                        env=environ,
                        cwd=plan.root,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,  # Ctrl-C is the command's: it drains them
                    )
                )

    def status(self) -> list[NodeStatus]:
        """Each node's last status line (and summary, once it has stopped)."""
        found = []
        for node, proc in enumerate(self.procs):
            status = NodeStatus(code=proc.poll())
            try:
                text = self.stderr_path(node).read_text(errors="replace")
            except OSError:
                text = ""
            for match in _STATUS.finditer(text):
                status.lag = float(match["lag"])
                status.backlog = match["backlog"]
                status.written = int(match["written"])
            summary = _SUMMARY.search(text)
            if summary is not None:
                status.lag, status.backlog = 0.0, "0 B"
                status.written = int(summary["written"])
            found.append(status)
        return found

    def tell_drain(self) -> None:
        """Make every node's wait file: each aggregator drains and exits."""
        for node in range(self.plan.nodes):
            self.plan.wait_file(node).touch()

    def running(self) -> bool:
        return any(proc.poll() is None for proc in self.procs)

    def wait(self, timeout: float) -> list[int | None]:
        """Wait up to ``timeout`` s for every aggregator; their exit statuses (None for
        one still running, which is then stopped with SIGTERM: it drains what it can)."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.terminate()
        return [proc.poll() for proc in self.procs]

    def failures(self) -> list[str]:
        """One line for each aggregator that did not exit 0, with its last stderr line."""
        lines = []
        for node, proc in enumerate(self.procs):
            code = proc.poll()
            if code == 0:
                continue
            try:
                tail = self.stderr_path(node).read_text(errors="replace").strip().splitlines()
            except OSError:
                tail = []
            last = tail[-1] if tail else "(nothing on stderr)"
            state = "still running" if code is None else f"exited {code}"
            lines.append(f"the aggregator of {self.plan.node_name(node)} {state}: {last}")
        return lines
