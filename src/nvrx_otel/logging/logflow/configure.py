"""LogFlow's API on loguru: ``configure_logging``, ``get_logger``, ``shutdown_logging``,
``reset_logging``.

``configure_logging`` resolves the settings (:mod:`.settings`), then sets loguru up as
LogFlow does — a Rich console for rank 0's main process, the run file in LogFlow's line
format, stdlib logging and warnings intercepted — and adds the spool bridge when a
node-local spool is configured. Unlike LogFlow, a second call is never a silent no-op: an
explicit call after an implicit one (a ``get_logger()`` at import time) takes effect, and
a call that would change settings already applied explicitly warns that it is ignored
unless ``force=True``.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

from nvrx_otel import env
from nvrx_otel.identity import get_identity
from nvrx_otel.logging.handler import default_spool_dir
from nvrx_otel.logging.logflow import gate, intercept, queued, ranks, runfile
from nvrx_otel.logging.logflow.bridge import SpoolBridge, discard
from nvrx_otel.logging.logflow.console import ConsoleFilter, RichConsoleSink
from nvrx_otel.logging.logflow.levels import CONSOLE, FILE, LevelFilter, ModuleLevels, level_number
from nvrx_otel.logging.logflow.queued import QueuedFile
from nvrx_otel.logging.logflow.settings import (
    Settings,
    export_for_children,
    forget_export,
    resolve,
)
from nvrx_otel.spool.paths import SpoolPathError
from nvrx_otel.spool.registry import get_writer
from nvrx_otel.spool.writer import SpoolWriter

if TYPE_CHECKING:
    from loguru import Logger

FILE_FORMAT: Final = (
    "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {rank_tag}{name}:{function}:{line} | {message}"
)
"""LogFlow's run-file line (lnav format ``nvrx_logflow_log``); ``{rank_tag}`` is filled in
when the sink is added (``[rank N] | `` above rank 0)."""


@dataclass
class _State:
    configured: bool = False
    implicit: bool = False
    settings: Settings | None = None
    pid: int = 0
    handler_ids: list[int] = field(default_factory=list)
    run_file: Path | None = None
    run_file_start: int = 0  # its size when we began appending (what a pivot moves)
    owns_run_file: bool = False  # this process rotates and pivots it
    cleared: bool = False  # loguru's handlers were removed on the first configure
    had_default: bool = False  # loguru's default stderr handler was among them


_state = _State()
_lock = threading.RLock()


def configure_logging(
    log_dir: str | os.PathLike[str] | None = None,
    script_name: str | None = None,
    file_level: str | int | None = None,
    console_level: str | int | None = None,
    rotation_on_startup: bool | None = None,
    retention: int | None = None,
    enqueue: bool | None = None,
    force: bool = False,
    *,
    module_levels: dict[str, dict[str, Any]] | None = None,
    diagnose: bool | None = None,
) -> None:
    """Configure loguru as LogFlow does, bridged into the node-local spool.

    Arguments left ``None`` come from the environment (``LOGFLOW_*``), ``logflow.yaml`` /
    ``logflow.yml`` / ``[tool.logflow]`` in ``pyproject.toml`` in the working directory,
    ``$XDG_CONFIG_HOME/logflow/config.yaml``, then the defaults (``./logs``, the script's
    name, DEBUG to the file, INFO to the console, startup rotation keeping 5 archives, no
    enqueue, no diagnose). Raises ``ValueError`` naming the key, the value and where it
    came from for an unknown key or an invalid value.

    A repeated call applies new settings if the current ones were set implicitly (by
    ``get_logger``) or ``force`` is true; otherwise it warns that they are ignored.
    """
    arguments = {
        "log_dir": log_dir,
        "script_name": script_name,
        "file_level": file_level,
        "console_level": console_level,
        "rotation_on_startup": rotation_on_startup,
        "retention": retention,
        "enqueue": enqueue,
        "module_levels": module_levels,
        "diagnose": diagnose,
    }
    with _lock:
        settings = resolve(arguments)
        st = _state
        if st.configured and not force and not st.implicit:
            if settings != st.settings:
                warnings.warn(_ignored(settings, st.settings), UserWarning, stacklevel=2)
            return
        _apply(settings, implicit=False)


def get_logger(name: str | None = None) -> Logger:
    """loguru's logger (bound with ``name`` when given), configuring with the defaults
    first if nothing is configured yet."""
    if not _state.configured:
        with _lock:
            if not _state.configured:
                _apply(resolve({}), implicit=True)
    return logger.bind(name=name) if name else logger


def shutdown_logging() -> None:
    """Write out everything queued (``enqueue=True``) and flush the console; idempotent.

    In a forked child there is nothing to wait for: its run-file lines are written
    directly and its spool records at the call."""
    queued.flush_all()
    if _state.configured and _state.pid == os.getpid():
        logger.complete()  # loguru's own queues, if the user added enqueued sinks
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass


def reset_logging() -> None:
    """Back to the unconfigured state: our handlers removed (queues written out first),
    stdlib logging and warnings as they were, loguru's default handler back if the first
    ``configure_logging`` removed it."""
    global _state
    with _lock:
        st = _state
        _remove_handlers(st)
        gate.uninstall()
        gate.release()
        intercept.uninstall()
        forget_export()
        if st.had_default:
            logger.add(sys.stderr)
        _state = _State()


def active_settings() -> Settings | None:
    """The settings the loguru front end runs with in this process (each with its source),
    None while it is not configured."""
    return _state.settings if _state.configured else None


def current_run_file() -> Path | None:
    """The run file this process writes, if any (for tests and tools)."""
    return _state.run_file


# --- applying the settings --------------------------------------------------------------------


def _ignored(new: Settings, old: Settings | None) -> str:
    changed = []
    for key in ("log_dir", "script_name", "file_level", "console_level", "rotation_on_startup",
                "retention", "enqueue", "diagnose", "module_levels"):  # fmt: skip
        a, b = getattr(new, key), getattr(old, key, None)
        if a != b:
            changed.append(f"{key}={a!r} (in effect: {b!r})")
    return (
        "configure_logging() was already called in this process; ignoring "
        + ", ".join(changed)
        + ". Pass force=True to apply them."
    )


def _remove_handlers(st: _State) -> None:
    for hid in st.handler_ids:
        try:
            logger.remove(hid)  # an enqueued sink writes out its queue first
        except ValueError:
            pass  # already removed by the user
    st.handler_ids = []


def _spool_writer() -> SpoolWriter | None:
    if env.DISABLED.get():
        return None
    directory = default_spool_dir()
    if directory is None:
        return None
    try:
        if directory.parent.is_symlink():
            raise SpoolPathError(f"spool directory {directory.parent} is a symlink; refusing it")
        return get_writer(
            directory,
            max_file_size=env.spool_file_size(),
            budget=env.spool_budget(),
        )
    except (OSError, ValueError) as exc:
        env.warn_once(f"{exc}; loguru records are not spooled")
        return None


def _rotates(settings: Settings, per_rank: bool, spooling: bool, rank: int | None) -> bool:
    """Whether this process archives and pivots the run file (one process per file)."""
    if settings.inherited or not ranks.is_main_process():
        return False
    if per_rank:
        return True
    if spooling and rank is not None:  # a node-local log_dir: one file per node
        ident = get_identity()
        local = ident.workload_local_rank
        if local is None:
            local = ident.infra_local_rank
        return local == 0 if local is not None else rank == 0
    return rank is None or rank == 0


def _prepare_run_file(
    st: _State, path: Path, settings: Settings, owner: bool
) -> tuple[Path | None, int]:
    """Create the directory, rotate and pivot; the path to append to and its start."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        env.warn_once(f"cannot create the log directory {path.parent}: {exc}; no run file")
        return None, 0
    old, old_start = st.run_file, st.run_file_start
    if owner and path != old:
        try:
            if settings.rotation_on_startup:
                runfile.rotate(path, settings.retention)
            start = path.stat().st_size if path.exists() else 0
            if old is not None and st.owns_run_file and old.exists():
                runfile.move_tail(old, old_start, path)
            return path, start
        except OSError as exc:
            env.warn_once(f"cannot rotate the run file {path}: {exc}")
    try:
        return path, path.stat().st_size
    except OSError:
        return path, 0


