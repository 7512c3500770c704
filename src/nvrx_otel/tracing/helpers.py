"""Span helpers for NVRx's operations, named only through the semconv span table.

``checkpoint_span`` (groups ``nv.nvrx.ckpt`` and ``nv.nvrx.ckpt.save``) and ``ft_span``
(``nv.nvrx.ftl``) return a :class:`SpanHelper`: a context manager (``with``/``async
with``) and a decorator (sync and async) that runs the block in a span of the global
tracer provider, with the span group as the tracer name. An exception leaving the block
is recorded (an ``exception`` event, ``error.type``, status ERROR) and re-raised.

Attributes are keyword arguments: a short name (``iteration=``) becomes its semconv key
(``nv.nvrx.ckpt.iteration``); a full key (``**{"my.key": v}``) is kept. An unknown short
name is reported once on stderr and kept as given: telemetry never raises into training.

The schedule, request and finalize spans of one checkpoint share
``nv.nvrx.ckpt.call_idx``. Within a process they are linked automatically (request and
finalize link to the schedule span of the same ``call_idx``, finalize also to the
request); across processes :func:`checkpoint_link` gives the schedule span as a
``traceparent`` string to pass along, and ``link=`` of the worker's span takes it.

With tracing off (no provider set, or ``setup_tracing`` found it disabled) a helper costs
about what the API's no-op tracer costs: it only notices that there is no tracer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from types import TracebackType
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, SpanKind, Status, StatusCode

from nvrx_otel import _tracectx, _version, env
from nvrx_otel.semconv import (
    CKPT_CALL_IDX,
    ERROR_TYPE,
    RESTART_CYCLE,
    CkptSaveSpanKind,
    CkptSpanKind,
    FtSpanKind,
    SpanDef,
)
from nvrx_otel.tracing import provider as _provider
from nvrx_otel.tracing._scope import CONTEXT_VAR as _VAR
from nvrx_otel.tracing._scope import SPAN_KEY as _KEY
from nvrx_otel.tracing._scope import Scope, attach, detach
from nvrx_otel.tracing._scope import put as _put
from nvrx_otel.tracing.attributes import PLAIN, Owned
from nvrx_otel.tracing.ckptlinks import (
    LINKING,
    MAX_CHECKPOINTS,
    ByCallIdx,
    clear_links,
    forget_oldest,
    linked,
    requests,
    schedules,
)
from nvrx_otel.tracing.kinds import (
    CKPT_ATTRIBUTES,
    CKPT_KINDS,
    FT_ATTRIBUTES,
    FT_KINDS,
    kind_names,
    warn_unknown,
)
from nvrx_otel.tracing.propagation import LinkLike, to_links
from nvrx_otel.tracing.provider import LeanBackend, NvrxTracer
from nvrx_otel.tracing.span import LeanSpan, report_once, type_name

SCOPE_VERSION: Final = _version.__version__
"""Instrumentation scope version of the helpers' tracers."""

# --- the global provider, looked up cheaply ------------------------------------------------


def _installed_provider() -> trace.TracerProvider | None:
    """The provider ``trace.set_tracer_provider`` installed, or None (the API's proxy)."""
    found = trace.get_tracer_provider()
    return None if isinstance(found, trace.ProxyTracerProvider) else found


def _api_global() -> trace.TracerProvider | None:
    return trace._TRACER_PROVIDER  # the same, read directly (no environment lookup)


_global_provider = _api_global if hasattr(trace, "_TRACER_PROVIDER") else _installed_provider
_DIRECT: Final = _global_provider is _api_global  # SpanHelper.__enter__ reads it inline


class _Cache:
    __slots__ = ("ours", "provider", "tracers")

    def __init__(self) -> None:
        self.provider: object = None
        self.ours: _provider.NvrxTracerProvider | None = None
        self.tracers: dict[str, trace.Tracer | None] = {}


_cache = _Cache()


def tracer_for(group: str) -> trace.Tracer | None:
    """The global provider's tracer named ``group``, or None while tracing is off."""
    p = _global_provider()
    if p is None:
        return None
    c = _cache
    if p is not c.provider:
        c.tracers = {}
        c.ours = p if isinstance(p, _provider.NvrxTracerProvider) else None
        c.provider = p
    ours = c.ours
    if ours is not None and ours.backend is _provider.OFF:
        return None
    tracer = c.tracers.get(group)
    if tracer is None and group not in c.tracers:
        off = isinstance(p, trace.NoOpTracerProvider)
        tracer = c.tracers[group] = None if off else p.get_tracer(group, SCOPE_VERSION)
    return tracer


# --- the helper -------------------------------------------------------------------------------


