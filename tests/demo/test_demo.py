"""``nvrx-otel demo`` end to end, as a user runs it: a subprocess at small sizes (2 nodes x 2
ranks, 8 steps), then what it wrote under --out — the node logs and the aggregators'
OTLP/JSON — checked against what each scenario must show."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel import semconv
from nvrx_otel.demo.collective import COLLECTIVE_OP, COLLECTIVE_SPAN
from tests.collector.harness import logs, spans, wait_until
from tests.conftest import spawn
from tests.otlp_receiver import OtlpReceiver

NODES, PER_NODE, STEPS = 2, 2, 8
WORLD = NODES * PER_NODE
RUN_TIMEOUT_S = 240
_RANKED = re.compile(r"^(\S+ \S+) \[(\w+)\] \[(\w+)\] \[workload:(\d+|\?)\(")


@dataclass
class Run:
    out: Path
    proc: subprocess.CompletedProcess[str]

    def node_log(self) -> list[tuple[str, str, str, int | None, str]]:
        """(time, level, node, workload rank, line) of every record in the node logs."""
        found = []
        for path in sorted((self.out / "logs").glob("nvrx_log_*.log")):
            for line in path.read_text().splitlines():
                m = _RANKED.match(line)
                if m:
                    rank = None if m[4] == "?" else int(m[4])
                    found.append((m[1], m[2], m[3], rank, line))
        return found

    def logs(self) -> list[dict[str, Any]]:
        return logs(self.out / "otlp")

    def spans(self) -> list[dict[str, Any]]:
        return spans(self.out / "otlp")


def demo(tmp: Path, *args: str) -> Run:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "SLURM"))}
    out = tmp / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "nvrx_otel.cli", "demo", "--out", str(out),
         "--nodes", str(NODES), "--ranks-per-node", str(PER_NODE), "--steps", str(STEPS), *args],
        capture_output=True, text=True, env=environ, cwd=tmp, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    return Run(out, proc)


def once(*args: str) -> Callable[[pytest.TempPathFactory], Run]:
    """A module fixture: the demo run once with ``args``, shared by the tests on it."""

    @pytest.fixture(scope="module")
    def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
        return demo(tmp_path_factory.mktemp("demo"), *args)

    return run  # type: ignore[return-value]


clean = once()
failing = once("--fail-rank", "3")
hanging = once("--hang-rank", "1")


def by_name(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in items if s["name"] == name]


def cycle_spans(run: Run) -> dict[int, dict[str, Any]]:
    found = by_name(run.spans(), semconv.SPAN_FTL_CYCLE)
    return {s["attributes"][semconv.RESTART_CYCLE]: s for s in found}


def worker_spans(run: Run) -> list[dict[str, Any]]:
    return [s for s in run.spans() if s["resource"].get(semconv.WORKLOAD_RANK) is not None]


# --- a clean run ---------------------------------------------------------------------------


def test_a_clean_run_exits_0_and_says_where_it_wrote(clean: Run) -> None:
    assert clean.proc.returncode == 0, clean.proc.stdout + clean.proc.stderr
    out = clean.proc.stdout
    assert f"writing to {clean.out}" in out and "the job finished" in out
    for node in range(NODES):
        for path in (
            clean.out / "logs" / f"nvrx_log_node{node}.log",
            clean.out / "otlp" / f"logs_node{node}.jsonl",
            clean.out / "otlp" / f"traces_node{node}.jsonl",
        ):
            assert path.is_file() and path.stat().st_size > 0, path
            assert str(path) in out, path
    assert "no failure (" in out and "no silent ranks" in out  # the report, printed
    assert clean.proc.stderr == ""


def test_every_rank_logs_every_step_through_both_front_ends(clean: Run) -> None:
    """Stdlib step lines and loguru lines of every rank, on its own node, in the node log
    and in OTLP; the launcher's own lines on node 0 with an unknown workload rank."""
    lines = clean.node_log()
    for rank in range(WORLD):
        own = [line for _, _, node, r, line in lines if r == rank]
        assert all(f"[node{rank // PER_NODE}]" in line for line in own)
        steps = [line for line in own if re.search(r" step \d+/\d+ loss ", line)]
        assert len(steps) == STEPS, own
        assert any(f"rank {rank} finished {STEPS} steps" in line for line in own)  # loguru
        assert sum("checkpoint 1 saved at step 5" in line for line in own) == 1
    launcher = [(node, line) for _, _, node, r, line in lines if r is None]
    assert launcher and all(node == "node0" for node, _ in launcher)
    assert not any(level == "ERROR" for _, level, _, _, _ in lines)
    warnings = [line for _, level, _, _, line in lines if level == "WARNING"]
    assert all("watchdog: waiting for" in line for line in warnings)  # a slow start, at most

    records = clean.logs()
    for rank in range(WORLD):
        bodies = [r["body"] for r in records if r["resource"].get(semconv.WORKLOAD_RANK) == rank]
        assert sum(bool(re.match(r"step \d+/\d+ loss ", b)) for b in bodies) == STEPS
        assert f"rank {rank} finished {STEPS} steps" in bodies
    assert len(records) == len(lines)  # the same records on both sinks


