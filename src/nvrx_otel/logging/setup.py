"""NVRx's ``setup_logger`` and ``LogManager``: the ``"nvrx"`` logger in one of three modes.

Modes, first match wins: ``log_file`` given (one file, ``srun -l``-style rank prefixes);
a spool directory (argument or ``NVRX_NODE_LOCAL_TMPDIR``) → the node-local spool; else a
stream on stderr (stdout with ``NVRX_LOG_TO_STDOUT``). A spool directory that cannot be
used safely falls back to stderr with one line saying why. Unlike NVRx, a repeated call
with different arguments or environment reconfigures instead of silently keeping the
old setup.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from nvrx_otel import env
from nvrx_otel.identity import get_identity
from nvrx_otel.logging import fastpath
from nvrx_otel.logging.config import LogConfig
from nvrx_otel.logging.handler import SpoolHandler, from_log_record
from nvrx_otel.nodeline import format_record

_OURS = "_nvrx_otel_handler"
_setup_lock = threading.Lock()
_current: dict[str, Any] = {}


class NodeLineFormatter(logging.Formatter):
    """The node log's line grammar for stream and file modes (NVRx's line format)."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self.prefix = prefix
        self.fields: dict[str, Any] = {"node": LogConfig.get_node_id()}
        for key, value in (
            ("rank", LogConfig.get_workload_rank()),
            ("lrank", LogConfig.get_workload_local_rank()),
            ("irank", LogConfig.get_infra_rank()),
            ("ilrank", LogConfig.get_infra_local_rank()),
        ):
            if value is not None:
                self.fields[key] = value

    def format(self, record: logging.LogRecord) -> str:
        data = from_log_record(record)
        data.update(self.fields)
        text: str = format_record(data, self.fields["node"]).rstrip("\n")
        if self.prefix:
            text = "\n".join(self.prefix + line for line in text.split("\n"))
        return text


def _srun_prefix() -> str:
    """``"<infra rank>: "`` right-aligned like ``srun -l`` (width of the largest rank)."""
    rank = LogConfig.get_infra_rank()
    size = get_identity().world_size
    width = len(str(size - 1)) if size else 1
    return f"{'?' if rank is None else rank:>{width}}: "


def _mark(handler: logging.Handler) -> logging.Handler:
    setattr(handler, _OURS, True)
    return handler


def _spool_handler(root: str, prefix: str | None) -> logging.Handler | None:
    try:
        return SpoolHandler(
            root,
            proc=prefix,
            max_file_size=LogConfig.get_max_file_size(),
            budget=LogConfig.get_spool_budget(),
        )
    except (OSError, ValueError) as exc:
        env.warn_once(f"{exc}; logging to stderr instead of the node-local spool")
        return None


def _configure(
    logger: logging.Logger,
    node_local_tmp_dir: str | None,
    node_local_tmp_prefix: str | None,
    log_file: str | None,
) -> logging.Handler:
    for old in [h for h in logger.handlers if getattr(h, _OURS, False)]:
        logger.removeHandler(old)
        old.close()
    fastpath.uninstall(logger)
    logger.setLevel(LogConfig.get_log_level())
    logger.propagate = False  # as NVRx: ranks must not also print through the root logger
    handler = _handler(node_local_tmp_dir, node_local_tmp_prefix, log_file)
    logger.addHandler(_mark(handler))
    if isinstance(handler, SpoolHandler):
        fastpath.install(logger, handler)
    return handler


def _handler(
    node_local_tmp_dir: str | None, node_local_tmp_prefix: str | None, log_file: str | None
) -> logging.Handler:
    """The handler of the first mode that applies (see the module docstring)."""
    disabled = env.DISABLED.get()
    root = None if disabled else LogConfig.get_node_local_tmp_dir(node_local_tmp_dir)
    handler: logging.Handler | None = None
    if log_file:
        handler = logging.FileHandler(log_file, mode="a", encoding="utf-8", delay=True)
        handler.setFormatter(NodeLineFormatter(prefix=_srun_prefix()))
    elif root:
        handler = _spool_handler(root, node_local_tmp_prefix)
    if handler is None:
        stream = sys.stdout if LogConfig.get_log_to_stdout_cfg() else sys.stderr
        handler = logging.StreamHandler(stream)
        handler.setFormatter(NodeLineFormatter())
    return handler


def _settings(
    node_local_tmp_dir: str | None, node_local_tmp_prefix: str | None, log_file: str | None
) -> tuple[Any, ...]:
    import os

    watched = (
        env.NVRX_NODE_LOCAL_TMPDIR,
        env.NVRX_LOG_DEBUG,
        env.NVRX_LOG_TO_STDOUT,
        env.NVRX_LOG_MAX_FILE_SIZE_KB,
        env.NVRX_LOG_MAX_LOG_FILES,
        env.NVRX_OTEL_SPOOL_BUDGET_MB,
        env.NVRX_OTEL_DISABLED,
    )
    return (
        node_local_tmp_dir,
        node_local_tmp_prefix,
        log_file,
        tuple(os.environ.get(name) for name in watched),
        os.getpid(),
    )


