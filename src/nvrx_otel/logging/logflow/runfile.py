"""The run file: its name, startup archives, retention, and where it may be shared.

- Name: ``<log dir>/<script>.log`` (LogFlow's), or ``<script>.rank<N>.log`` when every
  rank would otherwise append to one file over shared storage (see :func:`per_rank`).
- Startup rotation: an existing non-empty run file becomes
  ``<stem>.<YYYY-MM-DD_HH-MM-SS>.<microseconds>.log`` (its mtime; a ``-<n>`` counter is
  added if that name exists). The name is taken with ``link`` + ``unlink``, which never
  replaces an existing file, so two archives never collide.
- Retention keeps the newest ``retention`` archives of this run file's stem (ours and
  LogFlow's second-precision names; newest by the timestamp in the name, then mtime) and
  deletes older ones; no other file is touched.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Final

ARCHIVE_SUFFIX: Final = r"\.\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}(?:\.\d{6})?(?:-\d+)?\.log(?:\.gz)?"
"""What follows the stem in an archive name (LogFlow's names have no microseconds; ``.gz``
when archives are compressed)."""
WORKER_INFIX: Final = ".worker"
"""``<script>[.rank<N>].worker<pid>.log``: a worker's own run file (``file_per: worker``)."""

_SHARED_FS: Final = frozenset(
    {
        "9p", "afs", "beegfs", "ceph", "cifs", "cvfs", "davfs", "fuse", "gfs2", "glusterfs",
        "gpfs", "lustre", "ncpfs", "nfs", "nfs4", "ocfs2", "orangefs", "panfs", "pvfs2",
        "quobyte", "smb3", "smbfs", "virtiofs", "wekafs",
    }
)  # fmt: skip
"""File system types that several nodes mount (and ``fuse.*`` except ``fuseblk``)."""


def discover_script_name() -> str:
    """LogFlow's default stem: the ``__main__`` file's stem (its folder's name for
    ``__main__.py``), else ``argv[0]``'s stem, else ``app``."""
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    if isinstance(file, str) and file:
        path = Path(file)
        if path.name == "__main__.py":
            return path.parent.name or "app"
        return path.stem or "app"
    if sys.argv and sys.argv[0] and not sys.argv[0].startswith("-"):
        return Path(sys.argv[0]).stem or "app"
    return "app"


def run_file(
    log_dir: Path, script: str, rank: int | None, *, per_rank: bool, worker: int | None = None
) -> Path:
    """The run file of this process (``worker``: the pid of a worker with its own file)."""
    stem = f"{script}.rank{rank}" if per_rank and rank is not None else script
    if worker is not None:
        stem = f"{stem}{WORKER_INFIX}{worker}"
    return log_dir / f"{stem}.log"


def purge_workers(path: Path, retention: int, *, shared: bool = False) -> list[Path]:
    """Delete the worker files of ``path``'s stem (their archives and lock files too) that
    belong to runs retention no longer keeps: older than the oldest archive of ``path`` it
    keeps, or, with ``retention`` 0, older than now (``shared``: than this run's start, so
    the workers of a rank that started first keep their files). Returns the deleted."""
    kept = archives(path)[:retention]
    if retention == 0:
        cutoff = run_start() if shared else time.time()
    elif len(kept) < retention:
        return []
    else:
        try:
            cutoff = kept[-1].stat().st_mtime
        except OSError:
            return []
    pattern = re.compile(
        re.escape(path.stem + WORKER_INFIX) + r"\d+(?:" + ARCHIVE_SUFFIX + r"|\.log|\.log\.lock)"
    )  # with the rotation lock file a worker made
    deleted = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            if entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                deleted.append(Path(entry.path))
        except OSError:
            continue
    return deleted


def filesystem_type(path: Path, mounts: str = "/proc/self/mounts") -> str | None:
    """The type of the file system holding ``path`` (longest mount point), or None."""
    try:
        table = Path(mounts).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in table.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, parts[2]
    return best_type


def is_node_local(path: Path, mounts: str = "/proc/self/mounts") -> bool:
    """Whether ``path`` is on storage only this node writes (unknown counts as shared)."""
    kind = filesystem_type(path, mounts)
    if kind is None:
        return False
    if kind == "fuseblk":
        return True
    return kind not in _SHARED_FS and not kind.startswith("fuse.")


def per_rank(spooling: bool, log_dir: Path, rank: int | None) -> bool:
    """Whether this rank writes its own run file: only with a node-local spool (the node
    log is then the durable record) and a ``log_dir`` that other nodes may share."""
    return spooling and rank is not None and not is_node_local(log_dir)


