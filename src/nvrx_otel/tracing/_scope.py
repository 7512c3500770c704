"""Making a span current, and the one context-manager-and-decorator shape every span
scope here shares (``start_as_current_span`` and the span helpers).

A span is made current exactly as ``trace.use_span`` does it: a new ``Context`` with the
span under the API's span key, attached to the runtime context. With the default
contextvars runtime that is one ``ContextVar.set``, done directly (on the same variable
``_tracectx`` reads for log correlation); with any other runtime, the public API.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import Token
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context

from nvrx_otel import _tracectx

F = TypeVar("F", bound=Callable[..., Any])


def _public_attach(span: trace.Span) -> object:
    return context_api.attach(trace.set_span_in_context(span))


def _public_detach(token: object) -> None:
    context_api.detach(token)  # type: ignore[arg-type]  # the API logs a failure, never raises


CONTEXT_VAR, SPAN_KEY = _tracectx.CONTEXT_VAR, _tracectx.SPAN_KEY
put: Final = dict.__setitem__
"""Sets a key of a new Context nobody else has seen yet (Context itself forbids it)."""


def attach(span: trace.Span) -> object:
    """Make ``span`` current; returns the token for :func:`detach`."""
    var = CONTEXT_VAR
    if var is None:
        return _public_attach(span)
    ctx = Context(var.get())
    put(ctx, SPAN_KEY, span)
    return var.set(ctx)


def detach(token: object) -> None:
    """Restore the context ``attach`` replaced (never raises, as the API's)."""
    var = CONTEXT_VAR
    if var is None:
        _public_detach(token)
        return
    try:
        var.reset(cast(Token[Context], token))
    except (ValueError, RuntimeError):  # entered in another context: as the API, go on
        pass


class Scope:
    """Base of span scopes: a context manager (sync and async) and a decorator.

    Subclasses implement ``__enter__``/``__exit__`` and ``fresh()`` (an unused copy, so
    that each call of a decorated function gets its own span).
    """

    __slots__ = ()

    def fresh(self) -> Scope:
        raise NotImplementedError

    def __enter__(self) -> trace.Span:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> trace.Span:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` (sync or async): each call runs in a new span."""
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.fresh():
                    return await func(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.fresh():
                return func(*args, **kwargs)

        return cast(F, wrapper)
