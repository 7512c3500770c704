"""The ``mpirun`` recipes of docs/launchers.md (section "Under `mpirun` (Open MPI,
MPICH)"), taken from the page itself and run with bash as written, so the two cannot drift.

What the test supplies: the variables the recipe names (``WAIT_FILE``, ``AGG_DIR``,
``NPROCS``, ``NNODES``, ``WORKLOAD_CMD``, ``WORKLOAD_ARGS``), a spool root under its
temporary directory in place of ``/tmp/nvrx`` (the one substitution), and ``mpirun``,
``mpiexec`` and ``python`` first on ``PATH`` as small scripts running
``mpirun.openmpi``, ``mpiexec.mpich`` and this interpreter. Open MPI as root on 2 cores
gets the page's environment variables for ``--allow-run-as-root`` and
``--oversubscribe``, and no binding (a machine shared with other work).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.aggregator.spoolkit import ROOT, process_env
from tests.conftest import spawn
from tests.launchers.conftest import need
from tests.launchers.mpi_rank import FAIL_CODE
from tests.launchers.mpikit import MPICH, OPENMPI, Launcher, check_node_log, identities

HEADING = "## Under `mpirun` (Open MPI, MPICH)"
SPOOL_ROOT = "/tmp/nvrx"
RECORDS = 100

OPENMPI_ROOT_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
}


def readme_recipe(command: str) -> str:
    """The fenced bash block of the page's mpirun section whose lines start ``command``."""
    text = (ROOT / "docs" / "launchers.md").read_text(encoding="utf-8")
    assert HEADING in text, f"docs/launchers.md has no section {HEADING!r}"
    section = re.split(r"\n#{1,3} ", text.split(HEADING, 1)[1], maxsplit=1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    found = [b for b in blocks if re.search(rf"^{re.escape(command)} ", b, re.M)]
    assert len(found) == 1, f"want one bash block running {command} under {HEADING!r}"
    return found[0]


def _bin(tmp: Path, launcher: Launcher, name: str) -> Path:
    """``name`` (what the page calls the launcher) and ``python`` as scripts in a dir."""
    directory = tmp / "bin"
    directory.mkdir()
    for alias, target in ((name, need(launcher.command)), ("python", sys.executable)):
        script = directory / alias
        script.write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
        script.chmod(0o755)
    return directory


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "rank-1-fails"])
@pytest.mark.parametrize(
    ("launcher", "name", "extra_env"),
    [(OPENMPI, "mpirun", OPENMPI_ROOT_ENV), (MPICH, "mpiexec", {})],
    ids=["openmpi", "mpich"],
)
def test_readme_mpirun_recipe(
    tmp_path: Path, launcher: Launcher, name: str, extra_env: dict[str, str], fail: bool
) -> None:
    script = readme_recipe(name)
    assert script.count(SPOOL_ROOT) == 1
    script = script.replace(SPOOL_ROOT, str(tmp_path / "spool"))
    out = tmp_path / "out"
    out.mkdir()
    rank_args = [str(out), str(RECORDS)]
    if fail:
        rank_args += ["1", "linger" if launcher.kills_on_failure else "exit"]
    env = process_env(tmp_path, "unused", **extra_env)
    del env["NVRX_OTEL_NODE_ID"]  # as in a real job: the node id is the host name
    env.update(
        PATH=f"{_bin(tmp_path, launcher, name)}:{env['PATH']}",
        WAIT_FILE=str(tmp_path / "wait"),
        AGG_DIR=str(tmp_path / "logs"),
        NPROCS="4",
        NNODES="1",
        WORKLOAD_CMD="python -m tests.launchers.mpi_rank",
        WORKLOAD_ARGS=" ".join(rank_args),
    )
    proc = spawn(
        ["bash", "-c", script], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == (FAIL_CODE if fail else 0), output

    want = identities(launcher, out, output)
    assert {w["rank"] for w in want.values()} == {0, 1, 2, 3}
    node_log = tmp_path / "logs" / f"nvrx_log_{socket.gethostname()}.log"
    lines = check_node_log(node_log, want, RECORDS)
    if fail:
        (failed,) = [pid for pid, ident in want.items() if ident["rank"] == 1]
        assert lines[failed][-1]["msg"] == f"failing now of pid {failed}"
    assert not list((tmp_path / "spool").rglob("*.jsonl"))  # all drained
