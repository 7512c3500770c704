"""A lean path for the ``"nvrx"`` logger as ``setup_logger`` leaves it.

With only our SpoolHandler, no filters and no propagation, building a ``LogRecord`` and
walking the handler machinery is pure overhead. ``install`` switches the logger to a
subclass whose ``debug``/``info``/.../``log`` look up the caller's frame, format the
message and append one line to the spool. The moment a user adds a filter or a handler,
or turns propagation on, each call builds a real ``LogRecord`` with the same caller
information and hands it to ``Logger.handle`` (the full stdlib path). The logger and the
handler learn of such changes as they happen (``watched.py``), so a call tests one number.

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
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, cast

from nvrx_otel import _tracectx, levels
from nvrx_otel import record as rec
from nvrx_otel.logging.handler import (
    SpoolHandler,
    add_exception,
    encoded_fields,
    format_message,
    report_error,
)
from nvrx_otel.logging.watched import WatchedList
from nvrx_otel.spool import writer as spool_writer

_SRCFILE = os.path.normcase(logging.addLevelName.__code__.co_filename)
_dumps = rec.json_value
_time_ns = time.time_ns
_get_ident = threading.get_ident
_context = _tracectx.context
_UNSET = object()
_NEVER = 1 << 62  # _Fast.lean_from while the lean path is off: no level reaches it
_LOGGER_INPUTS = frozenset({"propagate", "filters", "handlers"})  # of _Fast.recheck
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


# A plain call's line is one bytes formatting of a per-level template (level head, writer
# id and identity filled in) with the time, message, call site, thread, seq and trace ids;
# all but the time, the message and the seq are cached as ready bytes.
_TEMPLATE_SLOTS = 52  # templates by level (10, 20, ... 50) and level + 1 (traced)
_MAX_SITES = 4096  # call sites cached per logger; beyond, the cache starts over


def _thread_fields() -> bytes:
    """The current thread's ``tid``/``tn`` fields, encoded once per thread."""
    name = threading.current_thread().name
    frag: bytes = encoded_fields({"tid": _get_ident(), "tn": name})
    _thread.frag = frag
    return frag


class _Fast:
    """Per-logger fast-path state (a plain object: attribute lookups stay cheap)."""

    __slots__ = (
        "__weakref__",
        "handler",
        "last_code",
        "last_ctx",
        "lean_from",
        "logger",
        "only",
        "prefixes",
        "sites",
        "templates",
    )

    def __init__(self, logger: logging.Logger, handler: SpoolHandler | None) -> None:
        self.logger = logger
        self.handler: SpoolHandler = handler or _NO_HANDLER
        # The logger's handlers while the lean path may run (never, without a handler).
        self.only: list[logging.Handler] | None = [handler] if handler is not None else None
        self.prefixes: dict[int, bytes] = {}
        self.templates: list[bytes | None] = [None] * _TEMPLATE_SLOTS
        self.sites: dict[CodeType, dict[int, bytes]] = {}  # code -> instruction offset -> fields
        # The last caller's code and its sites: a code object hashes all its constants on
        # every lookup, and a loop logs from one function many times in a row. (One tuple:
        # another thread must never see one thread's code with another's sites.)
        self.last_code: tuple[object, dict[int, bytes]] = (None, {})
        # The last context seen and the encoded ids of its span. A context never changes
        # once current (a new span makes a new one), and holding it keeps its identity from
        # being reused by another object. (One tuple, as last_code.)
        self.last_ctx: tuple[object, bytes] = (_UNSET, b"")
        # The lowest level that may take the lean path (_NEVER: none): worked out again
        # whenever one of its inputs changes (watched.py), not read on every call.
        self.lean_from = _NEVER
        if handler is not None:
            handler._lean_users.add(self)
            handler.writer.watch_starts(self)  # the templates hold its id and identity
        self.recheck()

    def recheck(self) -> None:
        """Whether a call may skip the LogRecord: only our handler would see it and nothing
        would filter it. Every list read here is watched; a plain list put in the place of
        one keeps the full path."""
        logger = self.logger
        handler = self.handler
        ok = (
            self.only is not None
            and not logger.propagate
            and type(logger.filters) is WatchedList
            and not logger.filters
            and type(logger.handlers) is WatchedList
            and logger.handlers == self.only
            and type(handler.filters) is WatchedList
            and not handler.filters
            and type(handler.level) is int
        )
        self.lean_from = handler.level if ok else _NEVER

    def inputs_changed(self, done: bool) -> None:
        """An input of ``recheck`` changed (``done``) or is about to (the lean path stops
        until it is done)."""
        if done:
            self.recheck()
        else:
            self.lean_from = _NEVER

    def prefix(self, level: int) -> bytes:
        """The constant head of every line of this logger at ``level``."""
        head = self.prefixes.get(level)
        if head is None:
            head = self.prefixes[level] = rec.log_head(
                levels.severity_of(level), logging.getLevelName(level), self.logger.name
            )
        return head

    def writer_started(self) -> None:
        """Forget the templates: the writer has a new id and identity (a forked child)."""
        self.templates = [None] * _TEMPLATE_SLOTS

    def template(self, slot: int) -> bytes:
        """The line template at ``slot``: for level ``slot``, or for level ``slot - 1``
        with a last ``%b`` for the trace ids (the level methods' levels are multiples of 10)."""
        w = self.handler.writer
        traced = slot % 10 == 1
        template = rec.log_template(
            self.prefix(slot - traced), w.writer_id, w.identity_suffix, trace=traced
        )
        self.templates[slot] = template
        return template

    def site(self, code: CodeType, offset: int, lineno: int) -> bytes:
        """The ``path``/``line``/``fn`` fields of the call at ``offset`` in ``code``, encoded
        once (``lineno`` is the line of that instruction)."""
        if len(self.sites) >= _MAX_SITES:
            self.sites = {}
        encoded = encoded_fields({"path": code.co_filename, "line": lineno, "fn": code.co_name})
        sites = self.sites.setdefault(code, {})
        sites[offset] = encoded
        self.last_code = (code, sites)
        return encoded

    def sites_of(self, code: CodeType) -> dict[int, bytes]:
        """The call sites known in ``code`` (maybe none yet), remembered as the last."""
        sites = self.sites.get(code)
        if sites is None:
            return {}
        self.last_code = (code, sites)
        return sites

    def trace(self, context: Any) -> bytes:
        """The ``trace_id``/``span_id``/``tf`` fields of the span current in ``context``
        (None: in the public API's current context); empty without a valid span."""
        encoded = _tracectx.encoded_ids(context)
        if context is not None:
            self.last_ctx = (context, encoded)
        return encoded

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

    def lean(self, level: int) -> bool:
        """Whether a call at ``level`` may skip the LogRecord (see ``recheck``)."""
        return level >= self.lean_from

    def emit(
        self, level: int, msg: object, args: Any, kwargs: dict[str, Any], frame: FrameType
    ) -> None:
        """Any call the plain path of the level methods does not take: ``log()``, keyword
        arguments, messages that need ``format_message`` or odd values."""
        if kwargs.get("stack_info") or not self.lean(level):
            self.full(level, msg, args, frame, kwargs)
            return
        handler = self.handler
        code = frame.f_code
        w = handler.writer
        key = w.next_key()
        ts = _time_ns()
        record: dict[str, Any] = {
            "ts": ts,
            "msg": format_message(msg, args),
            "path": code.co_filename,
            "line": frame.f_lineno,
            "fn": code.co_name,
            "tid": _get_ident(),
            "tn": threading.current_thread().name,
            "key": key,
        }
        _tracectx.add_ids(record)
        exc_info = kwargs.get("exc_info")
        if exc_info:
            add_exception(record, _exc_tuple(exc_info))
        extra = kwargs.get("extra")
        if extra:
            record["attrs"] = dict(extra)
        line = self.prefix(level) + rec.encode(record)[1:-2] + w.identity_suffix
        w.write_line(line, ts)