class LogManager:
    """Log manager for large-scale training (NVRx compatible): configures ``"nvrx"``."""

    def __init__(
        self,
        node_local_tmp_dir: str | None = None,
        node_local_tmp_prefix: str | None = None,
        log_file: str | None = None,
    ) -> None:
        self._logger = fastpath.get_fast_logger(LogConfig.name)
        self._node_local_tmp_dir = LogConfig.get_node_local_tmp_dir(node_local_tmp_dir)
        self._handler = _configure(
            self._logger, node_local_tmp_dir, node_local_tmp_prefix, log_file
        )

    @property
    def logger(self) -> logging.Logger:
        """The ``"nvrx"`` logger."""
        return self._logger

    @property
    def node_local_tmp_logging_enabled(self) -> bool:
        """True when records go to the node-local spool."""
        return isinstance(self._handler, SpoolHandler)

    @property
    def workload_rank(self) -> int | None:
        """``RANK``."""
        return LogConfig.get_workload_rank()

    @property
    def workload_local_rank(self) -> int | None:
        """``LOCAL_RANK``."""
        return LogConfig.get_workload_local_rank()

    @property
    def infra_rank(self) -> int | None:
        """``SLURM_PROCID`` (with job-array support)."""
        return LogConfig.get_infra_rank()

    @property
    def infra_local_rank(self) -> int | None:
        """``SLURM_LOCALID``."""
        return LogConfig.get_infra_local_rank()


def setup_logger(
    node_local_tmp_dir: str | None = None,
    force_reset: bool = False,
    node_local_tmp_prefix: str | None = None,
    log_file: str | None = None,
    *,
    root_logger: bool = False,
) -> logging.Logger:
    """Set up and return the ``"nvrx"`` logger (NVRx compatible).

    Safe to call many times: the same arguments and environment return the configured
    logger; different ones (or ``force_reset=True``) reconfigure it. ``root_logger=True``
    also gives the stdlib root logger the same kind of handler (:func:`setup_root_logger`),
    so that library loggers (``logging.getLogger(__name__)``, torch's) reach the node log.
    """
    if root_logger:
        setup_root_logger(node_local_tmp_dir)
    settings = _settings(node_local_tmp_dir, node_local_tmp_prefix, log_file)
    with _setup_lock:
        logger = fastpath.get_fast_logger(LogConfig.name)
        ours = [h for h in logger.handlers if getattr(h, _OURS, False)]
        if not force_reset and ours and _current.get("settings") == settings:
            return logger
        manager = LogManager(node_local_tmp_dir, node_local_tmp_prefix, log_file)
        _current["settings"] = settings
        _current["manager"] = manager
        _current["at"] = time.time()
        return manager.logger


def setup_root_logger(node_local_tmp_dir: str | None = None) -> logging.Logger:
    """Give the stdlib root logger the handler ``setup_logger`` gives ``"nvrx"`` (the
    node-local spool, else a stream on stderr) and its level, so that code logging with
    ``logging.getLogger(__name__)`` reaches the node log with no setup of its own (the
    ``opentelemetry-instrument`` path). Handlers others added to the root stay; a repeated
    call replaces only the one it added. Never raises: a failure is reported once on
    stderr and the root logger is left as it was."""
    root = logging.getLogger()
    try:
        with _setup_lock:
            for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
                root.removeHandler(old)
                old.close()
            root.setLevel(LogConfig.get_log_level())
            root.addHandler(_mark(_handler(node_local_tmp_dir, None, None)))
    except Exception as exc:  # telemetry never raises into training
        env.warn_once(f"cannot bridge the root logger: {exc!r}; it is left as it was")
    return root


def active_arguments() -> dict[str, str]:
    """The arguments the last ``setup_logger`` call of this process gave (those not None),
    for :func:`nvrx_otel.activeconfig.get_active_config`; empty before any call."""
    settings = _current.get("settings")
    installed = any(getattr(h, _OURS, False) for h in logging.getLogger(LogConfig.name).handlers)
    if not settings or not installed:
        return {}
    names = ("node_local_tmp_dir", "node_local_tmp_prefix", "log_file")
    return {n: str(v) for n, v in zip(names, settings[:3], strict=True) if v is not None}


def _after_fork_in_child() -> None:
    global _setup_lock
    _setup_lock = threading.Lock()


import os as _os  # noqa: E402  (kept apart: only the fork hook needs it at import)

_os.register_at_fork(after_in_child=_after_fork_in_child)
