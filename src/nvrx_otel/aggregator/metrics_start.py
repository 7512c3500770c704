"""When the aggregator's health metrics start, and their last export.

They start once the loop and every sink have caught up with the spool, or one export
interval after the aggregator started at the latest: setting up the SDK's exporter costs
about 0.1 s of the GIL a catch-up needs, and nothing is lost by waiting (the instruments
observe the aggregator's totals, and the first export would come one interval after the
start anyway). Stopped before they were due, they are started for one last export.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvrx_otel.aggregator.config import AggregatorConfig
    from nvrx_otel.aggregator.health import Health
    from nvrx_otel.aggregator.otlp_metrics import HealthMetrics
    from nvrx_otel.aggregator.sinks import Sink


class MetricsStart:
    """Health metrics over the OTLP endpoint's sink (none without one)."""

    def __init__(
        self,
        config: AggregatorConfig,
        health: Health,
        sinks: Mapping[str, Sink],
        backlog: Callable[[], int],
    ) -> None:
        self._config = config
        self._health = health
        self._sinks = sinks
        self._backlog = backlog
        self.metrics: HealthMetrics | None = None
        self._due: float | None = None  # they start by then (monotonic)

    def defer(self) -> None:
        """The aggregator starts: the metrics are due one export interval from now."""
        if "otlp" in self._sinks:
            from nvrx_otel.aggregator.otlp_metrics import export_interval

            self._due = time.monotonic() + export_interval(self._config.status_interval)

    def when_due(self, now: float, backlog: bool) -> None:
        """Start them when due, or once the loop (no ``backlog``) and every sink caught up."""
        due = self._due
        if due is None:
            return
        if now >= due or (not backlog and all(s.caught_up() for s in self._sinks.values())):
            self.start()

    def start(self) -> None:
        self._due = None
        otlp = self._sinks.get("otlp")
        if otlp is not None:
            from nvrx_otel.aggregator.otlp_metrics import start_health_metrics

            self.metrics = start_health_metrics(self._config, self._health, otlp, self._backlog)

    def stop(self, deadline: float) -> None:
        """A last export, within what is left of the drain (``deadline``, monotonic)."""
        if self._due is not None:  # stopped before they were due: export them once
            self.start()
        if self.metrics is not None:
            self.metrics.shutdown(min(1.0, max(0.1, deadline - time.monotonic())))
            self.metrics = None
