"""stdlib ``logging`` glue: a LogRecord becomes the project's record and goes to the spool."""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from nvrx_otel import _tracectx, env, levels
from nvrx_otel import record as rec
from nvrx_otel.identity import get_identity
from nvrx_otel.logging.watched import WatchedList
from nvrx_otel.spool.paths import job_dir
from nvrx_otel.spool.registry import writer_for_root
from nvrx_otel.spool.writer import DEFAULT_MAX_FILE_SIZE, SpoolWriter

_dumps = rec.json_value
_LEAN_INPUTS = frozenset({"level", "filters"})  # a SpoolHandler's, for the lean path

SPOOLED_ATTR = "nvrx_spooled"
"""Set on a LogRecord once it reached the spool, so other front ends never spool it twice."""

_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    SPOOLED_ATTR,
}
_N_STD = len(vars(logging.LogRecord("", 0, "", 0, "", (), None)))
_errors = {"count": 0}
_error_lock = threading.RLock()  # a signal handler may report while its thread does


def report_error(what: str, exc: BaseException, *, lost: bool = False) -> None:
    """Count an error inside logging; tell stderr about the first of each kind only
    (``lost``: the record is not spooled, the writer counts it as dropped)."""
    with _error_lock:
        _errors["count"] += 1
        first = _errors.setdefault(f"seen:{what}:{type(exc).__name__}", 0) == 0
        _errors[f"seen:{what}:{type(exc).__name__}"] = 1
    if first:
        try:
            fate = "counted as dropped" if lost else "kept with the error noted"
            sys.stderr.write(
                f"nvrx-otel: {what}: {type(exc).__name__}: {exc} "
                f"(the record is {fate}; further ones are counted)\n"
            )
        except Exception:  # stderr unusable: the count remains
            pass


def error_count() -> int:
    """How many errors logging swallowed in this process (bad format arguments and such)."""
    return _errors["count"]


def format_message(msg: object, args: Any) -> str:
    """``msg % args`` as stdlib does, never raising: a bad format keeps msg and args.

    As ``logging.LogRecord``, a lone non-empty mapping argument is the mapping to format
    with (``log.info("%(step)d", {"step": 1})``)."""
    if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], Mapping) and args[0]:
        args = args[0]
    try:
        text = str(msg)
        if args:
            text = text % args
        return text
    except Exception as exc:
        report_error("bad log format arguments", exc)
        try:
            return f"{msg!r} % {args!r} [format error: {type(exc).__name__}: {exc}]"
        except Exception:
            return f"<unprintable message> [format error: {type(exc).__name__}]"


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def add_exception(record: dict[str, Any], exc_info: ExcInfo | tuple[None, None, None]) -> None:
    """Fill ``exc``/``exc_type``/``exc_msg`` from ``exc_info``."""
    etype, value, tb = exc_info
    if etype is None or value is None:
        return
    try:
        record["exc"] = "".join(traceback.format_exception(etype, value, tb)).rstrip("\n")
        record["exc_type"] = etype.__qualname__
        record["exc_msg"] = str(value)
    except Exception as exc:
        report_error("cannot format exception", exc)
        record["exc_type"] = getattr(etype, "__qualname__", "?")


def from_log_record(lr: logging.LogRecord) -> dict[str, Any]:
    """The project's record for a stdlib LogRecord (without writer fields)."""
    msg = format_message(lr.msg, lr.args)
    out: dict[str, Any] = {
        "k": rec.KIND_LOG,
        "ts": int(lr.created * 1_000_000_000),
        "sev": levels.severity_of(lr.levelno),
        "lvl": lr.levelname,
        "lg": lr.name,
        "msg": msg,
        "file": lr.filename,
        "path": lr.pathname,
        "line": lr.lineno,
        "fn": lr.funcName,
        "tid": lr.thread,
        "tn": lr.threadName,
    }
    _tracectx.add_ids(out)
    if lr.exc_info:
        add_exception(out, lr.exc_info)
    elif lr.exc_text:
        out["exc"] = lr.exc_text
    if lr.stack_info:
        out["exc"] = (out.get("exc", "") + "\n" + lr.stack_info).lstrip("\n")
    fields = lr.__dict__
    if len(fields) > _N_STD:  # cheap test first: extra fields make the dict larger
        names = fields.keys() - _STD_ATTRS
        if names:
            out["attrs"] = {k: fields[k] for k in names}
    return out


encoded_fields = rec.encoded_fields


# A plain record's line (no exception, stack or extra fields) is one bytes formatting of a
# template per logger and level (head, writer id and identity filled in) with the time,
# message, call site, thread, seq and trace ids; site and thread come from caches.
_MAX_CACHED = 4096  # entries per cache; beyond, it starts over
_UNSET = object()


