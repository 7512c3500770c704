"""The demo's hand-over to ``nvrx-otel report``."""

from __future__ import annotations

import importlib
from pathlib import Path


def print_report(out_dir: Path) -> int:
    """Print the report of what the demo wrote under ``out_dir``; returns its status."""
    try:
        report_cli = importlib.import_module("nvrx_otel.report.cli")
    except ImportError:
        print("nvrx-otel report is not installed: no report of the run (read the files below)")
        return 0
    status: int = report_cli.main([str(out_dir)])
    return status
