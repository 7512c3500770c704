"""The current span, read the fast way.

``trace.get_current_span()`` walks three API layers (~0.25 us); log calls need only the
span in the current context. When the SDK's default contextvars runtime context is in
use, read its ContextVar and the span key directly (~0.05 us); otherwise fall back to the
public API. Both give the same answer: the span set by ``trace.use_span``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context


def _context_var() -> tuple[ContextVar[Context] | None, str]:
    """The runtime's ContextVar and the span key, when the default runtime is in use."""
    try:
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
        from opentelemetry.trace.propagation import _SPAN_KEY

        runtime = context_api._RUNTIME_CONTEXT
        if type(runtime) is not ContextVarsRuntimeContext:
            return None, ""
        var: ContextVar[Context] = runtime._current_context
        return var, _SPAN_KEY
    except (ImportError, AttributeError):  # another API version: the public way
        return None, ""


CONTEXT_VAR, SPAN_KEY = _context_var()
"""The default runtime's ContextVar (None with another runtime) and the API's span key.
Hot paths read ``CONTEXT_VAR.get().get(SPAN_KEY)`` inline when it is not None."""


def _public() -> Any:
    return trace.get_current_span()


def _make_getter() -> Callable[[], Any]:
    var, key = CONTEXT_VAR, SPAN_KEY
    if var is None:
        return _public

    def current_span() -> Any:
        return var.get().get(key)

    return current_span


current_span: Callable[[], Any] = _make_getter()
"""The current span object, or None when there is none (the fast getter) / INVALID_SPAN."""

context: Callable[[], Any] = (lambda: None) if CONTEXT_VAR is None else CONTEXT_VAR.get
"""The current context of the default runtime (None with another runtime): hot paths key
caches on it, as a context never changes once current (a new span makes a new one)."""


def encoded_ids(ctx: Any) -> bytes:
    """``,"trace_id":"…","span_id":"…","tf":N`` for the valid span in ``ctx`` (a value of
    ``context()``; None: the public API's current span), else ``b""``."""
    span = current_span() if ctx is None else ctx.get(SPAN_KEY)
    if span is None:
        return b""
    ids = span.get_span_context()
    if not ids.is_valid:
        return b""
    return b',"trace_id":"%032x","span_id":"%016x","tf":%d' % (
        ids.trace_id,
        ids.span_id,
        int(ids.trace_flags),
    )


def add_ids(record: dict[str, Any]) -> None:
    """Add ``trace_id``/``span_id``/``tf`` of the current valid span to ``record``."""
    span = current_span()
    if span is None:
        return
    ctx = span.get_span_context()
    if ctx.is_valid:
        record["trace_id"] = format(ctx.trace_id, "032x")
        record["span_id"] = format(ctx.span_id, "016x")
        record["tf"] = int(ctx.trace_flags)


_REMEMBERED = "__nvrx_otel_span__"


def remember(exc: BaseException, span: Any) -> None:
    """Note on ``exc`` the span it escapes from, unless an inner span did already: the
    uncaught-exception hook runs after every span has ended, in no span."""
    try:
        if getattr(exc, _REMEMBERED, None) is None:
            ids = span.get_span_context()
            if ids.is_valid:
                setattr(exc, _REMEMBERED, (ids.trace_id, ids.span_id, int(ids.trace_flags)))
    except Exception:  # an exception type that takes no attributes: no context then
        pass


def remembered(exc: BaseException) -> dict[str, Any] | None:
    """``trace_id``/``span_id``/``tf`` of the span ``exc`` escaped from, if noted."""
    ids = getattr(exc, _REMEMBERED, None)
    if not isinstance(ids, tuple) or len(ids) != 3:
        return None
    return {"trace_id": format(ids[0], "032x"), "span_id": format(ids[1], "016x"), "tf": ids[2]}
