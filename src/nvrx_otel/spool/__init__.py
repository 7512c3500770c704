"""The node-local spool: per-process append-only writers and the reader's file rules."""

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
