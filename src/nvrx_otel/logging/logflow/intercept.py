"""Interception: stdlib ``logging`` and ``warnings`` go to loguru, each record once.

:func:`install` puts one :class:`InterceptHandler` on the root logger and takes the console
handlers (those printing on stdout/stderr, such as the ones PyTorch and TensorFlow add)
off every logger, those that exist and, through ``ownhandlers``, those a library adds later
(``import torch`` after ``configure_logging``); absl's handler is taken off the root. A
logger that does not propagate (torch's) gets ``ownhandlers``' bridge, which hands its
records to the root's InterceptHandler, so each reaches loguru once whatever the order of
imports. The ``"nvrx"`` logger tree and loggers with a
:class:`~nvrx_otel.logging.handler.SpoolHandler` are left alone. Every handler taken is
remembered and :func:`uninstall` puts it back.

A stdlib record keeps its caller: the frame that made the call is found by its file and
line (records replayed from another thread keep their file, line, function and logger
name). A record that a SpoolHandler has written or will write carries ``nvrx_spooled`` in
``extra`` so the spool bridge skips it. A loguru sink that logs through stdlib does not
recurse: the inner record is dropped and counted.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

from loguru import logger

from nvrx_otel.logging import ownhandlers
from nvrx_otel.logging.handler import SPOOLED_ATTR, SpoolHandler, format_message, report_error

_STD_ATTRS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    SPOOLED_ATTR,
}
_N_STD: Final = len(vars(logging.LogRecord("", 0, "", 0, "", (), None)))
_MAX_DEPTH: Final = 64
_WARNINGS_FILE: Final = warnings.__file__
_guard = threading.local()
_levels: dict[tuple[int, str], str | int] = {}


def _loguru_level(levelno: int, levelname: str) -> str | int:
    """loguru's level of the same name when it has one, else the number."""
    key = (levelno, levelname)
    found = _levels.get(key)
    if found is None:
        try:
            logger.level(levelname)
            found = levelname
        except ValueError:
            found = levelno
        _levels[key] = found
    return found


def _depth_of(lr: logging.LogRecord) -> int | None:
    """How many frames above the caller of this function the logging call is (None when
    it is not on this thread's stack)."""
    frame: FrameType | None = sys._getframe(1)
    depth = 0
    path, line = lr.pathname, lr.lineno
    while frame is not None and depth < _MAX_DEPTH:
        if frame.f_lineno == line and frame.f_code.co_filename == path:
            return depth
        frame = frame.f_back
        depth += 1
    return None


def _replay(lr: logging.LogRecord) -> Any:
    """A patcher giving a loguru record the stdlib record's call site."""
    from loguru import _recattrs

    record_file: Any = _recattrs.RecordFile  # untyped

    def patch(record: Any) -> None:
        record["file"] = record_file(lr.filename, lr.pathname)
        record["line"] = lr.lineno
        record["function"] = lr.funcName
        record["module"] = lr.module
        record["name"] = lr.name

    return patch


class InterceptHandler(logging.Handler):
    """A root ``logging.Handler`` forwarding every record to loguru."""

    _nvrx_otel_root_sink = True  # ownhandlers.ROOT_SINK: bridges feed it

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(_guard, "busy", False):
            report_error("stdlib record logged from inside a loguru sink", RecursionError())
            return
        _guard.busy = True
        try:
            self._forward(record)
        except Exception as exc:  # telemetry never breaks the log call
            report_error("cannot forward a stdlib record to loguru", exc)
        finally:
            _guard.busy = False

    def _forward(self, lr: logging.LogRecord) -> None:
        level = _loguru_level(lr.levelno, lr.levelname)
        message = format_message(lr.msg, lr.args)
        depth = _depth_of(lr)
        log: Any = logger.opt(depth=depth or 0, exception=lr.exc_info or None)
        if depth is None:
            log = log.patch(_replay(lr))
        bound: dict[str, Any] = {}
        fields = lr.__dict__
        if len(fields) > _N_STD:
            bound = {k: fields[k] for k in fields.keys() - _STD_ATTRS}
        if getattr(lr, SPOOLED_ATTR, False) or _spooled_by_root(lr):
            bound[SPOOLED_ATTR] = True
        if bound:
            log = log.bind(**bound)
        log.log(level, message)

    def handleError(self, record: logging.LogRecord) -> None:
        report_error("log handler error", sys.exc_info()[1] or RuntimeError("unknown"))


