"""The report's numbers against the hand-written job of :mod:`tests.report.fixture`,
computed by hand here."""

from __future__ import annotations

import io
import statistics
from pathlib import Path

import pytest

from nvrx_otel import semconv as sc
from nvrx_otel.report import Report, analyse
from nvrx_otel.view.read import Problems
from tests.report import fixture
from tests.report.otlpkit import at, sid


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    directory = fixture.write(tmp_path_factory.mktemp("job"))
    return analyse([str(directory)], problems=Problems(io.StringIO()))


def test_phase_percentiles_are_nearest_rank_over_every_span(report: Report) -> None:
    phases = {p.name: p for p in report.phases}
    write = phases[sc.SPAN_CKPT_SAVE_WRITE]
    # durations 1.0 1.1 1.2 3.0: p50 = 2nd of 4 (ceil(0.5*4)), p99 = 4th (ceil(3.96))
    assert (write.count, write.ranks) == (4, 4)
    assert write.p50_s == pytest.approx(1.1)
    assert write.p99_s == pytest.approx(3.0)
    assert (write.max_s, write.max_rank) == (pytest.approx(3.0), 3)
    imports = phases[sc.SPAN_FTL_PYTHON_IMPORTS]
    # 0.1 0.1 0.1 0.2 0.2 0.2 0.3 0.4: p50 = 4th of 8, p99 = 8th
    assert (imports.count, imports.ranks) == (8, 4)
    assert imports.p50_s == pytest.approx(0.2)
    assert imports.p99_s == pytest.approx(0.4)
    assert (imports.max_s, imports.max_rank) == (pytest.approx(0.4), 3)
    cycle = phases[sc.SPAN_FTL_CYCLE]  # the launcher's: counted, with no rank
    assert (cycle.count, cycle.ranks, cycle.max_rank) == (1, 0, None)
    assert cycle.max_s == pytest.approx(10.3)


def test_truncated_spans_have_no_duration_in_the_phase_table(report: Report) -> None:
    assert sc.SPAN_CKPT_SAVE_COMPLETION_SYNC not in {p.name for p in report.phases}


def test_a_straggler_is_over_one_and_a_half_times_the_median_of_the_ranks_means(
    report: Report,
) -> None:
    # write: means 1.0 1.2 1.1 3.0, median (1.1 + 1.2) / 2 = 1.15, 1.5 x 1.15 = 1.725 < 3.0
    # imports: means 0.2 0.2 0.1 0.3, median 0.2, 1.5 x 0.2 = 0.3: rank 3 is not over it
    (s,) = report.stragglers
    assert (s.phase, s.rank, s.node, s.count) == (sc.SPAN_CKPT_SAVE_WRITE, 3, "n1", 1)
    assert s.median_s == pytest.approx(1.15)
    assert s.mean_s == pytest.approx(3.0)
    assert s.ratio == pytest.approx(3.0 / 1.15)


def test_the_first_failure_by_time_is_the_earliest_error_with_its_last_lines(
    report: Report,
) -> None:
    f = report.first_failure
    assert f is not None
    assert (f.rank, f.node, f.cycle, f.kind, f.what) == (1, "n0", 0, "log", "peer failed")
    assert f.ts_ns == at(9.95)
    assert f.observed_ns == at(10.5)
    assert f.trace_id == fixture.T1
    # its last ten log lines up to the failure: steps 1..9 and the error itself
    assert [ln.text for ln in f.last_lines] == [f"step {i}" for i in range(1, 10)] + ["peer failed"]


def test_the_first_failure_by_trace_is_the_innermost_failing_span(report: Report) -> None:
    # trace 1: the launcher's cycle span > rank 2's request > rank 2's stage, all ERROR;
    # rank 1's error log is in the trace but its span did not fail
    f = report.first_failure_by_trace
    assert f is not None
    assert (f.rank, f.node, f.kind, f.span_id) == (2, "n1", "span", sid(12))
    assert f.what == f"{sc.SPAN_CKPT_SAVE_STAGE}: RuntimeError: CUDA error"
    assert f.ts_ns == at(10.0)


def test_an_order_within_the_clock_skew_across_nodes_is_flagged(report: Report) -> None:
    o = report.ordering
    assert o is not None
    assert not o.sure
    assert o.other is not None and (o.other.rank, o.other.node) == (2, "n1")
    assert o.margin_s == pytest.approx(0.05)
    assert "could be the other way" in o.note


