"""NVRx's in-process aggregator API on top of :class:`~nvrx_otel.aggregator.service.Aggregator`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nvrx_otel.aggregator.health import say
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig
from nvrx_otel.spool.registry import flush_own_writers


class NodeLogAggregator:
    """NVRx's ``NodeLogAggregator``: aggregates the spool under ``temp_dir`` (the spool
    root, NVRx's ``NVRX_NODE_LOCAL_TMPDIR``) into ``log_dir/log_file`` in a background
    thread until :meth:`shutdown`.

    ``max_file_size`` is accepted for compatibility and not used: writers rotate their own
    spool files and the aggregator deletes them once consumed. Chronological ordering
    (``en_chrono_ord``) holds records for ``NVRX_OTEL_HOLD_WINDOW_MS``.
    """

    def __init__(
        self, log_dir: str, temp_dir: str, log_file: str, max_file_size: int, en_chrono_ord: bool
    ) -> None:
        self._max_msg_file_size = max_file_size
        config = AggregatorConfig.from_env(
            log_dir=Path(log_dir),
            spool_root=Path(temp_dir),
            log_name=log_file,
            chrono=bool(en_chrono_ord),
        )
        try:
            self._aggregator = Aggregator(config)
        except ValueError as exc:  # a bad OTEL_EXPORTER_OTLP_* value: never into training
            say(f"OTLP export off: {exc}")
            self._aggregator = Aggregator(replace(config, otlp_from_env=False))
        self._started = False

    @property
    def aggregator(self) -> Aggregator:
        """The service underneath (its ``health`` counters, paths and config)."""
        return self._aggregator

    def start_aggregator(self) -> None:
        """Start the aggregator thread (once; later calls do nothing). Raises
        ``AggregatorError`` when another aggregator already serves the job directory."""
        if self._started:
            return
        self._aggregator.start_thread()
        self._started = True

    def shutdown(self) -> None:
        """Drain (within the drain timeout), write what is left and stop the thread.

        This process's own spool writers (``setup_logger`` in the same process) are
        flushed and read to their end, not waited for: they live on after this."""
        if self._started:
            self._aggregator.shutdown(unwaited=flush_own_writers())
            self._started = False