def _apply(settings: Settings, *, implicit: bool) -> None:
    st = _state
    pid = os.getpid()
    main = ranks.is_main_process()
    rank = ranks.logflow_rank()
    tag = ranks.rank_tag(rank)
    log_dir = Path(settings.log_dir).expanduser().resolve()
    script = settings.script_name or runfile.discover_script_name()
    writer = _spool_writer()
    per_rank = runfile.per_rank(writer is not None, log_dir, rank)
    owner = _rotates(settings, per_rank, writer is not None, rank)

    _remove_handlers(st)
    if not st.cleared:
        st.had_default = 0 in logger._core.handlers  # type: ignore[attr-defined]
        logger.remove()  # as LogFlow: loguru's default stderr sink would print twice
        st.cleared = True
    path, start = _prepare_run_file(
        st, runfile.run_file(log_dir, script, rank, per_rank=per_rank), settings, owner
    )

    levels = None
    if settings.module_levels:
        levels = ModuleLevels(settings.console_level, settings.file_level, settings.module_levels)
    console_floor = levels.floor(CONSOLE) if levels else level_number(settings.console_level)
    file_floor = levels.floor(FILE) if levels else level_number(settings.file_level)
    ids: list[tuple[int, int]] = []  # (handler id, sink)
    if main and (rank is None or rank == 0):
        hid = logger.add(
            RichConsoleSink(tag),
            level=console_floor,
            format="{message}",
            filter=ConsoleFilter(pid, levels),
            colorize=False,
            diagnose=settings.diagnose,
            enqueue=False,
        )
        ids.append((hid, CONSOLE))
    if path is not None:
        file_options: dict[str, Any] = {
            "level": file_floor,
            "format": FILE_FORMAT.replace("{rank_tag}", tag),
            "filter": LevelFilter(levels, FILE) if levels else None,
            "colorize": False,
            "diagnose": settings.diagnose,
            "enqueue": False,  # loguru's enqueue deadlocks with fork: see .queued
        }
        try:
            if settings.enqueue:
                hid = logger.add(QueuedFile(path), **file_options)
            else:
                hid = logger.add(str(path), mode="a", encoding="utf-8", **file_options)
            ids.append((hid, FILE))
        except OSError as exc:  # the console and the spool still work
            env.warn_once(f"cannot open the run file {path}: {exc}; no run file")
            path = None
    if writer is not None:
        hid = logger.add(
            discard,
            level=file_floor,
            format="{message}",
            filter=SpoolBridge(writer, levels),
            colorize=False,
            enqueue=False,
        )
        ids.append((hid, FILE))

    gate.uninstall()
    if levels is not None:
        for hid, sink in ids:
            gate.register(hid, _threshold(levels, sink, pid), levels.ceiling(sink))
        gate.install()
    gate.adopt()
    floors = [console_floor if sink == CONSOLE else file_floor for _, sink in ids]
    intercept.install(min(floors, default=file_floor))
    if main and not settings.inherited:
        export_for_children(settings, log_dir, script)

    st.configured = True
    st.implicit = implicit
    st.settings = settings
    st.pid = pid
    st.handler_ids = [hid for hid, _ in ids]
    st.run_file = path
    st.run_file_start = start
    st.owns_run_file = owner


def _threshold(levels: ModuleLevels, sink: int, pid: int) -> gate.Threshold:
    if sink == CONSOLE:

        def console(name: Any) -> int:
            return levels.threshold(name, CONSOLE) if os.getpid() == pid else gate.NEVER

        return console

    def file(name: Any) -> int:
        return levels.threshold(name, FILE)

    return file


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)
