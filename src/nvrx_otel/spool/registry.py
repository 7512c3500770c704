"""The process's spool writers: one per spool directory, made on first use, closed at exit.

Front ends ask here for the writer of their job's directory (:func:`writer_for_root`);
a later call with other settings reconfigures the same writer. At exit every writer
writes its pending drop record and closes its files.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

from nvrx_otel.identity import get_identity
from nvrx_otel.spool.paths import check_dir, check_root, job_dir
from nvrx_otel.spool.writer import DEFAULT_MAX_FILE_SIZE, SpoolWriter, _all_writers

_writers: dict[Path, SpoolWriter] = {}
_registry_lock = threading.RLock()  # setup from a signal handler never waits for itself


def get_writer(
    directory: Path,
    *,
    proc: str | None = None,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    budget: int | None = None,
) -> SpoolWriter:
    """The process's writer for ``directory`` (created on first use; a SpoolPathError
    says why a directory cannot be used). Settings of a later call replace earlier ones."""
    key = directory.absolute()
    with _registry_lock:
        writer = _writers.get(key)
        if writer is None:
            writer = _writers[key] = SpoolWriter(
                key, proc=proc, max_file_size=max_file_size, budget=budget
            )
            _watch(writer)
        else:
            writer.configure(max_file_size, budget)
            if proc is not None:
                writer.rename(proc)
        return writer


def _watch(writer: SpoolWriter) -> None:
    """The first writer of a process starts its watcher and uncaught-exception hooks."""
    try:
        from nvrx_otel.watch import capture, uncaught

        uncaught.install(writer)
        capture.start(writer)
    except Exception as exc:  # telemetry never raises into training
        from nvrx_otel import env

        env.warn_once(f"cannot watch this process: {exc!r}")


def writer_for_root(
    root: str | os.PathLike[str],
    *,
    proc: str | None = None,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    budget: int | None = None,
) -> SpoolWriter:
    """The process's writer for this job's directory under the spool ``root``.

    Refuses a root that is a symlink, another user's, or writable by others without the
    sticky bit, and a job directory that is a symlink, foreign-owned, writable by group or
    others, or not writable: :class:`SpoolPathError` says which and why.
    """
    check_root(root)
    directory = job_dir(root, get_identity().job_id)
    check_dir(directory, create=True)
    return get_writer(directory, proc=proc, max_file_size=max_file_size, budget=budget)


def flush_own_writers() -> list[str]:
    """Flush every writer of this process (a pending drop record is written) and return
    their writer ids (for an in-process aggregator that must not wait for them)."""
    ids = []
    for writer in list(_all_writers):
        if writer.pid == os.getpid():
            writer.flush()
            ids.append(writer.writer_id)
    return ids


def close_writers() -> None:
    """Flush pending drop records and close every writer of this process."""
    with _registry_lock:
        writers = list(_writers.values())
    for writer in writers:
        writer.close()


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.RLock()  # setup from a signal handler never waits for itself


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(close_writers)
