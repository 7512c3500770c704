"""LogFlow's API on loguru, bridged into the node-local spool (see ``configure``).

Switch from LogFlow by changing one import::

    from nvrx_otel.logging import configure_logging, get_logger
"""

from nvrx_otel.logging.logflow.configure import (
    configure_logging,
    get_logger,
    reset_logging,
    shutdown_logging,
)

__all__ = [
    "configure_logging",
    "get_logger",
    "reset_logging",
    "shutdown_logging",
]
