"""The Slurm batch script of docs/launchers.md under what a big job meets besides a clean end: local
task 0 failing while the others run on, Slurm's warning signal, a small spool under many
tasks, an OTLP endpoint that never answers, the aggregator killed mid-run then run again
with ``--job-id``, and a ``scancel`` while the aggregator is still starting.

The cluster, the script and the job helpers are test_slurm.py's; each test checks the
page's promise for its scenario: every record a task logged is in the node log or in a
``dropped`` line, the step ends promptly, and the exit code is the workload's.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvrx_otel import semconv
from tests.launchers import test_slurm
from tests.launchers.slurm import SlurmCluster
from tests.launchers.test_slurm import DROPPED, Job, messages
from tests.otlp_receiver import OtlpReceiver

# test_slurm's fixtures: the cluster (one for this module), its OTLP receiver, a job.
slurm = test_slurm.slurm
receiver = test_slurm.receiver
job = test_slurm.job


def kept_and_dropped(job: Job) -> tuple[Counter[str], Counter[str]]:
    """Records kept per task (``t<procid>-<i>``, each must be there once) and records
    reported dropped per task (by the infra rank of the drop line: the workload rank is
    ``?`` under a plain ``srun``)."""
    records = job.node_log()
    logged = messages(records)
    assert not logged or max(logged.values()) == 1, "duplicates in the node log"
    kept: Counter[str] = Counter(m.split("-")[0][1:] for m in logged)
    dropped: Counter[str] = Counter()
    for r in records:
        m = DROPPED.search(r["msg"])
        if m:
            dropped[r["irank"]] += int(m.group(1))
    return kept, dropped


def counts(job: Job) -> dict[str, int]:
    """How many records each task says it logged, by procid."""
    return {p.name.rsplit("-", 1)[1]: int(p.read_text()) for p in job.out.glob("count-*")}


def test_task_0_failing_first_keeps_the_records_of_the_tasks_that_run_on(job: Job) -> None:
    """Local task 0 crashes at once; the node's other tasks run on (in training: hanging
    in a collective until a timeout, logging what one needs to debug it) longer than the
    recipe's 20 s drain. Their records must reach the node log, and the step ends with the
    workload's code."""
    job.submit("first_fails 26", "-n", "2", "--overcommit")
    state, _ = job.wait_end(timeout=120)
    assert (state, job.show()["ExitCode"]) == ("FAILED", "1:0"), job.output()
    logged = counts(job)
    assert logged["0"] == 100 and logged["1"] > 300, logged
    kept, dropped = kept_and_dropped(job)
    for procid, count in logged.items():
        assert kept[procid] + dropped[procid] == count, (
            procid, kept[procid], dropped[procid], count, job.output(),
        )  # fmt: skip


def test_scancel_usr1_keeps_every_record_and_the_workloads_exit_code(job: Job) -> None:
    """Slurm's usual warning before a time limit (``--signal=USR1@90``, or ``scancel -s
    USR1``) goes to every process of the step; a training job checkpoints on it and
    leaves. The aggregator and the recipe's tasks must live through it."""
    job.submit("until_term", "-n", "2", "--overcommit")
    job.slurm.wait_until("records in the node log", lambda: len(job.node_log()) > 2000, 90)
    done = job.slurm.run("scancel", "--signal=USR1", job.id)
    assert done.returncode == 0, done.stderr
    state, _ = job.wait_end(timeout=90)
    logged = counts(job)
    assert sorted(logged) == ["0", "1"], f"each task leaves on SIGUSR1:\n{job.output()}"
    kept, dropped = kept_and_dropped(job)
    for procid, count in logged.items():
        assert kept[procid] + dropped[procid] == count, (
            procid, kept[procid], dropped[procid], count, job.output(),
        )  # fmt: skip
    assert (state, job.show()["ExitCode"]) == ("FAILED", "143:0"), job.output()


