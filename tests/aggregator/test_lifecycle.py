"""The service as a real process: wait file, signals, drain timeout, the job lock, CPU
priority, other jobs' spool files and the command line (H9)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvrx_otel.aggregator.health import JOB_MISMATCH_EXIT
from tests.aggregator.spoolkit import (
    NO_WATCHER,
    NODE,
    AggProc,
    FakeWriter,
    cli,
    finish,
    log_path,
    messages,
    process_env,
    spawn,
    spool_dir,
    started,
    wait_for,
)


def test_stale_wait_file_is_ignored_until_made_again(tmp_path: Path) -> None:
    """A wait file older than the aggregator (a previous job's, a second old) does not
    stop it; touching it again does."""
    done = tmp_path / "done"
    done.touch()
    an_old_time = time.time_ns() - 1_000_000_000
    os.utime(done, ns=(an_old_time, an_old_time))
    w = FakeWriter(spool_dir(tmp_path))
    agg = cli(tmp_path)
    started(tmp_path, agg)
    w.log("one")
    wait_for(lambda: messages(log_path(tmp_path)) == ["one"], what="first record")
    w.log("two")  # a later cycle: the aggregator is still running despite the old file
    wait_for(lambda: messages(log_path(tmp_path)) == ["one", "two"], what="second record")
    assert agg.poll() is None
    w.close()
    os.utime(done, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    code, err = finish(agg, timeout=10)
    assert code == 0, err
    assert "is older than this aggregator: ignoring it" in err
    assert "stopped (wait file)" in err


LATE_STARTING_AGGREGATOR = """
import pathlib, runpy, sys
pathlib.Path(sys.argv[1]).touch()  # the workload ends before the aggregator's own code runs
sys.argv = ["nvrx_otel.logging.aggregator", *sys.argv[2:]]
runpy.run_module("nvrx_otel.logging.aggregator", run_name="__main__", alter_sys=True)
"""


def test_wait_file_made_while_the_aggregator_starts_up_counts(tmp_path: Path) -> None:
    """A fast workload finishes, and touches the wait file, after the aggregator's process
    started but before its Python reached the wait file (a 2-core node under a job's
    start-up load): the wait file counts, the aggregator drains and exits at once instead
    of waiting for a touch that never comes."""
    w = FakeWriter(spool_dir(tmp_path))
    for i in range(50):
        w.log(f"r{i}")
    w.close()
    done = tmp_path / "done"
    agg = cli(tmp_path, command=[sys.executable, "-c", LATE_STARTING_AGGREGATOR, str(done)])
    code, err = finish(agg, timeout=60)
    assert code == 0, err
    assert "older than this aggregator" not in err, err
    assert "stopped (wait file)" in err, err
    assert messages(log_path(tmp_path)) == [f"r{i}" for i in range(50)]


def test_wait_file_judged_against_the_start_it_is_given(tmp_path: Path) -> None:
    """The rule itself: a wait file whose mtime is at or after the start (less the clocks'
    slack) counts at once; one older is stale until touched again."""
    from nvrx_otel.aggregator.lifecycle import WaitFile

    done = tmp_path / "done"
    done.touch()
    made = done.stat().st_mtime_ns
    assert WaitFile(done, since_ns=made - 1).fresh()
    assert WaitFile(done, since_ns=made + WaitFile.SLACK_NS).fresh()
    stale = WaitFile(done, since_ns=made + WaitFile.SLACK_NS + 1)
    assert not stale.fresh()
    assert not WaitFile(done).fresh()  # no start given: whatever is there is stale
    os.utime(done, ns=(made + 10**9, made + 10**9))  # touched again
    assert stale.fresh()
    assert not WaitFile(tmp_path / "absent", since_ns=0).fresh()


def test_sigterm_drains_writers_that_finish_then_exits_0(tmp_path: Path) -> None:
    """On SIGTERM the aggregator keeps reading while writers live, writes everything once
    they are gone, prints a summary and exits 0."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("before the signal")
    agg = cli(tmp_path)
    started(tmp_path, agg)
    wait_for(lambda: messages(log_path(tmp_path)) == ["before the signal"], what="record")
    agg.send_signal(signal.SIGTERM)
    for i in range(100):
        w.log(f"during the drain {i}")
    w.close()
    code, err = finish(agg, timeout=15)
    assert code == 0, err
    assert messages(log_path(tmp_path)) == ["before the signal"] + [
        f"during the drain {i}" for i in range(100)
    ]
    assert "stopped (SIGTERM)" in err and "wrote 101 records" in err


def test_drain_timeout_bounds_the_wait_for_live_writers(tmp_path: Path) -> None:
    """A writer that never exits holds the aggregator only for --drain-timeout; what was
    complete is written and the summary says a writer was left running."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("complete")
    w.raw(b'{"v":1,"k":"log","msg":"torn')
    agg = cli(tmp_path, "--drain-timeout", "0.5")
    started(tmp_path, agg)
    wait_for(lambda: messages(log_path(tmp_path)) == ["complete"], what="record")
    start = time.monotonic()
    agg.send_signal(signal.SIGINT)
    code, err = finish(agg, timeout=15)
    elapsed = time.monotonic() - start
    w.close()
    assert code == 0, err
    assert 0.4 < elapsed < 5, elapsed
    assert "1 writer was still running after the 0.5 s drain timeout" in err
    assert messages(log_path(tmp_path)) == ["complete"]


def test_wait_file_drain_reads_on_while_a_live_writer_still_logs(tmp_path: Path) -> None:
    """The process that made the wait file ended, another writer (a node's other task)
    goes on logging for longer than --drain-timeout: every record it writes reaches the
    node log, and the drain ends --drain-timeout after its last one."""
    w = FakeWriter(spool_dir(tmp_path))
    agg = cli(tmp_path, "--drain-timeout", "1")
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    wait_for(lambda: "draining (wait file)" in agg.err(), what="the drain")
    deadline = time.monotonic() + 3  # three drain timeouts of logging
    i = 0
    while time.monotonic() < deadline:
        w.log(f"late {i}")
        i += 1
        time.sleep(0.05)
    last = time.monotonic()
    code, err = finish(agg, timeout=30)
    ended = time.monotonic()
    w.close()
    assert code == 0, err
    assert messages(log_path(tmp_path)) == [f"late {n}" for n in range(i)]
    assert ended - last >= 0.9, "it waits --drain-timeout after the last record"
    assert "after the last record read 1 s" in err


def test_signal_during_a_wait_file_drain_bounds_it(tmp_path: Path) -> None:
    """A SIGTERM while a wait-file drain follows a writer that keeps logging: the drain
    ends --drain-timeout after the signal (Slurm's SIGKILL follows its SIGTERM)."""
    w = FakeWriter(spool_dir(tmp_path))
    agg = cli(tmp_path, "--drain-timeout", "1")
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    wait_for(lambda: "draining (wait file)" in agg.err(), what="the drain")
    agg.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    while agg.poll() is None and time.monotonic() - signalled < 20:
        w.log("still logging")
        time.sleep(0.05)
    code, err = finish(agg, timeout=30)
    w.close()
    assert code == 0, err
    assert time.monotonic() - signalled < 6, err


def test_signal_repeated_at_once_is_the_same_shutdown(tmp_path: Path) -> None:
    """``scancel``: Slurm's SIGTERM and the job script's forwarded one arrive together. The
    second must not cut the drain short: records written after both still arrive, and
    the exit is 0."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("before the signals")
    agg = cli(tmp_path, "--drain-timeout", "60")
    started(tmp_path, agg)
    agg.send_signal(signal.SIGTERM)
    wait_for(lambda: "draining (SIGTERM)" in agg.err(), what="the drain to begin")
    agg.send_signal(signal.SIGTERM)  # (sent at once they may merge into one delivery)
    wait_for(lambda: "again within" in agg.err(), what="the second signal")
    for i in range(100):
        w.log(f"after the signals {i}")
    w.close()
    code, err = finish(agg, timeout=30)
    assert code == 0, err
    assert messages(log_path(tmp_path)) == ["before the signals"] + [
        f"after the signals {i}" for i in range(100)
    ]
    assert "exiting at once" not in err


def test_second_signal_after_the_grace_exits_at_once(tmp_path: Path) -> None:
    """During a long drain a signal that comes after the grace period (a person pressing
    Ctrl-C again) ends the process immediately."""
    from nvrx_otel.aggregator.lifecycle import SIGNAL_GRACE_S

    w = FakeWriter(spool_dir(tmp_path))
    agg = cli(tmp_path, "--drain-timeout", "60")
    started(tmp_path, agg)
    agg.send_signal(signal.SIGTERM)
    wait_for(lambda: "draining (SIGTERM)" in agg.err(), what="the drain to begin")
    time.sleep(SIGNAL_GRACE_S)  # the grace is a span of time: let it pass
    assert agg.poll() is None  # the live writer keeps the drain going
    start = time.monotonic()
    agg.send_signal(signal.SIGTERM)
    code, err = finish(agg, timeout=10)
    w.close()
    assert time.monotonic() - start < 5
    assert code == 128 + signal.SIGTERM, err
    assert "second signal: exiting at once" in err


def test_workload_signals_neither_stop_nor_kill_it(tmp_path: Path) -> None:
    """Slurm sends SIGUSR1 (``--signal=USR1@T``, ``scancel -s USR1``) or SIGUSR2 to every
    process of a step, meant for the training: the aggregator says so and aggregates on."""
    w = FakeWriter(spool_dir(tmp_path))
    agg = cli(tmp_path)
    started(tmp_path, agg)
    # Its CPU priority is lowered right after its handlers are in place.
    nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
    wait_for(lambda: os.getpriority(os.PRIO_PROCESS, agg.pid) == nice, what="handlers")
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        agg.send_signal(sig)
        wait_for(lambda s=sig: f"{s.name}: a signal for the workload" in agg.err(), what=sig.name)
    w.log("after the signals")
    wait_for(lambda: messages(log_path(tmp_path)) == ["after the signals"], what="record")
    w.close()
    assert agg.poll() is None
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert "draining" in err


def test_second_aggregator_on_the_same_job_is_refused(tmp_path: Path) -> None:
    first = cli(tmp_path)
    started(tmp_path, first)
    second = cli(tmp_path)
    code, err = finish(second, timeout=15)
    assert code == 1
    assert f"another aggregator (pid {first.pid}) already serves" in err
    assert ".nvrx_aggregator.lock" in err
    assert first.poll() is None
    (tmp_path / "done").touch()
    code, err = finish(first)
    assert code == 0, err


def test_runs_at_lowered_cpu_priority_by_default(tmp_path: Path) -> None:
    agg = cli(tmp_path)
    started(tmp_path, agg)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    wait_for(lambda: os.getpriority(os.PRIO_PROCESS, agg.pid) == min(19, mine + 10), what="nice")
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err


def test_other_jobs_spool_files_are_reported_not_mixed_in(tmp_path: Path) -> None:
    other = FakeWriter(spool_dir(tmp_path, "job2"))
    other.log("belongs to job2")
    other.close()
    mine = FakeWriter(spool_dir(tmp_path))
    mine.log("belongs to job1")
    mine.close()
    agg = cli(tmp_path)
    started(tmp_path, agg)
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert messages(log_path(tmp_path)) == ["belongs to job1"]
    assert f"{spool_dir(tmp_path, 'job2')} holds 1 spool file (" in err
    assert "of another job" in err
    assert other.path.exists()  # left alone


def _rank_with_run_id(tmp: Path, run_id: str, text: str) -> None:
    """A rank process started with TORCHELASTIC_RUN_ID: it spools into <root>/<run_id>/."""
    code = (
        "from nvrx_otel.logging import setup_logger\n"
        f"setup_logger(node_local_tmp_dir={str(tmp / 'spool')!r}).info({text!r})\n"
    )
    env = process_env(tmp, NODE, TORCHELASTIC_RUN_ID=run_id)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


def _aggregator_without_job_id(tmp: Path) -> AggProc:
    env = process_env(tmp, NODE)
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    argv = [sys.executable, "-m", "nvrx_otel.logging.aggregator", "--log-dir", str(tmp / "logs")]
    argv += ["--wait-file", str(tmp / "done"), "--check-interval", "0.05"]
    agg = spawn(tmp, argv, env)
    started(tmp, agg, job="nojob")
    return agg


def test_job_id_mismatch_is_said_at_once_and_exits_non_zero(tmp_path: Path) -> None:
    """Ranks with TORCHELASTIC_RUN_ID=myrun, an aggregator started without it: it serves
    nojob and writes nothing. It says so as soon as myrun receives records (not at the next
    status line, 60 s later), again in the summary, and exits 3."""
    agg = _aggregator_without_job_id(tmp_path)
    _rank_with_run_id(tmp_path, "myrun", "lost to the mismatch")
    myrun = tmp_path / "spool" / "myrun"
    wait_for(lambda: "is receiving records of another job" in agg.err(), what="mismatch line")
    line = next(x for x in agg.err().splitlines() if "is receiving records" in x)
    assert str(myrun) in line and "--job-id myrun" in line and "received none" in line
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == JOB_MISMATCH_EXIT == 3, err
    summary = err.strip().splitlines()[-1]
    assert "stopped (wait file)" in summary and "wrote 0 records" in summary
    assert f"records went to other jobs' spool directories while it ran: {myrun}" in summary
    assert "exit status 3" in summary
    assert log_path(tmp_path).parent.exists() and not messages(log_path(tmp_path))


def test_job_id_mismatch_with_records_of_its_own_is_said_but_exits_zero(tmp_path: Path) -> None:
    agg = _aggregator_without_job_id(tmp_path)
    mine = FakeWriter(tmp_path / "spool" / "nojob")
    mine.log("mine")
    mine.close()
    wait_for(lambda: messages(log_path(tmp_path)) == ["mine"], what="own record")
    _rank_with_run_id(tmp_path, "myrun", "elsewhere")
    wait_for(lambda: "is receiving records of another job" in agg.err(), what="mismatch line")
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert "records went to other jobs' spool directories" in err.strip().splitlines()[-1]


def test_another_jobs_spool_an_aggregator_serves_is_not_a_mismatch(tmp_path: Path) -> None:
    other = FakeWriter(spool_dir(tmp_path, "job2"))
    other.log("job2's own aggregator takes it")
    (spool_dir(tmp_path, "job2") / ".nvrx_aggregator.lock").write_text(f"{os.getpid()}\n")
    agg = cli(tmp_path)
    started(tmp_path, agg)
    other.log("more for job2")
    other.close()
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert "is receiving records" not in err and "records went to other jobs'" not in err


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX"))}
    full_env.update(NO_WATCHER)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, env=full_env, timeout=60
    )


def test_bad_values_name_the_flag(tmp_path: Path) -> None:
    base = ["--log-dir", str(tmp_path), "--wait-file", str(tmp_path / "w")]
    base += ["--spool-dir", str(tmp_path / "s")]
    for flag, value, words in (
        ("--check-interval", "abc", "expected a number of seconds > 0, got 'abc'"),
        ("--check-interval", "0", "expected a number of seconds > 0, got '0'"),
        ("--drain-timeout", "-1", "expected a number of seconds >= 0, got '-1'"),
        ("--nice", "40", "expected a whole number from 0 to 19, got '40'"),
    ):
        out = _run("nvrx_otel.logging.aggregator", *base, flag, value)
        assert out.returncode == 2, out.stderr
        assert f"argument {flag}: {words}" in out.stderr
    out = _run("nvrx_otel.logging.aggregator", "--log-dir", str(tmp_path), "--wait-file", "w")
    assert out.returncode == 2
    assert "pass --spool-dir or set NVRX_NODE_LOCAL_TMPDIR" in out.stderr
    out = _run("nvrx_otel.logging.aggregator", *base, env={"NVRX_OTEL_HOLD_WINDOW_MS": "soon"})
    assert out.returncode == 2
    assert "NVRX_OTEL_HOLD_WINDOW_MS='soon': expected a whole number >= 0" in out.stderr


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode != 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "error: " in lines[0], out.stderr  # no usage, no traceback
    return lines[0]


def _base(tmp: Path, log_dir: Path | None = None) -> list[str]:
    return ["--log-dir", str(log_dir or tmp / "logs"), "--wait-file", str(tmp / "w"),
            "--spool-dir", str(tmp / "s"), "--drain-timeout", "0"]  # fmt: skip


def test_log_dir_that_is_a_file_is_one_line_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    out = _run("nvrx_otel.logging.aggregator", *_base(tmp_path, tmp_path / "afile"))
    line = _one_line_error(out)
    assert out.returncode == 1 and f"{tmp_path / 'afile'} is not a directory" in line


def test_otlp_json_naming_a_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    for target in (tmp_path / "afile", tmp_path / "afile" / "below"):
        out = _run("nvrx_otel.logging.aggregator", *_base(tmp_path), "--otlp-json", str(target))
        line = _one_line_error(out)
        assert f"cannot write OTLP/JSON lines to {target}: {tmp_path / 'afile'} is not a" in line


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:port"),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "collector/v1/logs"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector"),
    ],
)
def test_endpoint_variable_that_is_not_a_url_is_refused_at_start(
    tmp_path: Path, name: str, value: str
) -> None:
    """Such an endpoint was retried for ever; now one line names the variable and value."""
    out = _run("nvrx_otel.logging.aggregator", *_base(tmp_path), env={name: value})
    line = _one_line_error(out)
    assert out.returncode == 2 and f"{name}={value!r}: expected an http:// or https:// URL" in line


def test_grpc_endpoint_variable_may_be_host_and_port(tmp_path: Path) -> None:
    from nvrx_otel.aggregator.otlp_transport import resolve

    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "node:4317"}
    assert resolve("logs", environ=environ).endpoint == "node:4317"
    with pytest.raises(ValueError, match="or host:port for gRPC"):
        resolve("logs", environ={**environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "node:port"})


def test_wait_file_in_a_missing_directory_is_warned_at_start(tmp_path: Path) -> None:
    wait = tmp_path / "not-yet" / "done"
    agg = cli(tmp_path, wait_file=wait)
    started(tmp_path, agg)
    assert f"the wait file's directory {wait.parent} does not exist" in agg.err()
    wait.parent.mkdir()
    wait.touch()  # made later, it still ends the run
    code, err = finish(agg)
    assert code == 0, err


def test_nvrx_otel_aggregate_is_the_same_command(tmp_path: Path) -> None:
    out = _run("nvrx_otel.cli", "aggregate", "--help")
    assert out.returncode == 0
    assert out.stdout.startswith("usage: nvrx-otel aggregate")
    assert "--en-chronological-ordering" in out.stdout and "--drain-timeout" in out.stdout
    w = FakeWriter(spool_dir(tmp_path))
    w.log("via nvrx-otel aggregate")
    w.close()
    (tmp_path / "done").touch()  # older than the aggregator: ignored ...
    env = {"NVRX_OTEL_NODE_ID": NODE}
    proc = spawn(
        tmp_path,
        [sys.executable, "-m", "nvrx_otel.cli", "aggregate", "--log-dir", str(tmp_path / "logs"),
         "--wait-file", str(tmp_path / "done"), "--spool-dir", str(tmp_path / "spool"),
         "--job-id", "job1", "--check-interval", "0.05"],
        {**os.environ, **env},
    )  # fmt: skip
    started(tmp_path, proc)
    wait_for(lambda: messages(log_path(tmp_path)) == ["via nvrx-otel aggregate"], what="record")
    os.utime(tmp_path / "done", ns=(time.time_ns(), time.time_ns() + 1_000_000))  # ... until now
    code, err = finish(proc)
    assert code == 0, err


def test_status_lines_and_final_summary_on_stderr(tmp_path: Path) -> None:
    """Every NVRX_OTEL_STATUS_INTERVAL_S a status line (lag, backlog, records/s, drops,
    corrupt records) goes to stderr, and a summary at the end."""
    w = FakeWriter(spool_dir(tmp_path))
    w.log("one")
    w.raw(b"not a record\n")
    w.raw(b'{"v":1,"k":"log","msg":"half')  # a tail that waits: backlog
    agg = cli(tmp_path, env={"NVRX_OTEL_STATUS_INTERVAL_S": "0.1"})
    started(tmp_path, agg)
    line = wait_for(
        lambda: next(
            (x for x in agg.err().splitlines() if "status:" in x and "1 corrupt" in x), ""
        ),
        what="a status line",
    )
    assert re.search(
        r"status: lag \d+\.\d s, backlog 28 B, \d+ records/s, 2 written, 0 dropped, "
        r"1 corrupt, 1 writer \(1 live\)$",
        line,
    ), line
    w.close()
    (tmp_path / "done").touch()
    code, err = finish(agg)
    assert code == 0, err
    assert re.search(
        r"stopped \(wait file\) after \d+\.\d s: wrote 3 records to .*nvrx_log_testnode\.log "
        r"\(\d+ records/s\); reported 0 dropped and 2 corrupt records; 1 writer$",
        err.rstrip("\n").splitlines()[-1],
    ), err
