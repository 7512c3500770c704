"""Restart cycles when some records have no cycle (the launcher's): worked out by hand."""

from __future__ import annotations

import io
from pathlib import Path

from nvrx_otel.report import analyse
from nvrx_otel.view.read import Problems
from tests.report.otlpkit import at, log, logs_line, resource


def test_records_without_a_cycle_do_not_stretch_cycle_0(tmp_path: Path) -> None:
    """Cycle 0 runs 0-4 s, cycle 1 5-10 s; the launcher logs at 0 s, 4.5 s and 11 s with no
    cycle. Cycle 0 still ends at 4 s (it used to span the whole job, over cycle 1)."""
    lines = [
        logs_line(resource("n0"), [log(at(0), "launching"), log(at(4.5), "restarting"),
                                   log(at(11), "done")]),
        logs_line(resource("n0", 0, 0), [log(at(0.5), "step 0"), log(at(4), "failed", "ERROR")]),
        logs_line(resource("n0", 0, 1), [log(at(5), "step 0"), log(at(10), "step 9")]),
    ]  # fmt: skip
    (tmp_path / "logs_n0.jsonl").write_text("".join(lines))
    r = analyse([str(tmp_path)], problems=Problems(io.StringIO()))
    (c0, c1) = r.cycles
    assert (c0.start_ns, c0.end_ns, c0.failed_ranks) == (at(0.5), at(4), 1)
    assert (c1.start_ns, c1.end_ns, c1.failed_ranks) == (at(5), at(10), 0)
    assert c1.recovery_s is not None and abs(c1.recovery_s - 1.0) < 1e-9


def test_without_any_cycle_every_record_is_cycle_0(tmp_path: Path) -> None:
    lines = [logs_line(resource("n0", 0), [log(at(1), "a"), log(at(3), "b")])]
    (tmp_path / "logs_n0.jsonl").write_text("".join(lines))
    r = analyse([str(tmp_path)], problems=Problems(io.StringIO()))
    ((c0),) = r.cycles
    assert (c0.cycle, c0.start_ns, c0.end_ns) == (0, at(1), at(3))
