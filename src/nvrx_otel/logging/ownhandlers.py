"""Loggers with handlers of their own (PyTorch's pattern): each record reaches the spool once.

torch gives each of its loggers ``propagate=False`` and a console handler of its own (a
``_StderrHandler``: a plain ``logging.Handler`` whose ``stream`` is ``sys.stderr``), at
``import torch`` and again at every ``torch._logging.set_logs``; other frameworks do the
same. Such records never reach the root logger, where ``setup_root_logger``'s SpoolHandler
(the distro, ``opentelemetry-instrument``) and the loguru front end's InterceptHandler
wait for them. And a record that is spooled *and* printed by a console handler would come
back a second time as a captured stderr line.

:func:`install` (by every front end that spools stdlib records) chains
``logging.Logger.addHandler`` and adopts the loggers there are, so the order of imports
does not matter:

- a logger with a console handler gets a :class:`Bridge`: whenever the logger does not
  propagate (looked up at each record, as torch flips it), the bridge hands the record to
  the root's sinks (a SpoolHandler, the InterceptHandler), as propagation would have;
- a console handler (any logger's, the root's included: ``basicConfig``'s) announces its
  copy of a record that is spooled to the watcher (``capture.expect``), which forwards
  that line and does not record it again;
- with the loguru front end, a console handler added later is handed to it (``take``):
  it is taken off, as those of the loggers that existed were (loguru's console prints the
  record once), and put back by its ``uninstall``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Final

from nvrx_otel.logging.handler import SpoolHandler, report_error
from nvrx_otel.watch import capture

ROOT_SINK: Final = "_nvrx_otel_root_sink"
"""Set (true) on a root handler class that a bridge feeds besides SpoolHandler."""
_ANNOUNCES: Final = "_nvrx_otel_announces"

Take = Callable[[logging.Logger, logging.Handler], bool]
"""Whether the front end takes a console handler being added to a logger (loguru's)."""

_state: dict[str, Any] = {"take": None, "active": False}
_lock: Any = getattr(logging, "_lock")  # noqa: B009  (logging's own: one lock, one order)
"""logging's module lock (an RLock, reset by logging at fork): ``dictConfig`` holds it
while it adds handlers, so taking any lock of ours inside the hook would invert the order."""


def console_fd(handler: logging.Handler) -> int | None:
    """1 or 2 when ``handler`` prints on stdout or stderr (a ``StreamHandler`` on one, or
    any handler whose ``stream`` is one, as torch's ``_StderrHandler``), else None."""
    if isinstance(handler, logging.FileHandler):
        return None
    try:
        stream = getattr(handler, "stream", None)
    except Exception:
        return None
    if stream is None:
        return None
    if stream is sys.stderr or stream is sys.__stderr__:
        return 2
    if stream is sys.stdout or stream is sys.__stdout__:
        return 1
    return None


class Bridge(logging.Handler):
    """On a logger with handlers of its own: while it does not propagate, its records go to
    the root's sinks, as they would if it did (unless a SpoolHandler on their way to it
    has spooled them already)."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger

    def handle(self, record: logging.LogRecord) -> bool:
        if self.logger.propagate:
            return False  # the root's sinks get it by propagation
        try:
            if not _spooled_on_the_way(record, self.logger):
                for h in logging.root.handlers:
                    if _takes(h, record):
                        h.handle(record)
        except Exception as exc:  # telemetry never breaks the log call
            report_error("cannot hand a record of a non-propagating logger on", exc)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


def _is_root_sink(h: logging.Handler) -> bool:
    return isinstance(h, SpoolHandler) or bool(getattr(h, ROOT_SINK, False))


def _takes(h: logging.Handler, record: logging.LogRecord) -> bool:
    """Whether sink ``h`` takes ``record`` (its level, then its filters)."""
    if not _is_root_sink(h) or record.levelno < h.level:
        return False
    return not h.filters or bool(h.filter(record))


def _logger_of(record: logging.LogRecord) -> logging.Logger:
    found = logging.Logger.manager.loggerDict.get(record.name)
    return found if isinstance(found, logging.Logger) else logging.root


def _spooled_on_the_way(record: logging.LogRecord, until: logging.Logger) -> bool:
    """Whether a SpoolHandler of a logger from ``record``'s up to ``until`` takes it."""
    c: logging.Logger | None = _logger_of(record)
    while c is not None:
        if any(isinstance(h, SpoolHandler) and _takes(h, record) for h in c.handlers):
            return True
        if c is until or not c.propagate:
            return False
        c = c.parent
    return False


def install(take: Take | None = None) -> None:
    """Chain ``Logger.addHandler`` and ``removeHandler`` (once) and adopt every logger
    there is; ``take`` is the loguru front end's (None: console handlers stay)."""
    with _lock:
        if take is not None:
            _state["take"] = take
        _state["active"] = True
        if not getattr(logging.Logger.addHandler, "_nvrx_otel", False):
            original_add = logging.Logger.addHandler
            original_remove = logging.Logger.removeHandler

            def add_handler(self: logging.Logger, hdlr: logging.Handler) -> None:
                """``Logger.addHandler``, then the logger adopted (``ownhandlers``)."""
                if _state["active"] and not isinstance(hdlr, Bridge) and _taken(self, hdlr):
                    return
                original_add(self, hdlr)
                if _state["active"] and not isinstance(hdlr, Bridge):
                    _adopt(self)

            def remove_handler(self: logging.Logger, hdlr: logging.Handler) -> None:
                """``Logger.removeHandler``; a bridge left with no console goes too."""
                original_remove(self, hdlr)
                if _state["active"] and not isinstance(hdlr, Bridge):
                    _unbridge(self, original_remove)

            add_handler._nvrx_otel = True  # type: ignore[attr-defined]
            logging.Logger.addHandler = add_handler  # type: ignore[method-assign]
            logging.Logger.removeHandler = remove_handler  # type: ignore[method-assign]
        _adopt(logging.root)
        for lg in list(logging.Logger.manager.loggerDict.values()):
            if isinstance(lg, logging.Logger):
                _adopt(lg)


def forget_take() -> None:
    """The loguru front end is gone: console handlers added from now on stay."""
    _state["take"] = None


def _taken(logger: logging.Logger, hdlr: logging.Handler) -> bool:
    take = _state["take"]
    if take is None or console_fd(hdlr) is None:
        return False
    try:
        return bool(take(logger, hdlr))
    except Exception as exc:
        report_error("cannot adopt a logger's console handler", exc)
        return False


def _adopt(logger: logging.Logger) -> None:
    try:
        handlers = list(logger.handlers)
        consoles = [h for h in handlers if console_fd(h) is not None]
        for h in consoles:
            _announce(h)
        own_spool = any(isinstance(h, SpoolHandler) for h in handlers)
        if consoles and logger is not logging.root and not own_spool:
            bridge(logger)
    except Exception as exc:  # telemetry never breaks the program's own logging setup
        report_error("cannot adopt a logger with handlers of its own", exc)


def _unbridge(
    logger: logging.Logger, remove: Callable[[logging.Logger, logging.Handler], None]
) -> None:
    """With the stdlib front ends, a logger whose last console handler was removed loses
    its bridge too (``if not logger.handlers: logger.addHandler(...)`` then works)."""
    try:
        if _state["take"] is not None or any(console_fd(h) is not None for h in logger.handlers):
            return
        for h in [h for h in logger.handlers if isinstance(h, Bridge)]:
            remove(logger, h)
    except Exception as exc:
        report_error("cannot take a bridge off a logger", exc)


def bridge(logger: logging.Logger) -> None:
    """Give ``logger`` a :class:`Bridge` (once)."""
    with _lock:
        if not any(isinstance(h, Bridge) for h in logger.handlers):
            logger.addHandler(Bridge(logger))


def _announce(handler: logging.Handler) -> None:
    """Have ``handler`` tell the watcher, as it formats a record that is spooled, the text
    it is about to print, so that the captured copy is not recorded a second time. (Where
    it prints is looked up then: a handler's stream may change.) A line announced and not
    printed is forgotten by the watcher after ``notes.Expected.TTL_S``."""
    if getattr(handler, _ANNOUNCES, False):
        return
    original = handler.format

    def format(record: logging.LogRecord) -> str:
        text = original(record)
        try:
            fd = console_fd(handler)
            terminator = getattr(handler, "terminator", "\n")
            printed = fd is not None and terminator.endswith("\n")
            if printed and capture.captured(fd or 2) and spooled(record):
                capture.expect(fd or 2, text + terminator)
        except Exception:
            pass  # at worst the copy is recorded twice
        return text

    setattr(handler, "format", format)  # noqa: B010  (an instance attribute, by design)
    setattr(handler, _ANNOUNCES, True)


def spooled(record: logging.LogRecord) -> bool:
    """Whether ``record`` reaches a sink that takes it (a SpoolHandler on its logger or an
    ancestor while they propagate, a root sink by propagation or by a bridge)."""
    c: logging.Logger | None = _logger_of(record)
    while c is not None:
        bridged = False
        for h in c.handlers:
            if isinstance(h, Bridge):
                bridged = True
            elif _takes(h, record):
                return True
        if not c.propagate:
            return bridged and any(_takes(h, record) for h in logging.root.handlers)
        c = c.parent
    return False
