"""Identity resolution per launcher, overrides, fork, malformed values and the Resource."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from nvrx_otel import identity, semconv
from nvrx_otel.identity import Identity, resolve

HOST = "node007"


def _expect(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "workload_rank": None, "workload_local_rank": None, "world_size": None,
        "local_world_size": None, "group_rank": None, "infra_rank": None,
        "infra_local_rank": None, "node_id": HOST, "job_id": None, "array_task_id": None,
        "restart_cycle": None, "host_name": HOST, "pid": 1234,
    }  # fmt: skip
    base.update(fields)
    return base


CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("no launcher", {}, _expect()),
    (
        "torchrun",
        {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8",
         "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "run-a", "TORCHELASTIC_RESTART_COUNT": "2"},
        _expect(workload_rank=9, workload_local_rank=1, world_size=16, local_world_size=8,
                group_rank=1, job_id="run-a", restart_cycle=2),
    ),
    (
        "slurm",
        {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4242", "SLURM_NNODES": "4"},
        _expect(infra_rank=5, infra_local_rank=1, job_id="4242"),
    ),
    (
        "slurm job array",
        {"SLURM_PROCID": "3", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "4250",
         "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "2", "SLURM_NNODES": "4"},
        _expect(infra_rank=2 * 4 + 3, infra_local_rank=0, job_id="4242_2", array_task_id=2),
    ),
    (
        "slurm job array, node count from SLURM_JOB_NUM_NODES",
        {"SLURM_PROCID": "1", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "3",
         "SLURM_JOB_NUM_NODES": "2"},
        _expect(infra_rank=7, job_id="10_3", array_task_id=3),
    ),
    (
        "slurm + torchrun: SLURM job id wins over the torchelastic run id",
        {"RANK": "0", "SLURM_PROCID": "0", "SLURM_JOB_ID": "99", "TORCHELASTIC_RUN_ID": "r"},
        _expect(workload_rank=0, infra_rank=0, job_id="99"),
    ),
    (
        "openmpi",
        {"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
         "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
        _expect(workload_rank=6, workload_local_rank=2, world_size=8, local_world_size=4),
    ),
    (
        "mpich / hydra (PMI)",
        {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
        _expect(workload_rank=3, workload_local_rank=1, world_size=4, local_world_size=2),
    ),
    (
        "mpich / hydra, PMI over a port (mpiexec -pmi-port): PMI_ID, no size",
        {"PMI_ID": "3", "PMI_PORT": "vm:40601", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
        _expect(workload_rank=3, workload_local_rank=1, local_world_size=2),
    ),
    (
        "pmix: only the rank is in the environment",
        {"PMIX_RANK": "11", "PMIX_NAMESPACE": "slurm.pmix.77.0"},
        _expect(workload_rank=11),
    ),
    (
        "RANK wins over the MPI variables",
        {"RANK": "1", "OMPI_COMM_WORLD_RANK": "2", "PMIX_RANK": "3", "PMI_RANK": "4",
         "PMI_ID": "5"},
        _expect(workload_rank=1),
    ),
    (
        "node id override",
        {"NVRX_OTEL_NODE_ID": "sim-node-3"},
        _expect(node_id="sim-node-3"),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("environ", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_launcher_table(environ: dict[str, str], expected: dict[str, Any]) -> None:
    got = resolve(environ, strict=True, host_name=HOST, pid=1234)
    assert got == Identity(**expected)


def test_override_wins_over_environment() -> None:
    got = resolve({"RANK": "1"}, host_name=HOST, pid=1, workload_rank=5, world_size=8)
    assert (got.workload_rank, got.world_size) == (5, 8)


def test_set_identity_mp_spawn_style(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    identity.clear_identity()
    try:
        assert identity.get_identity().workload_rank == 0
        identity.set_identity(workload_rank=3, workload_local_rank=3, world_size=4)
        got = identity.get_identity()
        assert (got.workload_rank, got.workload_local_rank, got.world_size) == (3, 3, 4)
        with pytest.raises(TypeError, match="unknown fields: rank"):
            identity.set_identity(rank=1)
    finally:
        identity.clear_identity()


def test_malformed_value_strict_raises_naming_variable_and_value() -> None:
    with pytest.raises(ValueError, match=r"RANK='abc': expected a whole number >= 0"):
        resolve({"RANK": "abc"}, strict=True)


def test_malformed_value_lenient_is_unknown_and_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = resolve({"RANK": "abc", "LOCAL_RANK": "2"}, host_name=HOST)
    assert got.workload_rank is None and got.workload_local_rank == 2
    err = capsys.readouterr().err
    assert "RANK='abc'" in err and "treating it as unknown" in err
    assert err.count("\n") == 1


BEYOND_64_BITS = str(2**64 + 5)
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID")


@pytest.mark.parametrize("name", RANK_VARIABLES)
def test_rank_beyond_64_bits_is_unknown_and_reported(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No record could carry such a rank: it is unknown, named once on stderr."""
    got = resolve({name: BEYOND_64_BITS}, host_name=HOST)
    assert got.workload_rank is None and got.workload_local_rank is None
    assert got.infra_rank is None and got.infra_local_rank is None
    err = capsys.readouterr().err
    assert f"{name}='{BEYOND_64_BITS}'" in err and "64 bits" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match="fits in 64 bits"):
        resolve({name: BEYOND_64_BITS}, strict=True)


