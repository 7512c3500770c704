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

import dataclasses
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
from nvrx_otel.logging.logflow.directfile import DirectFile
from nvrx_otel.logging.logflow.jsonline import json_line
from nvrx_otel.logging.logflow.levels import CONSOLE, FILE, LevelFilter, ModuleLevels, level_number
from nvrx_otel.logging.logflow.queued import QueuedFile, encode_text
from nvrx_otel.logging.logflow.reload import Reloader, Switch, floored
from nvrx_otel.logging.logflow.runfilewriter import Rotation, RunFile, losses
from nvrx_otel.logging.logflow.settings import (
    Settings,
    export_for_children,
    forget_export,
    resolve,
)
from nvrx_otel.logging.logflow.textfile import TextFile
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
    arguments: dict[str, Any] = field(default_factory=dict)  # of the call that applied
    switches: list[tuple[Switch, int, Any]] = field(default_factory=list)  # (filter, sink, ...)
    reloader: Reloader | None = None
    applied_levels: Settings | None = None  # what the switches apply now
    console: RichConsoleSink | None = None


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
    file_per: str | None = None,
    file_format: str | None = None,
    rotation_size: int | str | None = None,
    rotation_interval: float | str | None = None,
    compression: str | None = None,
    reload_signal: str | None = None,
    reload_action: str | None = None,
) -> None:
    """Configure loguru as LogFlow does, bridged into the node-local spool.

    Arguments left ``None`` come from the environment (``LOGFLOW_*``), ``logflow.yaml`` /
    ``logflow.yml`` / ``[tool.logflow]`` in ``pyproject.toml`` in the working directory,
    ``$XDG_CONFIG_HOME/logflow/config.yaml``, then the defaults (``./logs``, the script's
    name, DEBUG to the file, INFO to the console, startup rotation keeping 5 archives, no
    enqueue, no diagnose). Raises ``ValueError`` naming the key, the value and where it
    came from for an unknown key or an invalid value.

    Beyond LogFlow (keyword-only, also in the files and ``NVRX_OTEL_LOGURU_*``):
    ``file_per`` (``rank`` or ``worker``: a file per worker process), ``file_format``
    (``text`` or ``json``), ``rotation_size`` / ``rotation_interval`` (archive while
    running), ``compression`` (``gz``), ``reload_signal`` / ``reload_action`` (reconfigure
    on a signal).

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
        "file_per": file_per,
        "file_format": file_format,
        "rotation_size": rotation_size,
        "rotation_interval": rotation_interval,
        "compression": compression,
        "reload_signal": reload_signal,
        "reload_action": reload_action,
    }
    with _lock:
        settings = resolve(arguments)
        st = _state
        if st.configured and not force and not st.implicit:
            if settings != st.settings:
                warnings.warn(_ignored(settings, st.settings), UserWarning, stacklevel=2)
            return
        _apply(settings, implicit=False)
        _state.arguments = {k: v for k, v in arguments.items() if v is not None}


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
    losses.report()
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
        _stop_reloader(st)
        _remove_handlers(st)
        gate.uninstall()
        gate.release()
        intercept.uninstall()
        forget_export()
        if st.had_default:
            logger.add(sys.stderr)
        _state = _State()


def active_settings() -> Settings | None:
    """The settings the loguru front end runs with in this process (each with its source;
    levels a reload signal changed say so), None while it is not configured."""
    st = _state
    if not st.configured:
        return None
    return st.applied_levels if st.applied_levels is not None else st.settings


def current_run_file() -> Path | None:
    """The run file this process writes, if any (for tests and tools)."""
    return _state.run_file


# --- applying the settings --------------------------------------------------------------------


def _ignored(new: Settings, old: Settings | None) -> str:
    changed = []
    for key in ("log_dir", "script_name", "file_level", "console_level", "rotation_on_startup",
                "retention", "enqueue", "diagnose", "module_levels", "file_per", "file_format",
                "rotation_size", "rotation_interval", "compression", "reload_signal",
                "reload_action"):  # fmt: skip
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
    st: _State, path: Path, settings: Settings, owner: bool, shared: bool
) -> tuple[Path | None, int]:
    """Create the directory, rotate and pivot; the path to append to and its start.

    ``shared``: the ranks of the node append to this one node-local file. A change of
    ``file_format`` (text lines of an implicit configuration, then ``json``) starts a new
    file: the lines written so far are archived (same path) or left where they are (another
    path), never mixed into a file of the other format."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        env.warn_once(f"cannot create the log directory {path.parent}: {exc}; no run file")
        return None, 0
    old, old_start = st.run_file, st.run_file_start
    reformat = (
        old is not None
        and st.settings is not None
        and st.settings.file_format != settings.file_format
    )
    if owner and path != old:
        try:
            if settings.rotation_on_startup:
                runfile.rotate(path, settings.retention, settings.compression, shared=shared)
                if settings.file_per == "worker":
                    runfile.purge_workers(path, settings.retention, shared=shared)
            start = path.stat().st_size if path.exists() else 0
            if old is not None and st.owns_run_file and old.exists() and not reformat:
                runfile.move_tail(old, old_start, path)
            return path, start
        except OSError as exc:
            env.warn_once(f"cannot rotate the run file {path}: {exc}")
    elif owner and reformat and st.owns_run_file:
        try:
            runfile.archive(path)  # retention applies at the next start
        except OSError as exc:
            env.warn_once(f"cannot archive the run file {path}: {exc}")
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
    worker = settings.file_per == "worker" and not main
    owner = worker or _rotates(settings, per_rank, writer is not None, rank)

    _remove_handlers(st)
    if not st.cleared:
        st.had_default = 0 in logger._core.handlers  # type: ignore[attr-defined]
        logger.remove()  # as LogFlow: loguru's default stderr sink would print twice
        st.cleared = True
    path, start = _prepare_run_file(
        st,
        runfile.run_file(log_dir, script, rank, per_rank=per_rank, worker=pid if worker else None),
        settings,
        owner,
        shared=writer is not None and rank is not None and not per_rank and not worker,
    )
    reloadable = settings.reload_signal is not None and main and not settings.inherited

    levels = None
    if settings.module_levels:
        levels = ModuleLevels(settings.console_level, settings.file_level, settings.module_levels)
    console_floor = levels.floor(CONSOLE) if levels else level_number(settings.console_level)
    file_floor = levels.floor(FILE) if levels else level_number(settings.file_level)
    ids: list[tuple[int, int]] = []  # (handler id, sink)
    console: RichConsoleSink | None = None
    switches: list[tuple[Switch, int, Any]] = []
    if main and (rank is None or rank == 0):
        console_filter: Any = ConsoleFilter(pid, levels)
        if reloadable:
            console_filter = Switch(floored(console_floor, console_filter))
            switches.append((console_filter, CONSOLE, pid))
        console = RichConsoleSink(tag, spooled=(levels, file_floor) if writer else None)
        hid = logger.add(
            console,
            level=_handler_level(settings, console_floor) if reloadable else console_floor,
            format="{message}",
            filter=console_filter,
            colorize=False,
            diagnose=settings.diagnose,
            enqueue=False,
        )
        ids.append((hid, CONSOLE))
    if path is not None:
        file_filter: Any = LevelFilter(levels, FILE) if levels else None
        # Without reloadable levels the bridge is the run file's filter (it spools, then
        # says whether the file takes the record): one handler less for loguru per record.
        if writer is not None and not reloadable:
            file_filter = SpoolBridge(writer, levels, keep=True)
        if reloadable:
            file_filter = Switch(floored(file_floor, file_filter))
            switches.append((file_filter, FILE, None))
        json = settings.file_format == "json"
        file_options: dict[str, Any] = {
            "level": _handler_level(settings, file_floor) if reloadable else file_floor,
            "format": "{message}" if json else FILE_FORMAT.replace("{rank_tag}", tag),
            "filter": file_filter,
            "colorize": False,
            "diagnose": settings.diagnose,
            "enqueue": False,  # loguru's enqueue deadlocks with fork: see .queued
        }
        try:
            own = settings.enqueue or json or settings.file_per == "worker"
            own = own or settings.rotation_size is not None
            own = own or settings.rotation_interval is not None
            if own:  # our own descriptor: rotation, JSON lines, per-worker files
                sink = _file_sink(settings, path, owner, rank, log_dir, script, per_rank)
                hid = logger.add(sink, **file_options)
            else:  # the default: lines from cached pieces (lone surrogates escaped)
                text_file = TextFile(path, file_options["format"])
                hid = logger.add(text_file, **file_options)
                text_file.take_over(logger._core.handlers[hid])  # type: ignore[attr-defined]
            ids.append((hid, FILE))
        except OSError as exc:  # the console and the spool still work
            env.warn_once(f"cannot open the run file {path}: {exc}; no run file")
            path = None
    if writer is not None and (path is None or reloadable):  # the bridge on its own handler
        bridge: Any = SpoolBridge(writer, levels)
        if reloadable:
            bridge = Switch(floored(file_floor, bridge))
            switches.append((bridge, -1, writer))
        hid = logger.add(
            discard,
            level=_handler_level(settings, file_floor) if reloadable else file_floor,
            format="{message}",
            filter=bridge,
            colorize=False,
            enqueue=False,
        )
        ids.append((hid, FILE))

    gate.uninstall()
    if levels is not None and not reloadable:  # a reload swaps filters the gate can't see
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
    st.switches = switches
    st.console = console
    st.applied_levels = settings
    _stop_reloader(st)
    if reloadable:
        _start_reloader(st, settings)


