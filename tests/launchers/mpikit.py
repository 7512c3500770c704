"""Running ``tests/launchers/mpi_rank.py`` under the real Open MPI and MPICH launchers, and
reading back what each rank saw, what the node log holds and what reached OTLP.

Open MPI flags, found on this root-in-a-container, 2-core machine:

- ``--allow-run-as-root``: Open MPI refuses to start as root without it.
- ``--oversubscribe``: 4 ranks on 2 cores (Open MPI counts one slot per core).
- ``--bind-to none``: the ranks are not pinned to cores of a machine shared with others.
- No ``--mca btl self,vader`` nor ``OMPI_MCA_btl_vader_single_copy_mechanism=none``: those
  matter when ranks exchange MPI messages (vader's single copy needs ptrace rights a
  container may lack). These ranks never call ``MPI_Init`` — nvrx-otel needs no MPI
  library — so no byte-transfer layer is ever opened.

MPICH's ``mpiexec`` (Hydra) needs nothing of the kind. Both start the processes with the
launcher's environment plus their own variables, which is what the tests look at.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvrx_otel import semconv
from tests.aggregator.spoolkit import LINE, ROOT, process_env
from tests.conftest import spawn
from tests.launchers.conftest import need

NODE = "mpinode"
MSG_PID = " of pid "

OPENMPI_FLAGS = ("--allow-run-as-root", "--oversubscribe", "--bind-to", "none")

RESOURCE_KEYS = {
    "rank": semconv.WORKLOAD_RANK,
    "lrank": semconv.WORKLOAD_LOCAL_RANK,
    "world_size": semconv.WORKLOAD_WORLD_SIZE,
    "local_world_size": semconv.WORKLOAD_LOCAL_WORLD_SIZE,
}
"""Identity fields compared, with their OTLP resource attribute."""


@dataclass(frozen=True)
class Launcher:
    """A launcher command line and the variable it exports for each identity field."""

    command: str
    args: tuple[str, ...]
    exports: dict[str, str | None]
    """Identity field -> the launcher's variable for it (``None``: it exports none)."""
    absent: tuple[str, ...] = ()
    """Variables docs/identity.md says this launcher does not export."""
    same: tuple[tuple[str, str], ...] = ()
    """Pairs of variables docs/identity.md says this launcher sets to the same value."""
    kills_on_failure: bool = False
    """Whether it kills the other ranks when one exits non-zero."""

    def argv(self) -> list[str]:
        return [need(self.command), *self.args]


OPENMPI = Launcher(
    "mpirun.openmpi",
    (*OPENMPI_FLAGS, "-np", "4"),
    {
        "rank": "OMPI_COMM_WORLD_RANK",
        "lrank": "OMPI_COMM_WORLD_LOCAL_RANK",
        "world_size": "OMPI_COMM_WORLD_SIZE",
        "local_world_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
    },
    same=(("PMIX_RANK", "OMPI_COMM_WORLD_RANK"),),
    kills_on_failure=True,
)
MPICH = Launcher(
    "mpiexec.mpich",
    ("-n", "4"),
    {
        "rank": "PMI_RANK",
        "lrank": "MPI_LOCALRANKID",
        "world_size": "PMI_SIZE",
        "local_world_size": "MPI_LOCALNRANKS",
    },
)
MPICH_PMI_PORT_TWO_PROXIES = Launcher(
    "mpiexec.mpich",
    # Two Hydra proxies ("nodes", both forked on this machine) of two ranks each, talking
    # PMI over a port: the local ranks differ from the ranks, and the rank is PMI_ID.
    ("-pmi-port", "-launcher", "fork", "-hosts", "nodea,nodeb", "-ppn", "2", "-n", "4"),
    {
        "rank": "PMI_ID",
        "lrank": "MPI_LOCALRANKID",
        "world_size": None,
        "local_world_size": "MPI_LOCALNRANKS",
    },
    absent=("PMI_RANK", "PMI_SIZE"),
)


