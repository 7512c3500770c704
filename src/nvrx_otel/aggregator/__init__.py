"""The node's aggregator: spool files in, the node log (and later OTLP) out.

``python -m nvrx_otel.logging.aggregator`` / ``nvrx-otel aggregate`` run it as a service;
:class:`Aggregator` runs it in-process; :class:`NodeLogAggregator` is NVRx's API for that.
Importing this package starts nothing.
"""

from nvrx_otel.aggregator.compat import NodeLogAggregator
from nvrx_otel.aggregator.nodelog import format_record
from nvrx_otel.aggregator.service import Aggregator, AggregatorConfig, AggregatorError

__all__ = [
    "Aggregator",
    "AggregatorConfig",
    "AggregatorError",
    "NodeLogAggregator",
    "format_record",
]
