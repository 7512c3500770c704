"""A lean path for the ``"nvrx"`` logger as ``setup_logger`` leaves it.

With only our SpoolHandler, no filters and no propagation, building a ``LogRecord`` and
walking the handler machinery is pure overhead. ``install`` switches the logger to a
subclass whose ``debug``/``info``/.../``log`` look up the caller's frame, format the
message and append one line to the spool. The moment a user adds a filter or a handler,
or turns propagation on, each call builds a real ``LogRecord`` with the same caller
information and hands it to ``Logger.handle`` (the full stdlib path). The logger and the
handler learn of such changes as they happen (``watched.py``), so a call tests one number.
The per-logger state behind this (whether the lean path may run, the cached pieces of a
line, the calls the level methods hand off) is ``leanpath.LeanPath``; this module is the
logger class, its level methods (the hot path) and switching the lean path on and off.

The disabled-level check is the stdlib's own ``isEnabledFor`` in a method of the same
shape as stdlib's, so a disabled call costs what it costs stdlib.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

from nvrx_otel import _tracectx
from nvrx_otel import record as rec
from nvrx_otel.logging.handler import SpoolHandler, encoded_fields, report_error
from nvrx_otel.logging.leanpath import LeanPath
from nvrx_otel.logging.watched import WatchedList
from nvrx_otel.spool import writer as spool_writer

_SRCFILE = os.path.normcase(logging.addLevelName.__code__.co_filename)
_dumps = rec.json_value
_time_ns = time.time_ns
_get_ident = threading.get_ident
_context = _tracectx.context
_LOGGER_INPUTS = frozenset({"propagate", "filters", "handlers"})  # of LeanPath.recheck
_thread = threading.local()
_getframe = sys._getframe
_append = spool_writer.append


def _caller(depth: int, stacklevel: int) -> FrameType:
    """The frame ``depth`` levels up, past stdlib logging's own frames (LoggerAdapter),
    then ``stacklevel - 1`` further non-logging frames up."""
    frame = sys._getframe(depth)
    while frame.f_back is not None and frame.f_code.co_filename == _SRCFILE:
        frame = frame.f_back
    while stacklevel > 1 and frame.f_back is not None:
        frame = frame.f_back
        if frame.f_code.co_filename != _SRCFILE:
            stacklevel -= 1
    return frame


def _thread_fields() -> bytes:
    """The current thread's ``tid``/``tn`` fields, encoded once per thread."""
    name = threading.current_thread().name
    frag: bytes = encoded_fields({"tid": _get_ident(), "tn": name})
    _thread.frag = frag
    return frag


def _level_method(level: int) -> Callable[..., None]:
    """``debug``/``info``/... for ``level``: the level check as ``isEnabledFor`` does it,
    then, for a plain call (no keyword arguments) of a logger as ``setup_logger`` left it,
    the line built from cached bytes and written, all inline (each call saved is ~3% of a
    log call); anything else goes to ``LeanPath.emit``."""

    def method(self: FastLogger, msg: object, *args: Any, **kwargs: Any) -> None:
        try:
            on = self._cache[level]  # type: ignore[attr-defined]
        except KeyError:
            on = self.isEnabledFor(level)
        if not on or self.disabled:
            return
        fast = self._nvrx_fast
        try:
            if kwargs:
                fast.emit(level, msg, args, kwargs, _caller(2, kwargs.get("stacklevel", 1)))
                return
            # The caller (LoggerAdapter and other stdlib callers go through log()).
            frame = _getframe(1)
            if level < fast.lean_from:  # LeanPath.lean, inline
                fast.full(level, msg, args, frame, kwargs)
                return
            try:
                message = _dumps(
                    (msg % args if args else msg) if msg.__class__ is str else str(msg)
                )
            except Exception:  # bad format arguments, a mapping argument, lone surrogates
                fast.emit(level, msg, args, kwargs, frame)
                return
            # Keyed by the call's instruction offset: f_lineno walks the line table from the
            # function's start, which in a long training loop costs more than the whole call.
            offset = frame.f_lasti
            code = frame.f_code
            known = fast.last_code
            site = (known[1] if known[0] is code else fast.sites_of(code)).get(offset)
            if site is None:
                site = fast.site(code, offset, frame.f_lineno)
            try:
                thread = _thread.frag
            except AttributeError:
                thread = _thread_fields()
            context = _context()
            last = fast.last_ctx
            trace = last[1] if last[0] is context else fast.trace(context)
            w = fast.handler.writer
            templates = fast.templates
            seq = next(w.counter)
            ts = _time_ns()
            if trace:
                template = templates[level + 1] or fast.template(level + 1)
                line = template % (ts, message, site, thread, seq, trace)
            else:
                template = templates[level] or fast.template(level)
                line = template % (ts, message, site, thread, seq)
            # The writer's append window (SpoolWriter's docstring), inline; write_line does
            # the rest.
            n = len(line)
            if w.size + n > w.limit:
                w.write_line(line, ts)
                return
            fd = w.fd
            try:
                written = _append(fd, line, w.size)
            except OSError as exc:
                w.write_failed(exc, ts)
                return
            if written == n:
                w.size += n
            else:
                w.finish_short_write(fd, line, written, ts)
        except Exception as exc:  # (a signal handler's exception too: the record is lost)
            fast.handler.writer.lost()
            report_error("cannot spool a log record", exc, lost=True)

    method.__name__ = method.__qualname__ = logging.getLevelName(level).lower()
    return method


