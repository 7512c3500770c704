"""The aggregator's settings: :class:`AggregatorConfig` (the CLI and the environment fill it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvrx_otel import env

DEFAULT_HOLD_WINDOW_MS: Final = env.HOLD_WINDOW_MS.default
DEFAULT_STATUS_INTERVAL_S: Final = env.STATUS_INTERVAL_S.default


@dataclass
class AggregatorConfig:
    """Everything an aggregator needs; :meth:`from_env` fills the environment knobs."""

    log_dir: Path
    spool_root: Path
    wait_file: Path | None = None
    since_ns: int | None = None  # a wait file made from then on counts (None: at open())
    job_id: str | None = None  # None: the identity's job id ("nojob" when it has none)
    node_id: str | None = None  # None: the identity's node id
    log_name: str | None = None  # None: nvrx_log_<node id>.log
    chrono: bool = False
    dedup_window_ms: int = 0  # > 0: collapse identical records of many ranks (dedup.py)
    check_interval: float = 1.0
    drain_timeout: float = 20.0
    hold_window_ms: int = DEFAULT_HOLD_WINDOW_MS
    status_interval: float = DEFAULT_STATUS_INTERVAL_S
    max_log_bytes: int = 0
    log_backups: int | None = None
    nice: int = 10
    settle_s: float = 2.0  # how long a writer's older file may still get a last write
    chunk_bytes: int = 256 << 10  # bytes read from one file at a time (cache-sized)
    otlp_endpoint: str | None = None  # base URL; None: from OTEL_EXPORTER_OTLP_* when set
    otlp_json: Path | None = None  # write OTLP/JSON lines here
    otlp_from_env: bool = True  # False: the OTEL_EXPORTER_OTLP_* variables turn nothing on

    @classmethod
    def from_env(cls, *, strict: bool = False, **fields: Any) -> AggregatorConfig:
        """A config from ``fields`` plus the NVRX_OTEL_* variables (``fields`` win)."""
        max_mb = env.NODE_LOG_MAX_MB.get(strict=strict)
        knobs: dict[str, Any] = {
            "max_log_bytes": int(max_mb * 1024 * 1024),
            "log_backups": env.NODE_LOG_BACKUPS.get(strict=strict),
            "hold_window_ms": env.HOLD_WINDOW_MS.get(strict=strict),
            "status_interval": env.STATUS_INTERVAL_S.get(strict=strict),
        }
        knobs.update(fields)
        return cls(**knobs)
