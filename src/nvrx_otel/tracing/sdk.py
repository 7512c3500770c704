"""The path without a spool: the OpenTelemetry SDK exports spans itself.

The SDK's ``BatchSpanProcessor`` does the batching (the processor decides when, the
exporter decides where). What this module adds:

- exporters chosen from ``OTEL_TRACES_EXPORTER`` (``otlp`` over the protocol
  ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` names, ``console``, or an installed entry
  point);
- a bounded exit: the SDK's own shutdown can wait many seconds on an unreachable
  endpoint, so the provider is made without its exit hook, and nvrx-otel's exit hook
  asks a waiting daemon thread to shut it down, waits at most ``EXIT_TIMEOUT_S``, then
  stops the exporters (which ends their retries) and returns. The thread exists from
  setup on because Python 3.12+ refuses to start threads at exit;
- fork safety: a forked child gets a fresh provider, processor and exporters with its
  own pid in the resource (the parent's HTTP connections are never reused), built at
  its first span rather than in the fork hook; a ``multiprocessing`` child, which skips
  ``atexit``, flushes through its finalizers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind
from opentelemetry.util import types

from nvrx_otel import env, semconv
from nvrx_otel.identity import get_identity
from nvrx_otel.tracing.provider import EXIT_TIMEOUT_S, Backend, parent_of
from nvrx_otel.tracing.sampling import SamplerConfig

if TYPE_CHECKING:
    from nvrx_otel.tracing.provider import NvrxTracer, NvrxTracerProvider

_HTTP = "http/protobuf"
_GRPC = "grpc"


def exporter_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """``OTEL_TRACES_EXPORTER`` as a list of lowercase names (default ``["otlp"]``)."""
    raw = (os.environ if environ is None else environ).get(env.OTEL_TRACES_EXPORTER, "")
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    return names or ["otlp"]


def _otlp() -> SpanExporter | None:
    protocol = (
        os.environ.get(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, "").strip()
        or os.environ.get(env.OTEL_EXPORTER_OTLP_PROTOCOL, "").strip()
        or _HTTP
    ).lower()
    if protocol == _GRPC:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            env.warn_once(
                "OTLP over grpc needs the grpc extra: pip install 'nvrx-otel[grpc]'; "
                "exporting spans over http/protobuf instead"
            )
        else:
            return GrpcExporter()
    elif protocol != _HTTP:
        env.warn_once(f"OTLP protocol {protocol!r} is not supported; using {_HTTP}")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def exporters_from_env(names: Sequence[str]) -> list[SpanExporter]:
    """The exporters ``names`` select; an unknown or broken one is reported and skipped."""
    out: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        try:
            if name == "otlp":
                exporter = _otlp()
            elif name == "console":
                from opentelemetry.sdk.trace.export import ConsoleSpanExporter

                exporter = ConsoleSpanExporter()
            else:
                exporter = _from_entry_point(name)
        except Exception as exc:  # a broken exporter must not stop training
            env.warn_once(f"cannot create span exporter {name!r}: {exc!r}; skipping it")
            continue
        if exporter is not None:
            out.append(exporter)
    return out


def _from_entry_point(name: str) -> SpanExporter | None:
    from importlib.metadata import entry_points

    for ep in entry_points(group="opentelemetry_traces_exporter"):
        if ep.name == name:
            exporter: SpanExporter = ep.load()()
            return exporter
    env.warn_once(f"{env.OTEL_TRACES_EXPORTER}: no span exporter named {name!r}; skipping it")
    return None


class GuardedExporter(SpanExporter):
    """Wraps an exporter so that it is shut down once, and can be stopped from another
    thread (``abort``) to end an export that is still retrying at exit."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            return self.inner.export(spans)
        except Exception as exc:
            env.warn_once(f"span exporter {type(self.inner).__name__} failed: {exc!r}")
            return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.inner.shutdown()
        except Exception as exc:
            env.warn_once(f"span exporter {type(self.inner).__name__} shutdown: {exc!r}")

    abort = shutdown


class _Closer:
    """A daemon thread that waits to run ``close`` (so that exit needs no new thread)."""

    def __init__(self, close: Callable[[], None]) -> None:
        self._close = close
        self._go = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvrx-otel-span-exit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._go.wait()
        try:
            self._close()
        except Exception as exc:
            env.warn_once(f"span provider shutdown: {exc!r}")
        finally:
            self._done.set()

    def close(self, timeout_s: float) -> bool:
        """Start closing; True when it finished within ``timeout_s``."""
        self._go.set()
        return self._done.wait(timeout_s)

    def wait(self, timeout_s: float) -> bool:
        return self._done.wait(timeout_s)


