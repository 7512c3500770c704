"""What one demo run does and where it writes: the validated options, the layout of the
output directory, and each simulated process's environment.

The plan is made once by the command (:func:`make_plan`) and handed to the launcher
process as JSON (:meth:`Plan.to_json`); the launcher and the ranks derive everything
else from it, so the three processes never disagree about a path or a step.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

import orjson

from nvrx_otel import env

MAX_RESTARTS: Final = 1
"""Restarts the launcher allows (torchrun's ``--max-restarts``): one after a rank failure."""

CHECKPOINT_EVERY: Final = 5
"""A checkpoint is saved every this many steps."""

HANG_TIMEOUT_S: Final = 8.0
"""How long ranks may wait in one collective for a rank that has started and said nothing
for as long before the launcher's watchdog declares a hang and kills the job (NCCL's
watchdog, much shortened)."""

STARTUP_TIMEOUT_S: Final = 120.0
"""A rank that has not said it is up this long after its start is a failure."""

HEARTBEAT_S: Final = 0.5
"""How often a rank waiting in a collective logs that it is still waiting."""

TERM_GRACE_S: Final = 2.0
"""How long the launcher waits after SIGTERM before it sends SIGKILL."""

STEP_TIME_S: Final = 0.15
"""The "compute" of one training step (a sleep)."""

_DROPPED_PREFIXES: Final = ("OTEL_", "NVRX_", "SLURM_", "TORCHELASTIC_", "LOGFLOW_", "PMI")
_DROPPED_NAMES: Final = frozenset(
    {
        env.RANK,
        env.LOCAL_RANK,
        env.WORLD_SIZE,
        env.LOCAL_WORLD_SIZE,
        env.GROUP_RANK,
        env.NODE_RANK,
        env.TRACEPARENT,
        env.TRACESTATE,
    }
)


class PlanError(ValueError):
    """A bad option: its message is the one line the command prints."""


@dataclass(frozen=True)
class Plan:
    """One demo run. ``fail_rank``/``hang_rank`` are None when not injected."""

    nodes: int
    ranks_per_node: int
    steps: int
    fail_rank: int | None
    hang_rank: int | None
    out: str
    job_id: str
    otlp_endpoint: str | None = None
    step_time: float = STEP_TIME_S
    hang_timeout: float = HANG_TIMEOUT_S

    # --- derived ----------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def fail_step(self) -> int:
        """The step at which ``fail_rank`` raises (cycle 0): two steps after the first
        checkpoint when there is one, so the restart resumes from it."""
        if self.steps >= CHECKPOINT_EVERY + 2:
            return CHECKPOINT_EVERY + 2
        return max(1, (self.steps + 1) // 2)

    @property
    def resume_step(self) -> int:
        """The last step checkpointed before ``fail_step``: where the restart starts."""
        return ((self.fail_step - 1) // CHECKPOINT_EVERY) * CHECKPOINT_EVERY

    @property
    def hang_step(self) -> int:
        """The step whose collective ``hang_rank`` never leaves (in :attr:`hang_cycle`;
        after the resumed checkpoint when that is the restart)."""
        step = max(1, (self.steps * 2) // 3)
        if self.fail_rank is not None:
            step = max(step, self.resume_step + 1)
        return min(step, self.steps)

    @property
    def hang_cycle(self) -> int:
        """The cycle the hang happens in: the restart when a rank also fails."""
        return 1 if self.fail_rank is not None else 0

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def node_name(self, node: int) -> str:
        return f"node{node}"

    # --- the output directory ---------------------------------------------------------

    @property
    def root(self) -> Path:
        return Path(self.out)

    @property
    def log_dir(self) -> Path:
        """The node logs, ``nvrx_log_<node>.log``."""
        return self.root / "logs"

    @property
    def otlp_dir(self) -> Path:
        """The aggregators' OTLP/JSON lines, ``logs_<node>.jsonl``, ``traces_<node>.jsonl``."""
        return self.root / "otlp"

    @property
    def stderr_dir(self) -> Path:
        """What each process wrote on stderr (aggregators' status lines, tracebacks)."""
        return self.root / "stderr"

    @property
    def run_file_dir(self) -> Path:
        """The loguru front end's run files (LogFlow's ``<script>.log``)."""
        return self.root / "logflow"

    @property
    def collective_dir(self) -> Path:
        """Where the ranks meet for their collectives (one directory per cycle)."""
        return self.root / "collectives"

    def spool_root(self, node: int) -> Path:
        """The node-local spool of ``node`` (empty again once its aggregator drained)."""
        return self.root / "spool" / self.node_name(node)

    def wait_file(self, node: int) -> Path:
        return self.root / "spool" / f".done-{self.node_name(node)}"

    # --- environments -----------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        """This environment without the variables that would give the simulated
        processes another identity or send their telemetry elsewhere (a real Slurm job
        or torchrun around the demo, an OTLP endpoint, a spool)."""
        return {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(_DROPPED_PREFIXES) and k not in _DROPPED_NAMES
        }

    def node_env(self, node: int) -> dict[str, str]:
        """What every process of ``node`` shares: its spool, its id, the Slurm job (one
        task per node, as ``srun`` starts torchrun under Slurm)."""
        environ = self.base_env()
        environ.update(
            {
                env.NVRX_NODE_LOCAL_TMPDIR: str(self.spool_root(node)),
                env.NVRX_OTEL_NODE_ID: self.node_name(node),
                env.SLURM_JOB_ID: self.job_id,
                env.SLURM_NNODES: str(self.nodes),
                env.SLURM_JOB_NUM_NODES: str(self.nodes),
                env.SLURM_PROCID: str(node),
                env.SLURM_LOCALID: "0",
                env.TORCHELASTIC_RUN_ID: self.job_id,
                env.OTEL_SERVICE_NAME: "nvrx-otel-demo",
                # A rank's stdout is the demo's event channel to its launcher, and all it
                # says goes through the logging API: no watcher (the report does not read
                # the watcher's records yet).
                env.NVRX_OTEL_CAPTURE_OUTPUT: "off",
                env.NVRX_OTEL_CAPTURE_STACKS: "off",
            }
        )
        return environ

    def rank_env(self, rank: int, cycle: int) -> dict[str, str]:
        """A worker as torchrun starts it: the node's environment plus its ranks."""
        node = self.node_of(rank)
        environ = self.node_env(node)
        environ.update(
            {
                env.RANK: str(rank),
                env.LOCAL_RANK: str(rank % self.ranks_per_node),
                env.WORLD_SIZE: str(self.world_size),
                env.LOCAL_WORLD_SIZE: str(self.ranks_per_node),
                env.GROUP_RANK: str(node),
                env.TORCHELASTIC_RESTART_COUNT: str(cycle),
            }
        )
        return environ

    # --- the hand-over to the launcher --------------------------------------------------

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls(**orjson.loads(text))


def default_out() -> Path:
    """``./nvrx-otel-demo/<local time>``, ``-2``, ``-3``... added when that is taken: a
    new directory for every run."""
    base = Path("nvrx-otel-demo") / time.strftime("%Y%m%d-%H%M%S")
    found, n = base, 1
    while found.exists():
        n += 1
        found = base.with_name(f"{base.name}-{n}")
    return found


def make_plan(
    *,
    nodes: int,
    ranks_per_node: int,
    steps: int,
    fail_rank: int | None,
    hang_rank: int | None,
    out: Path | None,
    otlp_endpoint: str | None,
) -> Plan:
    """Check the options; raises :class:`PlanError` with one line naming the problem."""
    for flag, value, low, high in (
        ("--nodes", nodes, 1, 16),
        ("--ranks-per-node", ranks_per_node, 1, 16),
        ("--steps", steps, 1, 10_000),
    ):
        if not low <= value <= high:
            raise PlanError(f"{flag} must be from {low} to {high}, got {value}")
    world = nodes * ranks_per_node
    if world < 2 and (fail_rank is not None or hang_rank is not None):
        raise PlanError("a fault needs at least 2 ranks (--nodes x --ranks-per-node)")
    for flag, rank in (("--fail-rank", fail_rank), ("--hang-rank", hang_rank)):
        if rank is not None and not 0 <= rank < world:
            raise PlanError(
                f"{flag} {rank} is not a rank of this job: ranks are 0 to {world - 1} "
                f"({nodes} nodes x {ranks_per_node} ranks)"
            )
    if otlp_endpoint is not None and not otlp_endpoint.startswith(("http://", "https://")):
        raise PlanError(
            f"--otlp-endpoint must be an http:// or https:// URL, got {otlp_endpoint!r}"
        )
    target = default_out() if out is None else out
    if target.exists() and not target.is_dir():
        raise PlanError(f"--out {target} is not a directory")
    if target.is_dir() and any(target.iterdir()):
        raise PlanError(f"--out {target} is not empty: give a new or empty directory")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Plan(
        nodes=nodes,
        ranks_per_node=ranks_per_node,
        steps=steps,
        fail_rank=fail_rank,
        hang_rank=hang_rank,
        out=str(target.resolve()),
        job_id=f"demo-{stamp}-{os.getpid()}",
        otlp_endpoint=otlp_endpoint,
    )
