"""The report of jobs run through the real path (ranks spooling, aggregators writing
``--otlp-json``): a rank that crashes and a restart, and a rank that hangs in a
collective while the others keep logging."""

from __future__ import annotations

import io
import signal
from pathlib import Path

from nvrx_otel import semconv as sc
from nvrx_otel.report import analyse, failures
from nvrx_otel.report.render import write_text
from nvrx_otel.view.read import Problems
from tests.aggregator.spoolkit import wait_for
from tests.report.reportkit import Node


def test_a_crash_then_a_restart(tmp_path: Path) -> None:
    nodes = [Node(tmp_path, "n0"), Node(tmp_path, "n1")]
    modes = {0: "ok", 1: "slow", 2: "crash", 3: "ok"}
    cycle0 = [nodes[r // 2].rank(r, modes[r], 5) for r in range(4)]
    codes = [p.wait(timeout=120) for p in cycle0]
    assert codes == [0, 0, 1, 0]
    cycle1 = [nodes[r // 2].rank(r, "ok", 5, cycle=1) for r in range(4)]
    assert [p.wait(timeout=120) for p in cycle1] == [0, 0, 0, 0]
    for n in nodes:
        n.finish()
    problems = io.StringIO()
    report = analyse([str(tmp_path / "otlp")], problems=Problems(problems))
    assert problems.getvalue() == ""
    assert report.nodes == ["n0", "n1"] and report.ranks == 4
    f = report.first_failure
    assert f is not None
    assert (f.rank, f.node, f.cycle) == (2, "n1", 0)
    assert f.trace_id is not None
    # its last lines end with its steps and the failure
    texts = [ln.text for ln in f.last_lines]
    assert "step 4" in texts, texts
    assert report.first_failure_by_trace is not None
    assert report.first_failure_by_trace.rank == 2
    phases = {p.name: p for p in report.phases}
    write = phases[sc.SPAN_CKPT_SAVE_WRITE]
    assert (write.count, write.ranks) == (40, 4)  # 5 steps x 4 ranks x 2 cycles
    assert sc.SPAN_FTL_PYTHON_STARTUP in phases and sc.SPAN_FTL_PYTHON_IMPORTS in phases
    # rank 1's writes take ten times the others': it is the write phase's worst straggler.
    # (A loaded machine can stretch one 10 ms write of another rank past the threshold,
    # which makes that rank a straggler too: the report is right to say so.)
    slow = [s for s in report.stragglers if s.phase == sc.SPAN_CKPT_SAVE_WRITE]
    assert slow and slow[0].rank == 1, slow
    assert all(s.ratio < slow[0].ratio for s in slow[1:]), slow
    c0, c1 = report.cycles
    assert (c0.cycle, c0.ranks, c0.failed_ranks) == (0, 4, 1)
    assert (c1.cycle, c1.ranks, c1.failed_ranks) == (1, 4, 0)
    assert c1.recovery_s is not None and c1.recovery_s > 0
    assert report.silent == []


def test_a_hung_rank_is_silent_inside_its_open_span(tmp_path: Path) -> None:
    nodes = [Node(tmp_path, "n0"), Node(tmp_path, "n1")]
    ranks = {r: nodes[r // 2].rank(r, "hang" if r == 3 else "beat", 5) for r in range(4)}
    for r in (0, 1, 2):  # the others went on logging for 40 heartbeats (2 s)
        wait_for(lambda r=r: (tmp_path / f"beat{r}").exists(), timeout=120, what=f"rank {r}")
    ranks[3].send_signal(signal.SIGKILL)  # the job is killed: the hung rank first
    assert ranks[3].wait(timeout=60) == -signal.SIGKILL
    (tmp_path / "release").touch()
    assert [ranks[r].wait(timeout=120) for r in (0, 1, 2)] == [0, 0, 0]
    for n in nodes:
        n.finish()
    report = analyse([str(tmp_path / "otlp")], silence_min_s=0.5, problems=Problems(io.StringIO()))
    assert [(s.rank, s.node) for s in report.silent] == [(3, "n1")]
    (s,) = report.silent
    assert s.behind_s >= 1.5  # 40 heartbeats at 50 ms
    assert s.open_span is not None
    assert (s.open_span.name, s.open_span.truncated) == (sc.SPAN_CKPT_SAVE_COMPLETION_SYNC, True)
    assert s.last_record is not None and s.last_record.text == "entering the completion barrier"
    # the truncated span is the hung rank's failure: the first one, at its last sign of life
    assert report.first_failure is not None and report.first_failure.rank == 3
    (h,) = report.hung
    assert (h.rank, h.span, h.since_ns) == (
        3,
        sc.SPAN_CKPT_SAVE_COMPLETION_SYNC,
        s.open_span.start_ns,
    )
    assert h.waiting == 3
    assert report.verdict.startswith(
        f"HUNG: rank 3 (n1) went silent in {sc.SPAN_CKPT_SAVE_COMPLETION_SYNC} at +"
    ), report.verdict
    assert "its process then ended inside it" in report.verdict


def test_the_rank_that_raised_is_named_not_the_victim_the_launcher_stopped(tmp_path: Path) -> None:
    """Rank 0 waits silent inside a span; rank 1 raises inside its span and logs the
    exception; then rank 0 is SIGTERMed, as torchrun stops the survivors. Rank 0's last
    record is older than rank 1's exception, but rank 0 is a victim: rank 1 is named."""
    node = Node(tmp_path, "n0")
    victim = node.rank(0, "hang", 3, watched=True)
    wait_for(lambda: "entering the completion barrier" in _node_log(tmp_path), 60, "rank 0 to wait")
    culprit = node.rank(1, "crash", 3, watched=True)
    assert culprit.wait(timeout=120) == 1
    victim.send_signal(signal.SIGTERM)
    assert victim.wait(timeout=60) == -signal.SIGTERM
    node.finish()
    report = analyse([str(tmp_path / "otlp")], problems=Problems(io.StringIO()))
    f = report.first_failure
    assert f is not None and f.rank == 1, f
    assert f.what == "step 3 failed" and f.evidence == failures.OWN
    assert report.stopped == [0]
    assert report.ordering is not None and "follow from it" not in report.ordering.note
    text = io.StringIO()
    write_text(report, text)
    assert "stopped by the launcher after it (victims): rank 0" in text.getvalue()


def _node_log(tmp: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (tmp / "logs").glob("*.log"))
