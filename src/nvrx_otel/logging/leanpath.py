"""The per-logger state of the ``"nvrx"`` logger's lean path (``fastpath.py``).

``LeanPath`` knows whether a call may skip the ``LogRecord`` (worked out again whenever
the logger's or the handler's level, filters or handlers change, so a call compares one
number), holds the pieces of a line the level methods splice together as ready bytes
(per-level templates with the writer id and identity filled in, call sites, the current
span's ids), and takes the calls those methods hand off: the full stdlib path through
``Logger.handle``, and the odd calls (``log()``, keyword arguments, messages that need
``format_message``) encoded record by record.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
import time
import traceback
from types import CodeType, FrameType
from typing import Any

from nvrx_otel import _tracectx, levels
from nvrx_otel import record as rec
from nvrx_otel.logging.handler import (
    SPOOLED_ATTR,
    SpoolHandler,
    add_exception,
    encoded_fields,
    format_message,
    report_error,
)
from nvrx_otel.logging.watched import WatchedList

_time_ns = time.time_ns
_get_ident = threading.get_ident
_UNSET = object()
_NEVER = 1 << 62  # LeanPath.lean_from while the lean path is off: no level reaches it


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


class LeanPath:
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
        try:
            logger.handle(record)
        except Exception as exc:
            if not getattr(record, SPOOLED_ATTR, False):
                raise  # not spooled: the caller counts it as dropped
            report_error("a log handler raised", exc)

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


class _NoHandler:
    """Stands in for the spool handler while the lean path is off: ``only`` is None then,
    so no call gets past the handler check to use it."""

    filters: list[Any] = []  # noqa: RUF012  # never changed
    level = logging.NOTSET


_NO_HANDLER: Any = _NoHandler()