def _spooled_by_root(lr: logging.LogRecord) -> bool:
    """Whether a SpoolHandler on the root logger (which may run after us) spools it."""
    return any(isinstance(h, SpoolHandler) and lr.levelno >= h.level for h in logging.root.handlers)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` replacement: a loguru WARNING at the warning's caller."""
    if file is not None:  # an explicit destination: leave it to the original
        _state.show_warning(message, category, filename, lineno, file, line)
        return
    frame: FrameType | None = sys._getframe(1)
    depth = 1
    while frame is not None and frame.f_code.co_filename == _WARNINGS_FILE:
        frame = frame.f_back
        depth += 1
    if frame is None:
        depth = 0
    logger.opt(depth=depth).warning(f"{category.__name__}: {message} ({filename}:{lineno})")


def _is_console(handler: logging.Handler) -> bool:
    return type(handler).__name__ == "ABSLHandler" or ownhandlers.console_fd(handler) is not None


@dataclass
class _Saved:
    """What :func:`install` changed, to put back."""

    handler: InterceptHandler | None = None
    root_level: int = logging.WARNING
    root_removed: list[logging.Handler] = field(default_factory=list)
    adopted: list[tuple[logging.Logger, list[logging.Handler]]] = field(default_factory=list)
    show_warning: Any = None


_state = _Saved()
_lock = threading.RLock()


def _leave_alone(name: str, lg: logging.Logger) -> bool:
    if name == "nvrx" or name.startswith("nvrx."):
        return True
    return any(isinstance(h, SpoolHandler) for h in lg.handlers)


def install(level: int) -> None:
    """Route stdlib logging (root level ``level``) and warnings into loguru; idempotent."""
    with _lock:
        root = logging.getLogger()
        if _state.handler is None:
            _state.handler = InterceptHandler()
            _state.root_level = root.level
            root.addHandler(_state.handler)
            _state.show_warning = warnings.showwarning
        for h in list(root.handlers):
            if h is not _state.handler and _is_console(h):
                root.removeHandler(h)
                _state.root_removed.append(h)
        root.setLevel(level)
        for lg in list(logging.Logger.manager.loggerDict.values()):
            if isinstance(lg, logging.Logger):
                for h in [h for h in lg.handlers if _is_console(h)]:
                    _take(lg, h)
        ownhandlers.install(take=_take)
        warnings.showwarning = _show_warning


def _take(lg: logging.Logger, h: logging.Handler) -> bool:
    """Take console handler ``h`` off (or keep it from) logger ``lg``; False when ``lg``
    is left alone or the interception is no longer on the root. Of the handlers of one
    type taken from one logger only the last is
    kept for :func:`uninstall` per stream (torch's ``set_logs`` replaces its handler each
    time)."""
    if _state.handler is None or _leave_alone(lg.name, lg) or not _is_console(h):
        return False
    if getattr(h, "_nvrx_otel_handler", False):  # setup_logger's or setup_root_logger's
        return False
    if _state.handler not in logging.root.handlers:  # basicConfig(force=True) took it off
        return False
    if h in lg.handlers:
        lg.removeHandler(h)
    if lg is logging.root:
        _state.root_removed.append(h)
        return True
    fd = ownhandlers.console_fd(h)
    for entry in _state.adopted:
        if entry[0] is lg:
            # a replacement (torch's set_logs makes a new one each time) replaces
            entry[1][:] = [
                o for o in entry[1] if type(o) is not type(h) or ownhandlers.console_fd(o) != fd
            ] + [h]
            break
    else:
        _state.adopted.append((lg, [h]))
    ownhandlers.bridge(lg)  # for whenever it does not propagate (torch flips it)
    return True


def uninstall() -> None:
    """Put back everything :func:`install` changed."""
    global _state
    with _lock:
        handler = _state.handler
        if handler is None:
            return
        saved, _state = _state, _Saved()  # from here on nothing is taken (ownhandlers)
        ownhandlers.forget_take()
        root = logging.getLogger()
        root.removeHandler(handler)
        for h in saved.root_removed:
            root.addHandler(h)
        root.setLevel(saved.root_level)
        for lg, removed in saved.adopted:
            for h in removed:
                lg.addHandler(h)
        if warnings.showwarning is _show_warning:
            warnings.showwarning = saved.show_warning


def installed() -> bool:
    return _state.handler is not None