class SdkBackend(Backend):
    """Spans through the SDK: a TracerProvider with one batch processor per exporter."""

    mode = "sdk"

    def __init__(
        self,
        make_exporters: Callable[[], Sequence[SpanExporter]],
        sampler: SamplerConfig,
        env_parent: SpanContext | None,
    ) -> None:
        self._make_exporters = make_exporters
        self.sampler = sampler
        self.env_parent = env_parent
        self._env_context: Context | None = None
        if env_parent is not None:
            self._env_context = trace.set_span_in_context(NonRecordingSpan(env_parent))
        self.sdk_provider = SdkTracerProvider(
            sampler=sampler.to_sdk(),
            resource=get_identity().resource(),
            shutdown_on_exit=False,
        )
        self._exporters = [GuardedExporter(e) for e in make_exporters()]
        for exporter in self._exporters:
            self.sdk_provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracers: dict[tuple[str, str | None], trace.Tracer] = {}
        self._closer = _Closer(self.sdk_provider.shutdown)
        self._pid = os.getpid()

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
        key = (tracer.scope, tracer.scope_version)
        sdk_tracer = self._tracers.get(key)
        if sdk_tracer is None:
            sdk_tracer = self._tracers[key] = self.sdk_provider.get_tracer(
                *key, schema_url=semconv.SCHEMA_URL
            )
        if self._env_context is not None and parent_of(context) is None:
            assert self.env_parent is not None
            context = trace.set_span_in_context(NonRecordingSpan(self.env_parent), context)
        return sdk_tracer.start_span(
            name,
            context,
            kind,
            attributes,
            links or (),
            start_time,
            record_exception,
            set_status_on_exception,
        )

    def force_flush(self, timeout_millis: int) -> bool:
        return bool(self.sdk_provider.force_flush(timeout_millis))

    def shutdown(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        if os.getpid() != self._pid:
            return  # a forked child's copy: its closer thread does not exist here
        if not self._closer.close(timeout_s * 0.75):
            for exporter in self._exporters:
                exporter.abort()  # ends retries; the processor's worker then finishes
            self._closer.wait(timeout_s * 0.25)

    def for_child(self, provider: NvrxTracerProvider) -> Backend:
        """A stand-in that builds a fresh SDK stack at the child's first span."""
        return ForkedChild(provider, self)

    def rebuilt(self) -> SdkBackend:
        """A fresh SDK stack for a forked child (own pid, no inherited connections)."""
        return SdkBackend(self._make_exporters, self.sampler, self.env_parent)


class ForkedChild(Backend):
    """The SDK backend of a forked child until its first span needs it.

    Building the SDK stack inside the fork hook can deadlock: it takes locks (those of
    ``concurrent.futures``, used to detect resources) whose own fork hooks may not have
    run yet. So the child's first span builds it, and installs it in the provider."""

    mode = "sdk"

    def __init__(self, provider: NvrxTracerProvider, parent: SdkBackend) -> None:
        self._provider = provider
        self._parent = parent
        self._lock = threading.Lock()

    def real(self) -> Backend:
        """The child's own SDK backend (built on first call)."""
        with self._lock:
            if self._provider.backend is self:
                self._provider.backend = self._parent.rebuilt()
            return self._provider.backend

    @property
    def sdk_provider(self) -> Any:
        return getattr(self.real(), "sdk_provider", None)

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
        return self.real().start_span(
            tracer,
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )

    def for_child(self, provider: NvrxTracerProvider) -> Backend:
        return ForkedChild(provider, self._parent)


def sdk_backend(
    exporters: Sequence[SpanExporter] | None,
    names: Sequence[str],
    sampler: SamplerConfig,
    env_parent: SpanContext | None,
) -> SdkBackend | None:
    """The SDK backend for the given exporters, else for those ``names`` select (made
    again in each forked child); None when that leaves no exporter at all."""
    if exporters is not None:
        given = list(exporters)

        def make() -> Sequence[SpanExporter]:
            return given

    else:
        chosen = list(names)
        first: list[Sequence[SpanExporter]] = [exporters_from_env(chosen)]
        if not first[0]:
            return None

        def make() -> Sequence[SpanExporter]:
            return first.pop() if first else exporters_from_env(chosen)

    return SdkBackend(make, sampler, env_parent)


def flush_in_multiprocessing_children(provider: Any, shutdown: Callable[[], None]) -> None:
    """Have ``multiprocessing`` children (which skip ``atexit``) run ``shutdown`` at exit."""
    try:
        from multiprocessing import util
    except ImportError:  # pragma: no cover - always there in CPython
        return

    def in_child(_: Any) -> None:
        util.Finalize(provider, shutdown, exitpriority=10)

    util.register_after_fork(provider, in_child)