class FastLogger(logging.Logger):
    """``logging.Logger`` with the spool fast path; set on the ``"nvrx"`` instance only.

    Each method checks the level the way ``isEnabledFor`` does (the ``disabled`` flag and
    the level cache) before doing anything else, so a disabled call stays as cheap as
    stdlib's even though the instance's class was switched.
    """

    def __init__(self, name: str, level: int | str = logging.NOTSET) -> None:
        super().__init__(name, level)
        self._nvrx_fast = LeanPath(self, None)  # set here: born with the class, reads stay fast
        _watch(self)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _LOGGER_INPUTS:
            fast = getattr(self, "_nvrx_fast", None)  # not __dict__: it would undo inline values
            if fast is not None:
                fast.recheck()

    def _nvrx_list_changed(self, done: bool) -> None:
        """``handlers`` or ``filters`` changed (``done``) or are about to: see watched.py."""
        self._nvrx_fast.inputs_changed(done)

    debug = _level_method(logging.DEBUG)
    info = _level_method(logging.INFO)
    warning = _level_method(logging.WARNING)
    warn = warning
    error = _level_method(logging.ERROR)
    critical = _level_method(logging.CRITICAL)
    fatal = critical

    def exception(self, msg: object, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if self.isEnabledFor(logging.ERROR):
            kwargs["exc_info"] = exc_info
            self._emit(logging.ERROR, msg, args, kwargs)

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not isinstance(level, int):  # stdlib raises into the caller here; we never do
            report_error("logger.log() level", TypeError(f"level must be an int: {level!r}"))  # type: ignore[unreachable]
            return
        if self.isEnabledFor(level):
            self._emit(level, msg, args, kwargs)

    def _emit(self, level: int, msg: object, args: Any, kwargs: dict[str, Any]) -> None:
        try:
            frame = _caller(3, kwargs.get("stacklevel", 1))  # _emit <- log() <- its caller
            self._nvrx_fast.emit(level, msg, args, kwargs, frame)
        except Exception as exc:  # (a signal handler's exception too: the record is lost)
            self._nvrx_fast.handler.writer.lost()
            report_error("cannot spool a log record", exc, lost=True)


def get_fast_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, created as a FastLogger when it does not exist yet.

    A logger born with its class keeps CPython's attribute caches specialised, which a
    later class switch (``install`` on an existing logger) cannot do; a disabled call then
    costs exactly what stdlib's does.
    """
    manager = logging.Logger.manager
    if name not in manager.loggerDict:
        previous = manager.loggerClass
        manager.loggerClass = FastLogger
        try:
            return logging.getLogger(name)
        finally:
            manager.loggerClass = previous
    return logging.getLogger(name)


def install(logger: logging.Logger, handler: SpoolHandler) -> bool:
    """Give ``logger`` the lean path while ``handler`` is its only handler.

    A FastLogger only gets new state. A plain ``logging.Logger`` (one made before
    ``setup_logger`` ran) is switched to FastLogger; a custom logger class is left alone
    and keeps the full path. Returns whether the lean path is on.
    """
    if type(logger) is FastLogger:
        _watch(logger)
        logger._nvrx_fast = LeanPath(logger, handler)
        return True
    if type(logger) is not logging.Logger:
        return False
    # A class switch turns the instance's attribute storage into a plain dict, which
    # CPython 3.11 cannot specialise attribute reads for (~5x slower): FastLoggers are
    # born as such (get_fast_logger) and never switched back (see uninstall).
    logger._nvrx_fast = LeanPath(logger, None)  # type: ignore[attr-defined]
    logger.__class__ = FastLogger
    _watch(cast(FastLogger, logger))
    logger._nvrx_fast = LeanPath(logger, handler)  # type: ignore[attr-defined]
    return True


def _watch(logger: FastLogger) -> None:
    """Give ``logger`` watched ``filters``/``handlers`` lists (same items) where it has
    plain ones: the lean path runs only while both are watched."""
    for name in ("filters", "handlers"):
        items = getattr(logger, name)
        if type(items) is not WatchedList:
            setattr(logger, name, WatchedList(logger, items))


def uninstall(logger: logging.Logger) -> None:
    """Take the lean path away: the logger then runs stdlib's full path for every call."""
    if type(logger) is FastLogger:
        logger._nvrx_fast = LeanPath(logger, None)
