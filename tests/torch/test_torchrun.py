"""The real torch tier: torch 2.15 from PyPI (``scripts/fetch-torch.sh``, cached), the real
``torchrun`` with 4 gloo ranks on CPU and DataLoader workers. Every rank's end is in the
records: the culprit's exception, the killed ranks' stacks, the hung rank's stack."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel.report import Report, analyse, failures
from nvrx_otel.view.read import Problems
from tests.aggregator.spoolkit import cli, finish, process_env, started, wait_for
from tests.conftest import log_records, spawn

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
TRAIN = Path(__file__).with_name("train.py")


@cache
def torch_site() -> str:
    """The cached torch install (scripts/test exports it; else the script reuses its cache)."""
    site = os.environ.get("NVRX_OTEL_TORCH_SITE")
    if site:
        return site
    done = subprocess.run([str(ROOT / "scripts" / "fetch-torch.sh")], capture_output=True,
                          text=True, env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    assert done.returncode == 0, f"scripts/fetch-torch.sh failed: {done.stderr}"
    return done.stdout.strip()


def torchrun(tmp: Path, *args: str, **env: str) -> tuple[int, str]:
    """Run train.py under torchrun (4 ranks); its exit code and stderr."""
    full = process_env(tmp, "testnode", SLURM_JOB_ID="job1", NVRX_OTEL_CAPTURE_OUTPUT="auto",
                       NVRX_OTEL_CAPTURE_STACKS="on", **env)  # fmt: skip
    full["PYTHONPATH"] = os.pathsep.join([torch_site(), str(ROOT / "src")])
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
            "--monitor-interval", "0.1", *args, str(TRAIN)]  # fmt: skip
    with (tmp / "torchrun.out").open("wb") as out, (tmp / "torchrun.err").open("wb") as err:
        proc = spawn(argv, stdout=out, stderr=err, env=full, cwd=tmp)
        code = proc.wait(timeout=600)
    return code, (tmp / "torchrun.err").read_text(errors="replace")


def endings(tmp: Path, n: int) -> dict[int, dict[str, Any]]:
    """Each rank's ending record (waits until there are ``n``), by rank."""

    def found() -> dict[int, dict[str, Any]] | None:
        out = {
            r["rank"]: r
            for r in log_records(tmp / "spool")
            if "nv.nvrx.process.outcome" in r.get("attrs", {})
        }
        return out if len(out) >= n else None

    result: dict[int, dict[str, Any]] = wait_for(found, 60, f"{n} ending records")
    return result


def report_of(tmp: Path) -> Report:
    """The report of the job: a real aggregator over its spool (``--otlp-json``), then
    ``nvrx-otel report``'s analysis of what it wrote."""
    (job,) = [p.name for p in (tmp / "spool").iterdir() if p.is_dir()]
    agg = cli(tmp, "--job-id", job, "--otlp-json", str(tmp / "otlp"))
    started(tmp, agg, job)
    (tmp / "done").touch()
    code, err = finish(agg, timeout=120)
    assert code == 0, err
    return analyse([str(tmp / "otlp")], problems=Problems(io.StringIO()))


def by_rank(tmp: Path, rank: int, **match: Any) -> list[dict[str, Any]]:
    return [
        r
        for r in log_records(tmp / "spool")
        if r.get("rank") == rank and all(r.get(k) == v for k, v in match.items())
    ]


def test_a_rank_that_raises_without_logging_is_the_one_with_the_exception(tmp_path: Path) -> None:
    code, err = torchrun(tmp_path, "--max-restarts", "0", TRAIN_FAIL_RANK="2")
    assert code != 0 and "Root Cause" in err
    ends = endings(tmp_path, 4)
    culprit = ends[2]
    assert culprit["attrs"] == {"process.exit.code": 1, "nv.nvrx.process.outcome": "exception"}
    (exc,) = by_rank(tmp_path, 2, lg="nvrx_otel.uncaught")
    assert exc["exc_type"] == "RuntimeError" and exc["fn"] == "train_step"
    assert exc["exc_msg"] == "loss is NaN at step 5 on rank 2"
    # torch's excepthook prints it again with "[rank2]: ": forwarded, not recorded twice
    assert "[rank2]: RuntimeError: loss is NaN at step 5 on rank 2" in err
    captured = by_rank(tmp_path, 2, lg="nvrx_otel.capture")
    assert not [r for r in captured if "loss is NaN" in r["msg"] or "Traceback" in r["msg"]]
    for rank in (0, 1, 3):  # the survivors: stopped by torchrun, or failed in gloo first
        assert ends[rank]["attrs"]["nv.nvrx.process.outcome"] in ("signal", "exception")
    started = [r["msg"] for r in log_records(tmp_path / "spool") if r.get("lvl") == "STDOUT"]
    assert sorted(started) == [f"rank {r} attempt 0 started" for r in range(4)]
    report = report_of(tmp_path)  # names the culprit, not a survivor torchrun stopped
    f = report.first_failure
    assert f is not None and (f.rank, f.evidence) == (2, failures.OWN), f
    assert "loss is NaN at step 5 on rank 2" in f.what
    assert set(report.stopped) | set(report.collective) == {0, 1, 3}


