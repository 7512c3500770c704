"""nvrx-otel: OpenTelemetry-native, rank-aware logging and tracing for distributed training.

Importing the package starts no thread, opens no file and adds no handler.
"""

from typing import TYPE_CHECKING, Any

from nvrx_otel._version import __version__
from nvrx_otel.identity import Identity, clear_identity, get_identity, set_identity

if TYPE_CHECKING:
    from nvrx_otel.activeconfig import get_active_config
    from nvrx_otel.runtags import run_tags, set_run_tags

__all__ = [
    "Identity",
    "__version__",
    "clear_identity",
    "get_active_config",
    "get_identity",
    "run_tags",
    "set_identity",
    "set_run_tags",
]


def __getattr__(name: str) -> Any:
    if name == "get_active_config":  # imported by those who ask (the doctor, a support call)
        from nvrx_otel.activeconfig import get_active_config

        return get_active_config
    if name in ("run_tags", "set_run_tags"):
        from nvrx_otel import runtags

        return getattr(runtags, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
