"""The demo's launcher: ``python -m nvrx_otel.demo.launcher PLAN_JSON``.

It plays torchrun (with NVRx's fault tolerance) for the whole job, as node 0's task: one
``nv.nvrx.ftl.cycle`` span per restart cycle, propagated to every worker it starts
(``inject_env``), with rendezvous, worker-launch, fault, attribution and teardown spans
inside, and its own log lines through ``setup_logger``. It watches its workers:

- a worker that exits non-zero is a failure: the launcher stops the others (SIGTERM,
  SIGKILL after a grace period), ends the cycle span with an error status and, once
  (:data:`~nvrx_otel.demo.plan.MAX_RESTARTS`), starts the next cycle from the last
  checkpoint every rank saved, with ``TORCHELASTIC_RESTART_COUNT`` one higher;
- a worker that keeps the others waiting in a collective for
  :data:`~nvrx_otel.demo.plan.HANG_TIMEOUT_S`, silent as long since it started, is a
  hang (one that is only slow, still starting on a loaded machine, is not): its watchdog
  kills the job (SIGTERM, then SIGKILL for the rank that ignores it) and does not
  restart it. A worker not up after :data:`~nvrx_otel.demo.plan.STARTUP_TIMEOUT_S` is a
  failure.

It forwards the workers' progress events and adds its own on stdout (:mod:`.events`),
and exits with the job's status: 0 when a cycle finished, 1 when the job failed.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final

from opentelemetry.trace import Status, StatusCode

from nvrx_otel.demo import events
from nvrx_otel.demo.plan import MAX_RESTARTS, STARTUP_TIMEOUT_S, TERM_GRACE_S, Plan
from nvrx_otel.logging import setup_logger
from nvrx_otel.semconv import ERROR_TYPE, FtSpanKind
from nvrx_otel.tracing import ft_span, inject_env, setup_tracing

if TYPE_CHECKING:
    import logging

RANK_MODULE: Final = "nvrx_otel.demo.rank"
HANG: Final = "hang"
"""The kind of fault (``error.type`` of the fault and cycle spans) of a hung rank."""
FAILURE: Final = "failure"
"""The kind of fault of a rank that exited non-zero (or never started)."""


@dataclass
class Worker:
    rank: int
    proc: subprocess.Popen[bytes]
    buffer: events.LineBuffer = field(default_factory=events.LineBuffer)
    step: int = 0
    checkpoint: int = 0
    started: bool = False  # it said it is up
    heard: float = field(default_factory=time.monotonic)  # its last event
    stopped: bool = False  # the launcher signalled it
    code: int | None = None


@dataclass
class Outcome:
    """How a cycle ended: ``kind`` None when every worker finished."""

    kind: str | None = None
    rank: int | None = None
    detail: str = ""
    resume: int = 0  # the last checkpoint every rank saved


class Launcher:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.log: logging.Logger = setup_logger()
        self._waits: dict[int, dict[str, Any]] = {}  # rank -> its last WAITING event
        self._selector: selectors.BaseSelector = selectors.DefaultSelector()
        self.workers: list[Worker] = []  # those of the current cycle

    # --- one cycle ----------------------------------------------------------------------

    def spawn(self, rank: int, cycle: int, start: int, context: dict[str, str]) -> Worker:
        """Start ``rank``; ``context`` is the cycle span's ``TRACEPARENT``."""
        plan = self.plan
        environ = plan.rank_env(rank, cycle)
        environ.update(context)
        with open(plan.stderr_dir / f"rank{rank}.txt", "ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", RANK_MODULE, plan.to_json(), str(cycle), str(start)],
                env=environ,
                cwd=plan.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )  # fmt: skip
        return Worker(rank, proc)

    def watch(self, workers: list[Worker]) -> Outcome:
        """Forward events until every worker has exited or a fault was seen."""
        self._selector = selectors.DefaultSelector()
        for w in workers:
            assert w.proc.stdout is not None
            os.set_blocking(w.proc.stdout.fileno(), False)
            self._selector.register(w.proc.stdout, selectors.EVENT_READ, w)
        outcome: Outcome | None = None
        while outcome is None:
            self._pump(0.1)
            outcome = self._judge(workers)
        return outcome

    def _pump(self, timeout: float) -> None:
        selector = self._selector
        for key, _ in selector.select(timeout):
            worker: Worker = key.data
            stream: IO[bytes] = key.fileobj  # type: ignore[assignment]
            try:
                data = os.read(stream.fileno(), 65536)
            except BlockingIOError:
                continue
            if not data:
                selector.unregister(stream)
                stream.close()
                continue
            for line in worker.buffer.feed(data):
                self._on_line(worker, line)

    def _on_line(self, worker: Worker, line: bytes) -> None:
        event = events.decode(line)
        if event is None:
            return
        kind = event["event"]
        worker.heard = time.monotonic()
        if kind == events.STARTED:
            worker.started = True
        elif kind == events.STEP:
            worker.step = int(event["step"])
        elif kind == events.CHECKPOINT:
            worker.checkpoint = int(event["step"])
        elif kind == events.WAITING:
            self._waits[worker.rank] = event
        if kind != events.WAITING:
            self._waits.pop(worker.rank, None)
        _forward(line + b"\n")

    def _judge(self, workers: list[Worker]) -> Outcome | None:
        for w in workers:
            if w.code is None and (code := w.proc.poll()) is not None:
                w.code = code
                events.emit(events.EXITED, rank=w.rank, code=code)
                if code != 0:
                    return Outcome(
                        FAILURE, w.rank, f"rank {w.rank} exited with status {code} at step "
                        f"{w.step + 1}",
                    )  # fmt: skip
        if all(w.code is not None for w in workers):
            return Outcome()
        now = time.monotonic()
        for w in workers:
            if not w.started and now - w.heard > STARTUP_TIMEOUT_S:
                return Outcome(
                    FAILURE, w.rank, f"rank {w.rank} did not start in {STARTUP_TIMEOUT_S:.0f} s"
                )
        by_rank = {w.rank: w for w in workers}
        timeout = self.plan.hang_timeout
        for event in self._waits.values():
            if float(event["waited"]) < timeout:
                continue
            for rank in event["missing"]:  # up, and silent for as long: stuck, not slow
                stuck = by_rank[int(rank)]
                if stuck.started and now - stuck.heard >= timeout:
                    return Outcome(
                        HANG, stuck.rank, f"rank {stuck.rank} has not joined {event['op']} of "
                        f"step {event['step']} for {float(event['waited']):.1f} s",
                    )  # fmt: skip
        return None

    def stop(self, workers: list[Worker], outcome: Outcome) -> None:
        """SIGTERM the workers still running, SIGKILL those that outlive the grace; read
        what they wrote until the end; note the last checkpoint every rank saved."""
        live = [w for w in workers if w.code is None]
        for w in live:
            w.stopped = True
            _signal(w.proc, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        while any(w.proc.poll() is None for w in live) and time.monotonic() < deadline:
            self._pump(0.05)
        for w in live:
            if w.proc.poll() is None:
                self.log.warning(
                    "rank %d ignored SIGTERM for %.0f s: SIGKILL", w.rank, TERM_GRACE_S
                )
                _signal(w.proc, signal.SIGKILL)
        for w in live:
            w.code = w.proc.wait()
            events.emit(events.EXITED, rank=w.rank, code=w.code, stopped=True)
        while self._selector.get_map():  # what they wrote before they went
            self._pump(0.05)
        self._selector.close()
        saved = [w.checkpoint for w in workers]
        outcome.resume = min(saved) if saved else 0

    # --- the job ------------------------------------------------------------------------

    def run(self) -> int:
        plan = self.plan
        start = 0
        for cycle in range(MAX_RESTARTS + 1):
            self._waits = {}
            outcome = self.cycle(cycle, start)
            if outcome.kind is None:
                self.log.info("job %s finished in cycle %d", plan.job_id, cycle)
                events.emit(events.END, code=0, outcome=_finished(cycle))
                return 0
            if outcome.kind == HANG or cycle == MAX_RESTARTS:
                why = "a hang is not restarted" if outcome.kind == HANG else "no restart left"
                self.log.error("job %s failed in cycle %d: %s", plan.job_id, cycle, why)
                events.emit(
                    events.END, code=1, outcome=f"the job failed in cycle {cycle}: {outcome.detail}"
                )
                return 1
            start = outcome.resume
            self.log.warning(
                "restarting the job (restart %d of %d) from the checkpoint of step %d",
                cycle + 1,
                MAX_RESTARTS,
                start,
            )
        return 1  # not reached: the last cycle returns

    def cycle(self, cycle: int, start: int) -> Outcome:
        plan = self.plan
        with ft_span(FtSpanKind.CYCLE, cycle=cycle) as span:
            events.emit(events.CYCLE, cycle=cycle, start=start)
            context = inject_env({})  # the cycle span: the parent of the workers' spans
            with ft_span(FtSpanKind.RENDEZVOUS, cycle=cycle):
                (plan.collective_dir / f"cycle{cycle}").mkdir(parents=True, exist_ok=True)
                self.log.info(
                    "cycle %d: rendezvous of %d nodes, %d ranks", cycle, plan.nodes, plan.world_size
                )
            with ft_span(FtSpanKind.WORKER_LAUNCH, cycle=cycle):
                workers = self.workers = []
                for rank in range(plan.world_size):
                    workers.append(self.spawn(rank, cycle, start, context))
                self.log.info("cycle %d: started %d workers", cycle, len(workers))
            outcome = self.watch(workers)
            if outcome.kind is None:
                self.stop(workers, outcome)
                self.log.info("cycle %d: every worker finished", cycle)
                return outcome
            self._fault(cycle, outcome, workers)
            span.set_attribute(ERROR_TYPE, outcome.kind)
            span.set_status(Status(StatusCode.ERROR, outcome.detail))
        return outcome

    def _fault(self, cycle: int, outcome: Outcome, workers: list[Worker]) -> None:
        events.emit(events.FAULT, kind=outcome.kind, rank=outcome.rank, detail=outcome.detail)
        with ft_span(FtSpanKind.FAULT, cycle=cycle, error_type=outcome.kind):
            self.log.error("cycle %d: %s: %s", cycle, outcome.kind, outcome.detail)
        with ft_span(FtSpanKind.ATTRIBUTION, cycle=cycle):
            self.log.error("cycle %d: fault attributed to rank %s", cycle, outcome.rank)
        with ft_span(FtSpanKind.TEARDOWN, cycle=cycle):
            self.stop(workers, outcome)
            stopped = [w for w in workers if w.stopped]
            self.log.info(
                "cycle %d: stopped %d workers: %s",
                cycle,
                len(stopped),
                ", ".join(f"rank {w.rank} ({_status(w.code)})" for w in stopped) or "none",
            )


def _status(code: int | None) -> str:
    if code is None:
        return "running"
    return f"signal {-code}" if code < 0 else f"exit {code}"


def _finished(cycle: int) -> str:
    if cycle == 0:
        return "the job finished"
    return f"the job finished in cycle {cycle} after {cycle} restart{'s' if cycle > 1 else ''}"


def _signal(proc: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    try:
        os.kill(proc.pid, signum)
    except ProcessLookupError:
        pass


def _forward(line: bytes) -> None:
    try:
        os.write(1, line)
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    plan = Plan.from_json(args[0])
    setup_tracing()
    launcher = Launcher(plan)
    try:
        return launcher.run()
    except KeyboardInterrupt:  # Ctrl-C, or the demo command interrupted
        launcher.log.warning("interrupted: stopping the workers")
        launcher.stop(launcher.workers, Outcome("interrupted"))
        return 130


if __name__ == "__main__":
    sys.exit(main())
