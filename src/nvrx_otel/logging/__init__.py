"""Rank-aware logging front ends: NVRx's stdlib API, the spool handler, LogFlow's loguru API.

Every name is imported when first asked for: ``python -m nvrx_otel.logging.aggregator``
(the aggregator's NVRx entry point) goes through this package and needs none of them.
"""

from typing import TYPE_CHECKING, Final

from nvrx_otel import _lazy

if TYPE_CHECKING:
    from nvrx_otel.aggregator.compat import NodeLogAggregator
    from nvrx_otel.logging.config import LogConfig
    from nvrx_otel.logging.handler import SpoolHandler
    from nvrx_otel.logging.logflow import (
        configure_logging,
        get_logger,
        reset_logging,
        shutdown_logging,
    )
    from nvrx_otel.logging.setup import LogManager, setup_logger

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

_HOMES: Final = {
    "LogConfig": "nvrx_otel.logging.config",
    "SpoolHandler": "nvrx_otel.logging.handler",
    "LogManager": "nvrx_otel.logging.setup",
    "setup_logger": "nvrx_otel.logging.setup",
    # the aggregator is imported only by those who run one
    "NodeLogAggregator": "nvrx_otel.aggregator.compat",
    # the loguru front end: loguru is imported by those who use it
    "configure_logging": "nvrx_otel.logging.logflow",
    "get_logger": "nvrx_otel.logging.logflow",
    "reset_logging": "nvrx_otel.logging.logflow",
    "shutdown_logging": "nvrx_otel.logging.logflow",
}


__getattr__ = _lazy.attributes(__name__, _HOMES, globals())