# --- per-worker files, rotation, JSON lines ---------------------------------------------------


def _file_sink(
    settings: Settings,
    path: Path,
    owner: bool,
    rank: int | None,
    log_dir: Path,
    script: str,
    per_rank: bool,
) -> Any:
    rotation = Rotation(
        settings.rotation_size,
        settings.rotation_interval,
        settings.compression,
        settings.retention,
    )
    file = RunFile(path, rotation, owner=owner)
    encode: Any = encode_text
    if settings.file_format == "json":

        def encode(message: Any) -> bytes:
            return json_line(message.record, rank)

    worker_path = None
    if settings.file_per == "worker":

        def worker_path(child: int) -> Path:
            return runfile.run_file(log_dir, script, rank, per_rank=per_rank, worker=child)

    if settings.enqueue and ranks.is_main_process():
        # A child (spawn, forkserver) may end with os._exit, before a thread of its own
        # wrote its queue out: it writes directly, as a forked child does.
        return QueuedFile(file, encode, worker_path)
    return DirectFile(file, encode, worker_path)


# --- reconfiguring on a signal ----------------------------------------------------------------

_DEBUG = 10


def _handler_level(settings: Settings, floor: int) -> int:
    """The level a switchable handler is added with: every level a switch can turn on."""
    return min(floor, _DEBUG) if settings.reload_action == "debug" else 0