class HelperSpec:
    """What a kind of helper adds: its name (for messages), its short attribute names,
    the attribute its first keyword fills, and whether it links by ``call_idx``."""

    __slots__ = ("fixed_key", "links", "name", "short")

    def __init__(
        self, name: str, short: Mapping[str, str], fixed_key: str | None, links: bool = False
    ) -> None:
        self.name = name
        self.short = short
        self.fixed_key = fixed_key
        self.links = links


CKPT_SPEC: Final = HelperSpec("checkpoint_span", CKPT_ATTRIBUTES, CKPT_CALL_IDX, links=True)
FT_SPEC: Final = HelperSpec("ft_span", FT_ATTRIBUTES, RESTART_CYCLE)
_INTERNAL: Final = SpanKind.INTERNAL


class SpanHelper(Scope):
    """One semconv span as a context manager and a decorator (see the module docstring).

    As a context manager an instance is used once; as a decorator each call of the
    function gets a fresh span. ``record()`` starts and ends the span at once.
    """

    __slots__ = (
        "_def",
        "_given",
        "_link",
        "_mapped",
        "_span",
        "_spec",
        "_start_time",
        "_token",
        "_value",
    )

    def __init__(
        self,
        sdef: SpanDef | None,
        spec: HelperSpec,
        value: Any,
        given: dict[str, Any],
        link: LinkLike | Sequence[LinkLike] | None = None,
        start_time: int | None = None,
        mapped: dict[str, Any] | None = None,
    ) -> None:
        self._def = sdef
        self._spec = spec
        self._value = value
        self._given = given
        self._link = link
        self._start_time = start_time
        self._mapped = mapped
        self._span: trace.Span | None  # set by __enter__
        self._token: object
        # (checkpoint_span() sets the same slots without calling this: keep them in step)

    @property
    def name(self) -> str | None:
        """The span name (None for an unknown kind, which records nothing)."""
        return None if self._def is None else self._def.name

    def fresh(self) -> SpanHelper:
        mapped = self._mapped
        if mapped is None and self._def is not None:
            mapped = self._mapped = self._attributes(owned=False)  # shared by every call
        return SpanHelper(
            self._def,
            self._spec,
            self._value,
            self._given,
            self._link,
            self._start_time,
            mapped,
        )

    def record(self) -> trace.Span:
        """Start and end the span now (``startup_spans().record()``); returns it."""
        scope = self.fresh()
        span = scope.__enter__()
        scope.__exit__(None, None, None)
        return span

    def _attributes(self, owned: bool) -> dict[str, Any]:
        """The span's attributes under their full keys; ``owned``: for this span alone
        (the span may then keep the dict itself when every value is plain)."""
        spec = self._spec
        mapped: dict[str, Any] = Owned() if owned else {}
        value = self._value
        plain = value is None or type(value) in PLAIN
        if spec.fixed_key is not None and value is not None:
            mapped[spec.fixed_key] = value
        short = spec.short
        for key, value in self._given.items():
            full = short.get(key)
            if full is None:
                full = key
                if "." not in key:
                    warn_unknown(spec.name, key, short)
            mapped[full] = value
            if type(value) not in PLAIN or not full:
                plain = False
        return mapped if plain or not owned else dict(mapped)  # odd values: the span cleans

    def __enter__(self) -> trace.Span:
        self._span = None
        sdef = self._def
        if sdef is None:
            return INVALID_SPAN
        # tracer_for(sdef.group), inlined while the global provider is the cached one
        c = _cache
        group = sdef.group
        now = trace._TRACER_PROVIDER if _DIRECT else _installed_provider()
        tracer = c.tracers.get(group) if now is c.provider else None
        if tracer is None:
            tracer = tracer_for(group)
            if tracer is None:
                return INVALID_SPAN
        ours = tracer if type(tracer) is NvrxTracer else None
        if ours is not None and ours._provider.backend is _provider.OFF:
            return INVALID_SPAN
        try:
            links = None if self._link is None else to_links(self._link)
            value = self._value
            kept: ByCallIdx | None = None  # where to remember this span
            if self._spec.links and value is not None:
                linking = LINKING.get(sdef.kind)  # None: a span that does not link
                if linking is not None:
                    earlier, kept = linking
                    for spans in earlier:
                        if value in spans:  # an earlier span of this checkpoint: link to them
                            more = linked(value, earlier)
                            if more:
                                links = more if links is None else links + more
                            break
            attrs = self._mapped
            if attrs is None:  # _attributes(owned=True), inlined for known names, plain values
                attrs = Owned()
                spec = self._spec
                if value is not None and spec.fixed_key is not None:
                    attrs[spec.fixed_key] = value
                short = spec.short
                given = self._given
                for key in given:
                    v = given[key]
                    full = short.get(key)
                    if full is None or type(v) not in PLAIN:
                        attrs = self._attributes(owned=True)
                        break
                    attrs[full] = v
                else:
                    if value is not None and type(value) not in PLAIN:
                        attrs = self._attributes(owned=True)
            if ours is not None:  # straight to the backend: no keyword passing
                backend = ours._provider.backend
                if (  # the common case: the spool, plain attributes for this span alone
                    links is None
                    and type(attrs) is Owned
                    and type(backend) is LeanBackend
                    and backend.sink is not None
                    and len(attrs) <= backend.sink.max_attributes
                    and self._start_time is None
                ):
                    span = backend.start_owned(ours, sdef.name, attrs)
                else:
                    span = backend.start_span(
                        ours,
                        sdef.name,
                        None,
                        _INTERNAL,
                        attrs,
                        links,
                        self._start_time,
                        False,
                        False,
                    )
            else:
                span = tracer.start_span(
                    sdef.name,
                    attributes=attrs,
                    links=links,
                    start_time=self._start_time,
                    record_exception=False,
                    set_status_on_exception=False,
                )
            var = _VAR
            if var is None:
                self._token = attach(span)
            else:  # attach() inlined: this is every helper span's path
                ctx = Context(var.get())
                _put(ctx, _KEY, span)
                self._token = var.set(ctx)
            self._span = span
            if kept is not None:  # remember it for the later spans of this checkpoint
                if kept is schedules:  # a new checkpoint under this index: forget the old one
                    schedules.pop(value, None)
                    requests.pop(value, None)
                kept[value] = span._ctx if type(span) is LeanSpan else span.get_span_context()
                if len(kept) > MAX_CHECKPOINTS:
                    forget_oldest(kept)
            return span
        except Exception as exc:  # telemetry never raises into training
            report_once(f"{self._spec.name}: cannot start span", exc)
            return INVALID_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span  # None: tracing was off
        if span is None:
            return
        self._span = None
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
            if exc is not None and isinstance(exc, _ERRORS) and span.is_recording():
                span.set_attribute(ERROR_TYPE, type_name(exc))
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()
        except Exception as err:
            report_once(f"{self._spec.name}: cannot end span", err)


