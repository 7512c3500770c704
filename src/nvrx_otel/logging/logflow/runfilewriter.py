"""The run file written through a descriptor of our own: rotation while running, and the
switch of a forked worker to a file of its own.

loguru's file sink rotates by renaming the file under its own names, compresses in the
writing thread and knows nothing of the other processes appending to the same file (a
node-local ``log_dir`` is shared by the ranks of a node, forked children inherit the
descriptor). :class:`RunFile` appends with ``O_APPEND`` and rotates as the startup
rotation does (:func:`~nvrx_otel.logging.logflow.runfile.archive`: the archive naming and
per-script retention stay LogFlow's):

- Rotation by size counts what every process appended (``fstat`` of the descriptor before
  each write; the queued writer splits a batch where it would cross the size): any writer
  whose next line would take the file past ``rotation_size`` archives it, under an
  exclusive ``flock`` on ``<run file>.lock``, so one rotates and the others follow.
  Rotation by time (``rotation_interval``) is the owner's (the process that opened the
  file first): a quiet owner delays it. Compression (gzip) and retention run in a
  background thread.
- A run file (or its directory) deleted while running is made again at the next line,
  said once on stderr.
- Every process writing the same file with rotation on looks at the path before each line
  and, when it names another file than its descriptor (another writer rotated), reopens
  it, so its lines go to the new file. A line written to the archive in the moment between
  is kept: the archive is compressed only after :data:`COMPRESS_GRACE_S`, and what was
  appended while it was compressed is added before the plain archive goes (one process
  compresses an archive: the ``.gz.partial`` is created exclusively). A normal exit waits
  for that (at most the grace and the compression); archives left plain by a killed
  process or a worker ending with ``os._exit`` are compressed after the next startup
  rotation, the same way.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import gzip
import os
import sys
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
_LOCK_WAIT_S: Final = 5.0
"""How long a writer waits for another's rotation (under ``<run file>.lock``) at most."""
_STALE_PARTIAL_S: Final = 300.0
"""A ``.gz.partial`` untouched this long was left by a process killed while compressing."""
COMPRESS_GRACE_S: Final = 2.0
"""How long an archive stays plain before it is compressed: other processes appending to
the run file have moved to the new file by then (they look before every line)."""


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def safe_text(text: str) -> bytes:
    """UTF-8 of ``text`` with lone surrogates (undecodable file names) escaped, not lost."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


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
    """One run file: an ``O_APPEND`` descriptor, rotated by size by any writer (under a lock
    file), by time by its owner, followed by the others."""

    def __init__(self, path: Path, rotation: Rotation | None, *, owner: bool) -> None:
        self.path = path
        self.rotation = rotation if rotation is not None and rotation.active else None
        self.compression = rotation.compression if rotation is not None else "none"
        self.retention = rotation.retention if rotation is not None else 0
        self.owner_pid = os.getpid() if owner else 0
        self.lock = threading.Lock()
        self.lock_fd = -1  # <run file>.lock while this process rotates
        self.fd = -1
        self.ino = (0, 0)
        self.opened = 0.0
        self._open()
        _files.add(self)

    def _open(self) -> None:
        try:
            fd = os.open(self.path, _FLAGS, 0o644)
        except FileNotFoundError:  # the log directory was deleted: make it again
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, _FLAGS, 0o644)
        st = os.fstat(fd)
        old, self.fd = self.fd, fd
        self.ino = (st.st_dev, st.st_ino)
        self.opened = time.monotonic()
        if old >= 0:
            try:
                os.close(old)
            except OSError:
                pass

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole lines) to the run file, rotating or following first."""
        self.append_lines([data])

    def append_lines(self, lines: list[bytes]) -> None:
        """Write whole lines; with ``rotation_size`` a batch that would take the file past
        the size is split there, the file rotated in between."""
        with self.lock:
            limit = self.rotation.size if self.rotation is not None else None
            i, n = 0, len(lines)
            while i < n:
                size = self._prepare(len(lines[i]))
                if limit is None:
                    chunk, i = b"".join(lines[i:]) if i else b"".join(lines), n
                else:
                    j, total = i + 1, len(lines[i])
                    while j < n and size + total + len(lines[j]) <= limit:
                        total += len(lines[j])
                        j += 1
                    chunk, i = b"".join(lines[i:j]), j
                write_all(self.fd, chunk)

    def _prepare(self, incoming: int) -> int:
        """Before a write: make the file again if it was deleted, follow or make a rotation.
        Returns the file's size (0 when rotation by size is off: not measured)."""
        r = self.rotation
        try:
            st = os.fstat(self.fd)
            if st.st_nlink == 0:
                self._remade()
                st = os.fstat(self.fd)
            if r is None:
                return 0
            if self._follow():  # another writer rotated (by size: any writer may)
                st = os.fstat(self.fd)
            if (
                self.owner_pid == os.getpid()
                and r.interval is not None
                and time.monotonic() - self.opened >= r.interval
            ):
                self._rotate_locked(None)
                st = os.fstat(self.fd)
            if r.size is not None and st.st_size > 0 and st.st_size + incoming > r.size:
                self._rotate_locked(incoming)
                st = os.fstat(self.fd)
            return st.st_size
        except Exception as exc:  # keep writing where we are
            env.warn_once(f"cannot rotate the run file {self.path}: {exc}")
            return 0

    def _remade(self) -> None:
        existed = self.path.exists()
        self._open()
        if not existed:
            env.warn_once(f"the run file {self.path} was deleted; writing a new one there")

    def _rotate_locked(self, incoming: int | None) -> None:
        """Archive the run file under ``<run file>.lock`` (``flock``): every writer of the
        file may rotate it by size, one at a time; who comes second follows the first."""
        lock = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.lock_fd = lock  # a child forked meanwhile closes its copy (else it holds the lock)
        try:
            deadline = time.monotonic() + _LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:  # never hang the log call
                        env.warn_once(f"{self.path}.lock stays locked; rotating without it")
                        break
                    time.sleep(0.01)
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) != self.ino:
                    self._open()  # another writer rotated meanwhile
                    if incoming is not None:
                        size = os.fstat(self.fd).st_size
                        limit = self.rotation.size if self.rotation is not None else None
                        if limit is None or size == 0 or size + incoming <= limit:
                            return
                    else:
                        return
            except FileNotFoundError:
                self._open()
                return
            self._rotate()
        finally:
            self.lock_fd = -1
            os.close(lock)  # closing releases the lock

    def _rotate(self) -> None:
        made = runfile.archive(self.path)
        self._open()
        if made is not None:
            args = (self.path, [made], self.compression, self.retention)
            try:
                threading.Thread(
                    target=finish_archive,
                    args=args,
                    name="nvrx-otel-runfile-archive",
                    daemon=False,  # a normal exit finishes it (kill -9: the next start does)
                ).start()
            except RuntimeError as exc:  # no thread to be had (interpreter exiting, limits)
                env.warn_once(f"cannot start the archive thread for {self.path}: {exc}")
                if self.compression != "gz":
                    runfile.purge(self.path, self.retention)

    def _follow(self) -> bool:
        """Reopen the path if it names another file than the descriptor; True if so."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._open()  # archived and not yet recreated, or deleted: make it
            return True
        if (st.st_dev, st.st_ino) != self.ino:
            self._open()
            return True
        return False

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


class Losses:
    """Run-file lines that could not be written: the first of each kind said on stderr,
    all counted, the count said at exit (never a traceback per line)."""

    def __init__(self) -> None:
        # Reentrant: a signal handler may log while a line's loss is counted, and its own
        # line fail too (the same full disk).
        self.lock = threading.RLock()
        self.count = 0
        self.kinds: dict[str, int] = {}
        self.reported = 0

    def add(self, path: Path, exc: BaseException, lines: int = 1) -> None:
        kind = _kind(exc)
        with self.lock:
            self.count += lines
            first = kind not in self.kinds
            self.kinds[kind] = self.kinds.get(kind, 0) + lines
        if first:
            env.warn_once(
                f"cannot write the run file {path}: {kind}: {exc} (its records are still "
                "spooled; further lost lines are counted and the count said at exit)"
            )

    def report(self) -> None:
        """Say how many lines were lost since the last report (at shutdown and exit)."""
        with self.lock:
            new, self.reported = self.count - self.reported, self.count
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.kinds.items()))
        if new > 0:
            try:
                sys.stderr.write(
                    f"nvrx-otel: {self.count} run-file line(s) could not be written ({kinds})\n"
                )
                sys.stderr.flush()
            except Exception:  # stderr unusable: nothing left to tell
                pass


def _kind(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return type(exc).__name__


losses = Losses()
atexit.register(losses.report)


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
    src = open(made, "rb")  # noqa: SIM115 (FileNotFoundError: purged meanwhile)
    try:  # one compressor per archive: another process may be at it (or died at it)
        out = open(partial, "xb")  # noqa: SIM115
    except FileExistsError:
        try:
            if time.time() - partial.stat().st_mtime < _STALE_PARTIAL_S:
                src.close()
                return target  # another process is compressing it
            partial.unlink()
        except FileNotFoundError:
            pass
        try:
            out = open(partial, "xb")  # noqa: SIM115
        except BaseException:
            src.close()
            raise
    with src, out, gzip.GzipFile(fileobj=out, mode="wb") as dst:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                size = os.fstat(src.fileno()).st_size
                if size <= done:
                    break
                continue  # appended meanwhile
            dst.write(chunk)
            done += len(chunk)
    try:
        st = made.stat()
    except FileNotFoundError:  # purged while compressed: so is the copy
        partial.unlink(missing_ok=True)
        raise
    os.utime(partial, (st.st_atime, st.st_mtime))  # mtime: retention's tie-break
    os.rename(partial, target)
    made.unlink(missing_ok=True)
    return target


_files: weakref.WeakSet[RunFile] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for f in list(_files):
        f.lock = threading.Lock()  # another thread of the parent may have held it
        if f.lock_fd >= 0:  # the parent's rotation lock: the child's copy would keep it held
            try:
                os.close(f.lock_fd)
            except OSError:
                pass
            f.lock_fd = -1
    losses.lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)

PathFor = Callable[[int], Path]
"""The run file of a process with the given pid (a forked worker's own file)."""
