"""Helpers for aggregator tests: spool files made like a writer makes them (so tests can
also craft torn and corrupt bytes), the aggregator in-process or as a real process, and
polling with a deadline instead of sleeping."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nvrx_otel import record as rec
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig
from nvrx_otel.spool.paths import SpoolFileName

NODE = "testnode"
ROOT = Path(__file__).resolve().parents[2]


NO_WATCHER = {"NVRX_OTEL_CAPTURE_OUTPUT": "off", "NVRX_OTEL_CAPTURE_STACKS": "off"}
"""No watcher in a rank a test starts (its records would change every count) unless the
test asks for one."""


def process_env(tmp: Path, node: str, **extra: str) -> dict[str, str]:
    """The environment of a rank or aggregator process a test starts: this machine's
    without OTEL_/RANK/NVRX_ variables, the spool under ``tmp``, node id ``node``, this
    checkout importable, no watcher (``NVRX_OTEL_CAPTURE_*`` off), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RANK", "NVRX_"))}
    env.update(NVRX_NODE_LOCAL_TMPDIR=str(tmp / "spool"), NVRX_OTEL_NODE_ID=node)
    env.update(NO_WATCHER)
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[(?P<lvl>[A-Z]+)\] \[(?P<node>[^\]]+)\] "
    r"\[workload:(?P<r>\d+|\?)\((?P<lr>\d+|\?)\) infra:(?P<ir>\d+|\?)\((?P<ilr>\d+|\?)\)\] "
    r"(?P<file>\S+):(?P<line>\d+|\?) (?P<msg>.*?)"
    r"(?: \[trace_id=(?P<trace>[0-9a-f]{32}) span_id=(?P<span>[0-9a-f]{16})\])?$"
)
"""The node-log line grammar."""


def wait_for(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class FakeWriter:
    """A spool writer made by hand: same file names, header, lock and rotation as
    ``SpoolWriter``, plus raw writes for torn or corrupt bytes."""

    def __init__(
        self,
        directory: Path,
        *,
        writer: str = "00000000000000a1",
        pid: int = 4242,
        proc: str = "rank0",
        identity: dict[str, Any] | None = None,
        index: int = 0,
        resource: dict[str, Any] | None = None,
    ) -> None:
        self.directory = directory
        self.resource = resource or {}  # the header's ``res`` (the OTLP resource)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.writer, self.pid, self.proc = writer, pid, proc
        self.identity = {"node": NODE, "rank": 0, "lrank": 0, "irank": 0, "ilrank": 0}
        if identity is not None:
            self.identity = identity
        self.seq = 0
        self.fd = -1
        self.index = index - 1
        self.rotate()

    @property
    def path(self) -> Path:
        return self.directory / SpoolFileName(self.writer, self.index, self.pid, self.proc).name

    def rotate(self) -> None:
        """Open the next index (header, lock, rename) and let go of the old file."""
        self.index += 1
        tmp = self.directory / f".{self.path.name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        header = {"v": 1, "k": "hdr", "w": self.writer, "f": self.index, "ts": time.time_ns()}
        header.update({"pid": self.pid, "ppid": 1, "proc": self.proc, "res": self.resource})
        os.write(fd, rec.encode(header))
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.rename(tmp, self.path)
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = fd

    def record(self, msg: str, **fields: Any) -> dict[str, Any]:
        d: dict[str, Any] = {"v": 1, "k": "log", "ts": time.time_ns(), "sev": 9, "lvl": "INFO"}
        d.update({"lg": "t", "msg": msg, "file": "train.py", "line": 7, "pid": self.pid})
        d["key"] = f"{self.writer}-{self.seq:x}"
        d.update(self.identity)
        d.update(fields)
        self.seq += 1
        return d

    def log(self, msg: str, **fields: Any) -> dict[str, Any]:
        d = self.record(msg, **fields)
        self.raw(rec.encode(d))
        return d

    def raw(self, data: bytes) -> None:
        os.write(self.fd, data)

    def drop(self, count: int, first_ts: int, last_ts: int, reason: str = "budget") -> None:
        d: dict[str, Any] = {"v": 1, "k": "drop", "ts": time.time_ns(), "pid": self.pid}
        d.update({"count": count, "first_ts": first_ts, "last_ts": last_ts, "reason": reason})
        d["key"] = f"{self.writer}-{self.seq:x}"
        d.update(self.identity)
        self.seq += 1
        self.raw(rec.encode(d))

    def close(self) -> None:
        """The writer is gone: its lock is released."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def config(tmp: Path, **overrides: Any) -> AggregatorConfig:
    fields: dict[str, Any] = {
        "log_dir": tmp / "logs",
        "spool_root": tmp / "spool",
        "job_id": "job1",
        "node_id": NODE,
        "check_interval": 0.02,
        "drain_timeout": 10.0,
        "status_interval": 0.0,
        "nice": 0,
        "settle_s": 0.2,
    }
    fields.update(overrides)
    return AggregatorConfig(**fields)


def spool_dir(tmp: Path, job: str = "job1") -> Path:
    return tmp / "spool" / job


def log_path(tmp: Path) -> Path:
    return tmp / "logs" / f"nvrx_log_{NODE}.log"


def log_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def messages(path: Path) -> list[str]:
    """Messages of the record lines (continuation lines left out)."""
    out = []
    for line in log_lines(path):
        m = LINE.match(line)
        if m:
            out.append(m["msg"])
    return out


LOSS = re.compile(r"^(?P<what>dropped|corrupt) (?P<n>\d+) records from rank \S+ pid \S+ between ")


def ledger(path: Path) -> tuple[list[str], int, int]:
    """The node log's side of the ledger: messages of the records it holds (loss reports
    left out), records reported dropped, records reported corrupt."""
    kept: list[str] = []
    lost = {"dropped": 0, "corrupt": 0}
    for msg in messages(path):
        m = LOSS.match(msg)
        if m:
            lost[m["what"]] += int(m["n"])
        else:
            kept.append(msg)
    return kept, lost["dropped"], lost["corrupt"]


def writer_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a rank process writing to the test spool (job ``job1``)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX", "RANK"))}
    full.update({"SLURM_JOB_ID": "job1", "NVRX_OTEL_NODE_ID": NODE, **NO_WATCHER})
    full.update(extra)
    return full


@contextmanager
def running(cfg: AggregatorConfig, **kwargs: Any) -> Iterator[Aggregator]:
    """An in-process aggregator thread, shut down (drained) on exit."""
    agg = Aggregator(cfg, **kwargs)
    agg.start_thread()
    try:
        yield agg
    finally:
        agg.shutdown(timeout=30)
        assert agg.exit_code == 0


class AggProc(subprocess.Popen[str]):
    """An aggregator process whose stderr goes to a file the test can poll."""

    err_path: Path

    def err(self) -> str:
        return self.err_path.read_text()


def cli(
    tmp: Path,
    *args: str,
    env: dict[str, str] | None = None,
    wait_file: Path | None = None,
    command: list[str] | None = None,
) -> AggProc:
    """``python -m nvrx_otel.logging.aggregator`` as a real process (``command`` instead of
    ``python -m ...``: e.g. a ``python -c`` that sets limits first, then runs the module)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NVRX", "RANK"))}
    full_env.update({"NVRX_OTEL_NODE_ID": NODE, "NVRX_NODE_LOCAL_TMPDIR": str(tmp / "spool")})
    full_env.update(env or {})
    argv = command or [sys.executable, "-m", "nvrx_otel.logging.aggregator"]
    argv = [*argv, "--log-dir", str(tmp / "logs")]
    argv += ["--wait-file", str(wait_file or tmp / "done"), "--check-interval", "0.05"]
    argv += ["--job-id", "job1", *args]
    return spawn(tmp, argv, full_env)