_new_helper: Final = object.__new__
_ERRORS: Final = (Exception, KeyboardInterrupt)
"""Exceptions that make a helper's span an error (not GeneratorExit, SystemExit...)."""


def _kind_value(kind: object) -> str:
    return kind.value if isinstance(kind, Enum) else str(kind)


def checkpoint_span(
    kind: CkptSpanKind | CkptSaveSpanKind | str,
    *,
    call_idx: int | None,
    link: LinkLike | Sequence[LinkLike] | None = None,
    **attributes: Any,
) -> SpanHelper:
    """A span of checkpoint ``kind``: ``schedule``/``request``/``finalize``
    (``nv.nvrx.ckpt``) or a save phase (``nv.nvrx.ckpt.save``: ``stage_wait``, ``stage``,
    ``write``...), tagged ``nv.nvrx.ckpt.call_idx``. ``link`` adds links (a traceparent
    from :func:`checkpoint_link`, a span, a span context). See the module docstring."""
    sdef = CKPT_KINDS.get(kind)
    if sdef is None:
        env.warn_once(
            f"checkpoint_span: unknown kind {_kind_value(kind)!r}; no span is recorded "
            f"(kinds: {kind_names(CKPT_KINDS)})"
        )
    # SpanHelper(sdef, CKPT_SPEC, call_idx, attributes, link) without running __init__ as
    # a frame of its own: this is every checkpoint span's path, traced or not
    helper = _new_helper(SpanHelper)
    helper._def = sdef
    helper._spec = CKPT_SPEC
    helper._value = call_idx
    helper._given = attributes
    helper._link = link
    helper._start_time = None
    helper._mapped = None
    return helper


def ft_span(
    kind: FtSpanKind | str,
    *,
    cycle: int | None,
    link: LinkLike | Sequence[LinkLike] | None = None,
    **attributes: Any,
) -> SpanHelper:
    """A fault-tolerance span of ``kind`` (``nv.nvrx.ftl``: ``cycle``, ``rendezvous``,
    ``worker_launch``, ``fault``...), tagged ``nv.nvrx.restart.cycle``."""
    sdef = FT_KINDS.get(kind)
    if sdef is None:
        env.warn_once(
            f"ft_span: unknown kind {_kind_value(kind)!r}; no span is recorded "
            f"(kinds: {kind_names(FT_KINDS)})"
        )
    return SpanHelper(sdef, FT_SPEC, cycle, attributes, link)


def reset() -> None:
    """Forget cached tracers and checkpoint links (tests, reconfiguration)."""
    global _cache
    _cache = _Cache()
    clear_links()
