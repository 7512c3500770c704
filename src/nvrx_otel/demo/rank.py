"""One rank of the demo job: ``python -m nvrx_otel.demo.rank PLAN_JSON CYCLE START``.

Its identity comes from the environment the launcher gives it (Slurm's and torchrun's
variables, ``NVRX_OTEL_NODE_ID``, the node's spool), its parent span from ``TRACEPARENT``
(the launcher's cycle span). It trains from step ``START + 1`` to the plan's last step:
a sleep for the compute, an allreduce with the other ranks, a step line through the
stdlib front end (``setup_logger``) and throughput lines through the loguru front end
(``get_logger``), and a checkpoint with its save phases every few steps. All of it runs in
an ``nv.nvrx.ftl.run`` span, so every record carries the cycle's trace id.

Faults, as the plan says: ``fail_rank`` raises at ``fail_step`` of cycle 0 (logged with its
traceback) and exits 1; ``hang_rank`` never leaves the collective of ``hang_step`` in
``hang_cycle``. SIGTERM from the launcher ends a rank with the exception it raises here,
so its open spans end as errors and it says so before exiting 143 (the handler only takes
note; the rank raises at its next look, never inside a log call).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from nvrx_otel.demo import events
from nvrx_otel.demo.collective import Collectives
from nvrx_otel.demo.plan import CHECKPOINT_EVERY, HEARTBEAT_S, Plan
from nvrx_otel.identity import get_identity
from nvrx_otel.semconv import CkptSaveSpanKind, CkptSpanKind, FtSpanKind
from nvrx_otel.tracing import checkpoint_span, ft_span, setup_tracing, startup_spans

if TYPE_CHECKING:
    import logging

    from loguru import Logger

TERMINATED_EXIT = 128 + signal.SIGTERM
SHARD_BYTES = 64 << 20
"""What one rank's checkpoint shard claims to weigh (nothing is written)."""


class InjectedFault(RuntimeError):
    """The fault ``--fail-rank`` injects."""


class Terminated(Exception):
    """SIGTERM from the launcher, raised at the rank's next look (:func:`check`)."""


_signalled: list[str] = []


def _terminate(signum: int, frame: FrameType | None) -> None:
    _signalled.append(signal.Signals(signum).name)  # raised by check(), not inside a log call


def check() -> None:
    """Raise :class:`Terminated` once the launcher has sent SIGTERM: after each sleep of
    the compute and at each look of a waiting collective, so a signal never interrupts a
    log call halfway."""
    if _signalled:
        raise Terminated(f"signal {_signalled[0]} from the launcher")


def loss_at(step: int, rank: int) -> float:
    """A plausible, slowly falling loss."""
    return 2.5 * math.exp(-step / 40) + 0.01 * ((step * 7 + rank * 3) % 5)