def spawn(tmp: Path, argv: list[str], env: dict[str, str]) -> AggProc:
    n = len(list(tmp.glob("aggregator-*.err")))
    err_path = tmp / f"aggregator-{n}.err"
    with err_path.open("w") as err:
        proc = AggProc(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    proc.err_path = err_path
    return proc


def started(tmp: Path, proc: AggProc, job: str = "job1") -> None:
    """Wait until a CLI aggregator has opened: it holds the job lock, has committed its
    starting point and has seen any old wait file (it says so on stderr after that)."""
    lock = tmp / "spool" / job / ".nvrx_aggregator.lock"

    def ready() -> bool:
        assert proc.poll() is None, f"aggregator exited early: {proc.err()}"
        try:
            return lock.read_text().strip() == str(proc.pid) and ": aggregating " in proc.err()
        except FileNotFoundError:
            return False

    wait_for(ready, timeout=20, what="aggregator start")


def holds_lock(tmp: Path, proc: subprocess.Popen[Any], job: str = "nojob") -> None:
    """Wait until an aggregator process holds its job's lock (it has opened the spool and
    the node log); for processes whose stderr a test reads only at the end."""
    lock = tmp / "spool" / job / ".nvrx_aggregator.lock"

    def ready() -> bool:
        assert proc.poll() is None, "aggregator exited early"
        try:
            return lock.read_text().strip() == str(proc.pid)
        except FileNotFoundError:
            return False

    wait_for(ready, timeout=60, what="the aggregator's job lock")


def finish(proc: AggProc, timeout: float = 30) -> tuple[int, str]:
    """Wait for a CLI aggregator; its exit code and stderr."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"aggregator did not exit within {timeout} s; stderr:\n{proc.err()}"
        ) from None
    return proc.returncode, proc.err()
