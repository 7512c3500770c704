"""A lean path for the ``"nvrx"`` logger as ``setup_logger`` leaves it.

With only our SpoolHandler, no filters and no propagation, building a ``LogRecord`` and
walking the handler machinery is pure overhead. ``install`` switches the logger to a
subclass whose ``debug``/``info``/.../``log`` look up the caller's frame, format the
message and append one line to the spool. The moment a user adds a filter or a handler,
or turns propagation on, each call builds a real ``LogRecord`` with the same caller
information and hands it to ``Logger.handle`` (the full stdlib path).

The disabled-level check is the stdlib's own ``isEnabledFor`` in a method of the same
shape as stdlib's, so a disabled call costs what it costs stdlib.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any

import orjson

from nvrx_otel import _tracectx
from nvrx_otel import record as rec
from nvrx_otel.logging.handler import SpoolHandler, add_exception, format_message, report_error

_SRCFILE = os.path.normcase(logging.addLevelName.__code__.co_filename)
_NEWLINE = orjson.OPT_APPEND_NEWLINE
_DEBUG, _INFO, _WARNING, _ERROR, _CRITICAL = 10, 20, 30, 40, 50
_SEV = {lv: rec.severity_of(lv) for lv in (10, 20, 30, 40, 50)}
_dumps = orjson.dumps
_time_ns = time.time_ns
_get_ident = threading.get_ident
_current_span = _tracectx.current_span
_thread = threading.local()
_getframe = sys._getframe


def _thread_name() -> str:
    """The current thread's name, looked up once per thread."""
    try:
        name: str = _thread.name
    except AttributeError:
        name = _thread.name = threading.current_thread().name
    return name


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


def _exc_tuple(exc_info: Any) -> Any:
    if isinstance(exc_info, BaseException):
        return (type(exc_info), exc_info, exc_info.__traceback__)
    if isinstance(exc_info, tuple):
        return exc_info
    return sys.exc_info()


def _stack_text(frame: FrameType) -> str:
    out = io.StringIO()
    out.write("Stack (most recent call last):\n")
    traceback.print_stack(frame, file=out)
    return out.getvalue().rstrip("\n")


class _Fast:
    """Per-logger fast-path state (a plain object: attribute lookups stay cheap)."""

    __slots__ = ("handler", "logger", "prefixes")

    def __init__(self, logger: logging.Logger, handler: SpoolHandler) -> None:
        self.logger = logger
        self.handler = handler
        self.prefixes: dict[int, bytes] = {}

    def prefix(self, level: int) -> bytes:
        """The constant head of every line of this logger at ``level``."""
        head = self.prefixes.get(level)
        if head is None:
            fields = {
                "v": rec.SCHEMA_VERSION,
                "k": rec.KIND_LOG,
                "sev": _SEV[level] if level in _SEV else rec.severity_of(level),
                "lvl": logging.getLevelName(level),
                "lg": self.logger.name,
            }
            head = self.prefixes[level] = _dumps(fields)[:-1] + b","
        return head

    def full(
        self, level: int, msg: object, args: Any, frame: FrameType, kwargs: dict[str, Any]
    ) -> None:
        """A real LogRecord through ``Logger.handle``: filters and handlers as stdlib runs them."""
        logger = self.logger
        exc_info = kwargs.get("exc_info")
        code = frame.f_code
        record = logger.makeRecord(
            logger.name,
            level,
            code.co_filename,
            frame.f_lineno,
            msg,
            args,
            _exc_tuple(exc_info) if exc_info else None,
            code.co_name,
            kwargs.get("extra"),
            _stack_text(frame) if kwargs.get("stack_info") else None,
        )
        logger.handle(record)

    def emit(self, level: int, msg: object, args: Any, kwargs: dict[str, Any]) -> None:
        # Hot path: the helpers (_caller, _thread_name) are inlined for their common case;
        # each saved call is ~3% of the whole log call.
        try:
            if kwargs:
                frame = _caller(3, kwargs.get("stacklevel", 1))
            else:
                frame = _getframe(2)  # emit <- the logger method <- its caller
                if frame.f_code.co_filename == _SRCFILE:  # via LoggerAdapter and the like
                    frame = _caller(3, 1)
            handler = self.handler
            logger = self.logger
            handlers = logger.handlers
            if (
                logger.propagate
                or logger.filters
                or len(handlers) != 1
                or handlers[0] is not handler
                or handler.filters
                or level < handler.level
                or (kwargs and kwargs.get("stack_info"))
            ):
                self.full(level, msg, args, frame, kwargs)
                return
            code = frame.f_code
            try:
                text = (msg % args if args else msg) if msg.__class__ is str else str(msg)
            except Exception:
                text = format_message(msg, args)
            try:
                thread_name = _thread.name
            except AttributeError:
                thread_name = _thread_name()
            w = handler.writer
            seq = next(w._seq)
            ts = _time_ns()
            record: dict[str, Any] = {
                "ts": ts,
                "msg": text,
                "path": code.co_filename,
                "line": frame.f_lineno,
                "fn": code.co_name,
                "tid": _get_ident(),
                "tn": thread_name,
                "seq": seq,
                "key": f"{w.writer_id}-{seq}",
            }
            span = _current_span()
            if span is not None:
                ctx = span.get_span_context()
                if ctx.is_valid:
                    record["trace_id"] = format(ctx.trace_id, "032x")
                    record["span_id"] = format(ctx.span_id, "016x")
                    record["tf"] = int(ctx.trace_flags)
            if kwargs:
                exc_info = kwargs.get("exc_info")
                if exc_info:
                    add_exception(record, _exc_tuple(exc_info))
                extra = kwargs.get("extra")
                if extra:
                    record["attrs"] = dict(extra)
            try:
                body = _dumps(record)
            except (TypeError, orjson.JSONEncodeError):
                body = rec.encode(record)[:-1]
            line = (self.prefixes.get(level) or self.prefix(level)) + body[1:-1] + w.identity_suffix
            w.write_line(line, ts)
        except Exception as exc:
            report_error("cannot spool a log record", exc)


