"""Rank-aware logging front ends: NVRx's stdlib API and the spool handler."""

from typing import TYPE_CHECKING, Any

from nvrx_otel.logging.config import LogConfig
from nvrx_otel.logging.handler import SpoolHandler
from nvrx_otel.logging.setup import LogManager, setup_logger

if TYPE_CHECKING:
    from nvrx_otel.aggregator.compat import NodeLogAggregator

__all__ = [
    "LogConfig",
    "LogManager",
    "NodeLogAggregator",
    "SpoolHandler",
    "setup_logger",
]


def __getattr__(name: str) -> Any:
    if name == "NodeLogAggregator":  # the aggregator is imported only by those who run one
        from nvrx_otel.aggregator.compat import NodeLogAggregator

        return NodeLogAggregator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
