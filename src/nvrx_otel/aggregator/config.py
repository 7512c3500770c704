"""The aggregator's settings: :class:`AggregatorConfig` (the CLI and the environment fill it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nvrx_otel import env

if TYPE_CHECKING:
    from nvrx_otel.aggregator.otlp_transport import OtlpConfig

DEFAULT_HOLD_WINDOW_MS: Final = env.HOLD_WINDOW_MS.default
DEFAULT_STATUS_INTERVAL_S: Final = env.STATUS_INTERVAL_S.default
OTLP_SIGNALS: Final = ("logs", "traces", "metrics")
"""The signals whose OTLP endpoint variables (``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``) exist."""


def otlp_enabled(environ: Mapping[str, str] | None = None, endpoint: str | None = None) -> bool:
    """OTLP output is on with ``--otlp-endpoint`` or any OTLP endpoint variable set (told
    here, apart from the transport, which a run without OTLP does not import)."""
    e = os.environ if environ is None else environ
    names = [env.OTEL_EXPORTER_OTLP_ENDPOINT] + [
        env.OTEL_EXPORTER_OTLP_ENDPOINT.replace("OTLP_", f"OTLP_{s.upper()}_") for s in OTLP_SIGNALS
    ]
    return bool(endpoint) or any(e.get(n, "").strip() for n in names)


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
    def from_env(
        cls, *, strict: bool = False, environ: Mapping[str, str] | None = None, **fields: Any
    ) -> AggregatorConfig:
        """A config from ``fields`` plus the NVRX_OTEL_* variables of ``environ`` (default
        ``os.environ``; ``fields`` win). ``strict``: ValueError for a malformed one, as the
        CLI refuses to start with it."""
        max_mb = env.NODE_LOG_MAX_MB.get(environ, strict=strict)
        knobs: dict[str, Any] = {
            "max_log_bytes": int(max_mb * 1024 * 1024),
            "log_backups": env.NODE_LOG_BACKUPS.get(environ, strict=strict),
            "hold_window_ms": env.HOLD_WINDOW_MS.get(environ, strict=strict),
            "status_interval": env.STATUS_INTERVAL_S.get(environ, strict=strict),
        }
        knobs.update(fields)
        return cls(**knobs)

    def otlp_endpoints(self, environ: Mapping[str, str] | None = None) -> dict[str, OtlpConfig]:
        """The logs and traces endpoints this config sends to ({} when OTLP is off): the
        sinks are made from these, and ``nvrx-otel doctor`` asks the same. ValueError naming
        the variable and its value for one the aggregator refuses to start with (an
        endpoint no request could reach: no scheme, another scheme, a bad port)."""
        base = self.otlp_endpoint
        on = otlp_enabled(environ, base) if self.otlp_from_env else bool(base)
        if not on:
            return {}
        from nvrx_otel.aggregator.otlp_transport import resolve

        return {s: resolve(s, base_endpoint=base, environ=environ) for s in ("logs", "traces")}
