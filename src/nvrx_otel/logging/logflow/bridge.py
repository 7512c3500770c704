"""The bridge: every loguru record becomes the project's record in the rank's spool.

It is installed as the *filter* of the run file's loguru handler (it spools the record,
then returns whether the run file takes it), or, without a run file, of a handler that
never writes (its filter returns False). loguru runs a handler's filter in the calling
thread, before it formats anything or takes the handler's lock, whatever the other
handlers do with ``enqueue=True``. So the record is in the kernel when the log call
returns — a killed process loses nothing it logged — its trace and span ids are those of
the call site, and it costs one function call. (A sink would run in loguru's writer
thread under ``enqueue``; a patcher runs before the level and module filters and is
replaced by any ``logger.configure(patcher=...)``.)

The handler's level and :class:`~nvrx_otel.logging.logflow.levels.ModuleLevels` are the
run file's: what goes into the run file goes into the node log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from nvrx_otel import _tracectx, levels
from nvrx_otel import record as rec
from nvrx_otel.logging.handler import SPOOLED_ATTR, add_exception, report_error
from nvrx_otel.logging.logflow.levels import FILE, ModuleLevels
from nvrx_otel.spool.writer import SpoolWriter

NAME_KEY: Final = "name"
"""The ``extra`` key ``get_logger(name)`` binds; it becomes the record's logger name."""

_sev_by_name: dict[str, int] = {}
_dumps = orjson.dumps
_current_span = _tracectx.current_span
_encoded_ids = _tracectx.encoded_ids
_context = _tracectx.context
_UNSET: Final = object()
_ATTRS: Final = b',"attrs":'


def severity(name: str, no: int) -> int:
    """OTel severity of a loguru level (:func:`nvrx_otel.levels.severity_for`), cached."""
    sev = _sev_by_name.get(name)
    if sev is None:
        sev = _sev_by_name[name] = levels.severity_for(name, no)
    return sev


