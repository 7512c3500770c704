"""``nvrx-otel report``: what happened to a job, from its OTLP JSON files.

Per phase the durations across ranks, the stragglers, the first failing rank (by time
and by trace), the ranks that went silent while the others went on, and the restart
cycles; as text, JSON, a Perfetto trace, a PNG timeline or one HTML page. The questions
each live in a module of their own (:mod:`.phases`, :mod:`.stragglers`, :mod:`.failures`,
:mod:`.silence`, :mod:`.cycles`), fed record by record by :mod:`.analyse`; the outputs
are :mod:`.render`, :mod:`.perfetto`, :mod:`.png` and :mod:`.html`. docs/report.md has
the definitions and thresholds.
"""

from __future__ import annotations

from nvrx_otel.report.analyse import analyse
from nvrx_otel.report.model import (
    Cycle,
    Failure,
    LogLine,
    OpenSpan,
    Ordering,
    PhaseStats,
    Report,
    Silent,
    Straggler,
)

__all__ = [
    "Cycle",
    "Failure",
    "LogLine",
    "OpenSpan",
    "Ordering",
    "PhaseStats",
    "Report",
    "Silent",
    "Straggler",
    "analyse",
]