def test_array_infra_rank_beyond_64_bits_is_unknown_and_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    environ = {"SLURM_PROCID": "1", "SLURM_ARRAY_JOB_ID": "10",
               "SLURM_ARRAY_TASK_ID": str(2**62), "SLURM_NNODES": "4"}  # fmt: skip
    got = resolve(environ, host_name=HOST)
    assert got.infra_rank is None and got.array_task_id == 2**62
    assert "does not fit in 64 bits" in capsys.readouterr().err


def test_override_beyond_64_bits_is_unknown_and_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = resolve({}, host_name=HOST, workload_rank=2**70, world_size=8)
    assert got.workload_rank is None and got.world_size == 8
    assert "set_identity(workload_rank=...)" in capsys.readouterr().err


def test_malformed_first_choice_does_not_fall_through() -> None:
    """A present-but-bad RANK is unknown; it does not silently take OMPI's value instead."""
    got = resolve({"RANK": "x", "OMPI_COMM_WORLD_RANK": "4"}, host_name=HOST)
    assert got.workload_rank is None


def test_identity_is_resolved_again_after_fork() -> None:
    identity.clear_identity()
    parent = identity.get_identity()
    assert parent.pid == os.getpid()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.write(w, str(identity.get_identity().pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    child_pid = int(os.read(r, 64))
    os.close(r)
    os.waitpid(pid, 0)
    assert child_pid == pid != parent.pid


def test_resource_merges_otel_env_with_identity_winning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=llm,nv.nvrx.node.id=wrong")
    ident = resolve({"RANK": "2", "NVRX_OTEL_NODE_ID": "n1"}, host_name=HOST, pid=77)
    attrs = ident.resource().attributes
    assert attrs["service.name"] == "trainer"
    assert attrs["team"] == "llm"
    assert attrs[semconv.NODE_ID] == "n1"
    assert attrs[semconv.WORKLOAD_RANK] == 2
    assert attrs[semconv.PROCESS_PID] == 77
    assert semconv.INFRA_RANK not in attrs  # unknown values are left out


def test_service_instance_id_is_a_random_uuid_per_process_with_job_node_pid_apart() -> None:
    """The semantic conventions recommend a random UUID; job, node and pid have their own
    attributes. A forked child is another process: it gets its own."""
    env = {"SLURM_JOB_ID": "42", "NVRX_OTEL_NODE_ID": "n1"}
    attrs = resolve(env, host_name=HOST, pid=77).attributes()
    instance = attrs[semconv.SERVICE_INSTANCE_ID]
    assert isinstance(instance, str) and uuid.UUID(instance).version == 4
    assert resolve(env, host_name=HOST, pid=77).attributes()[semconv.SERVICE_INSTANCE_ID] == (
        instance
    )  # one per process, not per resolution
    assert (attrs[semconv.JOB_ID], attrs[semconv.NODE_ID], attrs[semconv.PROCESS_PID]) == (
        "42",
        "n1",
        77,
    )
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.write(w, identity.instance_id().encode())
        finally:
            os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert uuid.UUID(child).version == 4 and child != instance


def test_resource_carries_the_semantic_conventions_schema_url() -> None:
    ident = resolve({"RANK": "0"}, host_name=HOST, pid=77)
    assert ident.resource().schema_url == semconv.SCHEMA_URL