@dataclass
class Job:
    """One launcher run with its aggregator; the attributes are filled as it runs."""

    tmp: Path
    launcher: Launcher
    records: int
    env: dict[str, str] = field(init=False)
    out: Path = field(init=False)
    returncode: int | None = None
    output: str = ""

    def __post_init__(self) -> None:
        self.env = process_env(self.tmp, NODE)
        self.out = self.tmp / "out"
        self.out.mkdir()

    def start_aggregator(self, *args: str) -> subprocess.Popen[str]:
        return spawn(
            [sys.executable, "-m", "nvrx_otel.logging.aggregator",
             "--log-dir", str(self.tmp / "logs"), "--wait-file", str(self.tmp / "wait"),
             "--check-interval", "0.2", *args],
            env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def launch(self, *rank_args: str) -> int:
        proc = spawn(
            [*self.launcher.argv(), sys.executable, "-m", "tests.launchers.mpi_rank",
             str(self.out), str(self.records), *rank_args],
            env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.output, _ = proc.communicate(timeout=300)
        self.returncode = proc.returncode
        return proc.returncode

    def stop_aggregator(self, agg: subprocess.Popen[str]) -> str:
        (self.tmp / "wait").touch()
        _, err = agg.communicate(timeout=180)
        assert agg.returncode == 0, err
        return str(err)

    def node_log(self) -> Path:
        return self.tmp / "logs" / f"nvrx_log_{NODE}.log"


def seen_envs(out: Path) -> dict[int, dict[str, str]]:
    """pid -> the launcher variables that rank process saw."""
    seen: dict[int, dict[str, str]] = {}
    for path in out.glob("seen.*.json"):
        data = json.loads(path.read_text())
        seen[data["pid"]] = data["env"]
    return seen


def expected_identity(launcher: Launcher, env: dict[str, str]) -> dict[str, int | None]:
    """The identity a rank must have: the values of the variables its launcher exported
    to it (a field the launcher exports nothing for is unknown)."""
    out: dict[str, int | None] = {}
    for key, name in launcher.exports.items():
        out[key] = None if name is None else int(env[name])
    return out


def node_log_by_pid(path: Path) -> dict[int, list[dict[str, Any]]]:
    """pid -> the node-log lines (parsed) of that rank process, in file order."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m and MSG_PID in m["msg"]:
            out[int(m["msg"].rsplit(MSG_PID, 1)[1].split()[0])].append(m.groupdict())
    return dict(out)


def record_numbers(lines: list[dict[str, Any]]) -> list[int]:
    """The ``<i>`` of the ``mpi record <i> of pid <pid>`` lines, in order."""
    return [int(x["msg"].split()[2]) for x in lines if x["msg"].startswith("mpi record ")]


def rank_text(value: int | None) -> str:
    """How the node log writes a rank."""
    return "?" if value is None else str(value)


def unique_logs(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OTLP log records once each (delivery is at least once: key on the record key)."""
    return list({log["attributes"][semconv.RECORD_KEY]: log for log in logs}.values())


def resource_identity(resource: dict[str, Any]) -> dict[str, int | None]:
    return {key: resource.get(attr) for key, attr in RESOURCE_KEYS.items()}


def identities(launcher: Launcher, out: Path, output: str) -> dict[int, dict[str, int | None]]:
    """pid -> the identity each of the 4 ranks must have, from the variables it saw;
    checks the launcher exported what docs/identity.md says it does (``output``: the
    launcher's, for the failure message)."""
    seen = seen_envs(out)
    assert len(seen) == 4, output
    for env in seen.values():
        for name in launcher.absent:
            assert name not in env, f"{launcher.command} exported {name}"
        for a, b in launcher.same:
            assert env[a] == env[b], (a, b, env)
    return {pid: expected_identity(launcher, env) for pid, env in seen.items()}


def check_node_log(
    path: Path, want: dict[int, dict[str, int | None]], records: int
) -> dict[int, list[dict[str, Any]]]:
    """Every rank process of ``want`` has its ``records`` records in the node log, each
    once and in order, and its checkpoint record, all with its ranks; returns its lines."""
    lines = node_log_by_pid(path)
    assert set(lines) == set(want)
    for pid, got in lines.items():
        assert record_numbers(got) == list(range(records)), pid
        assert any(x["msg"].startswith("mpi checkpoint") for x in got)
        ident = want[pid]
        assert {(x["r"], x["lr"], x["ir"], x["ilr"]) for x in got} == {
            (rank_text(ident["rank"]), rank_text(ident["lrank"]), "?", "?")
        }
    return lines
