"""``setup_tracing()``: configure tracing from the environment and install the provider.

Where spans go, first match wins:

1. ``NVRX_OTEL_DISABLED`` or ``OTEL_SDK_DISABLED`` true: nowhere. Nothing is installed
   (an already installed nvrx-otel provider is switched off) and the API's
   ``NoOpTracerProvider`` is returned, unless ours is installed.
2. A usable spool (``spool_dir``, else ``NVRX_NODE_LOCAL_TMPDIR``): lean spans append
   ``span_start``/``span_end`` records to this process's spool; the node's aggregator
   exports them. ``OTEL_TRACES_EXPORTER=none`` keeps them out of the spool.
3. Otherwise the SDK with a batch processor per exporter (``exporters``, else
   ``OTEL_TRACES_EXPORTER``, default ``otlp``); ``none`` alone means spans carry ids but
   are not exported.

Sampling follows ``OTEL_TRACES_SAMPLER``/``_ARG``; ``TRACEPARENT`` (set by a launcher's
``inject_env``) parents every root span. Calling again with the same arguments and
environment returns the same provider untouched; anything different reconfigures the same
provider object (tracers already handed out follow), shutting the old path down within
a second. ``reset_tracing()`` is the test hook that forgets all of it.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanExporter

from nvrx_otel import env
from nvrx_otel.spool.registry import writer_for_root
from nvrx_otel.spool.writer import SpoolWriter
from nvrx_otel.tracing import helpers
from nvrx_otel.tracing.attributes import Limits
from nvrx_otel.tracing.propagation import env_parent
from nvrx_otel.tracing.provider import OFF, Backend, LeanBackend, NvrxTracerProvider
from nvrx_otel.tracing.sampling import sampler_from_env
from nvrx_otel.tracing.sdk import exporter_names, flush_in_multiprocessing_children, sdk_backend
from nvrx_otel.tracing.span import SpanSink

_lock = threading.Lock()
_state: dict[str, Any] = {}
_WATCHED_PREFIXES = ("OTEL_", "NVRX_")
_WATCHED = (env.TRACEPARENT, env.TRACESTATE)


def _settings(spool_dir: object, proc: str | None, exporters: object) -> tuple[Any, ...]:
    watched = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(_WATCHED_PREFIXES) or k in _WATCHED
    )
    return (spool_dir, proc, exporters if exporters is None else id(exporters), tuple(watched))


def _disabled() -> bool:
    return env.DISABLED.get() or env.read(env.OTEL_SDK_DISABLED, env.parse_flag, False)


def _writer(root: str, proc: str | None) -> SpoolWriter | None:
    try:
        return writer_for_root(
            root, proc=proc, max_file_size=env.spool_file_size(), budget=env.spool_budget()
        )
    except (OSError, ValueError) as exc:
        env.warn_once(f"{exc}; spans go to the exporters instead of the node-local spool")
        return None


def _backend(
    spool_dir: str | os.PathLike[str] | None,
    proc: str | None,
    exporters: Sequence[SpanExporter] | None,
) -> Backend:
    sampler = sampler_from_env()
    parent = env_parent()
    names = exporter_names()
    nothing = exporters is None and all(n == "none" for n in names)
    root = env.spool_root(spool_dir)
    if spool_dir is None and not env.SPOOL_SPANS.get():
        root = None  # the filelog agent reads logs from the spool; spans go over OTLP
    writer = _writer(root, proc) if root else None
    if writer is not None:
        sink = None if nothing else SpanSink(writer, Limits.from_env())
        return LeanBackend(sink, sampler, parent)
    backend = None if nothing else sdk_backend(exporters, names, sampler, parent)
    return LeanBackend(None, sampler, parent) if backend is None else backend


def setup_tracing(
    *,
    spool_dir: str | os.PathLike[str] | None = None,
    proc: str | None = None,
    exporters: Sequence[SpanExporter] | None = None,
) -> trace.TracerProvider:
    """Configure tracing (see the module docstring) and return the provider.

    ``spool_dir`` is the spool root (default ``NVRX_NODE_LOCAL_TMPDIR``; spans go to its
    ``<job id>`` directory, beside the logs); ``proc`` names this process in spool file
    names (NVRx's ``node_local_tmp_prefix``); ``exporters`` replace ``OTEL_TRACES_EXPORTER``
    on the path without a spool. Never raises: a failure is reported once on stderr and
    tracing stays off.
    """
    try:
        return _setup(spool_dir, proc, exporters)
    except Exception as exc:  # telemetry never raises into training
        env.warn_once(f"cannot set up tracing: {exc!r}; tracing is off")
        found: trace.TracerProvider | None = _state.get("provider")
        return found if found is not None else trace.NoOpTracerProvider()


def _setup(
    spool_dir: str | os.PathLike[str] | None,
    proc: str | None,
    exporters: Sequence[SpanExporter] | None,
) -> trace.TracerProvider:
    settings = _settings(spool_dir, proc, exporters)
    with _lock:
        provider: NvrxTracerProvider | None = _state.get("provider")
        if "settings" in _state and _state["settings"] == settings:
            return provider if provider is not None else trace.NoOpTracerProvider()
        if _disabled():
            _state["settings"] = settings
            if provider is None:
                return trace.NoOpTracerProvider()
            provider.install(OFF)
            return provider
        backend = _backend(spool_dir, proc, exporters)
        if provider is None:
            provider = _state["provider"] = NvrxTracerProvider()
            atexit.register(provider.shutdown)
        provider.install(backend)
        if backend.mode == "sdk" and not _state.get("mp_hook"):
            _state["mp_hook"] = True
            flush_in_multiprocessing_children(provider, provider.shutdown)
        _install_globally(provider)
        _state["settings"] = settings
        return provider


def _install_globally(provider: NvrxTracerProvider) -> None:
    current = trace.get_tracer_provider()
    if current is provider:
        return
    if isinstance(current, trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
        return
    env.warn_once(
        f"a tracer provider ({type(current).__name__}) is already installed globally; "
        "nvrx-otel's provider is returned but not installed, and the span helpers use "
        "the installed one"
    )


def active_arguments() -> dict[str, str]:
    """The arguments the last ``setup_tracing`` call of this process gave (those not None),
    for :func:`nvrx_otel.activeconfig.get_active_config`; empty before any call."""
    settings = _state.get("settings")
    if not settings:
        return {}
    spool_dir, proc, exporters = settings[:3]
    given = {"spool_dir": spool_dir, "proc": proc, "exporters": exporters and "given"}
    return {n: str(v) for n, v in given.items() if v is not None}


def reset_tracing() -> None:
    """Test hook: shut tracing down and forget the global tracer provider, so that the
    next ``setup_tracing()`` (or ``trace.set_tracer_provider``) starts from scratch."""
    with _lock:
        provider: NvrxTracerProvider | None = _state.get("provider")
        _state.clear()
    if provider is not None:
        provider.shutdown()
        atexit.unregister(provider.shutdown)
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    helpers.reset()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
