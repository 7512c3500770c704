"""What the aggregator's loop hands batches to besides the node log, and how it builds them.

The loop reads and decodes each spool byte once, writes the batch to the node log, and
then hands the same batch to every :class:`Sink` (:meth:`Sink.take`). A sink keeps its
own cursor per spool file and its own thread; its progress is committed with the node
log's in the one state document (``state.py``), and a spool file is deleted only once
every sink's *committed* cursor is past it (:meth:`Sink.consumed`). A sink that cannot keep
up refuses batches and catches up later from its own cursor; the node log never waits for
it. Today the one such sink is OTLP (``otlp_export``; an endpoint over HTTP or gRPC
and/or ``--otlp-json`` files), built only when configured, so an aggregator without OTLP
imports none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nvrx_otel.aggregator.reader import Chunk
from nvrx_otel.aggregator.state import OtlpProgress

if TYPE_CHECKING:
    from nvrx_otel.aggregator.config import AggregatorConfig
    from nvrx_otel.aggregator.otlp_files import FileView


class Sink(Protocol):
    """A destination of the records the loop reads (besides the node log)."""

    dirty: bool  # progress to commit
    exported: dict[str, int]  # delivered: "logs", "spans", "truncated" (health metrics)

    @property
    def dropped(self) -> int:
        """Records the sink lost for good (refused, given way), for health metrics."""
        ...

    def take(self, chunk: Chunk, start: int) -> None:
        """A batch read from ``chunk.file`` at offset ``start`` (loss reports included)."""
        ...

    def report(self, writer: str, record: dict[str, Any]) -> None:
        """A loss report no spool file holds (a drop ledger's)."""
        ...

    def update(self, views: list[FileView]) -> None:
        """The spool files as the loop knows them now (what it read and committed)."""
        ...

    def caught_up(self) -> bool:
        """Everything the node log committed is delivered (for the drain)."""
        ...

    def consumed(self, name: str, ino: int, size: int) -> bool:
        """The committed cursor is at the end of this file: it may be deleted."""
        ...

    def state(self) -> OtlpProgress:
        """Progress to commit; :meth:`committed` once it is."""
        ...

    def committed(self) -> None: ...

    def restore(self, saved: OtlpProgress | None) -> None:
        """Resume from committed progress (None: start afresh)."""
        ...

    def start(self) -> None: ...

    def drain_by(self, deadline: float) -> None:
        """Deliver what is left by ``deadline`` (monotonic), cutting retries short; called
        again with a later deadline while a wait-file drain follows live writers."""
        ...

    def stop(self, deadline: float) -> None:
        """Deliver until caught up or ``deadline`` (monotonic), then stop."""
        ...

    def summary(self) -> str: ...


def build_sinks(config: AggregatorConfig, node_id: str) -> dict[str, Sink]:
    """The sinks a config asks for, by their name in the state: ``otlp`` (``otlp_endpoint``
    or the ``OTEL_EXPORTER_OTLP_*`` variables) and ``otlp_json`` (``otlp_json``), each with
    its own cursors, so files keep flowing while an endpoint is down. Empty (nothing of
    OTLP imported) when OTLP is off."""
    endpoints = config.otlp_endpoints()
    json_dir: Path | None = config.otlp_json
    if not endpoints and json_dir is None:
        return {}
    from nvrx_otel.aggregator.otlp_delivery import EndpointExporter, JsonLines
    from nvrx_otel.aggregator.otlp_export import OtlpExport
    from nvrx_otel.aggregator.otlp_transport import Transport
    from nvrx_otel.spool.paths import safe_component

    sinks: dict[str, Sink] = {}
    if endpoints:
        from nvrx_otel.aggregator.health import say

        for problem in dict.fromkeys(
            c.header_problem for c in endpoints.values() if c.header_problem
        ):
            say(f"{problem}: records are sent without them")  # the value is never shown
        logs = Transport("logs", endpoints["logs"])
        traces = Transport("traces", endpoints["traces"])
        exporter = EndpointExporter({"logs": logs, "traces": traces})
        sinks["otlp"] = OtlpExport(exporters=[exporter], has_endpoint=True)
    if json_dir is not None:
        try:
            json = JsonLines(json_dir, safe_component(node_id))
        except OSError as exc:
            from nvrx_otel.aggregator.lifecycle import AggregatorError, not_a_directory

            blocked = not_a_directory(json_dir)
            why = str(exc) if blocked is None else f"{blocked} is not a directory"
            raise AggregatorError(f"cannot write OTLP/JSON lines to {json_dir}: {why}") from None
        sinks["otlp_json"] = OtlpExport(exporters=[json], label="OTLP/JSON")
    return sinks


def deliver_and_stop(sinks: Mapping[str, Sink], deadline: float) -> None:
    """At the end of a run: every sink delivers what it holds by ``deadline`` (monotonic),
    all at once, then stops and says its summary."""
    from nvrx_otel.aggregator.health import say

    for sink in sinks.values():
        sink.drain_by(deadline)
    for sink in sinks.values():
        sink.stop(deadline)
        say(sink.summary())