def test_budget_drops_of_eight_tasks_on_two_cpus_are_all_reported(
    job: Job, receiver: OtlpReceiver
) -> None:
    """Eight tasks on the cluster's two CPUs log a burst into a small spool
    (``NVRX_LOG_MAX_FILE_SIZE_KB=64``, one file): the writers drop for budget, and for each
    task its 20000 records and its ``work`` span's end are in the node log, counted
    dropped, or (the span) exported."""
    job.env.update(NVRX_LOG_MAX_FILE_SIZE_KB="64", NVRX_LOG_MAX_LOG_FILES="1")
    job.submit("normal 20000", "-n", "8", "--overcommit")
    state, _ = job.wait_end(timeout=180)
    assert state == "COMPLETED", job.output()
    kept, dropped = kept_and_dropped(job)
    assert sum(dropped.values()) > 0, "the burst was to overrun the spool budget"
    # The aggregator exited before the step ended: what it exported has arrived. A span
    # whose end record was dropped is exported truncated (from its start record).
    ended = Counter(
        str(s["resource"][semconv.INFRA_RANK])
        for s in receiver.spans
        if s["name"] == "work" and not s["attributes"].get(semconv.SPAN_TRUNCATED)
    )
    for procid in map(str, range(8)):
        assert kept[procid] + dropped[procid] + ended[procid] == 20000 + 1, (
            procid, kept[procid], dropped[procid], ended[procid], job.output(),
        )  # fmt: skip


@pytest.fixture
def black_hole(slurm: SlurmCluster) -> Iterator[str]:
    """An OTLP endpoint in the cluster's namespace that accepts connections and never
    answers (a collector that hangs): a listening socket nobody accepts from."""

    def listen() -> socket.socket:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        return s

    sock = slurm.in_netns(listen)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_scancel_with_an_otlp_endpoint_that_never_answers_ends_before_kill_wait(
    job: Job, black_hole: str
) -> None:
    """An OTLP export that hangs must not hold the step: after ``scancel`` the drain ends
    within ``--drain-timeout`` (20 s), before Slurm's SIGKILL (KillWait, 30 s), and the
    node log has every record."""
    job.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = black_hole
    job.submit("until_term", "-n", "2", "--overcommit")
    job.slurm.wait_until("records in the node log", lambda: len(job.node_log()) > 2000, 90)
    cancelled = time.time()
    done = job.slurm.run("scancel", job.id)
    assert done.returncode == 0, done.stderr
    state, ended = job.wait_end(timeout=90)
    assert state == "CANCELLED", job.output()
    assert ended - cancelled < 29, f"{ended - cancelled:.1f} s:\n{job.output()}"
    assert "exit at once" not in job.output()
    assert "stopped (SIGTERM)" in job.output(), job.output()
    kept, dropped = kept_and_dropped(job)
    logged = counts(job)
    assert sorted(logged) == ["0", "1"], job.output()
    for procid, count in logged.items():
        assert kept[procid] + dropped[procid] == count, (procid, kept, dropped, job.output())


def aggregator_pid(job: Job) -> int:
    """The pid of the job's aggregator (the one writing to its ``AGG_DIR``)."""
    agg_dir = str(job.tmp / "logs" / job.id)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"nvrx_otel.logging.aggregator" in argv and agg_dir.encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no aggregator for {agg_dir}:\n{job.output()}")


