"""The run file written through a descriptor of our own: rotation while running, and the
switch of a forked worker to a file of its own.

loguru's file sink rotates by renaming the file under its own names, compresses in the
writing thread and knows nothing of the other processes appending to the same file (a
node-local ``log_dir`` is shared by the ranks of a node, forked children inherit the
descriptor). :class:`RunFile` appends with ``O_APPEND`` and rotates as the startup
rotation does (:func:`~nvrx_otel.logging.logflow.runfile.archive`: the archive naming and
per-script retention stay LogFlow's):

- Only the process that owns the run file archives it, when the next line would take it
  past ``rotation_size`` or once it has been open ``rotation_interval``; it then opens a
  new file at the path. Compression (gzip) and retention run in a background thread.
- Any other process writing the same file looks at the path before each line and, when it
  names another file than its descriptor (the owner rotated), reopens it, so its lines go
  to the new file. A line written to the archive in the moment between is kept: the
  archive is compressed only after :data:`COMPRESS_GRACE_S`, and what was appended while
  it was compressed is added as a further gzip member before the plain archive goes. A
  normal exit waits for that (at most the grace and the compression); archives left plain
  by a killed process are compressed after the next startup rotation, the same way (the
  startup rotation archives a file the other ranks of the node may already be writing).
"""

from __future__ import annotations

import gzip
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvrx_otel import env
from nvrx_otel.logging.logflow import runfile

_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
COMPRESS_GRACE_S: Final = 2.0
"""How long an archive stays plain before it is compressed: other processes appending to
the run file have moved to the new file by then (they look before every line)."""


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass(frozen=True)
class Rotation:
    """When the run file is archived while running, and what happens to its archives."""

    size: int | None = None  # bytes
    interval: float | None = None  # seconds
    compression: str = "none"  # "gz" or "none"
    retention: int = 5

    @property
    def active(self) -> bool:
        return self.size is not None or self.interval is not None


class RunFile:
    """One run file: an ``O_APPEND`` descriptor, rotated by its owner, followed by others."""

    def __init__(self, path: Path, rotation: Rotation | None, *, owner: bool) -> None:
        self.path = path
        self.rotation = rotation if rotation is not None and rotation.active else None
        self.compression = rotation.compression if rotation is not None else "none"
        self.retention = rotation.retention if rotation is not None else 0
        self.owner_pid = os.getpid() if owner else 0
        self.lock = threading.Lock()
        self.fd = -1
        self.ino = (0, 0)
        self.size = 0
        self.opened = 0.0
        self._open()
        _files.add(self)

    def _open(self) -> None:
        fd = os.open(self.path, _FLAGS, 0o644)
        st = os.fstat(fd)
        old, self.fd = self.fd, fd
        self.ino = (st.st_dev, st.st_ino)
        self.size = st.st_size
        self.opened = time.monotonic()
        if old >= 0:
            try:
                os.close(old)
            except OSError:
                pass

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole lines) to the run file, rotating or following first."""
        with self.lock:
            if self.rotation is not None:
                try:
                    if self.owner_pid == os.getpid():
                        if self._due(len(data)):
                            self._rotate()
                    else:
                        self._follow()
                except OSError as exc:  # keep writing where we are
                    env.warn_once(f"cannot rotate the run file {self.path}: {exc}")
            write_all(self.fd, data)
            self.size += len(data)

    def _due(self, incoming: int) -> bool:
        r = self.rotation
        assert r is not None
        if r.size is not None and self.size > 0 and self.size + incoming > r.size:
            return True
        return r.interval is not None and time.monotonic() - self.opened >= r.interval

    def _rotate(self) -> None:
        made = runfile.archive(self.path)
        self._open()
        if made is not None:
            threading.Thread(
                target=finish_archive,
                args=(self.path, [made], self.compression, self.retention),
                name="nvrx-otel-runfile-archive",
                daemon=False,  # a normal exit finishes it (kill -9: the next start does)
            ).start()

    def _follow(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._open()  # archived and not yet recreated: make it
            return
        if (st.st_dev, st.st_ino) != self.ino:
            self._open()

    def reopen_as(self, path: Path, *, owner: bool) -> None:
        """Switch to another file (a forked worker's own); the old descriptor is closed."""
        with self.lock:
            self.path = path
            self.owner_pid = os.getpid() if owner else 0
            self._open()

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = -1


def finish_archive(
    path: Path, made: list[Path], compression: str, retention: int, grace: float = COMPRESS_GRACE_S
) -> None:
    """Compress archives (after ``grace`` seconds) and apply the retention of ``path``."""
    try:
        if compression == "gz":
            time.sleep(grace)  # other writers move to the new file before it is read
            for archive in made:
                try:
                    compress(archive)
                except FileNotFoundError:
                    pass  # retention deleted it meanwhile (newer archives were made)
        runfile.purge(path, retention)
    except OSError as exc:
        env.warn_once(f"cannot compress or purge the archives of {path}: {exc}")


def compress(made: Path) -> Path:
    """``<archive>.log`` → ``<archive>.log.gz``: what was appended while compressing is
    added as a further gzip member before the plain archive is removed."""
    target = made.with_name(made.name + ".gz")
    partial = made.with_name(made.name + ".gz.partial")  # no archive name until complete
    done = 0
    with open(made, "rb") as src, gzip.open(partial, "ab") as dst:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                size = os.fstat(src.fileno()).st_size
                if size <= done:
                    break
                continue  # appended meanwhile
            dst.write(chunk)
            done += len(chunk)
    st = made.stat()
    os.utime(partial, (st.st_atime, st.st_mtime))  # retention orders archives by mtime
    os.rename(partial, target)
    made.unlink()
    return target


_files: weakref.WeakSet[RunFile] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for f in list(_files):
        f.lock = threading.Lock()  # another thread of the parent may have held it


os.register_at_fork(after_in_child=_after_fork_in_child)

PathFor = Callable[[int], Path]
"""The run file of a process with the given pid (a forked worker's own file)."""