class Trainer:
    def __init__(self, plan: Plan, cycle: int, start: int) -> None:
        from nvrx_otel.logging import configure_logging, get_logger, setup_logger

        ident = get_identity()
        self.plan = plan
        self.cycle = cycle
        self.start = start
        self.rank = ident.workload_rank if ident.workload_rank is not None else 0
        self.log: logging.Logger = setup_logger()
        configure_logging(
            log_dir=plan.run_file_dir,
            script_name="train",
            console_level="WARNING",
            rotation_on_startup=False,
        )
        self.flow: Logger = get_logger("train")
        self.step = start
        self.collective = Collectives(
            plan.collective_dir / f"cycle{cycle}",
            self.rank,
            plan.world_size,
            self.log,
            heartbeat=HEARTBEAT_S,
            on_wait=self._waiting,
            check=check,
        )

    def _waiting(self, op: str, step: int, missing: list[int], waited: float) -> None:
        events.emit(
            events.WAITING, rank=self.rank, step=step, op=op, missing=missing, waited=waited
        )

    def run(self) -> None:
        plan = self.plan
        self.log.info(
            "rank %d of %d starting cycle %d at step %d of %d",
            self.rank,
            plan.world_size,
            self.cycle,
            self.start + 1,
            plan.steps,
        )
        if self.start:
            self.flow.info("resumed from the checkpoint of step {}", self.start)
        events.emit(events.STARTED, rank=self.rank, cycle=self.cycle, step=self.start)
        started = time.monotonic()
        for step in range(self.start + 1, plan.steps + 1):
            self.step = step
            time.sleep(plan.step_time)  # forward and backward
            check()
            if self.cycle == 0 and self.rank == plan.fail_rank and step == plan.fail_step:
                raise InjectedFault(f"injected fault on rank {self.rank} at step {step}")
            hang = (
                self.rank == plan.hang_rank
                and step == plan.hang_step
                and self.cycle == plan.hang_cycle
            )
            self.collective("allreduce", step=step, hang=hang)
            loss = loss_at(step, self.rank)
            self.log.info("step %d/%d loss %.4f", step, plan.steps, loss)
            if step % 4 == 0:
                rate = (step - self.start) / max(time.monotonic() - started, 1e-9)
                self.flow.debug("throughput {:.2f} steps/s on rank {}", rate, self.rank)
            events.emit(events.STEP, rank=self.rank, step=step, loss=round(loss, 4))
            if step % CHECKPOINT_EVERY == 0:
                self.checkpoint(step)
        self.flow.success("rank {} finished {} steps", self.rank, plan.steps)
        events.emit(events.DONE, rank=self.rank)

    def checkpoint(self, step: int) -> None:
        """A checkpoint as NVRx's async checkpointing traces one: the trainer schedules
        it, the worker serves the request through the save phases, the trainer finalizes."""
        idx = step // CHECKPOINT_EVERY
        path = f"checkpoints/iter_{step:07d}"
        with checkpoint_span(CkptSpanKind.SCHEDULE, call_idx=idx, iteration=step):
            with checkpoint_span(CkptSpanKind.REQUEST, call_idx=idx, path=path):
                with checkpoint_span(CkptSaveSpanKind.STAGE_WAIT, call_idx=idx):
                    pass
                with checkpoint_span(CkptSaveSpanKind.STAGE, call_idx=idx, bytes=SHARD_BYTES):
                    time.sleep(0.005)
                with checkpoint_span(
                    CkptSaveSpanKind.WRITE,
                    call_idx=idx,
                    bytes=SHARD_BYTES,
                    path=path,
                    strategy="torch_dist",
                ):
                    time.sleep(0.01)
                with checkpoint_span(CkptSaveSpanKind.COMPLETION_SYNC, call_idx=idx):
                    self.collective("barrier", step=step)
            with checkpoint_span(CkptSpanKind.FINALIZE, call_idx=idx):
                self.log.info("checkpoint %d saved at step %d to %s", idx, step, path)
        events.emit(events.CHECKPOINT, rank=self.rank, step=step)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    plan, cycle, start = Plan.from_json(args[0]), int(args[1]), int(args[2])
    signal.signal(signal.SIGTERM, _terminate)
    setup_tracing()
    trainer: Trainer | None = None
    try:
        with startup_spans():
            trainer = Trainer(plan, cycle, start)
        with ft_span(FtSpanKind.RUN, cycle=cycle):
            try:
                trainer.run()
            except InjectedFault:
                trainer.log.exception("rank %d failed at step %d", trainer.rank, trainer.step)
                raise
            except Terminated as exc:
                trainer.log.warning(
                    "rank %d stopped at step %d: %s", trainer.rank, trainer.step, exc
                )
                raise
    except InjectedFault:
        return 1
    except Terminated:
        return TERMINATED_EXIT
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _shutdown()
    return 0


def _shutdown() -> None:
    from nvrx_otel.logging import shutdown_logging

    shutdown_logging()


if __name__ == "__main__":
    sys.exit(main())