def flatten(
    extra: Mapping[Any, Any], prefix: str = "", out: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``extra`` as attributes: nested mappings become dotted keys."""
    attrs: dict[str, Any] = {} if out is None else out
    for key, value in extra.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flatten(value, name + ".", attrs)
        else:
            attrs[name] = value
    return attrs


_MAX_CACHED: Final = 4096
"""Entries each of the bridge's caches keeps (heads, templates, call sites, threads)."""


class SpoolBridge:
    """A loguru filter that writes the record to ``writer``; returns whether the run file
    takes it (``keep``), or False on a handler of its own.

    Like the stdlib fast path, it builds the spool line itself. A record without exception
    is one ``%`` of a cached line template per level and logger name
    (``record.log_template``) with the message's JSON, cached call-site and thread fields,
    the trace fields of the last context and the JSON of its ``extra`` beyond the bound name
    (flattened, if any), appended by the writer's ``write_line``; any other
    record (an exception, a value orjson refuses) is a dict of its own fields after a
    cached head (``record.headed_line``). Both write the same bytes for the same record.
    """

    def __init__(
        self, writer: SpoolWriter, levels: ModuleLevels | None, *, keep: bool = False
    ) -> None:
        """``keep``: return True for a record the level rules let through (the filter of
        the run file's handler, which then writes it too); else always False (the filter
        of a handler of its own that never writes)."""
        self.writer = writer
        self.keep = keep
        self.levels = levels
        self.cache = levels.caches[FILE] if levels is not None else None
        self.heads: dict[tuple[str, int, str], bytes] = {}
        # (level name, level no, logger name) -> line template (has the writer id), with
        # slots for the trace ids and the attributes (either may be empty). (loguru's
        # level, file and thread objects hash by identity: the keys are their values.)
        self.templates: dict[tuple[str, int, str], bytes] = {}
        self.sites: dict[tuple[str, int, str], bytes] = {}  # (path, line, function) -> fields
        self.threads: dict[tuple[int, str], bytes] = {}  # (id, name) -> fields
        # The context of the last record and its trace fields: a context never changes once
        # current (a new span makes a new one); holding it keeps its identity from being
        # reused by another object.
        self.last_ctx: tuple[object, bytes] = (_UNSET, b"")
        self.start_ns: int | None = None  # loguru's start time, from the first record
        writer.watch_starts(self)

    def writer_started(self) -> None:
        """The writer has a new id and identity (a forked child): forget the templates."""
        self.templates = {}

    def template(self, key: tuple[str, int, str]) -> bytes:
        """The line template of a level and logger name (level name, level no, logger)."""
        w = self.writer
        head = self.heads.get(key) or self.head(*key)
        if len(self.templates) >= _MAX_CACHED:
            self.templates = {}
        template = self.templates[key] = rec.log_template(
            head, w.writer_id, w.identity_suffix, trace=True, attrs=True
        )
        return template

    def site(self, key: tuple[str, int, str], name: str) -> bytes:
        """The ``file``/``path``/``line``/``fn`` fields of a call site, encoded once."""
        if len(self.sites) >= _MAX_CACHED:
            self.sites = {}
        path, line, fn = key
        fields = {"file": name, "path": path, "line": line, "fn": fn}
        encoded = self.sites[key] = rec.encoded_fields(fields)
        return encoded

    def thread(self, key: tuple[int, str]) -> bytes:
        """The ``tid``/``tn`` fields of a thread, encoded once."""
        if len(self.threads) >= _MAX_CACHED:
            self.threads = {}
        encoded = self.threads[key] = rec.encoded_fields({"tid": key[0], "tn": key[1]})
        return encoded

    def trace(self, context: Any) -> bytes:
        """The ``trace_id``/``span_id``/``tf`` fields of the span current in ``context``
        (None: in the public API's current context); empty without a valid span."""
        encoded = _encoded_ids(context)
        if context is not None:
            self.last_ctx = (context, encoded)
        return encoded

    def head(self, level: str, no: int, lg: str) -> bytes:
        """The constant start of a line (``{"v":1,"k":"log","sev":..,"lvl":..,"lg":..,``)."""
        heads = self.heads
        if len(heads) > 4096:  # many distinct bound names: keep the cache bounded
            heads.clear()
        head = heads[(level, no, lg)] = rec.log_head(severity(level, no), level, lg)
        return head

    def __call__(self, record: Any) -> bool:
        keep = self.keep
        try:
            level = record["level"]
            cache = self.cache
            if cache is not None:
                name = record["name"]
                threshold = cache.get(name)
                if threshold is None:
                    threshold = self.levels.threshold(name, FILE)  # type: ignore[union-attr]
                if level.no < threshold:
                    return False
            extra = record["extra"]
            bound: Any = None
            if extra:
                if SPOOLED_ATTR in extra:
                    return keep  # the stdlib front end spooled it already
                bound = extra.get(NAME_KEY)
            named = bound.__class__ is str
            lg: str = bound if named else (record["name"] or "")
            writer = self.writer
            elapsed = record["elapsed"]  # loguru's time minus its start: cheaper than time
            us = (elapsed.days * 86400 + elapsed.seconds) * 1_000_000 + elapsed.microseconds
            start = self.start_ns
            if start is None:
                start = self.start_ns = round(record["time"].timestamp() * 1e6) * 1000 - us * 1000
            ts = start + us * 1000
            if record["exception"] is None:
                # the template path (the dict path below writes the same bytes)
                try:
                    msg = _dumps(record["message"])
                    attrs = b""
                    if extra and (len(extra) > 1 or not named):  # as the dict path's attrs
                        flat = flatten(extra)
                        if named:
                            del flat[NAME_KEY]
                        attrs = _ATTRS + _dumps(flat)
                except (TypeError, orjson.JSONEncodeError):  # lone surrogates, odd values:
                    pass  # the dict path
                else:
                    file = record["file"]
                    where = (file.path, record["line"], record["function"])
                    site = self.sites.get(where) or self.site(where, file.name)
                    thread = record["thread"]
                    who = (thread.id, thread.name)
                    fields = self.threads.get(who) or self.thread(who)
                    context = _context()
                    last = self.last_ctx
                    trace = last[1] if last[0] is context else self.trace(context)
                    seq = next(writer.counter)
                    tkey = (level.name, level.no, lg)
                    template = self.templates.get(tkey) or self.template(tkey)
                    writer.write_line(template % (ts, msg, site, fields, seq, trace, attrs), ts)
                    return keep
            file = record["file"]
            thread = record["thread"]
            key = writer.next_key()
            out: dict[str, Any] = {
                "ts": ts,
                "msg": record["message"],
                "file": file.name,
                "path": file.path,
                "line": record["line"],
                "fn": record["function"],
                "tid": thread.id,
                "tn": thread.name,
                "key": key,
            }
            span = _current_span()
            if span is not None:
                ctx = span.get_span_context()
                if ctx.is_valid:
                    out["trace_id"] = format(ctx.trace_id, "032x")
                    out["span_id"] = format(ctx.span_id, "016x")
                    out["tf"] = int(ctx.trace_flags)
            exc = record["exception"]
            if exc is not None:
                add_exception(out, (exc.type, exc.value, exc.traceback))
            if extra and (len(extra) > 1 or not named):
                flat = flatten(extra)
                if named:
                    del flat[NAME_KEY]
                out["attrs"] = flat
            head = self.heads.get((level.name, level.no, lg)) or self.head(level.name, level.no, lg)
            writer.write_line(rec.headed_line(head, out, writer.identity_suffix), ts)
        except Exception as exc:  # telemetry never breaks the log call
            self.writer.lost()  # (a signal handler's exception too: the record is lost)
            report_error("cannot spool a loguru record", exc, lost=True)
        return keep


def discard(message: Any) -> None:
    """The bridge handler's sink: never called, its filter returns False."""
