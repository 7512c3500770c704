"""The bridge: every loguru record becomes the project's record in the rank's spool.

It is installed as the *filter* of a loguru handler that never writes (its filter returns
False). loguru runs a handler's filter in the calling thread, before it formats anything
or takes the handler's lock, whatever the other handlers do with ``enqueue=True``. So the
record is in the kernel when the log call returns — a killed process loses nothing it
logged — its trace and span ids are those of the call site, and it costs one function
call. (A sink would run in loguru's writer thread under ``enqueue``; a patcher runs before
the level and module filters and is replaced by any ``logger.configure(patcher=...)``.)

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


class SpoolBridge:
    """A loguru filter that writes the record to ``writer`` and returns False.

    Like the stdlib fast path, it builds the spool line itself: a cached head per level
    and logger name, the record's own fields, and the writer's identity suffix.
    """

    def __init__(self, writer: SpoolWriter, levels: ModuleLevels | None) -> None:
        self.writer = writer
        self.levels = levels
        self.cache = levels.caches[FILE] if levels is not None else None
        self.heads: dict[tuple[str, int, str], bytes] = {}
        self.start_ns: int | None = None  # loguru's start time, from the first record

    def head(self, level: str, no: int, lg: str) -> bytes:
        """The constant start of a line (``{"v":1,"k":"log","sev":..,"lvl":..,"lg":..,``)."""
        heads = self.heads
        if len(heads) > 4096:  # many distinct bound names: keep the cache bounded
            heads.clear()
        head = heads[(level, no, lg)] = rec.log_head(severity(level, no), level, lg)
        return head

    def __call__(self, record: Any) -> bool:
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
                    return False  # the stdlib front end spooled it already
                bound = extra.get(NAME_KEY)
            named = bound.__class__ is str
            lg: str = bound if named else (record["name"] or "")
            writer = self.writer
            key = writer.next_key()
            file = record["file"]
            thread = record["thread"]
            elapsed = record["elapsed"]  # loguru's time minus its start: cheaper than time
            us = (elapsed.days * 86400 + elapsed.seconds) * 1_000_000 + elapsed.microseconds
            start = self.start_ns
            if start is None:
                start = self.start_ns = round(record["time"].timestamp() * 1e6) * 1000 - us * 1000
            ts = start + us * 1000
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
                attrs = flatten(extra)
                if named:
                    del attrs[NAME_KEY]
                out["attrs"] = attrs
            head = self.heads.get((level.name, level.no, lg)) or self.head(level.name, level.no, lg)
            writer.write_line(rec.headed_line(head, out, writer.identity_suffix), ts)
        except Exception as exc:  # telemetry never breaks the log call
            report_error("cannot spool a loguru record", exc)
        return False


def discard(message: Any) -> None:
    """The bridge handler's sink: never called, its filter returns False."""
