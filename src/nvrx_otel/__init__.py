"""nvrx-otel: OpenTelemetry-native, rank-aware logging and tracing for distributed training.

Importing the package starts no thread, opens no file and adds no handler.
"""

from nvrx_otel._version import __version__
from nvrx_otel.identity import Identity, clear_identity, get_identity, set_identity

__all__ = [
    "Identity",
    "__version__",
    "clear_identity",
    "get_identity",
    "set_identity",
]
