"""nvrx-otel's TracerProvider: one per process, set once as the global provider.

Its tracers hand every span to the provider's current *backend*, so ``setup_tracing`` can
switch between the lean spool path, the SDK path and off without the tracers that modules
already hold going stale:

- :class:`LeanBackend` (spool path): :class:`~nvrx_otel.tracing.span.LeanSpan` writing
  ``span_start``/``span_end`` records; with no sink (``OTEL_TRACES_EXPORTER=none``) spans
  are non-recording but carry fresh ids, so context still propagates;
- ``SdkBackend`` (``tracing/sdk.py``): the OpenTelemetry SDK with a batch processor;
- :data:`OFF`: nothing, as the API's no-op tracer.

Root spans take the process's ``TRACEPARENT`` (a launcher's span) as their parent, in
every thread. A forked child keeps working: the spool writer re-opens itself, the SDK
backend is rebuilt (own pid, no inherited connections) at the child's first span.
"""

from __future__ import annotations

import os
import random
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.span import DEFAULT_TRACE_STATE
from opentelemetry.util import types

from nvrx_otel import _tracectx
from nvrx_otel.tracing._scope import CONTEXT_VAR as _VAR
from nvrx_otel.tracing._scope import SPAN_KEY as _KEY
from nvrx_otel.tracing._scope import Scope, attach, detach
from nvrx_otel.tracing._scope import put as _put
from nvrx_otel.tracing.sampling import SamplerConfig
from nvrx_otel.tracing.span import FAST_CONTEXT as _FAST_CONTEXT
from nvrx_otel.tracing.span import LeanSpan, SpanSink, report_once
from nvrx_otel.tracing.span import start_owned as _start_owned

EXIT_TIMEOUT_S: Final = 0.8
"""Longest a shutdown (at exit, or when reconfiguring) waits for exporters."""

_LOW_64: Final = (1 << 64) - 1
_FLAGS: Final = tuple(TraceFlags(i) for i in range(4))  # bit 0 sampled, bit 1 random id
_getrandbits = random.getrandbits  # reseeded in a forked child by the random module
_current_span = _tracectx.current_span
_tuple_new = tuple.__new__