def test_the_workers_spans_share_the_trace_of_the_launchers_cycle_span(clean: Run) -> None:
    cycles = cycle_spans(clean)
    assert list(cycles) == [0]
    cycle = cycles[0]
    assert cycle["resource"].get(semconv.WORKLOAD_RANK) is None  # the launcher's
    workers = worker_spans(clean)
    assert {s["resource"][semconv.WORKLOAD_RANK] for s in workers} == set(range(WORLD))
    assert {s["trace_id"] for s in workers} == {cycle["trace_id"]}
    runs = by_name(workers, semconv.SPAN_FTL_RUN)
    assert len(runs) == WORLD
    assert {s["parent_span_id"] for s in runs} == {cycle["span_id"]}  # through TRACEPARENT
    names = {s["name"] for s in workers}
    for name in (
        semconv.SPAN_CKPT_SCHEDULE,
        semconv.SPAN_CKPT_REQUEST,
        semconv.SPAN_CKPT_FINALIZE,
        semconv.SPAN_CKPT_SAVE_STAGE,
        semconv.SPAN_CKPT_SAVE_WRITE,
        semconv.SPAN_CKPT_SAVE_COMPLETION_SYNC,
        semconv.SPAN_FTL_PYTHON_STARTUP,
        COLLECTIVE_SPAN,
    ):
        assert name in names, name
    assert not any(s["attributes"].get(semconv.SPAN_TRUNCATED) for s in clean.spans())
    records = [r for r in clean.logs() if r["resource"].get(semconv.WORKLOAD_RANK) is not None]
    assert {r["trace_id"] for r in records} == {cycle["trace_id"]}


# --- a rank fails: one restart -------------------------------------------------------------


def test_a_failing_rank_is_restarted_once_and_the_job_finishes(failing: Run) -> None:
    assert failing.proc.returncode == 0, failing.proc.stdout + failing.proc.stderr
    out = failing.proc.stdout
    assert "cycle 0: failure: rank 3 exited with status 1" in out
    assert "the job finished in cycle 1 after 1 restart" in out


def test_the_failing_ranks_exception_is_logged_with_its_traceback(failing: Run) -> None:
    errors = [r for r in failing.logs() if r["severity_text"] == "ERROR"]
    own = [r for r in errors if r["resource"].get(semconv.WORKLOAD_RANK) == 3]
    assert len(own) == 1, errors
    record = own[0]
    assert record["attributes"][semconv.EXCEPTION_TYPE] == "InjectedFault"
    assert "Traceback" in record["attributes"][semconv.EXCEPTION_STACKTRACE]
    assert record["resource"][semconv.RESTART_CYCLE] == 0
    text = (failing.out / "logs" / "nvrx_log_node1.log").read_text()
    assert "    InjectedFault: injected fault on rank 3 at step 7" in text


def test_the_restart_cycle_logs_with_restart_count_1_from_the_checkpoint(failing: Run) -> None:
    records = [r for r in failing.logs() if r["resource"].get(semconv.WORKLOAD_RANK) is not None]
    second = [r for r in records if r["resource"][semconv.RESTART_CYCLE] == 1]
    for rank in range(WORLD):
        bodies = [r["body"] for r in second if r["resource"][semconv.WORKLOAD_RANK] == rank]
        assert f"rank {rank} of {WORLD} starting cycle 1 at step 6 of {STEPS}" in bodies
        assert f"rank {rank} finished {STEPS} steps" in bodies
        steps = [int(m[1]) for b in bodies if (m := re.match(r"step (\d+)/", b))]
        assert steps == list(range(6, STEPS + 1))  # resumed after the checkpoint of step 5


