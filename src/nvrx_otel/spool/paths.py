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


def check_dir(path: Path, *, create: bool) -> None:
    """Refuse a directory that is a symlink, owned by another user, or not writable.

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
    if stat.S_ISLNK(st.st_mode):
        raise SpoolPathError(f"spool directory {path} is a symlink; refusing to write through it")
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolPathError(f"spool directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise SpoolPathError(
            f"spool directory {path} is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpoolPathError(f"spool directory {path} is not writable")