class Backend:
    """Where a provider's spans go. This base is the "off" backend."""

    mode = "off"

    def start_span(
        self,
        tracer: NvrxTracer,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link] | None,
        start_time: int | None,
        record_exception: bool,
        set_status_on_exception: bool,
    ) -> trace.Span:
        return INVALID_SPAN

    def force_flush(self, timeout_millis: int) -> bool:
        return True

    def shutdown(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Flush and stop, waiting at most ``timeout_s``."""

    def for_child(self, provider: NvrxTracerProvider) -> Backend:
        """The backend ``provider`` continues with in a forked child (called in the fork
        hook, where nothing may wait on a lock: other fork hooks may not have run yet)."""
        return self


OFF: Final = Backend()


def parent_of(context: Context | None) -> SpanContext | None:
    """The valid span context of ``context`` (default: the current one), else None."""
    span = _current_span() if context is None else trace.get_current_span(context)
    if span is None:
        return None
    ctx: SpanContext = span.get_span_context()
    return ctx if ctx.is_valid else None


class LeanBackend(Backend):
    """Lean spans to the spool (``sink``), or id-carrying non-recording spans (no sink)."""

    def __init__(
        self, sink: SpanSink | None, sampler: SamplerConfig, env_parent: SpanContext | None
    ) -> None:
        self.sink = sink
        self.mode = "spool" if sink is not None else "none"
        self.sampler = sampler
        self.env_parent = env_parent
        self._bound = sampler.bound
        self._parent_based = sampler.parent_based

    def start_span(
        self,
        tracer: NvrxTracer,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link] | None,
        start_time: int | None,
        record_exception: bool,
        set_status_on_exception: bool,
    ) -> trace.Span:
        if context is None:
            # the span of the current context, or None (_tracectx.current_span, inlined)
            span: Any = _current_span() if _VAR is None else _VAR.get().get(_KEY)
            parent = None if span is None else span.get_span_context()
        else:
            parent = trace.get_current_span(context).get_span_context()
        ctx, ids, parent = self._child(parent)
        sink = self.sink
        if sink is None or not ids[2] & 1:
            return NonRecordingSpan(ctx)
        return LeanSpan(
            sink,
            ctx,
            ids,
            parent,
            name,
            tracer.scope_pair,
            kind,
            attributes,
            links,
            start_time,
            record_exception | (set_status_on_exception << 1),
        )

    def start_owned(self, tracer: NvrxTracer, name: str, attributes: dict[str, Any]) -> trace.Span:
        """``start_span(tracer, name, None, INTERNAL, attributes, None, None, False,
        False)`` for attributes built for this span alone, already clean and within the
        limits (``span.start_owned``): the span helpers' path."""
        span: Any = _current_span() if _VAR is None else _VAR.get().get(_KEY)
        parent = None if span is None else span.get_span_context()
        ctx, ids, parent = self._child(parent)
        sink = self.sink
        if sink is None or not ids[2] & 1:
            return NonRecordingSpan(ctx)
        return _start_owned(sink, ctx, ids, parent, name, tracer.scope_pair, attributes)

    def _child(
        self, parent: SpanContext | None
    ) -> tuple[SpanContext, tuple[int, int, int], SpanContext | None]:
        """A new span's context under ``parent`` (without a valid one: the environment's
        parent, else a new trace), its (trace id, span id, flags; bit 0 of the flags is
        "sampled") and the parent it got. One sampling decision for both ways in."""
        if parent is None or not parent.is_valid:
            parent = self.env_parent
        if parent is None:
            trace_id = _getrandbits(128) or 1
            sampled = (trace_id & _LOW_64) < self._bound
            flags = 3 if sampled else 2
            state = DEFAULT_TRACE_STATE
        else:
            trace_id = parent.trace_id
            pflags = parent.trace_flags
            # parent-based: follow the parent's flag; else decide on the trace id alone
            sampled = bool(pflags & 1) if self._parent_based else (trace_id & _LOW_64) < self._bound
            flags = (pflags & 2) | sampled
            state = parent.trace_state
        span_id = _getrandbits(64) or 1
        if _FAST_CONTEXT:  # the ids are valid by construction: skip the constructor's checks
            ctx = _tuple_new(SpanContext, (trace_id, span_id, False, _FLAGS[flags], state, True))
        else:
            ctx = SpanContext(trace_id, span_id, False, _FLAGS[flags], state)
        return ctx, (trace_id, span_id, flags), parent


class CurrentSpan(Scope):
    """What ``start_as_current_span`` returns: starts the span on enter (as the SDK's
    generator does), makes it current, and on exit records an escaping exception, sets
    status ERROR and ends it. Also a decorator, sync and async."""

    __slots__ = (
        "_attributes",
        "_context",
        "_end_on_exit",
        "_kind",
        "_links",
        "_name",
        "_record_exception",
        "_set_status",
        "_span",
        "_start_time",
        "_token",
        "_tracer",
    )

    def __init__(
        self,
        tracer: NvrxTracer,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link] | None,
        start_time: int | None,
        record_exception: bool,
        set_status_on_exception: bool,
        end_on_exit: bool,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._context = context
        self._kind = kind
        self._attributes = attributes
        self._links = links
        self._start_time = start_time
        self._record_exception = record_exception
        self._set_status = set_status_on_exception
        self._end_on_exit = end_on_exit

    def fresh(self) -> CurrentSpan:
        return CurrentSpan(
            self._tracer,
            self._name,
            self._context,
            self._kind,
            self._attributes,
            self._links,
            self._start_time,
            self._record_exception,
            self._set_status,
            self._end_on_exit,
        )

    def __enter__(self) -> trace.Span:
        tracer = self._tracer
        try:
            span = tracer._provider.backend.start_span(
                tracer,
                self._name,
                self._context,
                self._kind,
                self._attributes,
                self._links,
                self._start_time,
                self._record_exception,
                self._set_status,
            )
        except Exception as exc:  # telemetry never raises into training
            report_once("cannot start a span", exc)
            span = INVALID_SPAN
        self._span = span
        if span is not INVALID_SPAN:
            var = _VAR
            if var is None:
                self._token = attach(span)
            else:  # attach() inlined: this is every span's path
                ctx = Context(var.get())
                _put(ctx, _KEY, span)
                self._token = var.set(ctx)
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span is INVALID_SPAN:
            return
        var = _VAR
        if var is None:
            detach(self._token)
        else:  # detach() inlined
            try:
                var.reset(self._token)  # type: ignore[arg-type]
            except (ValueError, RuntimeError):  # entered in another context: go on
                pass
        if exc is not None:
            _tracectx.remember(exc, span)
        try:
            if exc is not None and isinstance(exc, Exception) and span.is_recording():
                if self._record_exception:
                    span.record_exception(exc)
                if self._set_status:
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            if self._end_on_exit:
                span.end()
        except Exception as err:
            report_once("cannot end a span", err)


class NvrxTracer(trace.Tracer):
    """A tracer of :class:`NvrxTracerProvider`: its scope, and the provider's backend."""

    __slots__ = ("_provider", "scope", "scope_pair", "scope_version")

    def __init__(self, provider: NvrxTracerProvider, scope: str, scope_version: str | None) -> None:
        self._provider = provider
        self.scope = scope
        self.scope_version = scope_version
        self.scope_pair = (scope, scope_version)

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        try:
            return self._provider.backend.start_span(
                self,
                name,
                context,
                kind,
                attributes,
                links,
                start_time,
                record_exception,
                set_status_on_exception,
            )
        except Exception as exc:  # telemetry never raises into training
            report_once("cannot start a span", exc)
            return INVALID_SPAN

    def start_as_current_span(  # type: ignore[override]  # a context manager, as the API's
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> CurrentSpan:
        return CurrentSpan(
            self,
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
            end_on_exit,
        )


_providers: weakref.WeakSet[NvrxTracerProvider] = weakref.WeakSet()


class NvrxTracerProvider(trace.TracerProvider):
    """The process's tracer provider; ``setup_tracing`` configures and installs it.

    ``mode`` says where spans go: ``"spool"``, ``"sdk"``, ``"none"`` (ids only) or
    ``"off"``. ``sdk_provider`` is the SDK's provider on the SDK path (to add processors).
    """

    def __init__(self) -> None:
        self.backend: Backend = OFF
        self._tracers: dict[tuple[str, str | None], NvrxTracer] = {}
        _providers.add(self)

    @property
    def mode(self) -> str:
        return self.backend.mode

    @property
    def sdk_provider(self) -> Any:
        """The SDK ``TracerProvider`` behind the SDK path, else None."""
        return getattr(self.backend, "sdk_provider", None)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes | None = None,
    ) -> trace.Tracer:
        key = (instrumenting_module_name or "", instrumenting_library_version)
        tracer = self._tracers.get(key)
        if tracer is None:
            tracer = self._tracers.setdefault(key, NvrxTracer(self, *key))
        return tracer

    def install(self, backend: Backend, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Send spans to ``backend`` from now on; the old backend is shut down (bounded)."""
        old, self.backend = self.backend, backend
        if old is not backend:
            old.shutdown(timeout_s)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what the SDK path still holds (the spool path holds nothing)."""
        return self.backend.force_flush(timeout_millis)

    def shutdown(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Flush within ``timeout_s`` and turn tracing off."""
        self.install(OFF, timeout_s)

    def _after_fork_in_child(self) -> None:
        try:
            self.backend = self.backend.for_child(self)
        except Exception as exc:
            report_once("cannot restart tracing in a forked child", exc)
            self.backend = OFF


def _after_fork_in_child() -> None:
    for provider in list(_providers):
        provider._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
