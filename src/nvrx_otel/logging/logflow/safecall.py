"""A bad format call through loguru keeps its record and never raises into training.

loguru formats ``message.format(*args, **kwargs)`` inside the call, before any handler
sees the record, so ``logger.info("step {} of {}", 1)`` raises ``IndexError`` at the call
site. As the stdlib path does (``handler.format_message``), the record is kept instead: its
message is the raw message with its arguments and the error noted, the error is counted
and the first of its kind reported on stderr.

The level methods call loguru as usual and come here only when that raised (a ``try``
costs nothing while nothing raises). An exception that the message's format does not
reproduce (a sink added with ``catch=False``, say) is loguru's to raise, as before.
"""

from __future__ import annotations

from typing import Any

from nvrx_otel.logging.handler import report_error

WHAT = "bad log format arguments"
"""The stderr line's and the error count's name for this error (the stdlib path's too)."""


class _AnyRecord(dict[str, Any]):
    """Stands for loguru's record (``opt(record=True)``) when the format is tried again:
    every key is there, so only what is wrong with the message or arguments fails."""

    def __missing__(self, key: str) -> Any:
        return _AnyRecord()

    def __getattr__(self, name: str) -> Any:
        return _AnyRecord()

    def __format__(self, spec: str) -> str:
        return ""


def _format_error(options: tuple[Any, ...], message: Any, args: Any, kwargs: Any) -> bool:
    """Whether formatting ``message`` with ``args`` and ``kwargs`` fails, as loguru does it."""
    lazy, colors, record = options[3], options[4], options[2]
    try:
        if lazy:
            args = [arg() for arg in args]
            kwargs = {key: value() for key, value in kwargs.items()}
        if record:
            kwargs = {**kwargs, "record": _AnyRecord()}
        if colors:
            from loguru._colorizer import Colorizer

            Colorizer.prepare_message(message, args, kwargs)  # type: ignore[no-untyped-call]
        else:
            str(message).format(*args, **kwargs)
    except Exception:
        return True
    return False


def raw_text(message: Any, args: Any, kwargs: Any, exc: BaseException) -> str:
    """The record's message for a call that cannot be formatted: message and arguments as
    given, and the error."""
    try:
        parts = [repr(message)]
        if args:
            parts.append(f"args={tuple(args)!r}")
        if kwargs:
            parts.append(f"kwargs={dict(kwargs)!r}")
        return f"{' '.join(parts)} [format error: {type(exc).__name__}: {exc}]"
    except Exception:
        return f"<unprintable message> [format error: {type(exc).__name__}]"


def kept(
    logger: Any,
    level: Any,
    options: tuple[Any, ...],
    message: Any,
    args: Any,
    kwargs: Any,
    exc: Exception,
) -> bool:
    """After loguru raised ``exc`` for a call from a level method: when the call's format
    is what failed, log its raw text in its place and return True; else return False (the
    caller raises ``exc``). Never raises itself."""
    try:
        if not (args or kwargs) or not _format_error(options, message, args, kwargs):
            return False
        report_error(WHAT, exc)
        exception, depth, _record, _lazy, _colors, raw, capture, patchers, extra = options
        if capture and kwargs:
            extra = {**extra, **{k: v for k, v in kwargs.items() if k != "record"}}
        # One frame deeper than the level method's own call: loguru finds the caller
        # (file, line, module) ``depth`` frames above the level method.
        plain = (exception, depth + 1, False, False, False, raw, capture, patchers, extra)
        logger._log(level, False, plain, raw_text(message, args, kwargs, exc), (), {})
    except Exception as again:  # the record cannot be kept either: it is counted
        report_error("cannot log a call with bad format arguments", again, lost=True)
    return True
