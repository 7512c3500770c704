"""Layers: no import runs from a lower layer up.

The layers, lowest first: ``env``/``identity``/``levels``/``record``/``spool`` (and the
neutral ``nodeline`` grammar), then the front ends ``logging`` and ``tracing``, then the
``aggregator``. The log view (``view``, the readers of node logs and OTLP JSON) stands on
the lowest layer alone, and the report (``report``) on the view. Each test starts a fresh
interpreter, so what it counts is what a rank process would import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOW = (
    "_lazy",
    "env",
    "envexternal",
    "envparse",
    "identity",
    "levels",
    "otelresource",
    "proctime",
    "record",
    "recordschema",
    "spool",
    "nodeline",
)
FRONT_ENDS = ("logging", "tracing")
UPPER = {
    "nvrx_otel._lazy": ("logging", "tracing", "aggregator"),
    "nvrx_otel.env": ("logging", "tracing", "aggregator"),
    "nvrx_otel.envexternal": ("logging", "tracing", "aggregator"),
    "nvrx_otel.envparse": ("logging", "tracing", "aggregator"),
    "nvrx_otel.identity": ("logging", "tracing", "aggregator"),
    "nvrx_otel.levels": ("logging", "tracing", "aggregator"),
    "nvrx_otel.otelresource": ("logging", "tracing", "aggregator"),
    "nvrx_otel.proctime": ("logging", "tracing", "aggregator"),
    "nvrx_otel.record": ("logging", "tracing", "aggregator"),
    "nvrx_otel.recordschema": ("logging", "tracing", "aggregator"),
    "nvrx_otel.spool": ("logging", "tracing", "aggregator"),
    "nvrx_otel.spool.writer": ("logging", "tracing", "aggregator"),
    "nvrx_otel.spool.slowpath": ("logging", "tracing", "aggregator"),
    "nvrx_otel.nodeline": ("logging", "tracing", "aggregator"),
    "nvrx_otel.otlptls": ("logging", "tracing", "aggregator"),
    "nvrx_otel.logging": ("tracing", "aggregator"),
    "nvrx_otel.logging.leanpath": ("tracing", "aggregator"),
    "nvrx_otel.logging.logflow": ("tracing", "aggregator"),
    "nvrx_otel.tracing": ("logging", "aggregator"),
    "nvrx_otel.view": ("logging", "tracing", "aggregator", "report"),
    "nvrx_otel.report": ("logging", "tracing", "aggregator"),
    "nvrx_otel.report.cli": ("logging", "tracing", "aggregator"),
}
STREAM_MODE_MODULES_MEASURED = 158
"""``sys.modules`` after a stream-mode ``setup_logger()`` and one log call (CPython 3.10+,
measured with the grammar in ``nodeline``; it was 245 when it came from the aggregator).
With the OTel SDK's resources loaded only when a Resource is made, CPython 3.11.7 counts
174 (184 before; the same in spool mode)."""
STREAM_MODE_MODULES_BOUND = 190


def _fresh(code: str, tmp_path: Path) -> dict[str, object]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NVRX_", "OTEL_", "LOGFLOW_", "TRACEPARENT"))
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


_REPORT = (
    "import json, sys\n"
    "mods = sorted(sys.modules)\n"
    "ours = [m for m in mods if m.startswith('nvrx_otel.')]\n"
    "print(json.dumps({'total': len(mods), 'ours': ours}))\n"
)


def _subpackages(found: dict[str, object]) -> set[str]:
    ours = found["ours"]
    assert isinstance(ours, list)
    return {m.split(".")[1] for m in ours}


@pytest.mark.parametrize("module", sorted(UPPER))
def test_importing_a_layer_imports_nothing_above_it(module: str, tmp_path: Path) -> None:
    found = _fresh(f"import {module}\n" + _REPORT, tmp_path)
    got = _subpackages(found)
    assert module.split(".")[1] in got
    assert got.isdisjoint(UPPER[module]), sorted(got)


def test_stream_mode_logging_imports_no_aggregator_module(tmp_path: Path) -> None:
    """A rank's first stream-mode log call formats NVRx's line without the aggregator."""
    found = _fresh(
        "from nvrx_otel.logging import setup_logger\nsetup_logger().info('one')\n" + _REPORT,
        tmp_path,
    )
    ours = found["ours"]
    assert isinstance(ours, list)
    assert [m for m in ours if m.startswith("nvrx_otel.aggregator")] == []
    assert _subpackages(found) <= {*LOW, "logging", "semconv", "_version", "_tracectx", "_lazy"}
    total = found["total"]
    assert isinstance(total, int)
    assert total <= STREAM_MODE_MODULES_BOUND, total


def test_a_rank_that_only_logs_loads_no_otel_sdk(tmp_path: Path) -> None:
    """Spool mode, one log call: the identity's resource attributes come without the OTel
    SDK (its resources module and what it imports load when tracing makes a Resource)."""
    found = _fresh(
        "import os, sys, json\n"
        f"os.environ['NVRX_NODE_LOCAL_TMPDIR'] = {str(tmp_path / 'spool')!r}\n"
        "from nvrx_otel.logging import setup_logger\n"
        "setup_logger().info('one')\n"
        "sdk = [m for m in sys.modules if m.startswith('opentelemetry.sdk')]\n"
        "print(json.dumps({'sdk': sdk}))\n",
        tmp_path,
    )
    assert found["sdk"] == []


def test_spooled_tracing_sizes_its_spool_without_the_logging_front_end(tmp_path: Path) -> None:
    """Spans spooled to a node-local spool: the spool is sized from the settings table,
    not from the logging front end's config."""
    spool = tmp_path / "spool"
    found = _fresh(
        "import os\n"
        f"os.environ['NVRX_NODE_LOCAL_TMPDIR'] = {str(spool)!r}\n"
        "os.environ['NVRX_LOG_MAX_FILE_SIZE_KB'] = '64'\n"
        "from nvrx_otel.tracing import setup_tracing\n"
        "provider = setup_tracing()\n"
        "with provider.get_tracer('t').start_as_current_span('s'):\n"
        "    pass\n"
        "provider.force_flush()\n" + _REPORT,
        tmp_path,
    )
    assert _subpackages(found).isdisjoint({"logging", "aggregator"})
    assert any(p.is_file() for p in spool.rglob("*")), "no span reached the spool"
