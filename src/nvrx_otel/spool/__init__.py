"""The node-local spool: per-process append-only writers and the reader's file rules.

Names are imported when first asked for: a reader (the aggregator) needs the paths, not
the writer."""

from typing import TYPE_CHECKING, Final

from nvrx_otel import _lazy

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


__getattr__ = _lazy.attributes(__name__, _HOMES, globals())
