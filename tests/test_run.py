"""``nvrx-otel run``: a job's command run with this node's aggregator, through the real
path — a launcher that picks a random rendezvous id as ``torchrun --standalone`` does,
ranks spooling, the aggregator draining after the command, the verdict printed."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import orjson

from nvrx_otel import run
from tests.aggregator.spoolkit import process_env, wait_for
from tests.conftest import spawn

LAUNCHER = Path(__file__).with_name("run_launcher.py")


def _env(tmp: Path) -> dict[str, str]:
    """A shell's environment: no spool root, no job id; temporary files under ``tmp``."""
    environ = process_env(tmp, "n0", TMPDIR=str(tmp))
    del environ["NVRX_NODE_LOCAL_TMPDIR"]
    for name in ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_NNODES", "TORCHELASTIC_RUN_ID"):
        environ.pop(name, None)
    environ.update(NVRX_OTEL_CAPTURE_OUTPUT="auto", NVRX_OTEL_CAPTURE_STACKS="on")
    return environ


def _run(tmp: Path, *argv: str, **extra: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "nvrx_otel", "run", *argv]
    environ = {**_env(tmp), **extra}
    return spawn(cmd, env=environ, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _resources(out: Path) -> list[dict[str, object]]:
    found = []
    for path in (out / "otlp").glob("logs_*.jsonl"):
        for line in path.read_bytes().splitlines():
            for rl in orjson.loads(line)["resourceLogs"]:
                attrs = {a["key"]: a["value"] for a in rl["resource"]["attributes"]}
                found.append({k: next(iter(v.values())) for k, v in attrs.items()})
    return found


def test_a_launcher_with_a_random_id_the_culprit_named_the_exit_status_passed_on(
    tmp_path: Path,
) -> None:
    proc = _run(tmp_path, "--out", "out", "--", sys.executable, str(LAUNCHER), str(tmp_path),
                "hang", "crash", "hang", CRASH_AFTER_HANGS="2")  # fmt: skip
    _, err_bytes = proc.communicate(timeout=180)
    err = err_bytes.decode()
    assert proc.returncode == 1, err
    job = re.search(r"nvrx-otel run: job (\S+) \(new\)", err)
    assert job is not None, err
    verdict = re.search(r"nvrx-otel run: verdict: (.*)", err)
    assert verdict is not None, err
    assert verdict[1].startswith("FAILED: rank 1 (n0) step 3 failed"), verdict[1]
    assert "the launcher stopped ranks 0,2" in verdict[1], verdict[1]
    assert "nvrx-otel run: the command exited 1" in err
    resources = _resources(tmp_path / "out")
    # every rank's records reached this aggregator: the job id is run's, not the launcher's
    assert {r["nv.nvrx.job.id"] for r in resources} == {job[1]}
    assert {r.get("nv.nvrx.workload.rank") for r in resources} >= {"0", "1", "2"}
    assert {r["service.name"] for r in resources} == {"run_launcher"}
    spool = tmp_path / f"nvrx-otel-{os.getuid()}"
    assert spool.is_dir() and not any((spool / job[1]).glob("*.spool*"))  # drained
    # the commands it prints run as printed, and say the same
    report = re.search(r"nvrx-otel run: the report: (.*)", err)
    logs = re.search(r"nvrx-otel run: the logs:   (.*)", err)
    assert report is not None and logs is not None, err
    shown = subprocess.run(report[1], shell=True, cwd=tmp_path, env=_env(tmp_path),
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == verdict[1]
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
    listed = subprocess.run(logs[1], shell=True, cwd=tmp_path, env=_env(tmp_path),
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "CUDA error on rank 1" in listed.stdout


def test_sigterm_reaches_the_command_and_what_its_ranks_said_then_is_drained(
    tmp_path: Path,
) -> None:
    proc = _run(tmp_path, "--out", "out", "--job-id", "j7", "--", sys.executable,
                str(LAUNCHER), str(tmp_path), "hang", "hang")  # fmt: skip
    node_log = tmp_path / "out" / "logs" / "nvrx_log_n0.log"

    def waiting() -> bool:
        return len(list(tmp_path.glob("hang*"))) == 2

    wait_for(waiting, 120, "both ranks to wait in their barrier")
    proc.send_signal(signal.SIGTERM)  # to run only, as a batch system's stop would
    _, err_bytes = proc.communicate(timeout=180)
    err = err_bytes.decode()
    assert proc.returncode == 143, err
    text = node_log.read_text(errors="replace")
    ended = re.findall(r"process \d+ was killed by SIGTERM", text)
    assert len(ended) == 2, text[-3000:]
    assert "verdict: " in err and "the command exited 143" in err


def test_a_command_that_cannot_start_exits_127_and_leaves_no_aggregator(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--", str(tmp_path / "no-such-program"))
    _, err_bytes = proc.communicate(timeout=120)
    err = err_bytes.decode()
    assert proc.returncode == 127, err
    assert "cannot run" in err and "no-such-program" in err


def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--out", "x")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and b"no command" in err
    assert not (tmp_path / "x").exists()


def _args(*cmd: str, **kw: str) -> argparse.Namespace:
    return argparse.Namespace(cmd=list(cmd), job_id=kw.get("job_id"), out=None,
                              service_name=kw.get("service_name"))  # fmt: skip


def test_the_job_id_comes_from_the_flag_ours_the_launcher_torchrun_or_is_new() -> None:
    torchrun = ("torchrun", "--rdzv-id", "r9", "--nproc-per-node", "2", "t.py")
    assert run.prepare(_args(*torchrun, job_id="f"), {"SLURM_JOB_ID": "5"}).job_id == "f"
    assert (
        run.prepare(_args(*torchrun), {"NVRX_OTEL_JOB_ID": "o", "SLURM_JOB_ID": "5"}).job_id == "o"
    )
    assert run.prepare(_args(*torchrun), {"SLURM_JOB_ID": "5"}).job_id == "5"
    assert run.prepare(_args(*torchrun), {}).job_id == "r9"
    assert run.prepare(_args("torchrun", "--rdzv_id=r8", "t.py"), {}).job_id == "r8"
    new = run.prepare(_args("torchrun", "--standalone", "t.py"), {})
    assert new.job_source == "new" and new.job_id.startswith("run-")
    assert new.environ["NVRX_OTEL_JOB_ID"] == new.job_id
    assert new.out == Path("nvrx-runs") / new.job_id


def test_the_service_is_named_after_the_script_unless_something_names_it() -> None:
    assert run.prepare(_args("torchrun", "train.py"), {}).environ["OTEL_SERVICE_NAME"] == "train"
    assert run.prepare(_args("./bench"), {}).environ["OTEL_SERVICE_NAME"] == "bench"
    named = run.prepare(_args("x.py"), {"OTEL_RESOURCE_ATTRIBUTES": "service.name=svc"})
    assert "OTEL_SERVICE_NAME" not in named.environ
    kept = run.prepare(_args("x.py"), {"OTEL_SERVICE_NAME": "mine"})
    assert kept.environ["OTEL_SERVICE_NAME"] == "mine"
    assert run.prepare(_args("x.py", service_name="s"), {}).environ["OTEL_SERVICE_NAME"] == "s"


def test_a_job_id_that_cannot_name_a_directory_is_refused() -> None:
    try:
        run.prepare(_args("x.py", job_id="a/b"), {})
    except ValueError as exc:
        assert "'a/b' (--job-id)" in str(exc)
    else:
        raise AssertionError("a job id with a slash was taken")
