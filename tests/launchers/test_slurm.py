"""The Slurm batch script of docs/launchers.md, taken from the page, run under a real Slurm.

One session-wide cluster (tests/launchers/slurm.py); each test submits the page's
script with ``sbatch`` and a workload of ``slurm_rank.py`` tasks, and reads back the node
log and what an OTLP receiver (inside the cluster's network namespace) got.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvrx_otel import semconv
from tests.launchers.slurm import SlurmCluster, cluster
from tests.otlp_receiver import OtlpReceiver

RECIPE = Path(__file__).parents[2] / "docs" / "launchers.md"
RANK = Path(__file__).with_name("slurm_rank.py")
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
LINE = re.compile(
    r"^\S+ \S+ \[(?P<level>\w+)\] \[(?P<node>[^\]]+)\] "
    r"\[workload:(?P<rank>\S+) infra:(?P<irank>\d+|\?)\((?P<ilrank>\d+|\?)\)\] \S+ "
    r"(?P<msg>.*?)(?: \[trace_id=\w+ span_id=\w+\])?$"
)
DROPPED = re.compile(r"dropped (\d+) records from rank (\S+) pid")


def readme_script() -> str:
    """The first ``bash`` block of the "Under Slurm" section of docs/launchers.md."""
    text = RECIPE.read_text()
    section = text[text.index("## Under Slurm") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "docs/launchers.md: no bash block under '## Under Slurm'"
    return block.group(1)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


@pytest.fixture
def receiver(slurm: SlurmCluster) -> Iterator[OtlpReceiver]:
    r = slurm.in_netns(lambda: OtlpReceiver().start())
    yield r
    r.stop()


class Job:
    """The README's script submitted once; ``out`` gets what the tasks write."""

    def __init__(self, slurm: SlurmCluster, tmp: Path, receiver: OtlpReceiver) -> None:
        self.slurm = slurm
        self.tmp = tmp
        self.out = tmp / "out"
        self.out.mkdir()
        self.script = tmp / "nvrx.sbatch"
        self.script.write_text(readme_script())
        self.env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin:/usr/sbin:/sbin",
            "NVRX_NODE_LOCAL_TMPDIR": str(tmp / "spool"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "NVRX_OTEL_STATUS_INTERVAL_S": "0",
        }
        self.id = ""

    def submit(self, workload: str, *sbatch_args: str) -> str:
        env = dict(self.env, WORKLOAD_CMD=f"python {RANK} {self.out} {workload}")
        done = self.slurm.run(
            "sbatch", "--parsable", f"--chdir={self.tmp}", f"--output={self.tmp}/slurm-%j.out",
            *sbatch_args, str(self.script), env=env, timeout=60, cwd=self.tmp,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        self.id = done.stdout.strip().split(";")[0]
        return self.id

    def wait_end(self, timeout: float = 120) -> tuple[str, float]:
        """The job's final state and the wall-clock time it was first seen ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.slurm.job_state(self.id)
            if state in ENDED:
                return state, time.time()
            time.sleep(0.1)
        raise AssertionError(f"job {self.id} still {state} after {timeout} s:\n{self.output()}")

    def show(self, job_id: str | None = None) -> dict[str, str]:
        out = self.slurm.run("scontrol", "-o", "show", "job", job_id or self.id).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def output(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.tmp.glob("slurm-*.out")))

    def node_log(self, job_id: str | None = None) -> list[dict[str, str]]:
        """The records of the job's node log (the recipe's default ``AGG_DIR``)."""
        out = []
        for path in (self.tmp / "logs" / (job_id or self.id)).glob("nvrx_log_*.log"):
            for line in path.read_text().splitlines():
                m = LINE.match(line)
                if m:
                    out.append(m.groupdict())
        return out

    def envs(self) -> dict[str, dict[str, str]]:
        """What Slurm exported to each task, by ``<job id>-<procid>``."""
        return {
            p.name[4:-5]: json.loads(p.read_text()) for p in self.out.glob("env-*.json")
        }  # fmt: skip


@pytest.fixture
def job(slurm: SlurmCluster, tmp_path: Path, receiver: OtlpReceiver) -> Job:
    return Job(slurm, tmp_path, receiver)


def messages(records: list[dict[str, str]]) -> Counter[str]:
    return Counter(r["msg"] for r in records if re.fullmatch(r"t\d+-\d+", r["msg"]))


def test_recipe_writes_every_record_and_the_step_ends_with_the_workload(
    job: Job, receiver: OtlpReceiver
) -> None:
    job.submit("normal 1000", "-n", "4", "--overcommit")
    state, ended = job.wait_end()
    assert state == "COMPLETED", job.output()
    assert job.show()["ExitCode"] == "0:0"
    logged = messages(job.node_log())
    assert logged == Counter({f"t{p}-{i}": 1 for p in range(4) for i in range(1000)})
    last_rank_end = max(float(p.read_text()) for p in job.out.glob("end-*"))
    assert ended - last_rank_end < 10, "the step outlived its workload"

    # The identity each task had, as Slurm exported it, in the node log and OTLP.
    envs = job.envs()
    assert sorted(envs) == [f"{job.id}-{p}" for p in range(4)]
    by_rank = {r["msg"].split("-")[0][1:]: r for r in job.node_log() if r["msg"].endswith("-0")}
    for e in envs.values():
        line = by_rank[e["SLURM_PROCID"]]
        assert (line["irank"], line["ilrank"]) == (e["SLURM_PROCID"], e["SLURM_LOCALID"])
        assert line["rank"] == "?(?)", "srun without an MPI plugin exports no workload rank"
        assert e["SLURM_JOB_ID"] == job.id and e["SLURM_NNODES"] == "1"
    assert receiver.wait_for(lambda r: len(r.logs) >= 4000, timeout=30)
    resources = {
        log["body"].split("-")[0][1:]: log["resource"]
        for log in receiver.logs
        if isinstance(log["body"], str) and log["body"].endswith("-0")
    }
    for e in envs.values():
        res = resources[e["SLURM_PROCID"]]
        assert res[semconv.JOB_ID] == e["SLURM_JOB_ID"]
        assert res[semconv.INFRA_RANK] == int(e["SLURM_PROCID"])
        assert res[semconv.INFRA_LOCAL_RANK] == int(e["SLURM_LOCALID"])
    assert receiver.wait_for(lambda r: len([s for s in r.spans if s["name"] == "work"]) == 4), (
        f"{[s['name'] for s in receiver.spans]}\n{job.output()}"
    )


def test_recipe_step_of_a_workload_that_fails_at_once_ends_with_its_code(job: Job) -> None:
    submitted = time.time()
    job.submit("fail 3", "-n", "4", "--overcommit")
    state, ended = job.wait_end()
    assert state == "FAILED", job.output()
    assert job.show()["ExitCode"] == "3:0"
    # The aggregator saw the wait file at once: no wait for --drain-timeout (20 s).
    assert ended - submitted < 15, f"{ended - submitted:.1f} s:\n{job.output()}"
    assert "exit at once" not in job.output()


def test_recipe_scancel_mid_run_keeps_every_record_logged_before_it(job: Job) -> None:
    job.submit("until_term", "-n", "4", "--overcommit")
    job.slurm.wait_until("records in the node log", lambda: len(job.node_log()) > 2000, 90)
    done = job.slurm.run("scancel", job.id)
    assert done.returncode == 0, done.stderr
    state, _ = job.wait_end(timeout=60)
    assert state == "CANCELLED"
    records = job.node_log()
    logged = messages(records)
    dropped: Counter[str] = Counter()
    for r in records:
        m = DROPPED.search(r["msg"])
        if m:
            dropped[m.group(2)] += int(m.group(1))
    counts = {p.name.rsplit("-", 1)[1]: int(p.read_text()) for p in job.out.glob("count-*")}
    assert sorted(counts) == ["0", "1", "2", "3"], "each task leaves on Slurm's SIGTERM"
    assert max(logged.values()) == 1, "duplicates in the node log"
    for procid, count in counts.items():
        kept = sum(1 for m in logged if m.startswith(f"t{procid}-"))
        assert kept + dropped[procid] == count, (procid, kept, dropped[procid], job.output())
    assert "exit at once" not in job.output()


def test_array_job_identity_is_what_slurm_exports(job: Job, receiver: OtlpReceiver) -> None:
    array_id = job.submit("normal 50", "--array=0-1", "-n", "2", "--overcommit")
    for t in (0, 1):
        job.id = f"{array_id}_{t}"
        assert job.wait_end()[0] == "COMPLETED", job.output()
    tasks = [job.show(f"{array_id}_{t}") for t in (0, 1)]
    envs = job.envs()
    assert len(envs) == 4
    assert receiver.wait_for(lambda r: len(r.logs) >= 200, timeout=30)
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for log in receiver.logs:
        res = log["resource"]
        seen[(str(res.get(semconv.JOB_ID)), str(res.get(semconv.INFRA_LOCAL_RANK)))] = res
    for e in envs.values():
        assert e["SLURM_ARRAY_JOB_ID"] == array_id
        job_id = f"{e['SLURM_ARRAY_JOB_ID']}_{e['SLURM_ARRAY_TASK_ID']}"
        res = seen[(job_id, e["SLURM_LOCALID"])]
        nnodes = int(e["SLURM_NNODES"])
        infra = int(e["SLURM_ARRAY_TASK_ID"]) * nnodes + int(e["SLURM_PROCID"])
        assert res[semconv.INFRA_RANK] == infra
        assert res[semconv.JOB_ARRAY_TASK_ID] == int(e["SLURM_ARRAY_TASK_ID"])
        # Each array task has a node log of its own (the recipe's AGG_DIR is per job).
        own = messages(job.node_log(e["SLURM_JOB_ID"]))
        assert own == Counter(
            {f"t{p}-{i}": 1 for p in range(2) for i in range(50)}
        ), e["SLURM_JOB_ID"]  # fmt: skip
        irank = {r["irank"] for r in job.node_log(e["SLURM_JOB_ID"]) if r["msg"].startswith("t")}
        assert str(infra) in irank
    assert {t["JobId"] for t in tasks} == {e["SLURM_JOB_ID"] for e in envs.values()}


def test_recipe_drain_timeout_is_below_slurms_kill_wait(slurm: SlurmCluster) -> None:
    """Slurm SIGKILLs a cancelled step KillWait seconds after its SIGTERM: the drain the
    recipe allows must end before that (the cluster runs Slurm's default KillWait)."""
    drain = re.search(r"--drain-timeout (\d+)", readme_script())
    assert drain is not None, "the page's recipe sets no --drain-timeout"
    config = slurm.run("scontrol", "show", "config").stdout
    kill_wait = re.search(r"^KillWait\s*=\s*(\d+) sec", config, re.M)
    assert kill_wait is not None, config
    assert int(drain.group(1)) < int(kill_wait.group(1))