def test_each_cycle_has_its_span_and_its_workers_share_its_trace(failing: Run) -> None:
    cycles = cycle_spans(failing)
    assert sorted(cycles) == [0, 1]
    assert cycles[0]["status"].get("code") == 2  # ERROR
    assert "rank 3 exited with status 1" in cycles[0]["status"].get("message", "")
    assert cycles[1]["status"].get("code", 0) != 2
    assert cycles[0]["trace_id"] != cycles[1]["trace_id"]
    for s in worker_spans(failing):
        cycle = s["resource"][semconv.RESTART_CYCLE]
        assert s["trace_id"] == cycles[cycle]["trace_id"], s
    launcher = [s for s in failing.spans() if s["resource"].get(semconv.WORKLOAD_RANK) is None]
    faults = by_name(launcher, semconv.SPAN_FTL_FAULT)
    assert [f["attributes"][semconv.RESTART_CYCLE] for f in faults] == [0]
    assert by_name(launcher, semconv.SPAN_FTL_TEARDOWN)


def test_the_ranks_stopped_by_the_launcher_end_their_spans_as_errors(failing: Run) -> None:
    """SIGTERM raises in the rank: its spans end (ERROR), nothing is left open."""
    runs = [
        s
        for s in by_name(worker_spans(failing), semconv.SPAN_FTL_RUN)
        if s["resource"][semconv.RESTART_CYCLE] == 0
    ]
    assert len(runs) == WORLD
    assert all(s["status"].get("code") == 2 for s in runs)
    assert not any(s["attributes"].get(semconv.SPAN_TRUNCATED) for s in failing.spans())


# --- a rank hangs: the watchdog kills the job ----------------------------------------------


def test_the_report_names_the_failing_rank_first_and_no_hung_rank(failing: Run) -> None:
    from nvrx_otel.report import analyse

    report = analyse([str(failing.out / "otlp")])
    assert report.first_failure is not None and report.first_failure.rank == 3
    assert report.silent == []
    assert len(report.cycles) == 2
    assert (
        "first failure (its own evidence)" in failing.proc.stdout
    )  # printed at the end of the run
    assert "rank 3 on node1 (cycle 0)" in failing.proc.stdout
    # the three the launcher stopped are victims, not failures; the restart is said
    assert report.verdict.startswith("FAILED: rank 3 (node1) "), report.verdict
    assert "the launcher stopped ranks 0-2; restarted, cycle 1 completed." in report.verdict
    assert report.stopped == [0, 1, 2]
    assert [c.failed_ranks for c in report.cycles] == [1, 0]
    assert "FAILED: rank 3 (node1)" in failing.proc.stdout  # the run's report starts with it


def test_the_report_names_the_hung_rank(hanging: Run) -> None:
    from nvrx_otel.report import analyse

    report = analyse([str(hanging.out / "otlp")])
    assert [s.rank for s in report.silent] == [1]
    assert "silent ranks" in hanging.proc.stdout
    assert report.verdict.startswith("HUNG: rank 1 (node0) went silent in "), report.verdict
    (h,) = report.hung
    assert (h.rank, h.waiting) == (1, 3)
    assert report.stopped == [0, 2, 3]  # the three waiting, stopped by the launcher
    assert "HUNG: rank 1 (node0)" in hanging.proc.stdout


def test_a_hang_kills_the_job_and_exits_1(hanging: Run) -> None:
    assert hanging.proc.returncode == 1, hanging.proc.stdout + hanging.proc.stderr
    out = hanging.proc.stdout
    assert "cycle 0: hang: rank 1 has not joined allreduce" in out
    assert "the job failed in cycle 0" in out
    assert "logs/nvrx_log_node0.log" in out  # what it wrote is still listed


def test_the_others_wait_with_heartbeats_after_the_hung_ranks_last_record(hanging: Run) -> None:
    lines = hanging.node_log()
    last_of_hung = max(t for t, _, _, r, _ in lines if r == 1)
    beats = [
        (t, r)
        for t, level, _, r, line in lines
        if level == "WARNING" and "watchdog: waiting for rank 1 in allreduce" in line
    ]
    assert {r for _, r in beats} == {0, 2, 3}
    for rank in (0, 2, 3):
        after = [t for t, r in beats if r == rank and t > last_of_hung]
        assert len(after) >= 3, beats  # every 0.5 s for the 4 s of the watchdog's timeout
    assert any("ignored SIGTERM" in line and "SIGKILL" in line for *_, line in lines)


