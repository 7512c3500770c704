"""Rank-aware logging front ends: NVRx's stdlib API, the spool handler, LogFlow's loguru API."""

from typing import TYPE_CHECKING, Any

from nvrx_otel.logging.config import LogConfig
from nvrx_otel.logging.handler import SpoolHandler
from nvrx_otel.logging.setup import LogManager, setup_logger

if TYPE_CHECKING:
    from nvrx_otel.aggregator.compat import NodeLogAggregator
    from nvrx_otel.logging.logflow import (
        configure_logging,
        get_logger,
        reset_logging,
        shutdown_logging,
    )

__all__ = [
    "LogConfig",
    "LogManager",
    "NodeLogAggregator",
    "SpoolHandler",
    "configure_logging",
    "get_logger",
    "reset_logging",
    "setup_logger",
    "shutdown_logging",
]

_LOGFLOW = frozenset({"configure_logging", "get_logger", "reset_logging", "shutdown_logging"})


def __getattr__(name: str) -> Any:
    if name == "NodeLogAggregator":  # the aggregator is imported only by those who run one
        from nvrx_otel.aggregator.compat import NodeLogAggregator

        return NodeLogAggregator
    if name in _LOGFLOW:  # the loguru front end: loguru is imported by those who use it
        from nvrx_otel.logging import logflow

        return getattr(logflow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