def test_an_order_beyond_the_skew_is_sure(tmp_path: Path) -> None:
    directory = fixture.write(tmp_path)
    r = analyse([str(directory)], skew_s=0.01, problems=Problems(io.StringIO()))
    assert r.ordering is not None and r.ordering.sure


def test_a_rank_silent_while_the_others_log_is_reported_with_its_open_span(
    report: Report,
) -> None:
    (s,) = report.silent
    assert (s.rank, s.node, s.cycle) == (3, "n1", 1)
    assert s.last_ns == at(20.5)  # its open span's start is its last sign of life
    assert s.behind_s == pytest.approx(34 - 20.5)
    # mean intervals between records in cycle 1: rank 0 (21 logs and run_start's start and
    # end, 13.5 to 34 s) 20.5 / 22, ranks 1 and 2 1.0, rank 3 (7 logs and a span start) 6.5 / 7
    typical = statistics.median([20.5 / 22, 1.0, 1.0, 6.5 / 7])
    assert s.threshold_s == pytest.approx(max(5.0, 10 * typical))
    assert s.last_record is not None and s.last_record.text == "step 20"
    assert s.open_span is not None
    assert (s.open_span.name, s.open_span.truncated) == (sc.SPAN_CKPT_SAVE_COMPLETION_SYNC, True)


def test_restart_cycles_and_the_time_to_recover(report: Report) -> None:
    c0, c1 = report.cycles
    assert (c0.cycle, c0.start_ns, c0.end_ns, c0.ranks, c0.failed_ranks) == (
        0, at(0), at(10.3), 4, 2,
    )  # fmt: skip
    assert c0.first_failure is not None and c0.first_failure.rank == 1
    assert c0.recovery_s is None
    assert (c1.cycle, c1.start_ns, c1.end_ns, c1.ranks, c1.failed_ranks) == (
        1, at(13.5), at(34), 4, 1,
    )  # fmt: skip
    assert c1.first_failure is not None and c1.first_failure.rank == 3
    # resumed at the end of run_start (15.0 s), 5.05 s after cycle 0's first failure (9.95 s)
    assert c1.resumed_ns == at(15.0)
    assert c1.recovery_s == pytest.approx(5.05)


def test_counts_and_the_malformed_line(report: Report) -> None:
    # logs: cycle 0 4 x 10 steps + 2 errors; cycle 1 3 x 21 + 7
    assert report.logs == 40 + 2 + 63 + 7
    assert report.spans == 4 * 3 + 3 + 1 + 1 + 1
    assert report.skipped_lines == 1
    assert (report.files, report.nodes, report.ranks) == (4, ["n0", "n1"], 4)
    assert (report.start_ns, report.end_ns) == (at(0), at(34))


def test_a_job_without_failures_or_silence(tmp_path: Path) -> None:
    from tests.report.otlpkit import log, logs_line, resource

    path = tmp_path / "logs_a.jsonl"
    path.write_text(
        "".join(logs_line(resource("a", r), [log(at(t), "ok") for t in range(5)]) for r in range(3))
    )
    r = analyse([str(path)])
    assert (r.first_failure, r.first_failure_by_trace, r.ordering) == (None, None, None)
    assert r.silent == [] and r.stragglers == [] and r.phases == []
    assert [(c.cycle, c.ranks, c.failed_ranks) for c in r.cycles] == [(0, 3, 0)]


@pytest.mark.parametrize("n", range(2, 9))
def test_the_median_of_the_others_is_the_median_without_the_rank(n: int) -> None:
    from nvrx_otel.report.silence import median_without

    values = sorted([5, 1, 9, 3, 3, 7, 2, 8][:n])
    for i in range(n):
        others = values[:i] + values[i + 1 :]
        assert median_without(values, i) == statistics.median(others)


@pytest.mark.parametrize(
    "values",
    [
        [7] * 5000,  # one value: no pass needed
        list(range(5000, 0, -1)),
        [1, 10**12] * 2000 + [5] * 1000,  # far apart: buckets narrow down in passes
        [(i * 7919) % 100_003 * 1_000 for i in range(20_000)],
    ],
)
def test_selecting_a_percentile_without_sorting_gives_the_sorted_answer(
    values: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from array import array

    from nvrx_otel.report import phases

    monkeypatch.setattr(phases, "SORT_MAX", 100)  # select, even for these few
    durations = array("q", values)
    ordered = sorted(values)
    for p in (1, 50, 99, 100):
        assert phases.percentile(durations, p) == phases.nearest_rank(ordered, p)
