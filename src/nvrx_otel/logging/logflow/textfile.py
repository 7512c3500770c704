"""The default run file (text lines; no rotation, JSON, per-worker files nor ``enqueue``):
its loguru handler builds each line from cached pieces instead of formatting it.

loguru's handler formats every line with ``format_map`` over a copy of the record (the
time through loguru's own datetime formatter), then writes it under its lock through a
line-buffered text file: about half the cost of a plain loguru call. The run file's
handler stays loguru's — its level, its filter (the spool bridge, module levels), its id —
but :meth:`TextFile.emit` takes the place of its ``emit``: after the level and the filter,
the line is the wall-clock second (made once a second), then
`` | LEVEL    | name:fn:line | `` (once per level and call site), the message, ``\\n``;
one ``os.write`` on an ``O_APPEND`` descriptor, under the file's own (reentrant, renewed in
a forked child) lock. Removing the handler closes the descriptor under that lock, or,
while a line is being written, leaves the close to that line's writer: removal holds
loguru's handler lock and never waits for the file's (a signal handler logging an
exception below a line holds the file's lock and waits for loguru's).

These are the bytes loguru's file sink writes for the same record (with
``errors="backslashreplace"``: a lone surrogate is escaped where loguru's strict default
loses the line): the pieces are made by ``format_map`` over the same fields, the second
from the same ``datetime`` fields loguru's ``YYYY-MM-DD HH:mm:ss.SSS`` reads, and the
handler is taken over only when its line for a sample record is the one loguru's format
makes. ``opt(raw=True)`` (a bare message) and exceptions (loguru formats the traceback) go
through loguru's own ``emit`` to :meth:`TextFile.write`, the same descriptor; a record
whose fields a patcher gave other types is formatted by ``format_map`` over the record, as
loguru's handler does.

A line that cannot be written (disk full, file size limit) or encoded (no memory for its
bytes) is counted and said once (:data:`~.runfilewriter.losses`), never raised into the
call nor a traceback per line. As with loguru's file sink, a run file deleted while
running is not made again (the other options' descriptor looks before every line: an
``fstat`` per line).
"""

from __future__ import annotations

import os
import string
import threading
import weakref
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any, Final

import loguru._datetime
import loguru._handler
import loguru._recattrs

from nvrx_otel.logging.logflow.runfilewriter import losses, safe_text

TIME_FIELD: Final = "{time:YYYY-MM-DD HH:mm:ss.SSS}"
"""The run file's line starts with this field (LogFlow's format)."""
_MESSAGE_FIELD: Final = "{message}"
_SITE_FIELDS: Final = frozenset({"level", "name", "function", "line"})
_MAX_CACHED: Final = 4096
_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
_MS: Final = tuple(f"{ms:03d}" for ms in range(1000))
_LoguruDatetime: Any = loguru._datetime.datetime
_RecordLevel: Any = loguru._recattrs.RecordLevel
_EMIT_ARGS: Final = ("self", "record", "level_id", "from_decorator", "is_raw", "colored_message")


def _middle_format(fmt: str) -> str | None:
    """The part of ``fmt`` between the time and the message, when ``fmt`` is
    ``{time:YYYY-MM-DD HH:mm:ss.SSS}<middle>{message}`` and the middle names only the
    level and the call site; else None (no fast path for that format)."""
    if not (fmt.startswith(TIME_FIELD) and fmt.endswith(_MESSAGE_FIELD)):
        return None
    middle = fmt[len(TIME_FIELD) : -len(_MESSAGE_FIELD)]
    try:
        fields = [(f, c) for _, f, _, c in string.Formatter().parse(middle) if f is not None]
    except ValueError:
        return None
    if not {f for f, _ in fields} <= _SITE_FIELDS:
        return None
    if any(f == "level" and c is not None for f, c in fields):
        return None  # repr(level) shows its icon, which logger.level() may change: not cached
    return middle


def _emit_matches() -> bool:
    """Whether loguru's ``Handler.emit`` takes the arguments :meth:`TextFile.emit` takes."""
    code = getattr(getattr(loguru._handler.Handler, "emit", None), "__code__", None)
    return code is not None and code.co_varnames[: len(_EMIT_ARGS)] == _EMIT_ARGS


_OPEN: weakref.WeakSet[TextFile] = weakref.WeakSet()


def _new_locks_in_child() -> None:
    """A forked child's copy of a lock another thread held is held for ever: new ones."""
    for text_file in list(_OPEN):
        text_file.lock = threading.RLock()
        if text_file.closed:  # removed while a thread of the parent wrote a line
            text_file.close_unused()


os.register_at_fork(after_in_child=_new_locks_in_child)