def _level_method(level: int) -> Callable[..., None]:
    """``debug``/``info``/... for ``level``: the level check as ``isEnabledFor`` does it,
    then, for a plain call (no keyword arguments) of a logger as ``setup_logger`` left it,
    the line built from cached bytes and written, all inline (each call saved is ~3% of a
    log call); anything else goes to ``_Fast.emit``."""

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
            if level < fast.lean_from:  # _Fast.lean, inline
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
        except Exception as exc:
            report_error("cannot spool a log record", exc)

    method.__name__ = method.__qualname__ = logging.getLevelName(level).lower()
    return method


class _NoHandler:
    """Stands in for the spool handler while the lean path is off: ``only`` is None then,
    so no call gets past the handler check to use it."""

    filters: list[Any] = []  # noqa: RUF012  # never changed
    level = logging.NOTSET


_NO_HANDLER: Any = _NoHandler()


class FastLogger(logging.Logger):
    """``logging.Logger`` with the spool fast path; set on the ``"nvrx"`` instance only.

    Each method checks the level the way ``isEnabledFor`` does (the ``disabled`` flag and
    the level cache) before doing anything else, so a disabled call stays as cheap as
    stdlib's even though the instance's class was switched.
    """

    def __init__(self, name: str, level: int | str = logging.NOTSET) -> None:
        super().__init__(name, level)
        self._nvrx_fast = _Fast(self, None)  # set here: born with the class, reads stay fast
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
        except Exception as exc:
            report_error("cannot spool a log record", exc)


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
        logger._nvrx_fast = _Fast(logger, handler)
        return True
    if type(logger) is not logging.Logger:
        return False
    # A class switch turns the instance's attribute storage into a plain dict, which
    # CPython 3.11 cannot specialise attribute reads for (~5x slower): FastLoggers are
    # born as such (get_fast_logger) and never switched back (see uninstall).
    logger._nvrx_fast = _Fast(logger, None)  # type: ignore[attr-defined]
    logger.__class__ = FastLogger
    _watch(cast(FastLogger, logger))
    logger._nvrx_fast = _Fast(logger, handler)  # type: ignore[attr-defined]
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
        logger._nvrx_fast = _Fast(logger, None)
