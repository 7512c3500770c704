"""The spool directory's state as the doctor reports it: writers, backlog, budget, other jobs.

It looks with the aggregator's own eyes (:class:`~nvrx_otel.aggregator.spooldir.SpoolDir`:
which files are whose, which writer still holds its lock; the committed aggregator state:
how far each file is in the node log) and never changes anything: no file is written,
deleted or locked for longer than the aggregator's own liveness probe, and the aggregator's
job lock is never taken (a running aggregator is known by the pid in its lock file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from nvrx_otel.aggregator.health import other_job_dirs, served
from nvrx_otel.aggregator.spooldir import SpoolDir
from nvrx_otel.aggregator.state import StateError, load
from nvrx_otel.spool.paths import LOCK_NAME, SpoolPathError, check_dir, check_root


@dataclass(frozen=True)
class WriterInfo:
    """One writer (one process's files) in the job directory."""

    writer: str
    pid: int
    proc: str
    live: bool  # still holds the lock of its newest file
    files: int
    held: int  # bytes of its files on disk: what counts against its budget
    backlog: int  # bytes not yet in the node log
    budget: int  # from its newest header (0: unknown)
    max_file: int  # the size at which it rotates, from the same header (0: unknown)

    @property
    def budget_share(self) -> float:
        """How much of its budget the writer's files take (0 when the budget is unknown)."""
        return self.held / self.budget if self.budget else 0.0

    @property
    def at_budget(self) -> bool:
        """A live writer with no room for another file within its budget: it drops new
        records once its current file is full (the writer's own rule)."""
        return self.live and bool(self.budget) and self.held + self.max_file > self.budget


@dataclass(frozen=True)
class OtherJob:
    """Another job's directory under the same spool root that holds spool files."""

    path: str
    files: int
    size: int
    served: bool


@dataclass
class SpoolState:
    """What the doctor found under one spool root for one job."""

    root: str | None
    job_dir: Path | None = None
    exists: bool = False
    unusable: str = ""  # why the front ends would refuse it ("" when usable)
    aggregator_pid: int | None = None  # a running aggregator serving the job directory
    state_problem: str = ""
    writers: list[WriterInfo] = field(default_factory=list)
    other_jobs: list[OtherJob] = field(default_factory=list)
    free_bytes: int | None = None
    refused: dict[str, str] = field(default_factory=dict)  # spool files the aggregator won't read

    @property
    def backlog(self) -> int:
        return sum(w.backlog for w in self.writers)

    @property
    def live_writers(self) -> int:
        return sum(1 for w in self.writers if w.live)


def inspect(root: str | None, job_dir: Path | None) -> SpoolState:
    """The state of ``job_dir`` under the spool ``root`` (both None: no spool configured)."""
    st = SpoolState(root=root, job_dir=job_dir)
    if root is None or job_dir is None:
        return st
    try:
        check_root(root)
        if os.path.lexists(job_dir):
            check_dir(job_dir, create=False)
    except SpoolPathError as exc:
        st.unusable = str(exc)
    st.exists = job_dir.is_dir() and not job_dir.is_symlink()
    st.free_bytes = _free(job_dir if st.exists else Path(root))
    st.other_jobs = _other_jobs(Path(root), job_dir)
    if not st.exists or st.unusable:
        return st
    st.aggregator_pid = _aggregator_pid(job_dir)
    try:
        committed = load(job_dir)
    except StateError as exc:
        committed, st.state_problem = None, str(exc)
    spool = SpoolDir(job_dir)
    try:
        spool.scan()
        st.refused = dict(spool.refused)  # by the aggregator's own checks (owner, file type)
        if committed is not None:
            spool.restore(committed.files)
        for writer, files in spool.writers():
            present = [f for f in files if not f.vanished]
            held = sum(spool.current_size(f) for f in present)
            backlog = sum(max(0, spool.current_size(f) - f.done) for f in present)
            newest = present[-1] if present else files[-1]
            budget, max_file = _limits(job_dir / newest.name)
            st.writers.append(
                WriterInfo(
                    writer=writer,
                    pid=newest.parts.pid,
                    proc=newest.parts.proc,
                    live=not spool.writer_gone(writer),
                    files=len(present),
                    held=held,
                    backlog=backlog,
                    budget=budget,
                    max_file=max_file,
                )
            )
    finally:
        spool.close()
    return st


def _limits(path: Path) -> tuple[int, int]:
    """The budget and rotation size the file's header states (0 when unknown)."""
    try:
        with open(path, "rb") as f:
            header = orjson.loads(f.readline(65536))
    except (OSError, orjson.JSONDecodeError):
        return 0, 0
    if not isinstance(header, dict):
        return 0, 0
    budget, max_file = header.get("budget"), header.get("max")
    return (
        budget if isinstance(budget, int) and budget > 0 else 0,
        max_file if isinstance(max_file, int) and max_file > 0 else 0,
    )


def _aggregator_pid(job_dir: Path) -> int | None:
    if not served(job_dir):
        return None
    try:
        text = (job_dir / LOCK_NAME).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _other_jobs(root: Path, own: Path) -> list[OtherJob]:
    return [
        OtherJob(path, files, size, served(Path(path)))
        for path, _, files, size in other_job_dirs(root, own)
    ]


def _free(path: Path) -> int | None:
    try:
        vfs = os.statvfs(path)
    except OSError:
        return None
    return vfs.f_bavail * vfs.f_frsize