class TextFile:
    """The run file as a loguru sink object (``write``/``stop``, ``name`` for loguru's
    repr) and, once :meth:`take_over` succeeded, its handler's ``emit``."""

    def __init__(self, path: os.PathLike[str] | str, fmt: str) -> None:
        """Open ``path`` for appending (``OSError`` if it cannot be); ``fmt`` is the format
        the handler is added with."""
        self.path = Path(path)
        self.name = f"'{path}'"  # as loguru names a file sink (its handler's repr)
        self.encoding = "utf-8"  # loguru's traceback formatter asks (as of its file sink)
        self.fmt = fmt
        self.middle = _middle_format(fmt)
        self.fd = os.open(path, _FLAGS, 0o666)
        self.closed = False
        # Held around each line :meth:`emit` writes and to close the descriptor, so it is
        # never closed under a line (whose number a file opened next would reuse), as
        # loguru's handler lock does for its own writes. Reentrant: a signal handler may log.
        # Removal never waits for it (:meth:`stop`).
        self.lock = threading.RLock()
        self.torn = False  # a write was cut short: the file ends inside a line
        _OPEN.add(self)
        self.sites: dict[tuple[Any, ...], str] = {}
        self.clock: tuple[tuple[int, ...], str] = ((), "")
        self.levelno = 0
        self.filter: Any = None
        self.errors: Any = None  # loguru's handler's error interceptor
        self.loguru_emit: Any = None
        self.handler: Any = None

    def take_over(self, handler: Any) -> bool:
        """Become ``handler``'s ``emit`` (the handler loguru made for this sink) when its
        format is one this class builds and loguru's handler looks as expected; else leave
        it alone (loguru formats, :meth:`write` writes). Returns whether it took over."""
        if self.middle is None or not _emit_matches():
            return False
        try:
            expected = self.fmt + "\n{exception}"
            if handler._decolorized_format != expected or handler._is_formatter_dynamic:
                return False
            if handler._colorize or handler._serialize or handler._enqueue:
                return False
            self.levelno = int(handler._levelno)
            self.filter = handler._filter
            self.errors = handler._error_interceptor
            if not callable(self.errors.should_catch) or not callable(self.errors.print):
                return False
            self.loguru_emit = handler.emit
            if not self.agrees(handler._decolorized_format):
                return False
        except Exception:  # loguru's handler is not what this class knows: leave it alone
            return False
        self.handler = handler
        handler.emit = self.emit
        return True

    def agrees(self, loguru_format: str) -> bool:
        """Whether :meth:`line` makes the line loguru's format makes of a sample record
        (the time as loguru formats it, the pieces put together as loguru does)."""
        zone = timezone(timedelta(hours=-3, minutes=-30), "probe")
        record = {
            "time": _LoguruDatetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=zone),
            "level": _RecordLevel("SUCCESS", 25, "\u2705"),
            "name": "pkg.mod",
            "function": "fn",
            "line": 42,
            "message": "probe {} \u00e9",
        }
        ours = self.line(record, record["level"])
        self.sites, self.clock = {}, ((), "")
        return ours == loguru_format.format_map({**record, "exception": ""})

    def __reduce__(self) -> Any:
        raise TypeError(f"cannot pickle {type(self).__name__!r} object (an open descriptor)")

    # -- loguru's sink -----------------------------------------------------------------------

    def write(self, message: Any) -> None:
        """A line loguru formatted (the records :meth:`emit` leaves to it)."""
        # Under loguru's handler lock (as stop() is), not this file's: a thread holding
        # this one may wait for loguru's (a signal handler logging an exception).
        try:
            data = safe_text(str(message))
        except Exception as exc:  # no memory for the bytes: lost, counted as a write error
            losses.add(self.path, exc)
            return
        self.append(data)

    def stop(self) -> None:
        """The handler was removed (loguru holds its handler lock): close the descriptor, or
        leave that to the line being written, whose writer closes it once written.

        Never waits for :attr:`lock`: its holder may be the main thread below a signal
        handler that logs an exception, which waits for loguru's handler lock (the two
        threads would wait for each other)."""
        self.closed = True  # before looking at the lock: a writer looks after releasing it
        self.close_unused()

    def close_unused(self) -> None:
        """Close the descriptor once :meth:`stop` was called, unless a line is being written
        (by another thread, or by this one below a signal handler): its writer calls this
        again after the line."""
        lock = self.lock
        if lock._is_owned() or not lock.acquire(blocking=False):  # type: ignore[attr-defined]
            return
        try:
            fd, self.fd = self.fd, -1  # under the lock: one caller closes it, no line after
        finally:
            lock.release()
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def append(self, data: bytes) -> None:
        """Write ``data`` (under :attr:`lock` or loguru's handler lock, both of which
        :meth:`stop` holds); a line cut short is ended before the next one."""
        fd = self.fd
        if fd < 0:
            return
        torn = self.torn
        if torn:
            data = b"\n" + data
            self.torn = False
        size = len(data)
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write (file size limit, signal)
                data = data[written:]
                written = os.write(fd, data)
        except Exception as exc:  # disk full or gone: the spool still has the record
            self.torn = torn or len(data) < size  # a fragment without its newline is left
            losses.add(self.path, exc)

    # -- the handler's emit -------------------------------------------------------------------

    def emit(
        self, record: Any, level_id: Any, from_decorator: Any, is_raw: Any, colored_message: Any
    ) -> None:
        """loguru's ``Handler.emit`` for this run file: level, filter, then the line from
        cached pieces (or loguru's own ``emit`` for what it does not build)."""
        try:
            to_loguru = is_raw or record["exception"] is not None or self.closed
            level = record["level"]
            if not to_loguru and level.no < self.levelno:
                return
        except Exception:  # a record a patcher broke: loguru's emit reports it its way
            to_loguru = True
        if to_loguru:
            self.loguru_emit(record, level_id, from_decorator, is_raw, colored_message)
            return
        filter_ = self.filter
        if filter_ is not None:
            try:
                if not filter_(record):
                    return
            except Exception:  # reported as loguru's emit does (not called a second time)
                errors = self.errors
                if not errors.should_catch():
                    raise
                errors.print(record)
                return
        text: str | None
        try:
            text = self.line(record, level)
        except Exception:  # a field a patcher gave another type
            text = self.formatted(record)
            if text is None:
                return
        try:
            data = text.encode()
        except Exception:  # lone surrogates (undecodable file names), no memory for the bytes
            encoded = self.encoded(text)
            if encoded is None:
                return
            data = encoded
        with self.lock:
            self.append(data)
        if self.closed:  # removed while this line was written: closing is left to its writer
            self.close_unused()

    def line(self, record: Any, level: Any) -> str:
        """The run-file line of a record without exception, from the cached pieces; raises
        for a field these cannot be made of (``formatted`` makes those lines)."""
        t = record["time"]
        if t.__class__ is not _LoguruDatetime:
            raise TypeError("not loguru's datetime")
        clock_key = (t.second, t.minute, t.hour, t.day, t.month, t.year)
        key, clock = self.clock
        if key != clock_key:
            s, mi, h, d, mo, y = clock_key
            clock = f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}."
            self.clock = (clock_key, clock)  # one assignment: threads see a matching pair
        name = record["name"]
        function = record["function"]
        line = record["line"]
        # The pieces are keyed by value: 1, 1.0 and True are one key, so only the types
        # loguru gives are cached (a patcher's others are formatted by ``formatted``).
        if (
            line.__class__ is not int
            or function.__class__ is not str
            or (name.__class__ is not str and name is not None)
            or level.__class__ is not _RecordLevel
        ):
            raise TypeError("a call-site field of a type the pieces are not keyed by")
        site_key = (level.name, name, function, line)
        site = self.sites.get(site_key)
        if site is None:
            site = self.site(site_key, level, name, function, line)
        message = record["message"]
        if message.__class__ is not str:
            raise TypeError("a message that is not a str")
        return f"{clock}{_MS[t.microsecond // 1000]}{site}{message}\n"

    def site(self, key: tuple[Any, ...], level: Any, name: Any, function: Any, line: Any) -> str:
        """`` | LEVEL    | name:function:line | `` of one level and call site, cached."""
        assert self.middle is not None
        if len(self.sites) >= _MAX_CACHED:
            self.sites = {}
        fields = {"level": level, "name": name, "function": function, "line": line}
        site = self.sites[key] = self.middle.format_map(fields)
        return site

    def encoded(self, text: str) -> bytes | None:
        """``safe_text`` of a line ``str.encode`` refused (lone surrogates escaped, as
        loguru's file sink with ``errors="backslashreplace"`` writes them); None when that
        fails too (no memory for the bytes: the line is lost, counted as a write error)."""
        try:
            return safe_text(text)
        except Exception as exc:
            losses.add(self.path, exc)
            return None

    def formatted(self, record: Any) -> str | None:
        """The line as loguru's handler formats it (a record the pieces cannot make: a
        patched field of another type); None when that fails too (counted)."""
        try:
            fields = record.copy()
            fields["exception"] = ""
            return str(self.handler._decolorized_format.format_map(fields))
        except Exception as exc:  # loguru's format fails too: the line is lost, counted
            losses.add(self.path, exc)
            return None
