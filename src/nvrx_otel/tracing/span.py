"""The lean span of the spool path: a real ``opentelemetry.trace.Span`` that appends one
``span_start`` record when it starts and one self-contained ``span_end`` record when it
ends (``docs/spool-format.md``), each with a single ``os.write`` through the process's
spool writer. A process killed in between leaves a ``span_start`` the aggregator closes.

It keeps what the SDK's span keeps (attributes, events, links, status, the dropped counts
of the span limits) in plain dicts and lists. The ``span_end`` record is the
``span_start`` record's dict completed (same ids, the live attributes and links), so each
record costs one ``orjson.dumps`` and little else. Nothing here raises into the caller: a
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

from nvrx_otel import env
from nvrx_otel import record as rec
from nvrx_otel.semconv import EXCEPTION_MESSAGE, EXCEPTION_STACKTRACE, EXCEPTION_TYPE
from nvrx_otel.spool.writer import SpoolWriter
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
    """Where lean spans go: the process's spool writer, plus the span limits."""

    __slots__ = ("limits", "max_attributes", "writer")

    def __init__(self, writer: SpoolWriter, limits: Limits) -> None:
        self.writer = writer
        self.limits = limits
        # Owned attributes are taken as they are up to this many (no length limit set)
        self.max_attributes = limits.attributes if limits.value_length is None else -1


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
    """

    __slots__ = (
        "_attrs",
        "_ctx",
        "_dropped",
        "_end",
        "_events",
        "_flags",
        "_links",
        "_parent",
        "_rec",
        "_sink",
        "_start",
        "_status",
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
        start = self._start = _time_ns() if start_time is None else start_time
        w = sink.writer
        seq = next(w.counter)  # as the logging fast path: the writer's own counter
        trace_id, span_id, trace_flags = ids
        record: dict[str, Any] = {  # the end record will be this dict, completed
            "k": _START,
            "ts": start,
            "trace_id": trace_id.to_bytes(16, "big").hex(),
            "span_id": span_id.to_bytes(8, "big").hex(),
            "tf": trace_flags,
            "name": name,
            "scope": scope[0],
            "kind": 0 if kind is _INTERNAL else _KIND_NUMBER.get(kind, 0),
            "attrs": attrs,
            "links": self._links,
            "v": _V,
            "key": rec.record_key(w.writer_id, seq),
        }
        if parent is not None:
            record["parent_id"] = parent.span_id.to_bytes(8, "big").hex()
            if parent.is_remote:  # e.g. the launcher's span, through TRACEPARENT
                record["parent_remote"] = True
        if scope[1]:
            record["scope_v"] = scope[1]
        self._rec = record
        _append(w, record, start)

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
            self._rec["name"] = name

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
        record = self._rec
        record["k"] = _END
        record["ts"] = end
        record["start"] = self._start
        record["events"] = self._events or _NO_EVENTS
        status = self._status
        record["status"] = (
            _UNSET_STATUS if status is None else {"code": status[0], "msg": status[1]}
        )
        dropped = self._dropped
        if dropped is not None:
            record["dropped"] = {"attrs": dropped[0], "events": dropped[1], "links": dropped[2]}
        w = self._sink.writer
        record["key"] = w.next_key()
        _append(w, record, end)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """Ends the span; as the SDK's, records an exception and sets status ERROR first."""
        if exc_val is not None and self._end is None:
            if self._flags & 1:
                self.record_exception(exc_val, escaped=True)
            if self._flags & 2:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        self.end()

    # -- read access (as the SDK's ReadableSpan names them) ----------------------------------

    @property
    def name(self) -> str:
        name: str = self._rec["name"]
        return name

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
        return SpanKind(self._rec["kind"])

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
        rec_ = self._rec
        return (
            f"LeanSpan(name={rec_['name']!r}, trace_id=0x{rec_['trace_id']}, "
            f"span_id=0x{rec_['span_id']}, recording={self._end is None})"
        )
