"""The node-local spool: per-process append-only writers and the reader's file rules.

Names are imported when first asked for: a reader (the aggregator) needs the paths, not
the writer."""

from importlib import import_module
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from nvrx_otel.spool.paths import SpoolFileName, SpoolPathError, job_dir, parse_name
    from nvrx_otel.spool.registry import get_writer
    from nvrx_otel.spool.writer import SpoolWriter

__all__ = [
    "SpoolFileName",
    "SpoolPathError",
    "SpoolWriter",
    "get_writer",
    "job_dir",
    "parse_name",
]

_HOMES: Final = {
    "SpoolFileName": "nvrx_otel.spool.paths",
    "SpoolPathError": "nvrx_otel.spool.paths",
    "job_dir": "nvrx_otel.spool.paths",
    "parse_name": "nvrx_otel.spool.paths",
    "get_writer": "nvrx_otel.spool.registry",
    "SpoolWriter": "nvrx_otel.spool.writer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # asked once
    return value