def spooled(directory: Path) -> int:
    """Bytes in the spool files of ``directory`` (files may vanish as they are read)."""
    total = 0
    for path in directory.glob("*.jsonl"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_rerun_with_job_id_after_the_aggregator_was_killed_writes_the_rest_once(
    job: Job,
) -> None:
    """The README's "a node that fails": the aggregator is killed (``kill -9``) while the
    tasks log on; once the job has ended, the aggregator run again on the node with
    ``--job-id`` and a fresh wait file writes what is left, each record once."""
    job.submit("until_term", "-n", "2", "--overcommit")
    job.slurm.wait_until("records in the node log", lambda: len(job.node_log()) > 2000, 90)
    os.kill(aggregator_pid(job), signal.SIGKILL)
    spool = job.tmp / "spool" / job.id
    left = spooled(spool)
    job.slurm.wait_until("records spooled after it", lambda: spooled(spool) > left + 200_000, 60)
    done = job.slurm.run("scancel", job.id)
    assert done.returncode == 0, done.stderr
    assert job.wait_end(timeout=60)[0] == "CANCELLED", job.output()
    logged = counts(job)
    assert sorted(logged) == ["0", "1"], job.output()
    before = sum(kept_and_dropped(job)[0].values())
    assert before < sum(logged.values()), "the killed aggregator had written everything"

    wait_file = job.tmp / "rerun.done"
    env = dict(os.environ, NVRX_NODE_LOCAL_TMPDIR=str(job.tmp / "spool"))
    env["NVRX_OTEL_STATUS_INTERVAL_S"] = "0"
    rerun = subprocess.Popen(
        [sys.executable, "-m", "nvrx_otel.logging.aggregator",
         "--log-dir", str(job.tmp / "logs" / job.id), "--wait-file", str(wait_file),
         "--job-id", job.id, "--drain-timeout", "20"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_file.touch()
    output, _ = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, output
    kept, dropped = kept_and_dropped(job)
    for procid, count in logged.items():
        assert kept[procid] + dropped[procid] == count, (procid, kept, dropped, output)
    assert not list((job.tmp / "spool" / job.id).glob("*.jsonl")), output
    assert re.search(r"stopped \(wait file\)", output), output


def test_scancel_while_the_aggregator_starts_keeps_every_record(job: Job) -> None:
    """Preemption or ``scancel`` can come at any moment, also while the aggregator's
    Python is still starting (seconds on a loaded node or a cold shared file system) and
    the ranks are already logging. Slurm's SIGTERM then reaches a process that has no
    handler yet: the recipe must keep it alive to drain what the ranks spooled.

    The aggregator's start is held at a gate: ``python`` on the job's ``PATH`` is a shim
    that, for the aggregator only, waits for a file before running the real interpreter."""
    gate = job.tmp / "gate"
    shim_dir = job.tmp / "shim"
    shim_dir.mkdir()
    shim = shim_dir / "python"
    shim.write_text(
        "#!/bin/bash\n"
        'if [[ " $* " == *" nvrx_otel.logging.aggregator "* ]]; then\n'
        f'  while [[ ! -e "{gate}" ]]; do sleep 0.05; done\n'
        "fi\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    shim.chmod(0o755)
    job.env["PATH"] = f"{shim_dir}:{job.env['PATH']}"
    job.submit("until_term", "-n", "2", "--overcommit")
    spool = job.tmp / "spool"
    # Both tasks logging (each handles SIGTERM from before its first record on; a task
    # still starting would die of the signal), and plenty spooled.
    job.slurm.wait_until(
        "records spooled by both tasks",
        lambda: spooled_anywhere(spool) > 100_000 and len(spooling_pids(spool)) == 2,
        90,
    )
    done = job.slurm.run("scancel", job.id)
    assert done.returncode == 0, done.stderr
    job.slurm.wait_until("the tasks' SIGTERM", lambda: len(counts(job)) == 2, 60)
    gate.touch()
    state, _ = job.wait_end(timeout=90)
    assert state == "CANCELLED", job.output()
    kept, dropped = kept_and_dropped(job)
    for procid, count in counts(job).items():
        assert kept[procid] + dropped[procid] == count, (
            procid, kept[procid], dropped[procid], count, job.output(),
        )  # fmt: skip


def spooling_pids(root: Path) -> set[str]:
    """The processes (``p<pid>`` of the names) with spool files under the spool root."""
    return {p.name.split(".")[1] for p in root.glob("*/*.jsonl")}


def spooled_anywhere(root: Path) -> int:
    """Bytes in the spool files under the spool root ``root``."""
    return sum(spooled(d) for d in root.glob("*") if d.is_dir())