class _Lines:
    """The lines of plain LogRecords from cached bytes (about a third of the instructions
    of building the record's dict and encoding it)."""

    __slots__ = ("__weakref__", "last_ctx", "sites", "templates", "threads", "writer")

    def __init__(self, writer: SpoolWriter) -> None:
        self.writer = writer
        self.templates: dict[tuple[str, int, str], bytes] = {}
        self.sites: dict[tuple[str, int, str, str], bytes] = {}
        self.threads: dict[tuple[Any, Any], bytes] = {}
        self.last_ctx: tuple[object, bytes] = (_UNSET, b"")  # one tuple: see leanpath
        writer.watch_starts(self)

    def writer_started(self) -> None:
        """The writer has a new id and identity (a forked child): new templates."""
        self.templates = {}

    def line(self, lr: logging.LogRecord) -> bytes:
        """``lr`` as a spool line; raises (before taking a key) if its message cannot be
        encoded this way (lone surrogates)."""
        head = (lr.name, lr.levelno, lr.levelname)
        template = self.templates.get(head) or self._template(head)
        message = _dumps(format_message(lr.msg, lr.args))
        where = (lr.pathname, lr.lineno, lr.funcName, lr.filename)
        site = self.sites.get(where) or self._cache(self.sites, where, _site_fields(where))
        who = (lr.thread, lr.threadName)
        thread = self.threads.get(who) or self._cache(
            self.threads, who, encoded_fields({"tid": who[0], "tn": who[1]})
        )
        ctx = _tracectx.context()
        last = self.last_ctx
        if last[0] is ctx:
            trace = last[1]
        else:
            trace = _tracectx.encoded_ids(ctx)
            if ctx is not None:
                self.last_ctx = (ctx, trace)
        seq = next(self.writer.counter)
        return template % (int(lr.created * 1_000_000_000), message, site, thread, seq, trace)

    def _template(self, head: tuple[str, int, str]) -> bytes:
        name, levelno, levelname = head
        w = self.writer
        start = rec.log_head(levels.severity_of(levelno), levelname, name)
        template = rec.log_template(start, w.writer_id, w.identity_suffix, trace=True)
        return self._cache(self.templates, head, template)

    @staticmethod
    def _cache(cache: dict[Any, bytes], key: Any, value: bytes) -> bytes:
        if len(cache) >= _MAX_CACHED:
            cache.clear()
        cache[key] = value
        return value


def _site_fields(where: tuple[str, int, str, str]) -> bytes:
    path, line, fn, file = where
    return encoded_fields({"file": file, "path": path, "line": line, "fn": fn})


def default_spool_dir() -> Path | None:
    """The job's spool directory from ``NVRX_NODE_LOCAL_TMPDIR``, or None when unset."""
    root = env.spool_root()
    return job_dir(root, get_identity().job_id) if root else None


class SpoolHandler(logging.Handler):
    """A ``logging.Handler`` that writes each record to this process's node-local spool.

    Usable from ``dictConfig``::

        {"class": "nvrx_otel.logging.SpoolHandler", "directory": "/tmp/nvrx"}

    ``directory`` is the spool root (default ``NVRX_NODE_LOCAL_TMPDIR``); records go to its
    ``<job id>`` subdirectory. ``extra`` fields become record attributes. ``emit`` never
    raises into the caller. Raises ``SpoolPathError`` if the directory is unusable.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        proc: str | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        budget: int | None = None,
        level: int = logging.NOTSET,
    ) -> None:
        # The lean paths (logging.fastpath) that write through this handler: told when its
        # level or filters change.
        self._lean_users: weakref.WeakSet[Any] = weakref.WeakSet()
        super().__init__(level)
        self.filters = WatchedList(self)
        if directory is None:
            directory = env.spool_root()
            if directory is None:
                raise ValueError(f"SpoolHandler needs a directory or {env.NVRX_NODE_LOCAL_TMPDIR}")
        self.writer: SpoolWriter = writer_for_root(
            directory, proc=proc, max_file_size=max_file_size, budget=budget
        )
        self._lines = _Lines(self.writer)
        from nvrx_otel.logging import ownhandlers  # it needs this module

        ownhandlers.install()  # torch's non-propagating loggers; console copies announced

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _LEAN_INPUTS:
            self._nvrx_list_changed(True)

    def _nvrx_list_changed(self, done: bool) -> None:
        """The level or the filters changed (``done``) or are about to: see watched.py."""
        users = getattr(self, "_lean_users", None)  # not __dict__ (see fastpath)
        if users:
            for fast in list(users):
                fast.inputs_changed(done)

    def handle(self, record: logging.LogRecord) -> bool:
        """``Handler.handle`` without the handler's lock: the writer takes none on its
        hot path (one write per record), so neither does the handler."""
        rv: Any = self.filter(record) if self.filters else True
        if isinstance(rv, logging.LogRecord):  # a filter may return a replacement (3.12+)
            record = rv
        if rv:
            self.emit(record)
        return bool(rv)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if (
                record.exc_info
                or record.exc_text
                or record.stack_info
                or len(record.__dict__) > _N_STD  # extra fields (or a formatter's)
            ):
                self.writer.emit(from_log_record(record))
            else:
                try:
                    line = self._lines.line(record)
                except (TypeError, orjson.JSONEncodeError):  # lone surrogates, odd values
                    self.writer.emit(from_log_record(record))
                else:
                    self.writer.write_line(line, int(record.created * 1_000_000_000))
            setattr(record, SPOOLED_ATTR, True)
        except Exception as exc:  # (a signal handler's exception too: the record is lost)
            self.writer.lost()
            report_error("cannot spool a log record", exc, lost=True)

    def handleError(self, record: logging.LogRecord) -> None:
        report_error("log handler error", sys.exc_info()[1] or RuntimeError("unknown"))
