"""Every span name counts (report/phases.py, timeline.py): the program's own spans are in
the phase table, the straggler rule and the picture, not only the conventions'."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nvrx_otel.report import analyse
from nvrx_otel.report.analyse import analyse_timeline
from nvrx_otel.report.phases import NAMES_MAX, OTHER, Phases
from nvrx_otel.report.png import USER_COLOUR
from nvrx_otel.view.read import Problems
from tests.report.otlpkit import at, resource, sid, span, spans_line, tid


def _job(tmp: Path) -> Path:
    """4 ranks, a ``train`` span around 5 ``step`` spans of 0.2 s; rank 2's take 0.6 s."""
    lines = []
    for r in range(4):
        step_s = 0.6 if r == 2 else 0.2
        spans = [span("train", at(0), at(5 * step_s), trace=tid(r + 1), span_id=sid(100 + r))]
        spans += [
            span("step", at(i * step_s), at((i + 1) * step_s), trace=tid(r + 1),
                 span_id=sid(10 * r + i), parent=sid(100 + r))
            for i in range(5)
        ]  # fmt: skip
        lines.append(spans_line(resource("n0", r), spans))
    (tmp / "traces_n0.jsonl").write_text("".join(lines))
    return tmp


def test_the_programs_own_spans_have_phases_and_a_straggler(tmp_path: Path) -> None:
    r = analyse([str(_job(tmp_path))], problems=Problems(io.StringIO()))
    phases = {p.name: p for p in r.phases}
    step = phases["step"]
    assert (step.count, step.ranks, step.group) == (20, 4, "spans")
    assert step.p50_s == pytest.approx(0.2) and step.max_s == pytest.approx(0.6)
    assert step.max_rank == 2
    slow = [(s.phase, s.rank) for s in r.stragglers]
    assert ("step", 2) in slow and all(rank == 2 for _, rank in slow)  # 3x the median


def test_the_picture_draws_the_programs_spans(tmp_path: Path) -> None:
    report, timeline = analyse_timeline([str(_job(tmp_path))], problems=Problems(io.StringIO()))
    bars = list(timeline.bars(2))
    assert len(bars) == 6 and {timeline.names[c & 0xFF] for _, _, c in bars} == {"train", "step"}
    from nvrx_otel.report.png import draw

    draw(report, timeline, str(tmp_path / "job.png"))
    import matplotlib.image as mpimg
    import numpy as np

    pixels = (mpimg.imread(str(tmp_path / "job.png"))[..., :3] * 255).astype(np.int64)
    want = np.array([int(USER_COLOUR[i : i + 2], 16) for i in (1, 3, 5)])
    near = np.abs(pixels - want).sum(axis=-1) < 60  # the bars' colour (drawn see-through)
    assert near.sum() > 1000, "the program's spans are not drawn"


def test_span_names_beyond_the_bound_share_one_row() -> None:
    from nvrx_otel.report.otlp import Span

    phases = Phases()
    for i in range(NAMES_MAX + 50):
        phases.add(Span(ts_ns=at(1), start_ns=at(0), name=f"step {i}", scope="x", node="n0",
                        rank=0, irank=None, cycle=None, pid=None, service=None, trace_id=None,
                        span_id=None, parent_id=None, error=False, status="",
                        truncated=False))  # fmt: skip
    rows = phases.stats()
    assert len(rows) == NAMES_MAX + 1 and rows[-1].name == OTHER and rows[-1].count == 50
