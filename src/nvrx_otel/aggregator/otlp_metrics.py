"""The aggregator's own health as OTel metrics, over the same OTLP endpoint as its logs.

Low rate (one export per interval), so the SDK's MeterProvider and OTLP metric exporter
do the job as they are; observable instruments read the aggregator's counters when the
reader collects. Shutdown is bounded: an unreachable endpoint never holds the exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, Observation

from nvrx_otel import semconv
from nvrx_otel.aggregator.health import Health, say
from nvrx_otel.aggregator.otlp_transport import OtlpConfig, resolve
from nvrx_otel.identity import get_identity

if TYPE_CHECKING:
    from nvrx_otel.aggregator.config import AggregatorConfig
    from nvrx_otel.aggregator.sinks import Sink

Reading = Callable[[], dict[str, float]]
"""Returns the current values: records, dropped, corrupt, backlog, lag, rate, exported."""


class HealthMetrics:
    """Exports ``read()`` every ``interval_s`` seconds until :meth:`shutdown`."""

    def __init__(
        self, config: OtlpConfig, resource: Any, read: Reading, *, interval_s: float = 10.0
    ) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        exporter = _exporter(config)
        self._reader = PeriodicExportingMetricReader(
            exporter,
            export_interval_millis=int(interval_s * 1000),
            export_timeout_millis=int(config.timeout * 1000),
        )
        self._provider = MeterProvider(
            resource=resource, metric_readers=[self._reader], shutdown_on_exit=False
        )
        self._read = read
        self._cache: dict[str, float] = {}
        self._cache_at = 0.0
        meter = self._provider.get_meter("nvrx_otel.aggregator", schema_url=semconv.SCHEMA_URL)
        for name, kind, unit, key, brief in (
            (semconv.METRIC_AGGREGATOR_RECORDS, "counter", "{record}", "records", "written"),
            (semconv.METRIC_AGGREGATOR_DROPPED, "counter", "{record}", "dropped", "dropped"),
            (semconv.METRIC_AGGREGATOR_CORRUPT, "counter", "{record}", "corrupt", "corrupt"),
            (semconv.METRIC_AGGREGATOR_OTLP_EXPORTED, "counter", "{record}", "exported", "sent"),
            (semconv.METRIC_AGGREGATOR_BACKLOG, "gauge", "By", "backlog", "backlog"),
            (semconv.METRIC_AGGREGATOR_LAG, "gauge", "s", "lag", "lag"),
            (semconv.METRIC_AGGREGATOR_RATE, "gauge", "{record}/s", "rate", "rate"),
        ):
            callback = self._callback(key)
            if kind == "counter":
                meter.create_observable_counter(name, [callback], unit=unit, description=brief)
            else:
                meter.create_observable_gauge(name, [callback], unit=unit, description=brief)

    def _values(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._cache_at > 0.5:  # one reading serves all instruments of a collection
            try:
                self._cache = self._read()
            except Exception:  # a metric callback must not break the export
                pass
            self._cache_at = now
        return self._cache

    def _callback(self, key: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            value = self._values().get(key)
            return [] if value is None else [Observation(value)]

        return observe

    def shutdown(self, timeout_s: float = 1.0) -> None:
        """Export once more and stop, waiting at most ``timeout_s``."""
        import threading

        done = threading.Event()

        def stop() -> None:
            try:
                self._provider.shutdown(timeout_millis=timeout_s * 1000)
            except Exception:
                pass
            done.set()

        threading.Thread(target=stop, daemon=True, name="nvrx-otel-metrics-stop").start()
        done.wait(timeout_s)
        # The SDK's reader restarts its ticker in a forked child even after shutdown, and
        # the ticker's last collection then warns "Exporter already shutdown" into the
        # child's logs (an in-process NodeLogAggregator, then a dataloader fork): no more
        # collections from this reader, in this process or a child.
        self._reader.collect = _no_collection  # type: ignore[misc,method-assign]


def _no_collection(*args: Any, **kwargs: Any) -> None:
    return None


def _exporter(config: OtlpConfig) -> Any:
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    temporality: dict[type, AggregationTemporality] = {}
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        return GrpcExporter(
            endpoint=config.endpoint,
            insecure=config.endpoint.startswith("http://"),
            headers=dict(config.headers),
            timeout=config.timeout,
            preferred_temporality=temporality,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(
        endpoint=config.endpoint,
        certificate_file=config.certificate,
        client_certificate_file=config.client_certificate,
        client_key_file=config.client_key,
        headers=dict(config.headers),
        timeout=config.timeout,
        compression=Compression.Gzip if config.compression == "gzip" else Compression.NoCompression,
        preferred_temporality=temporality,
    )


def export_interval(status_interval: float) -> float:
    """Seconds between two exports of the health metrics (``NVRX_OTEL_STATUS_INTERVAL_S``,
    at most 10; 10 when the status lines are off)."""
    return min(status_interval if status_interval > 0 else 60.0, 10.0)


def start_health_metrics(
    config: AggregatorConfig, health: Health, otlp: Sink, backlog: Callable[[], int]
) -> HealthMetrics | None:
    """The aggregator's health metrics over its OTLP endpoint (None when they cannot be:
    they are a bonus, records matter)."""

    def values() -> dict[str, float]:
        pending = backlog()
        lag = (time.time_ns() - health.last_ts) / 1e9 if pending and health.last_ts else 0.0
        return {
            "records": float(health.written),
            "dropped": float(health.dropped + otlp.dropped),
            "corrupt": float(health.corrupt),
            "exported": float(sum(otlp.exported.values())),
            "backlog": float(pending),
            "lag": max(lag, 0.0),
            "rate": health.rate(),
        }

    try:
        endpoint = resolve("metrics", base_endpoint=config.otlp_endpoint)
        return HealthMetrics(
            endpoint,
            get_identity().resource(),
            values,
            interval_s=export_interval(config.status_interval),
        )
    except Exception as exc:
        say(f"cannot export health metrics: {type(exc).__name__}: {exc}")
        return None
