"""The node's aggregator: spool files in, the node log (and later OTLP) out.

``python -m nvrx_otel.logging.aggregator`` / ``nvrx-otel aggregate`` run it as a service;
:class:`Aggregator` runs it in-process; :class:`NodeLogAggregator` is NVRx's API for that.
Importing this package starts nothing, and imports each name when first asked for (the
service's process needs neither NVRx's API nor the spool writer it flushes).
"""

from typing import TYPE_CHECKING, Final

from nvrx_otel import _lazy

if TYPE_CHECKING:
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

_HOMES: Final = {
    "Aggregator": "nvrx_otel.aggregator.service",
    "AggregatorConfig": "nvrx_otel.aggregator.service",
    "AggregatorError": "nvrx_otel.aggregator.service",
    "NodeLogAggregator": "nvrx_otel.aggregator.compat",
    "format_record": "nvrx_otel.aggregator.nodelog",
}


__getattr__ = _lazy.attributes(__name__, _HOMES, globals())
