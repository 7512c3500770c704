"""The ``nvrx-otel demo`` command: arguments, the run, and what it prints at the end."""

from __future__ import annotations

import argparse
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nvrx_otel import command
from nvrx_otel.demo import events
from nvrx_otel.demo.nodes import DRAIN_TIMEOUT_S, Aggregators
from nvrx_otel.demo.plan import Plan, PlanError, make_plan
from nvrx_otel.demo.progress import Display, JobState
from nvrx_otel.demo.report import print_report

if TYPE_CHECKING:
    from rich.console import Console

PROG = "nvrx-otel demo"
EXAMPLE = """\
example:
  nvrx-otel demo                                 # 2 nodes x 4 ranks, 20 steps
  nvrx-otel demo --fail-rank 5 --out /tmp/run1   # rank 5 fails, the job restarts once
  nvrx-otel demo --hang-rank 2                   # rank 2 hangs in an allreduce

Exit status: 0 when the job finished (also after a restart), 1 when it failed (a hang
is never restarted), 2 for bad options. Everything it wrote is under --out.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=2, metavar="N", help="simulated nodes (2)")
    parser.add_argument(
        "--ranks-per-node", type=int, default=4, metavar="M", help="ranks per node (4)"
    )
    parser.add_argument("--steps", type=int, default=20, metavar="S", help="training steps (20)")
    parser.add_argument(
        "--fail-rank",
        type=int,
        metavar="R",
        help="rank R raises an exception in cycle 0; the launcher restarts the job once",
    )
    parser.add_argument(
        "--hang-rank",
        type=int,
        metavar="R",
        help="rank R never leaves an allreduce; the launcher's watchdog kills the job",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where to write (a new or empty directory; default ./nvrx-otel-demo/<time>)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also export over OTLP to this collector (default: files under DIR only)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


DESCRIPTION = (
    "A simulated training job on this machine, with real processes: an aggregator per "
    "node, a launcher with restart cycles, ranks that log through the stdlib and loguru "
    "and trace checkpoints and collectives. No collector or server is needed."
)


def console() -> Console:
    from rich.console import Console

    found = Console()
    if not found.is_terminal:
        found = Console(width=max(found.width, 120))
    return found


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed arguments; returns the exit status."""
    try:
        plan = make_plan(
            nodes=args.nodes,
            ranks_per_node=args.ranks_per_node,
            steps=args.steps,
            fail_rank=args.fail_rank,
            hang_rank=args.hang_rank,
            out=args.out,
            otlp_endpoint=args.otlp_endpoint,
        )
        for directory in (plan.root, plan.log_dir, plan.otlp_dir, plan.stderr_dir):
            directory.mkdir(parents=True, exist_ok=True)
    except (PlanError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return Demo(plan, console()).run()


def _kill_group(pgid: int) -> None:
    """SIGKILL what is left of the launcher's process group (ranks of a launcher that
    died): nothing the demo started outlives it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Demo:
    def __init__(self, plan: Plan, out: Console) -> None:
        self.plan = plan
        self.console = out
        self.aggregators = Aggregators(plan)
        self.state = JobState(plan)

    def run(self) -> int:
        plan = self.plan
        self.console.print(
            f"{PROG}: writing to {plan.root}", markup=False, highlight=False, soft_wrap=True
        )
        self.aggregators.start()
        code = 1
        interrupted = False
        with Display(self.state, self.console) as display:
            try:
                code = self._job(display)
            except KeyboardInterrupt:
                interrupted = True
            try:
                self._drain(display)
            except KeyboardInterrupt:  # again: stop waiting (they drain on their own)
                interrupted = True
        shutil.rmtree(self.plan.collective_dir, ignore_errors=True)  # the ranks' scratch
        return self._finish(code, interrupted)

    def _drain(self, display: Display) -> None:
        """Tell the aggregators to drain and wait until they have exited."""
        self.state.phase = "draining the aggregators"
        self.aggregators.tell_drain()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S + 20
        while self.aggregators.running() and time.monotonic() < deadline:
            display.nodes(self.aggregators.status())
            display.refresh()
            time.sleep(0.2)
        self.aggregators.wait(timeout=max(deadline - time.monotonic(), 1.0))
        display.nodes(self.aggregators.status())
        self.state.phase = "done"

    def _job(self, display: Display) -> int:
        plan = self.plan
        with (plan.stderr_dir / "launcher.txt").open("ab") as err:
            launcher = subprocess.Popen(
                [sys.executable, "-m", "nvrx_otel.demo.launcher", plan.to_json()],
                env=plan.node_env(0),
                cwd=plan.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # its ranks too: what outlives it is killed below
            )
        assert launcher.stdout is not None
        stream = launcher.stdout
        os.set_blocking(stream.fileno(), False)
        buffer = events.LineBuffer()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(stream, selectors.EVENT_READ)
                last_status = 0.0
                while True:
                    ready = selector.select(0.125)
                    data = os.read(stream.fileno(), 65536) if ready else b""
                    if ready and not data:
                        break  # the launcher has gone
                    for line in buffer.feed(data):
                        event = events.decode(line)
                        if event is not None:
                            display.event(event)
                    if time.monotonic() - last_status > 0.5:
                        display.nodes(self.aggregators.status())
                        last_status = time.monotonic()
                    display.refresh()
            return launcher.wait()
        except BaseException:
            if launcher.poll() is None:
                launcher.send_signal(signal.SIGINT)  # it stops its ranks, then exits
                try:
                    launcher.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    launcher.kill()
            raise
        finally:
            stream.close()
            _kill_group(launcher.pid)

    def _finish(self, code: int, interrupted: bool) -> int:
        plan = self.plan
        out = self.console
        failures = self.aggregators.failures()
        for line in failures:
            print(f"{PROG}: {line}", file=sys.stderr)
        if interrupted:
            outcome = "interrupted"
        elif self.state.outcome:
            outcome = self.state.outcome
        else:
            launcher_err = plan.stderr_dir / "launcher.txt"
            outcome = f"the launcher exited with status {code} (its stderr: {launcher_err})"
        took = self.state.elapsed()
        out.print(f"{PROG}: {outcome} ({took:.1f} s)", markup=False, highlight=False)
        print_report(plan.root)
        out.print("wrote:", markup=False, highlight=False)
        for label, path in self._outputs():
            out.print(f"  {label:<22} {path}", markup=False, highlight=False, soft_wrap=True)
        out.print(
            f"read them with: {command.line('logs', str(plan.log_dir))}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        otlp = plan.root / "otlp"
        out.print(
            "picture them:   "
            + command.line(
                "report",
                str(otlp),
                "--html",
                str(plan.root / "report.html"),
                "--perfetto",
                str(plan.root / "trace.json"),
            ),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if interrupted:
            return 130
        if failures:
            return 1
        return code

    def _outputs(self) -> list[tuple[str, Path]]:
        plan = self.plan
        found: list[tuple[str, Path]] = []
        for label, pattern, where in (
            ("node log", "nvrx_log_*.log", plan.log_dir),
            ("OTLP/JSON logs", "logs_*.jsonl", plan.otlp_dir),
            ("OTLP/JSON spans", "traces_*.jsonl", plan.otlp_dir),
            ("OTLP/JSON metrics", "metrics_*.jsonl", plan.otlp_dir),
        ):
            found += [(label, p) for p in sorted(where.glob(pattern))]
        found += [
            ("loguru run files", plan.run_file_dir),
            ("stderr of each process", plan.stderr_dir),
        ]
        return found