def _start_reloader(st: _State, settings: Settings) -> None:
    name = settings.reload_signal
    assert name is not None
    if threading.current_thread() is not threading.main_thread():
        env.warn_once(
            f"reload_signal={name}: configure_logging() must run in the main thread to "
            "handle a signal; reloading is off"
        )
        return
    action = _toggle_debug if settings.reload_action == "debug" else _reload_files
    try:
        st.reloader = Reloader(name, action)
    except (OSError, ValueError) as exc:
        env.warn_once(f"reload_signal={name}: cannot install the handler: {exc}")


def _stop_reloader(st: _State) -> None:
    if st.reloader is not None:
        st.reloader.uninstall()
        st.reloader = None


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"nvrx-otel: {text}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass


def _toggle_debug() -> None:
    with _lock:
        st = _state
        base, now = st.settings, st.applied_levels
        if base is None or now is None:
            return
        on = now is base  # DEBUG is off: turn it on
        new = base
        if on:
            new = dataclasses.replace(
                base,
                file_level="DEBUG" if level_number(base.file_level) > _DEBUG else base.file_level,
                console_level=(
                    "DEBUG" if level_number(base.console_level) > _DEBUG else base.console_level
                ),
                sources=_reloaded_sources(base, ("file_level", "console_level")),
            )
        _switch(st, new)
        state = "on" if on else "off"
        _say(
            f"{base.reload_signal}: DEBUG {state} (file level {new.file_level}, "
            f"console level {new.console_level})"
        )


_RESTART_KEYS: Final = (
    "log_dir", "script_name", "enqueue", "diagnose", "file_per", "file_format", "rotation_size",
    "rotation_interval", "compression", "reload_signal", "reload_action", "retention",
)  # fmt: skip
"""Settings a reload reads but cannot apply to running handlers without losing records."""


def _reload_files() -> None:
    with _lock:
        st = _state
        if st.settings is None:
            return
        try:
            fresh = resolve(st.arguments)
        except (ValueError, TypeError) as exc:
            _say(f"{st.settings.reload_signal}: the configuration was not reloaded: {exc}")
            return
        levels_only = dataclasses.replace(
            st.settings,
            file_level=fresh.file_level,
            console_level=fresh.console_level,
            module_levels=fresh.module_levels,
            sources=_reloaded_sources(
                st.settings, ("file_level", "console_level", "module_levels")
            ),
        )
        _switch(st, levels_only)
        restart = [key for key in _RESTART_KEYS if getattr(fresh, key) != getattr(st.settings, key)]
        note = ""
        if restart:
            note = f"; changed but applied only at the next start: {', '.join(restart)}"
        _say(
            f"{st.settings.reload_signal}: levels reloaded (file level {fresh.file_level}, "
            f"console level {fresh.console_level}, {len(fresh.module_levels)} module rules){note}"
        )


def _reloaded_sources(base: Settings, keys: tuple[str, ...]) -> dict[str, str]:
    sources = dict(base.sources)
    for key in keys:
        sources[key] = f"reload signal {base.reload_signal}"
    return sources


def _switch(st: _State, new: Settings) -> None:
    """Swap every switchable handler's filter for the one ``new`` gives: one assignment each."""
    levels = None
    if new.module_levels:
        levels = ModuleLevels(new.console_level, new.file_level, new.module_levels)
    console_floor = levels.floor(CONSOLE) if levels else level_number(new.console_level)
    file_floor = levels.floor(FILE) if levels else level_number(new.file_level)
    if st.console is not None and st.console.spooled is not None:
        st.console.spooled = (levels, file_floor)
    for switch, sink, extra in st.switches:
        if sink == CONSOLE:
            switch.current = floored(console_floor, ConsoleFilter(extra, levels))
        elif sink == FILE:
            switch.current = floored(file_floor, LevelFilter(levels, FILE) if levels else None)
        else:
            switch.current = floored(file_floor, SpoolBridge(extra, levels))
    intercept.install(min(console_floor, file_floor))
    st.applied_levels = new


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
