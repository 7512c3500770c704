"""Spool directory layout, file names, and the safety checks on directories."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

NO_JOB: Final = "nojob"
"""Job directory name when the identity has no job id."""
LOCK_NAME: Final = ".nvrx_aggregator.lock"
"""Held with flock by the running aggregator of a job directory."""
STATE_NAME: Final = ".nvrx_aggregator.state.json"
"""The aggregator's committed progress."""
WAKE_NAME: Final = ".nvrx_aggregator.wake"
"""A FIFO the running aggregator reads: a writer under budget pressure writes a byte."""

_NAME = re.compile(
    r"^(?P<proc>.+)\.p(?P<pid>\d+)\.(?P<writer>[0-9a-f]{16})\.(?P<index>\d{6})\.jsonl$"
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@+-]")


class SpoolPathError(OSError):
    """A spool directory is unsafe or unusable; the message says which and why."""


@dataclass(frozen=True, order=True)
class SpoolFileName:
    """The parts of a spool file name."""

    writer: str
    index: int
    pid: int
    proc: str

    @property
    def name(self) -> str:
        return f"{self.proc}.p{self.pid}.{self.writer}.{self.index:06d}.jsonl"


def parse_name(name: str) -> SpoolFileName | None:
    """The parts of a spool file name, or None for any other file."""
    m = _NAME.match(name)
    if m is None:
        return None
    return SpoolFileName(
        writer=m["writer"], index=int(m["index"]), pid=int(m["pid"]), proc=m["proc"]
    )


def safe_component(text: str) -> str:
    """``text`` usable as one path component (job ids and process names come from outside)."""
    cleaned = _UNSAFE.sub("_", text).strip(".") or "_"
    return cleaned[:64]


def job_dir(root: str | os.PathLike[str], job_id: str | None) -> Path:
    """``<root>/<job id or nojob>``."""
    return Path(root) / safe_component(job_id or NO_JOB)


_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def check_dir(path: Path, *, create: bool) -> None:
    """Refuse a directory that is a symlink, owned by another user, writable by group or
    others, or not writable.

    With ``create`` a missing directory (and parents) is made with mode 0700.
    Raises :class:`SpoolPathError` naming the path and the reason.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise SpoolPathError(f"spool directory {path} does not exist") from None
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(path)
        except OSError as exc:
            raise SpoolPathError(f"cannot create spool directory {path}: {exc}") from None
    except OSError as exc:
        raise SpoolPathError(f"cannot use spool directory {path}: {exc}") from None
    _check_job_stat(path, st)
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpoolPathError(f"spool directory {path} is not writable")


def _check_job_stat(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise SpoolPathError(f"spool directory {path} is a symlink; refusing to write through it")
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolPathError(f"spool directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise SpoolPathError(
            f"spool directory {path} is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
        )
    if st.st_mode & 0o022:
        raise SpoolPathError(
            f"spool directory {path} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); refusing it (chmod go-w, or remove it to have "
            "it made 0700)"
        )


def check_root(path: str | os.PathLike[str]) -> None:
    """Refuse a spool root (the directory job directories are made in) that another user
    could swap a job directory in: a symlink, owned by a user other than this one or root,
    or writable by group or others without the sticky bit (``/tmp`` is fine). A missing
    root is fine (it is made 0700 with the job directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SpoolPathError(f"cannot use spool directory {path}: {exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise SpoolPathError(f"spool directory {path} is a symlink; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolPathError(f"spool directory {path} is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise SpoolPathError(
            f"spool directory {path} is owned by uid {st.st_uid}, neither this user "
            f"({os.geteuid()}) nor root"
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise SpoolPathError(
            f"spool directory {path} is writable by other users without the sticky bit (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); refusing it (chmod go-w, or +t as /tmp has)"
        )


def open_dir(path: Path, *, create: bool) -> int:
    """A descriptor of the job directory ``path`` after :func:`check_dir` (its parent
    checked as a spool root by :func:`check_root`), opened without following a symlink and
    checked again by the descriptor: files are made relative to it (``dir_fd``), so the
    directory's path being swapped later cannot redirect them."""
    check_root(path.parent)
    check_dir(path, create=create)
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        raise SpoolPathError(f"cannot open spool directory {path}: {exc}") from None
    try:
        _check_job_stat(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def dir_gone(fd: int) -> bool:
    """Whether the directory open as ``fd`` was removed (no name leads to it any more)."""
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError:
        return True