def test_the_hung_ranks_open_collective_span_is_closed_as_truncated(hanging: Run) -> None:
    collectives = by_name(worker_spans(hanging), COLLECTIVE_SPAN)
    truncated = [s for s in collectives if s["attributes"].get(semconv.SPAN_TRUNCATED)]
    assert len(truncated) == 1, truncated
    span = truncated[0]
    assert span["resource"][semconv.WORKLOAD_RANK] == 1
    assert span["attributes"][COLLECTIVE_OP] == "allreduce"
    assert span["status"].get("code") == 2
    waiting = [
        s
        for s in collectives
        if s["resource"][semconv.WORKLOAD_RANK] != 1 and s["status"].get("code") == 2
    ]
    assert {s["resource"][semconv.WORKLOAD_RANK] for s in waiting} == {0, 2, 3}  # SIGTERM
    cycle = cycle_spans(hanging)[0]
    assert cycle["status"].get("code") == 2 and span["trace_id"] == cycle["trace_id"]


# --- the command line ----------------------------------------------------------------------


def run_cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvrx_otel.cli", "demo", *args],
        capture_output=True, text=True, cwd=tmp, timeout=60,
    )  # fmt: skip


def test_help_gives_an_example(tmp_path: Path) -> None:
    out = run_cli(tmp_path, "--help")
    assert out.returncode == 0
    assert "example:" in out.stdout and "--fail-rank" in out.stdout
    assert "nvrx-otel demo --fail-rank" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--fail-rank", "8"],
            "--fail-rank 8 is not a rank of this job: ranks are 0 to 7 (2 nodes x 4 ranks)",
        ),
        (["--out", "afile"], "--out afile is not a directory"),
        (["--steps", "0"], "--steps must be from 1 to 10000, got 0"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "afile").write_text("x")
    out = run_cli(tmp_path, *args)
    assert out.returncode == 2
    assert out.stderr == f"nvrx-otel demo: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing was written


# --- Ctrl-C --------------------------------------------------------------------------------


def processes_mentioning(text: str) -> list[str]:
    """Command lines of the running processes whose arguments contain ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


# Ctrl-C at a terminal: SIGINT with its default action, whatever this test runner inherited
# (a shell without job control starts background commands with SIGINT ignored, and an
# ignored SIGINT stays ignored across exec).
CTRL_C_ABLE = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'nvrx-otel'; runpy.run_module('nvrx_otel.cli', run_name='__main__')"
)


def test_ctrl_c_stops_the_ranks_drains_the_aggregators_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = spawn(
        [sys.executable, "-c", CTRL_C_ABLE, "demo", "--out", str(out), "--steps", "1000",
         "--nodes", "2", "--ranks-per-node", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    first = out / "collectives" / "cycle0" / "000001"
    wait_until(lambda: first.is_dir() and len(list(first.iterdir())) == WORLD, "every rank up")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 130, stdout + stderr
    assert "nvrx-otel demo: interrupted" in stdout and str(out / "logs") in stdout
    assert processes_mentioning(str(out)) == []
    stopped = [
        r
        for _, level, _, r, line in Run(out, subprocess.CompletedProcess([], 0)).node_log()
        if level == "WARNING" and "signal SIGTERM from the launcher" in line
    ]
    assert sorted(stopped) == list(range(WORLD))  # logged, then drained into the node log


# --- a collector -----------------------------------------------------------------------------


def test_with_an_otlp_endpoint_the_same_records_go_there_too(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run = demo(tmp_path, "--otlp-endpoint", receiver.endpoint)
        assert run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
        keys = {r["attributes"][semconv.RECORD_KEY] for r in run.logs()}
        span_ids = {s["span_id"] for s in run.spans()}
        with receiver.lock:  # the aggregators drained: everything was acknowledged
            got_keys = {r["attributes"][semconv.RECORD_KEY] for r in receiver.logs}
            got_spans = {s["span_id"] for s in receiver.spans}
    assert keys and got_keys == keys
    assert span_ids and got_spans == span_ids
