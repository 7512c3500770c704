"""What the demo shows while it runs: the state of every rank and node aggregator, from
the launcher's events (:mod:`.events`) and the aggregators' status lines.

On a terminal a Rich live table (ranks, steps, waits, aggregator lag); in a pipe one plain
line per thing that happened (a cycle, a fault, the end), so a log of the run stays short.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvrx_otel.demo import events
from nvrx_otel.demo.nodes import NodeStatus
from nvrx_otel.demo.plan import Plan

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

MAX_ROWS = 32
"""Ranks shown one per row; the others are summed up in one line."""


@dataclass
class RankState:
    step: int = 0
    state: str = "starting"
    style: str = "dim"
    ended: bool = False  # done, failed or stopped


@dataclass
class JobState:
    """Everything the display shows, updated from events."""

    plan: Plan
    started: float = field(default_factory=time.monotonic)
    cycle: int = 0
    phase: str = "starting"
    outcome: str = ""
    ranks: dict[int, RankState] = field(default_factory=dict)
    nodes: list[NodeStatus] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ranks = {r: RankState() for r in range(self.plan.world_size)}

    def apply(self, event: dict[str, Any]) -> str | None:
        """Take ``event`` in; returns a line worth printing in plain mode, if any."""
        kind = event["event"]
        if kind == events.CYCLE:
            self.cycle = int(event["cycle"])
            self.phase = "running"
            start = int(event["start"])
            for r in self.ranks.values():
                r.state, r.style, r.step, r.ended = "starting", "dim", start, False
            resumed = f", resuming after step {start}" if start else ""
            return f"cycle {self.cycle}: starting {self.plan.world_size} ranks{resumed}"
        if kind == events.FAULT:
            self.phase = "stopping the ranks"
            return f"cycle {self.cycle}: {event['kind']}: {event['detail']}"
        if kind == events.END:
            self.phase = "draining the aggregators"
            self.outcome = str(event["outcome"])
            return None
        rank = self.ranks.get(event.get("rank", -1))
        if rank is None:
            return None
        if kind == events.STARTED:
            rank.state, rank.style = "running", ""
        elif kind == events.STEP:
            rank.step, rank.state, rank.style = int(event["step"]), "running", ""
        elif kind == events.CHECKPOINT:
            rank.state = f"checkpoint at step {event['step']}"
        elif kind == events.WAITING:
            missing = ",".join(str(m) for m in event["missing"])
            waited = float(event["waited"])
            rank.state = f"waiting {waited:.1f} s for rank {missing} in {event['op']}"
            rank.style = "yellow"
            for m in event["missing"]:  # the one they wait for says nothing itself
                late = self.ranks.get(int(m))
                if late is not None and not late.ended:
                    late.state = f"not in {event['op']} of step {event['step']} ({waited:.1f} s)"
                    late.style = "bold red"
        elif kind == events.DONE:
            rank.state, rank.style, rank.ended = "done", "green", True
        elif kind == events.EXITED:
            rank.ended = True
            code = int(event["code"])
            if code == 0:
                rank.state, rank.style = "done", "green"
            elif event.get("stopped"):
                how = f"signal {-code}" if code < 0 else f"exit {code}"
                rank.state, rank.style = f"stopped by the launcher ({how})", "magenta"
            else:
                rank.state, rank.style = f"failed (exit {code})", "bold red"
        return None

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def render(state: JobState) -> RenderableType:
    """The live view: a header, one row per rank, one line per node aggregator."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    plan = state.plan
    header = Text.assemble(
        ("nvrx-otel demo ", "bold"),
        f"job {plan.job_id}, {plan.nodes} nodes x {plan.ranks_per_node} ranks, "
        f"cycle {state.cycle}, {state.phase}, {state.elapsed():.0f} s",
    )
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("node", "rank", "step", "", "state"):
        table.add_column(column)
    shown = sorted(state.ranks.items())[:MAX_ROWS]
    for r, rank in shown:
        table.add_row(
            plan.node_name(plan.node_of(r)),
            str(r),
            f"{rank.step}/{plan.steps}",
            ProgressBar(total=plan.steps, completed=rank.step, width=20),
            Text(rank.state, style=rank.style),
        )
    parts: list[RenderableType] = [header, table]
    if len(state.ranks) > MAX_ROWS:
        rest = [rank.step for r, rank in state.ranks.items() if r >= MAX_ROWS]
        parts.append(
            Text(f"... {len(rest)} more ranks, steps {min(rest)} to {max(rest)}", style="dim")
        )
    for node, status in enumerate(state.nodes):
        lag = "-" if status.lag is None else f"{status.lag:.1f} s"
        written = "-" if status.written is None else str(status.written)
        parts.append(
            Text(
                f"aggregator {plan.node_name(node)}: lag {lag}, backlog {status.backlog or '-'}, "
                f"{written} records in the node log",
                style="cyan",
            )
        )
    if state.outcome:
        parts.append(Text(state.outcome, style="bold"))
    return Group(*parts)


class Display:
    """A live table on a terminal, plain lines otherwise."""

    def __init__(self, state: JobState, console: Console) -> None:
        self.state = state
        self.console = console
        self.live: Live | None = None
        if console.is_terminal:
            from rich.live import Live

            self.live = Live(render(state), console=console, refresh_per_second=8)

    def __enter__(self) -> Display:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(render(self.state))
            self.live.__exit__(None, None, None)

    def event(self, event: dict[str, Any]) -> None:
        line = self.state.apply(event)
        if line is not None:  # above the live table on a terminal
            self.console.print(line, markup=False, highlight=False)

    def nodes(self, statuses: list[NodeStatus]) -> None:
        self.state.nodes = statuses

    def refresh(self) -> None:
        if self.live is not None:
            self.live.update(render(self.state))