def test_torch_record_still_writes_the_error_file_torchrun_reports(tmp_path: Path) -> None:
    """With ``@record`` the exception goes to torch's error file first, then to our hook:
    torchrun's root cause holds the traceback from the file, and the record is there once."""
    code, err = torchrun(tmp_path, "--max-restarts", "0", TRAIN_FAIL_RANK="1", TRAIN_RECORD="1")
    assert code != 0
    cause = err[err.index("Root Cause") :]
    assert "rank      : 1" in cause and "error_file: <N/A>" not in cause
    assert "RuntimeError: loss is NaN at step 5 on rank 1" in cause
    assert endings(tmp_path, 4)[1]["attrs"]["nv.nvrx.process.outcome"] == "exception"
    (exc,) = by_rank(tmp_path, 1, lg="nvrx_otel.uncaught")
    assert exc["exc_msg"] == "loss is NaN at step 5 on rank 1" and exc["fn"] == "train_step"


def test_a_hung_rank_is_killed_with_its_stack_recorded(tmp_path: Path) -> None:
    code, _ = torchrun(tmp_path, "--max-restarts", "0", TRAIN_HANG_RANK="1", TRAIN_TIMEOUT_S="5")
    assert code != 0
    ends = endings(tmp_path, 4)
    hung = ends[1]
    assert hung["attrs"] == {
        "nv.nvrx.process.signal": "SIGTERM",
        "nv.nvrx.process.outcome": "signal",
    }
    (dump,) = by_rank(tmp_path, 1, lg="nvrx_otel.watch", lvl="WARNING", exc_type="SIGTERM")
    assert dump["fn"] == "hang_here" and "in train_step" in dump["exc"]
    for rank in (0, 2, 3):  # gloo's timeout in all_reduce: their own uncaught exception
        (exc,) = by_rank(tmp_path, rank, lg="nvrx_otel.uncaught")
        assert "Timed out" in exc["exc_msg"] or "Connection closed" in exc["exc_msg"], exc
    report = report_of(tmp_path)  # torchrun names the first rank to time out; this the hang
    f = report.first_failure
    assert f is not None and (f.rank, f.evidence) == (1, failures.HUNG), f
    assert "hung: did not fail while ranks 0,2-3 failed in a collective" in f.what
    assert report.collective == [0, 2, 3]


def test_redirects_and_tee_still_get_every_line_and_a_restart_is_recorded(
    tmp_path: Path,
) -> None:
    code, _ = torchrun(tmp_path, "--max-restarts", "1", "--redirects", "3", "--tee", "3",
                       "--log-dir", str(tmp_path / "tlogs"), TRAIN_FAIL_RANK="3")  # fmt: skip
    assert code != 0  # rank 3 raises in both attempts
    out = (tmp_path / "torchrun.out").read_text()
    for attempt in (0, 1):
        for rank in range(4):
            assert f"rank {rank} attempt {attempt} started" in out
    files = "".join(p.read_text() for p in (tmp_path / "tlogs").rglob("stdout.log"))
    assert files.count("attempt 1 started") == 4
    started = [r["msg"] for r in log_records(tmp_path / "spool") if r.get("lvl") == "STDOUT"]
    assert sorted(started) == sorted(
        f"rank {r} attempt {a} started" for a in (0, 1) for r in range(4)
    )
    wait_for(lambda: len(by_rank(tmp_path, 3, lg="nvrx_otel.uncaught")) == 2, 60, "2 exceptions")