def archive(path: Path) -> Path | None:
    """Rename a non-empty regular file to a new archive name; None if there was none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if st.st_size == 0 or not stat.S_ISREG(st.st_mode):
        return None
    when = datetime.fromtimestamp(st.st_mtime)
    base = f"{path.stem}.{when:%Y-%m-%d_%H-%M-%S}.{when.microsecond:06d}"
    for n in range(10_000):
        target = path.with_name(f"{base}.log" if n == 0 else f"{base}-{n}.log")
        try:
            os.link(path, target)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return None  # someone else archived it first
        except OSError:  # no hard links here: rename, but never over an existing file
            if target.exists():
                continue
            os.rename(path, target)
            return target
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return target
    raise OSError(f"no free archive name for {path}")


_STAMP: Final = re.compile(
    r"\.(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})(?:\.(\d{6}))?(?:-(\d+))?\.log(?:\.gz)?$"
)


def _age_key(name: str, mtime: float) -> tuple[str, str, int, float]:
    """Newer sorts higher: the timestamp in the name (a clock stepped back does not make
    old archives look new), its counter, then the mtime."""
    m = _STAMP.search(name)
    if m is None:
        return ("", "", 0, mtime)
    return (m[1], m[2] or "000000", int(m[3] or 0), mtime)


def archives(path: Path) -> list[Path]:
    """The archives of ``path``'s stem, newest first (by the timestamp in the name, then
    mtime)."""
    pattern = re.compile(re.escape(path.stem) + ARCHIVE_SUFFIX)
    found = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    names = {entry.name for entry in entries}
    for entry in entries:
        if entry.name + ".gz" in names:
            continue  # being compressed: the .gz is the same archive
        if pattern.fullmatch(entry.name):
            try:
                found.append((_age_key(entry.name, entry.stat().st_mtime), Path(entry.path)))
            except OSError:
                continue
    found.sort(reverse=True)
    return [p for _, p in found]


def worker_archives(path: Path) -> list[Path]:
    """The plain (uncompressed) archives of ``path``'s workers (a worker ending with
    ``os._exit`` leaves its last ones plain)."""
    pattern = re.compile(
        re.escape(path.stem + WORKER_INFIX) + r"\d+" + ARCHIVE_SUFFIX.replace(r"(?:\.gz)?", "")
    )
    found = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    names = {entry.name for entry in entries}
    for entry in entries:
        if pattern.fullmatch(entry.name) and entry.name + ".gz" not in names:
            found.append(Path(entry.path))
    return found


def process_start(pid: int | str = "self") -> float:
    """When a process (default: this one) started, in epoch seconds; this module's import
    time if unknown."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat_line.rsplit(")", 1)[1].split()[19])
        btime = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED


def run_start() -> float:
    """When this run started on this node, as far as this process can tell: the earlier of
    its own start and its parent's (the launcher that started the node's ranks: srun's
    slurmstepd, torchrun's agent, mpirun's daemon), so a rank that started a moment
    before this one counts as this run."""
    own = process_start()
    parent = process_start(os.getppid()) if os.getppid() > 1 else own
    return min(own, parent)


_IMPORTED: Final = time.time()


def purge(path: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` archives of ``path``'s stem; returns the deleted."""
    deleted = []
    for old in archives(path)[keep:]:
        try:
            old.unlink()
            deleted.append(old)
        except FileNotFoundError:
            pass
    return deleted


def rotate(
    path: Path, retention: int, compression: str = "none", *, shared: bool = False
) -> Path | None:
    """Startup rotation: archive ``path`` if it has content, then apply retention. With
    ``compression`` ``gz`` a background thread gzips it — and any archive a killed process
    left plain, the workers' too — after the grace other writers get to move on, then
    applies retention.

    ``shared`` (the ranks of a node append to one node-local file): a file written since
    this run started (:func:`run_start`) holds lines of this run (a rank that started
    first) and is not archived; it keeps the previous run's lines above them."""
    started = run_start()
    made = None
    try:
        fresh = shared and path.stat().st_mtime >= started
    except OSError:
        fresh = False
    if not fresh:
        made = archive(path)
    if compression == "gz":
        from nvrx_otel.logging.logflow.runfilewriter import finish_archive

        plain = [p for p in archives(path) if p.suffix == ".log"]
        plain += worker_archives(path)
        if plain:
            threading.Thread(
                target=finish_archive,
                args=(path, plain, compression, retention),
                name="nvrx-otel-runfile-archive",
                daemon=False,  # a normal exit finishes it
            ).start()
            return made
    if made is not None:
        purge(path, retention)
    return made


def move_tail(old: Path, start: int, new: Path) -> None:
    """Move what was appended to ``old`` from byte ``start`` on to the end of ``new``
    (LogFlow's pivot when the run file changes); ``old`` is left as it was before."""
    with old.open("rb") as src:
        src.seek(start)
        data = src.read()
    if data:
        with new.open("ab") as dst:
            dst.write(data)
    if start == 0:
        old.unlink()
    else:
        os.truncate(old, start)
