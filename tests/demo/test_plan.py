"""The demo's plan: option checks, the fault steps, each process's identity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvrx_otel import env
from nvrx_otel.demo.plan import CHECKPOINT_EVERY, Plan, PlanError, make_plan
from nvrx_otel.identity import resolve


def plan(tmp_path: Path, **overrides: object) -> Plan:
    options: dict[str, object] = {
        "nodes": 2,
        "ranks_per_node": 2,
        "steps": 8,
        "fail_rank": None,
        "hang_rank": None,
        "out": tmp_path / "out",
        "otlp_endpoint": None,
    }
    options.update(overrides)
    return make_plan(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"fail_rank": 4}, "--fail-rank 4 is not a rank of this job: ranks are 0 to 3"),
        ({"hang_rank": -1}, "--hang-rank -1 is not a rank of this job"),
        ({"nodes": 0}, "--nodes must be from 1 to 16, got 0"),
        ({"steps": 0}, "--steps must be from 1 to 10000, got 0"),
        ({"nodes": 1, "ranks_per_node": 1, "fail_rank": 0}, "a fault needs at least 2 ranks"),
        ({"otlp_endpoint": "localhost:4318"}, "--otlp-endpoint must be an http://"),
    ],
)
def test_bad_options_name_the_problem(
    tmp_path: Path, overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        plan(tmp_path, **overrides)


def test_out_must_be_a_new_or_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(PlanError, match="is not a directory"):
        plan(tmp_path, out=tmp_path / "file")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(PlanError, match="is not empty"):
        plan(tmp_path, out=tmp_path / "used")


def test_the_restart_resumes_from_the_checkpoint_before_the_fault(tmp_path: Path) -> None:
    p = plan(tmp_path, steps=20, fail_rank=1)
    assert p.fail_step == CHECKPOINT_EVERY + 2 and p.resume_step == CHECKPOINT_EVERY


def test_the_hang_comes_after_the_resumed_checkpoint(tmp_path: Path) -> None:
    for steps in range(1, 30):
        p = plan(tmp_path, steps=steps, fail_rank=0, hang_rank=1)
        assert p.hang_cycle == 1
        assert p.resume_step < p.hang_step <= steps, steps
        assert 1 <= p.fail_step <= steps
    assert plan(tmp_path, hang_rank=1).hang_cycle == 0


def test_ranks_get_the_identity_a_launcher_under_slurm_gives(tmp_path: Path) -> None:
    """Slurm's variables of the node's task (one per node) and torchrun's of the worker."""
    p = plan(tmp_path)
    ident = resolve(environ=p.rank_env(3, cycle=1), host_name="h", pid=1)
    assert (ident.workload_rank, ident.workload_local_rank, ident.world_size) == (3, 1, 4)
    assert (ident.infra_rank, ident.infra_local_rank, ident.node_id) == (1, 0, "node1")
    assert ident.job_id == p.job_id and ident.restart_cycle == 1
    launcher = resolve(environ=p.node_env(0), host_name="h", pid=1)
    assert launcher.workload_rank is None and launcher.infra_rank == 0
    assert launcher.node_id == "node0" and launcher.job_id == p.job_id


def test_the_callers_job_and_telemetry_variables_do_not_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A demo started inside a Slurm job or torchrun, or with OTLP variables, keeps its own
    identity and writes under --out only."""
    for name, value in (
        (env.SLURM_JOB_ID, "999"),
        (env.RANK, "7"),
        (env.TRACEPARENT, "00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
        (env.OTEL_EXPORTER_OTLP_ENDPOINT, "http://elsewhere:4318"),
        (env.NVRX_NODE_LOCAL_TMPDIR, "/elsewhere"),
    ):
        monkeypatch.setenv(name, value)
    p = plan(tmp_path)
    environ = p.node_env(1)
    assert environ[env.SLURM_JOB_ID] == p.job_id
    assert env.RANK not in environ and env.TRACEPARENT not in environ
    assert env.OTEL_EXPORTER_OTLP_ENDPOINT not in environ
    assert environ[env.NVRX_NODE_LOCAL_TMPDIR] == str(p.spool_root(1))
    assert environ["PATH"] == os.environ["PATH"]


def test_the_plan_reaches_the_launcher_unchanged(tmp_path: Path) -> None:
    p = plan(tmp_path, fail_rank=2)
    assert Plan.from_json(p.to_json()) == p


def test_the_default_out_is_a_new_directory_under_the_cwd_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = plan(tmp_path, out=None)
    assert Path(first.out).parent == tmp_path / "nvrx-otel-demo"
    Path(first.out).mkdir(parents=True)
    (Path(first.out) / "logs").mkdir()
    second = plan(tmp_path, out=None)  # the same second: still a new directory
    assert second.out != first.out and not Path(second.out).exists()
