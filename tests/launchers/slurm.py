"""A real one-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's
packages, configured in a temporary directory and run in a network namespace of their own.

slurmctld binds every address of its host (``CommunicationParameters=NoInAddrAny`` does
not apply to it), so the daemons, and every client the tests run (``sbatch``, ``srun``,
``scancel``), live in a network namespace that has only a loopback interface: nothing
listens outside 127.0.0.1. The namespace is held by a ``sleep`` that ends by itself, the
daemons run in the foreground as its children and die with it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000

NODE = "nvrxnode"
CPUS = 2
LIFETIME_S = 3600  # the namespace and every daemon end by themselves after this

CONF = """\
ClusterName=nvrxtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/slurmd
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
CommunicationParameters=NoInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES OverSubscribe=FORCE MaxTime=10
"""


def _commands() -> dict[str, str]:
    found = {c: shutil.which(c) for c in ("munged", "slurmctld", "slurmd", "nsenter", "unshare")}
    missing = [c for c, p in found.items() if p is None]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not installed: run scripts/install-test-packages.sh (as root)"
        )
    return {c: p for c, p in found.items() if p is not None}


class SlurmCluster:
    """One slurmctld and one slurmd (node ``NODE``, ``CPUS`` CPUs) with their own munged."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.conf = directory / "slurm.conf"
        self.munge_socket = directory / "munge" / "munge.socket"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._netns_pid = 0

    # -- clients -----------------------------------------------------------------------
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        out = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        out["SLURM_CONF"] = str(self.conf)
        out.update(extra or {})
        return out

    def argv(self, *args: str) -> list[str]:
        """``args`` run inside the cluster's network namespace."""
        return ["nsenter", "-t", str(self._netns_pid), "-n", "--", *args]

    def run(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), env=self.env(env), capture_output=True, text=True,
            timeout=timeout, **kw,
        )  # fmt: skip

    def popen(self, *args: str, env: dict[str, str] | None = None, **kw: Any) -> Any:
        return subprocess.Popen(self.argv(*args), env=self.env(env), **kw)

    def in_netns(self, make: Callable[[], T]) -> T:
        """``make()`` run by a thread inside the cluster's network namespace: a server it
        binds (an OTLP receiver on 127.0.0.1) is reachable from the jobs, and only there."""
        out: list[T] = []
        err: list[BaseException] = []

        def run() -> None:
            try:
                fd = os.open(f"/proc/{self._netns_pid}/ns/net", os.O_RDONLY)
                try:
                    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
                out.append(make())
            except BaseException as e:  # handed to the caller
                err.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        if err:
            raise err[0]
        return out[0]

    def job_state(self, job_id: str) -> str:
        out = self.run("scontrol", "-o", "show", "job", job_id, timeout=30).stdout
        for field in out.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return ""

    def wait_until(self, what: str, check: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} within {timeout} s; logs:\n{self.logs()}")
            time.sleep(0.1)

    def logs(self) -> str:
        out = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            path = self.dir / name
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-30:]))
        return "\n".join(out)

    # -- life --------------------------------------------------------------------------
    def start(self) -> None:
        cmds = _commands()
        for sub in ("state", "slurmd", "munge"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir / "munge", 0o700)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self.conf.write_text(
            CONF.format(
                host=socket.gethostname().split(".")[0],
                dir=self.dir,
                node=NODE,
                cpus=CPUS,
                munge_socket=self.munge_socket,
            )
        )
        # glibc resolves nothing (AI_ADDRCONFIG) where only 127.0.0.1 is configured: the
        # second loopback address makes Slurm resolve its own 127.0.0.1 addresses.
        holder = subprocess.Popen(
            [cmds["unshare"], "--net", "--", "sh", "-c",
             f"ip link set lo up; ip addr add 127.0.0.2/32 dev lo; exec sleep {LIFETIME_S}"],
            start_new_session=True,
        )  # fmt: skip
        self._procs.append(holder)
        self._netns_pid = holder.pid
        self.wait_until("a network namespace", self._netns_ready, timeout=30)
        m = self.dir / "munge"
        self._daemon(
            "munged", "--foreground", "--force", f"--socket={self.munge_socket}",
            f"--key-file={key}", f"--pid-file={m}/munged.pid", f"--seed-file={m}/seed",
            f"--log-file={self.dir}/munged.log",
        )  # fmt: skip
        self.wait_until("munged's socket", self.munge_socket.exists, timeout=30)
        self._daemon("slurmctld", "-D", "-i", "-f", str(self.conf))
        self._daemon("slurmd", "-D", "-N", NODE, "-f", str(self.conf))
        self.wait_until("an idle node", self._node_idle, timeout=90)

    def _netns_ready(self) -> bool:
        try:
            return os.readlink(f"/proc/{self._netns_pid}/ns/net") != os.readlink(
                "/proc/self/ns/net"
            )
        except OSError:
            return False

    def _daemon(self, *args: str) -> None:
        log = open(self.dir / f"{args[0]}.out", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            self.argv("timeout", "--kill-after=10", str(LIFETIME_S), *args), env=self.env(),
            stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self._procs.append(proc)

    def _node_idle(self) -> bool:
        for proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited {proc.returncode}:\n{self.logs()}")
        out = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=30)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    def stop(self) -> None:
        self.run("scancel", "--user", "root", timeout=30, check=False)
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)


@contextmanager
def cluster(directory: Path) -> Iterator[SlurmCluster]:
    c = SlurmCluster(directory)
    try:
        c.start()
        yield c
    finally:
        c.stop()