class FastLogger(logging.Logger):
    """``logging.Logger`` with the spool fast path; set on the ``"nvrx"`` instance only.

    Each method checks the level the way ``isEnabledFor`` does (the ``disabled`` flag and
    the level cache) before doing anything else, so a disabled call stays as cheap as
    stdlib's even though the instance's class was switched.
    """

    _nvrx_fast: _Fast

    def debug(self, msg: object, *args: Any, **kwargs: Any) -> None:
        try:
            on = self._cache[_DEBUG]  # type: ignore[attr-defined]
        except KeyError:
            on = self.isEnabledFor(_DEBUG)
        if on and not self.disabled:
            self._nvrx_fast.emit(_DEBUG, msg, args, kwargs)

    def info(self, msg: object, *args: Any, **kwargs: Any) -> None:
        try:
            on = self._cache[_INFO]  # type: ignore[attr-defined]
        except KeyError:
            on = self.isEnabledFor(_INFO)
        if on and not self.disabled:
            self._nvrx_fast.emit(_INFO, msg, args, kwargs)

    def warning(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(_WARNING):
            self._nvrx_fast.emit(_WARNING, msg, args, kwargs)

    warn = warning

    def error(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(_ERROR):
            self._nvrx_fast.emit(_ERROR, msg, args, kwargs)

    def exception(self, msg: object, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if self.isEnabledFor(_ERROR):
            kwargs["exc_info"] = exc_info
            self._nvrx_fast.emit(_ERROR, msg, args, kwargs)

    def critical(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(_CRITICAL):
            self._nvrx_fast.emit(_CRITICAL, msg, args, kwargs)

    fatal = critical

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not isinstance(level, int):  # stdlib raises into the caller here; we never do
            report_error("logger.log() level", TypeError(f"level must be an int: {level!r}"))  # type: ignore[unreachable]
            return
        if self.isEnabledFor(level):
            self._nvrx_fast.emit(level, msg, args, kwargs)


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

    Only a plain ``logging.Logger`` is switched (a custom logger class is left alone and
    keeps the full path); returns whether the fast path is on.
    """
    if type(logger) is not logging.Logger and type(logger) is not FastLogger:
        return False
    logger._nvrx_fast = _Fast(logger, handler)  # type: ignore[attr-defined]
    logger.__class__ = FastLogger
    return True


def uninstall(logger: logging.Logger) -> None:
    """Return ``logger`` to the stdlib ``logging.Logger``."""
    if type(logger) is FastLogger:
        plain: type[logging.Logger] = logging.Logger
        logger.__class__ = plain  # type: ignore[assignment]
        logger.__dict__.pop("_nvrx_fast", None)
