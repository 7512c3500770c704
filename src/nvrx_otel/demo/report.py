"""The demo's hand-over to ``nvrx-otel report``."""

from __future__ import annotations

from pathlib import Path


def print_report(out_dir: Path) -> int:
    """Print the report of what the demo wrote under ``out_dir``; returns its status."""
    from nvrx_otel.report.cli import main as report_main

    return report_main([str(out_dir / "otlp")])
