"""The lean span of the spool path: a real ``opentelemetry.trace.Span`` that appends one
``span_start`` record when it starts and one self-contained ``span_end`` record when it
ends (``docs/spool-format.md``), each with a single ``os.write`` through the process's
spool writer. A process killed in between leaves a ``span_start`` the aggregator closes.

It keeps what the SDK's span keeps (attributes, events, links, status, the dropped counts
of the span limits) in plain dicts and lists. The ``span_end`` record is the
``span_start`` record completed (same ids, the live attributes and links). Both lines are
filled into per-name templates the sink caches (one ``%`` and an ``orjson.dumps`` of the
attributes each) and appended through the writer's append window inline, so a span costs
two ``pwrite`` calls and little else; whatever the templates do not cover takes the dict
path, which writes the same bytes. Nothing here raises into the caller: a
record that cannot be written is counted by the writer, an odd attribute value is
converted or dropped.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Final

import orjson
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState
from opentelemetry.util import types

from nvrx_otel import _tracectx, env
from nvrx_otel import record as rec
from nvrx_otel.semconv import EXCEPTION_MESSAGE, EXCEPTION_STACKTRACE, EXCEPTION_TYPE
from nvrx_otel.spool.writer import SpoolWriter, append
from nvrx_otel.tracing.attributes import (
    PLAIN,
    Limits,
    Owned,
    all_plain,
    clean_attributes,
    clean_value,
)

EXCEPTION_EVENT: Final = "exception"
"""Name of the event ``record_exception`` adds (OpenTelemetry's)."""

_START: Final = rec.KIND_SPAN_START
_END: Final = rec.KIND_SPAN_END
_V: Final = rec.SCHEMA_VERSION
_OK: Final = StatusCode.OK.value
_dumps = orjson.dumps
_all_plain = all_plain
_time_ns = time.time_ns
_KIND_NUMBER: Final = {k: k.value for k in SpanKind}
# What ``end`` puts in the span_end record when nothing was set (shared, never changed;
# a tuple is encoded as a list)
_NO_EVENTS: Final = ()
_UNSET_STATUS: Final[Mapping[str, Any]] = {"code": 0, "msg": ""}
_INTERNAL: Final = SpanKind.INTERNAL


def _tuple_layout_ok() -> bool:
    """True when ``SpanContext`` is the tuple ``(trace_id, span_id, is_remote, flags,
    state, is_valid)``, so that a new span's context can be built without re-checking the
    ids it was just given (half the cost of the constructor)."""
    probe = (0x1234, 0x56, False, TraceFlags(1), TraceState())
    try:
        fast = tuple.__new__(SpanContext, (*probe, True))
        return bool(fast == SpanContext(*probe) and fast.is_valid and fast.trace_flags == 1)
    except Exception:  # another layout: the checked constructor
        return False


FAST_CONTEXT: Final = _tuple_layout_ok()
"""Whether the tracer may build a new span's ``SpanContext`` as a plain tuple."""


def type_name(exc: BaseException) -> str:
    """``module.QualName`` of an exception's class (``QualName`` for builtins), as the SDK
    writes ``exception.type``; also the value of ``error.type``."""
    cls = type(exc)
    module = cls.__module__
    return f"{module}.{cls.__qualname__}" if module and module != "builtins" else cls.__qualname__


_report_seen: set[str] = set()


def report_once(what: str, exc: BaseException) -> None:
    """Tell stderr about the first failure of each kind inside tracing (never raises)."""
    key = f"{what}:{type(exc).__name__}"
    if key in _report_seen:
        return
    _report_seen.add(key)
    env.warn_once(f"{what}: {type(exc).__name__}: {exc} (tracing goes on; not reported again)")


class SpanSink:
    """Where lean spans go: the process's spool writer, plus the span limits.

    It also keeps the line templates of the spans it has seen (:class:`Templates`), which
    hold the writer's id and identity: they are forgotten when the writer restarts (a
    forked child, a new process name)."""

    __slots__ = ("__weakref__", "limits", "max_attributes", "templates", "writer")

    def __init__(self, writer: SpoolWriter, limits: Limits) -> None:
        self.writer = writer
        self.limits = limits
        # Owned attributes are taken as they are up to this many (no length limit set)
        self.max_attributes = limits.attributes if limits.value_length is None else -1
        self.templates: dict[tuple[Any, ...], tuple[bytes, bytes, Any]] = {}
        writer.watch_starts(self)

    def writer_started(self) -> None:
        """The writer has a new id and identity: its templates are stale."""
        self.templates = {}

    def template(
        self, key: tuple[str, str, str | None, int, int, int]
    ) -> tuple[bytes, bytes, dict[tuple[Any, ...], Any]]:
        """The ``span_start`` and ``span_end`` line templates of spans named ``key[0]``
        of the scope ``key[1]`` (version ``key[2]``), kind number ``key[3]``, trace flags
        ``key[4]``, without a parent, with one of this process or a remote one (``key[5]``: 0,
        1, 2); raises when the name cannot be
        encoded (the caller takes the dict path). The third item is the cache that holds
        them: a span that started before the writer restarted sees it is stale."""
        templates = self.templates
        if len(templates) >= MAX_TEMPLATES:  # names made up per span: keep memory bounded
            templates = self.templates = {}
        start, end = line_templates(self.writer, *key)
        templates[key] = entry = (start, end, templates)
        return entry


_Entry = tuple[bytes, bytes, Any]
"""A sink's templates of one kind of span: start, end, and the cache that holds them."""

MAX_TEMPLATES: Final = 1024
"""Line templates a sink keeps (one per span name, scope, kind, flags and parentage)."""


_REMOTE: Final = 2


def _parentage(parent: SpanContext | None) -> int:
    """0: a root span; 1: a parent of this process; 2 (``_REMOTE``): another process's."""
    return 0 if parent is None else _REMOTE if parent.is_remote else 1


def _pct(data: bytes) -> bytes:
    return data.replace(b"%", b"%%")


def line_templates(
    w: SpoolWriter,
    name: str,
    scope: str,
    scope_v: str | None,
    kind: int,
    flags: int,
    parent: int,
) -> tuple[bytes, bytes]:
    """The two lines of a span as ``%`` templates, the bytes the dict path would write
    (``record.spliced_line`` of the dict ``LeanSpan._record`` builds, same field order).

    The start template takes ``(ts, trace_id, span_id, attrs JSON, links JSON, seq[,
    parent_id])``; the end template the same followed by ``(start, events JSON, status
    JSON)``. Ids are ints, written as zero-padded lowercase hex."""
    dumps = orjson.dumps
    fixed = (
        b'"trace_id":"%032x","span_id":"%016x","tf":'
        + str(flags).encode()
        + b',"name":'
        + _pct(dumps(name))
        + b',"scope":'
        + _pct(dumps(scope))
        + b',"kind":'
        + str(kind).encode()
        + b',"attrs":%b,"links":%b,"v":'
        + str(_V).encode()
        + b',"key":"'
        + _pct(w.writer_id.encode())
        + b'-%x"'
        + (b',"parent_id":"%016x"' if parent else b"")
        + (b',"parent_remote":true' if parent == _REMOTE else b"")
        + (b',"scope_v":' + _pct(dumps(scope_v)) if scope_v else b"")
    )
    suffix = _pct(w.identity_suffix)
    start = b'{"k":' + _pct(dumps(_START)) + b',"ts":%d,' + fixed + suffix
    end = (
        b'{"k":'
        + _pct(dumps(_END))
        + b',"ts":%d,'
        + fixed
        + b',"start":%d,"events":%b,"status":%b'
        + suffix
    )
    return start, end


_EMPTY_LIST: Final = b"[]"


class _DictPath(Exception):
    """A span_end that the templates do not cover (dropped counts)."""


_UNSET_STATUS_JSON: Final = orjson.dumps(_UNSET_STATUS)
_pappend = append


def _append(w: SpoolWriter, record: dict[str, Any], ts: int) -> None:
    """Append ``record`` (v/key set) with the writer's identity fields: one write."""
    try:
        w.write_line(rec.spliced_line(record, w.identity_suffix), ts)
    except Exception as exc:  # (a signal handler's exception too: the record is lost)
        w.lost()
        report_once("cannot spool a span record (counted as dropped)", exc)


class LeanSpan(trace.Span):
    """A recording span on the spool path (see the module docstring).

    Made by the nvrx-otel tracer, never directly. Thread-safe as far as the GIL makes dict
    and list updates atomic; ``end`` writes its record once.

    Its two lines are filled in from the sink's templates (:func:`line_templates`), one
    ``%`` each, and appended through the writer's append window inline; anything out of
    the common way (a name or attribute orjson refuses, dropped counts) takes the dict
    path (:meth:`_record`, ``record.spliced_line``), which writes the same bytes.
    """

    __slots__ = (
        "_ajson",
        "_attrs",
        "_ctx",
        "_dropped",
        "_end",
        "_events",
        "_flags",
        "_ids",
        "_kind",
        "_links",
        "_name",
        "_parent",
        "_scope",
        "_sink",
        "_start",
        "_status",
        "_tpl",
    )

    def __init__(
        self,
        sink: SpanSink,
        ctx: SpanContext,
        ids: tuple[int, int, int],
        parent: SpanContext | None,
        name: str,
        scope: tuple[str, str | None],
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link] | None,
        start_time: int | None,
        flags: int = 0,
    ) -> None:
        """``ids`` are ``ctx``'s trace id, span id and trace flags; ``scope`` the tracer's
        name and version; ``flags`` 1 records an escaping exception, 2 sets status ERROR
        on one (the SDK's ``record_exception``/``set_status_on_exception``, for
        ``__exit__``)."""
        self._sink = sink
        self._ctx = ctx
        self._parent = parent
        self._dropped: list[int] | None = None  # attributes, events, links, once any
        attrs: dict[str, Any]
        if not attributes:
            attrs = {}
        elif type(attributes) is Owned and len(attributes) <= sink.max_attributes:
            attrs = attributes  # built for this span alone, already clean
        elif (  # the common case, as clean_attributes would: plain values, checked in C
            len(attributes) <= sink.max_attributes
            and _all_plain(map(type, (attrs := dict(attributes)).values()))
            and "" not in attrs
        ):
            pass
        else:
            limits = sink.limits
            attrs, dropped = clean_attributes(attributes, limits.attributes, limits.value_length)
            if dropped:
                self._dropped = [dropped, 0, 0]
        self._attrs = attrs
        self._links: list[dict[str, Any]] = []
        if links:
            for link in links:
                self._add_link(link.context, link.attributes)
        self._events: list[dict[str, Any]] | None = None
        self._end: int | None = None
        self._status: tuple[int, str] | None = None  # (code, message) once set
        self._flags = flags
        self._ids = ids
        self._name = name
        self._scope = scope
        self._kind = 0 if kind is _INTERNAL else _KIND_NUMBER.get(kind, 0)
        self._tpl: _Entry | None = None
        self._spool_start(_time_ns() if start_time is None else start_time)

    def _spool_start(self, start: int) -> None:
        """Append the span_start line (never raises: a line not written is counted)."""
        self._start = start
        sink = self._sink
        w = sink.writer
        seq = next(w.counter)  # as the logging fast path: the writer's own counter
        try:
            parent = self._parent
            ids = self._ids
            key = (self._name, *self._scope, self._kind, ids[2], _parentage(parent))
            tpl = self._tpl = sink.templates.get(key) or sink.template(key)
            links = self._links
            attrs = _dumps(self._attrs)
            self._ajson: bytes | None = attrs  # the end line's too, while unchanged
            if parent is None:
                line = tpl[0] % (
                    start,
                    ids[0],
                    ids[1],
                    attrs,
                    _dumps(links) if links else _EMPTY_LIST,
                    seq,
                )
            else:
                line = tpl[0] % (
                    start,
                    ids[0],
                    ids[1],
                    attrs,
                    _dumps(links) if links else _EMPTY_LIST,
                    seq,
                    parent.span_id,
                )
        except Exception:  # a name or value orjson refuses: the dict path, same bytes
            self._tpl = self._ajson = None
            self._write_record(_START, start, seq)
            return
        try:  # the writer's append window (SpoolWriter's docstring), inline
            n = len(line)
            if w.size + n > w.limit:
                w.write_line(line, start)
                return
            fd = w.fd
            try:
                written = _pappend(fd, line, w.size)
            except OSError as exc:
                w.write_failed(exc, start)
                return
            if written == n:
                w.size += n
            else:
                w.finish_short_write(fd, line, written, start)
        except Exception as exc:  # (a signal handler's exception too: the record is lost)
            w.lost()
            report_once("cannot spool a span record (counted as dropped)", exc)

    def _record(self, kind: str, ts: int, seq: int) -> dict[str, Any]:
        """The span's record as a dict (``kind``: ``span_start`` or ``span_end``)."""
        trace_id, span_id, trace_flags = self._ids
        scope = self._scope
        record: dict[str, Any] = {
            "k": kind,
            "ts": ts,
            "trace_id": trace_id.to_bytes(16, "big").hex(),
            "span_id": span_id.to_bytes(8, "big").hex(),
            "tf": trace_flags,
            "name": self._name,
            "scope": scope[0],
            "kind": self._kind,
            "attrs": self._attrs,
            "links": self._links,
            "v": _V,
            "key": rec.record_key(self._sink.writer.writer_id, seq),
        }
        parent = self._parent
        if parent is not None:
            record["parent_id"] = parent.span_id.to_bytes(8, "big").hex()
            if parent.is_remote:  # e.g. the launcher's span, through TRACEPARENT
                record["parent_remote"] = True
        if scope[1]:
            record["scope_v"] = scope[1]
        if kind == _END:
            record["start"] = self._start
            record["events"] = self._events or _NO_EVENTS
            status = self._status
            record["status"] = (
                _UNSET_STATUS if status is None else {"code": status[0], "msg": status[1]}
            )
            dropped = self._dropped
            if dropped is not None:
                record["dropped"] = {
                    "attrs": dropped[0],
                    "events": dropped[1],
                    "links": dropped[2],
                }
        return record

    def _write_record(self, kind: str, ts: int, seq: int) -> None:
        """Append the span's record by the dict path (never raises)."""
        try:
            record = self._record(kind, ts, seq)
        except Exception as exc:
            self._sink.writer.lost()
            report_once("cannot spool a span record (counted as dropped)", exc)
            return
        _append(self._sink.writer, record, ts)

    def _count_drop(self, which: int) -> None:
        if self._dropped is None:
            self._dropped = [0, 0, 0]
        self._dropped[which] += 1

    # -- the OpenTelemetry Span API ------------------------------------------------------

    def get_span_context(self) -> SpanContext:
        return self._ctx

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._end is not None or type(key) is not str or not key:
            return
        limits = self._sink.limits
        if type(value) not in PLAIN or limits.value_length is not None:
            value = clean_value(value, limits.value_length)
            if value is None:
                return
        attrs = self._attrs
        if key in attrs or len(attrs) < limits.attributes:
            attrs[key] = value
            self._ajson = None  # the end line encodes them again
        else:
            self._count_drop(0)

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if self._end is not None:
            return
        limits = self._sink.limits
        attrs, _ = clean_attributes(attributes, limits.event_attributes, limits.value_length)
        events = self._events
        if events is None:
            events = self._events = []
        if len(events) >= limits.events:  # as the SDK: the oldest event goes
            self._count_drop(1)
            if not events:
                return
            del events[0]
        ts = _time_ns() if timestamp is None else timestamp
        events.append({"ts": ts, "name": name, "attrs": attrs})

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._end is None:
            self._add_link(context, attributes)

    def _add_link(self, context: SpanContext, attributes: types.Attributes) -> None:
        if not isinstance(context, SpanContext) or not context.is_valid:
            return
        limits = self._sink.limits
        if len(self._links) >= limits.links:
            self._count_drop(2)
            return
        attrs, _ = clean_attributes(attributes, limits.link_attributes, limits.value_length)
        self._links.append(
            {
                "trace_id": context.trace_id.to_bytes(16, "big").hex(),
                "span_id": context.span_id.to_bytes(8, "big").hex(),
                "attrs": attrs,
            }
        )

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name
            self._tpl = None  # the end line takes the template of the new name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._end is not None or (self._status is not None and self._status[0] == _OK):
            return  # as the SDK: OK is final
        if isinstance(status, Status):
            code, text = status.status_code, status.description
        else:
            code, text = status, description
        if code is StatusCode.UNSET:
            return
        self._status = (code.value, (text or "") if code is StatusCode.ERROR else "")

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        if self._end is not None:
            return
        try:
            message = str(exception)
        except Exception:
            message = f"<unprintable {type(exception).__qualname__}>"
        try:
            stack = "".join(
                traceback.format_exception(type(exception), exception, exception.__traceback__)
            )
        except Exception:
            stack = ""
        attrs: dict[str, Any] = {
            EXCEPTION_TYPE: type_name(exception),
            EXCEPTION_MESSAGE: message,
            EXCEPTION_STACKTRACE: stack,
        }
        if attributes:
            attrs.update(attributes)
        self.add_event(EXCEPTION_EVENT, attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        end = self._end = _time_ns() if end_time is None else end_time
        sink = self._sink
        w = sink.writer
        seq = next(w.counter)
        try:
            tpl: _Entry | None = self._tpl
            if tpl is None or tpl[2] is not sink.templates or self._dropped is not None:
                if self._dropped is not None:
                    raise _DictPath
                key = (self._name, *self._scope, self._kind, self._ids[2], _parentage(self._parent))
                tpl = sink.templates.get(key) or sink.template(key)
            trace_id, span_id, _ = self._ids
            links = self._links
            events = self._events
            status = self._status
            parent = self._parent
            line = tpl[1] % (
                (
                    end,
                    trace_id,
                    span_id,
                    self._ajson or _dumps(self._attrs),
                    _dumps(links) if links else _EMPTY_LIST,
                    seq,
                    self._start,
                    _dumps(events) if events else _EMPTY_LIST,
                    _UNSET_STATUS_JSON
                    if status is None
                    else _dumps({"code": status[0], "msg": status[1]}),
                )
                if parent is None
                else (
                    end,
                    trace_id,
                    span_id,
                    self._ajson or _dumps(self._attrs),
                    _dumps(links) if links else _EMPTY_LIST,
                    seq,
                    parent.span_id,
                    self._start,
                    _dumps(events) if events else _EMPTY_LIST,
                    _UNSET_STATUS_JSON
                    if status is None
                    else _dumps({"code": status[0], "msg": status[1]}),
                )
            )
        except Exception:  # dropped counts, a value orjson refuses: the dict path
            self._write_record(_END, end, seq)
            return
        try:  # the writer's append window, inline (as in __init__)
            n = len(line)
            if w.size + n > w.limit:
                w.write_line(line, end)
                return
            fd = w.fd
            try:
                written = _pappend(fd, line, w.size)
            except OSError as exc:
                w.write_failed(exc, end)
                return
            if written == n:
                w.size += n
            else:
                w.finish_short_write(fd, line, written, end)
        except Exception as exc:  # (a signal handler's exception too: the record is lost)
            w.lost()
            report_once("cannot spool a span record (counted as dropped)", exc)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """Ends the span; as the SDK's, records an exception and sets status ERROR first."""
        if exc_val is not None and self._end is None:
            _tracectx.remember(exc_val, self)
            if self._flags & 1:
                self.record_exception(exc_val, escaped=True)
            if self._flags & 2:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        self.end()

    # -- read access (as the SDK's ReadableSpan names them) ----------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def attributes(self) -> Mapping[str, Any]:
        return MappingProxyType(self._attrs)

    @property
    def events(self) -> tuple[dict[str, Any], ...]:
        return tuple(self._events or ())

    @property
    def parent(self) -> SpanContext | None:
        return self._parent

    @property
    def kind(self) -> SpanKind:
        return SpanKind(self._kind)

    @property
    def start_time(self) -> int:
        return self._start

    @property
    def end_time(self) -> int | None:
        return self._end

    @property
    def status(self) -> Status:
        if self._status is None:
            return Status(StatusCode.UNSET)
        code = StatusCode(self._status[0])
        return Status(code, self._status[1] or None) if code is StatusCode.ERROR else Status(code)

    def __repr__(self) -> str:
        trace_id, span_id, _ = self._ids
        return (
            f"LeanSpan(name={self._name!r}, trace_id=0x{trace_id:032x}, "
            f"span_id=0x{span_id:016x}, recording={self._end is None})"
        )


_new_span: Final = object.__new__


def start_owned(
    sink: SpanSink,
    ctx: SpanContext,
    ids: tuple[int, int, int],
    parent: SpanContext | None,
    name: str,
    scope: tuple[str, str | None],
    attrs: dict[str, Any],
) -> LeanSpan:
    """``LeanSpan(sink, ctx, ids, parent, name, scope, INTERNAL, attrs, None, None)`` for
    attributes built for this span alone and already clean (an ``Owned`` within the sink's
    ``max_attributes``, or a new empty dict): the span helpers' path, which skips the
    constructor's checks of its arguments."""
    span = _new_span(LeanSpan)
    span._sink = sink
    span._ctx = ctx
    span._parent = parent
    span._dropped = None
    span._attrs = attrs
    span._links = []
    span._events = None
    span._end = None
    span._status = None
    span._flags = 0
    span._ids = ids
    span._name = name
    span._scope = scope
    span._kind = 0
    span._tpl = None
    span._spool_start(_time_ns())
    return span
