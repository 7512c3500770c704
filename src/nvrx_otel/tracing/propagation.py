"""Carrying trace context to child processes and between processes (W3C trace context).

A launcher puts its current span into a worker's environment with :func:`inject_env`
(``TRACEPARENT``/``TRACESTATE``); ``setup_tracing`` in the worker reads them back with
:func:`env_parent`, and the worker's root spans become children of the launcher's span.
:func:`traceparent` and :func:`to_link` turn span contexts into strings and back, for
links across processes (a checkpoint's schedule span linked from the worker's request).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from nvrx_otel import env as envvars

_W3C: Final = TraceContextTextMapPropagator()
_TRACEPARENT: Final = "traceparent"  # the W3C carrier keys (lowercase, as in HTTP headers)
_TRACESTATE: Final = "tracestate"

LinkLike = str | SpanContext | trace.Span | Link
"""What a ``link=`` argument accepts: a traceparent string, a span context, a span, a Link."""


def traceparent(ctx: SpanContext) -> str:
    """The W3C ``traceparent`` of ``ctx`` (``00-<trace>-<span>-<flags>``)."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(value: str, state: str | None = None) -> SpanContext | None:
    """The (remote) span context of a ``traceparent`` string, or None if it is not one."""
    carrier = {_TRACEPARENT: value.strip()}
    if state:
        carrier[_TRACESTATE] = state
    ctx = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
    return ctx if ctx.is_valid else None


def env_parent(environ: Mapping[str, str] | None = None) -> SpanContext | None:
    """The span context in ``TRACEPARENT``/``TRACESTATE`` (default ``os.environ``), if any.

    A malformed value is reported once on stderr and ignored (root spans start new traces).
    """
    e = os.environ if environ is None else environ
    value = e.get(envvars.TRACEPARENT, "").strip()
    if not value:
        return None
    ctx = parse_traceparent(value, e.get(envvars.TRACESTATE))
    if ctx is None:
        envvars.warn_once(f"{envvars.TRACEPARENT}={value!r} is not a W3C traceparent; ignoring it")
    return ctx


def inject_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Put the current trace context into a child's environment and return it.

    ``env`` (changed in place) defaults to a copy of ``os.environ``. Inside a valid span
    ``TRACEPARENT`` (and ``TRACESTATE`` when there is one) are set to it; outside one the
    environment is returned as it is, so an inherited ``TRACEPARENT`` still reaches
    grandchildren. Pass the result as ``env=`` of ``subprocess.Popen``.
    """
    target = dict(os.environ) if env is None else env
    try:
        span = trace.get_current_span()
        ctx = span.get_span_context()
        if ctx.is_valid:
            carrier: dict[str, str] = {}
            _W3C.inject(carrier, context=trace.set_span_in_context(span))
            target[envvars.TRACEPARENT] = carrier.get(_TRACEPARENT, traceparent(ctx))
            if carrier.get(_TRACESTATE):
                target[envvars.TRACESTATE] = carrier[_TRACESTATE]
            else:
                target.pop(envvars.TRACESTATE, None)
    except Exception as exc:  # telemetry never raises into training
        envvars.warn_once(f"cannot put the trace context into a child's environment: {exc!r}")
    return target


def to_link(value: Any) -> Link | None:
    """A Link for one ``LinkLike`` value; None (reported once) for anything else."""
    if isinstance(value, Link):
        return value if value.context.is_valid else None
    ctx: SpanContext | None
    if isinstance(value, SpanContext):
        ctx = value
    elif isinstance(value, trace.Span):
        ctx = value.get_span_context()
    elif isinstance(value, str):
        ctx = parse_traceparent(value)
    else:
        ctx = None
    if ctx is None or not ctx.is_valid:
        if value is not None and value != "":
            envvars.warn_once(f"cannot link to {value!r}: not a traceparent, span context or span")
        return None
    return Link(ctx)


def to_links(value: LinkLike | Sequence[LinkLike] | None) -> list[Link]:
    """Links for a ``link=`` argument: one ``LinkLike``, a sequence of them, or None."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [link for link in map(to_link, value) if link is not None]
    link = to_link(value)
    return [] if link is None else [link]
